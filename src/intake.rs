//! Group commit of new tickets: creates that arrive together share one transaction (two
//! statements and one commit for the whole group), so a burst of clients costs the database about
//! what one client does. A create is answered only after its group commits, so every
//! acknowledged ticket and its `ticket.created` event are durable.

use sqlx::PgPool;
use tokio::sync::{mpsc, oneshot};

use crate::db::events::ReservedEvent;
use crate::db::tickets::NewTicket;
use crate::desk::DeskError;
use crate::domain::event::kind;
use crate::domain::Ticket;
use crate::events::EventHub;

/// The most tickets one transaction takes.
const MAX_GROUP: usize = 128;
/// Groups written at once: a create that arrives while a group commits starts the next group at
/// once instead of waiting for that commit (which would add its latency to every create).
const WRITERS: usize = 4;

struct Job {
    new: NewTicket,
    reply: oneshot::Sender<Result<Ticket, DeskError>>,
}

/// Creates in flight at which a create joins a group instead of writing on its own: alone, its
/// own transaction answers sooner; in a crowd, shared commits answer more of them.
const GROUP_FROM: usize = 4;

/// Hands new tickets to the writer tasks; cloned into every request.
#[derive(Clone)]
pub struct Intake {
    jobs: mpsc::Sender<Job>,
    in_flight: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

/// Counts a create as in flight until dropped.
pub struct InFlight {
    count: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    crowded: bool,
}

impl InFlight {
    /// Whether enough other creates are in flight for this one to join a group.
    pub fn crowded(&self) -> bool {
        self.crowded
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.count.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Intake {
    /// Starts the writer. It ends once every `Intake` is dropped and the queue is drained.
    pub fn start(pool: PgPool, hub: EventHub) -> Intake {
        let (jobs, rx) = mpsc::channel(4 * MAX_GROUP);
        let rx = std::sync::Arc::new(tokio::sync::Mutex::new(rx));
        for _ in 0..WRITERS {
            tokio::spawn(writer(pool.clone(), hub.clone(), rx.clone()));
        }
        Intake {
            jobs,
            in_flight: Default::default(),
        }
    }

    /// Marks a create as in flight (until the guard is dropped).
    pub fn enter(&self) -> InFlight {
        let before = self.in_flight.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        InFlight {
            count: self.in_flight.clone(),
            crowded: before + 1 >= GROUP_FROM,
        }
    }

    /// Creates a ticket without an idempotency key and wakes the workers.
    pub async fn create(&self, new: NewTicket) -> Result<Ticket, DeskError> {
        let (reply, answer) = oneshot::channel();
        let closed = || DeskError::Db(sqlx::Error::PoolClosed);
        self.jobs.send(Job { new, reply }).await.map_err(|_| closed())?;
        answer.await.map_err(|_| closed())?
    }
}

async fn writer(pool: PgPool, hub: EventHub, rx: std::sync::Arc<tokio::sync::Mutex<mpsc::Receiver<Job>>>) {
    let mut group = Vec::with_capacity(MAX_GROUP);
    loop {
        // Whatever queued while the other writers were busy forms the next group.
        if rx.lock().await.recv_many(&mut group, MAX_GROUP).await == 0 {
            return;
        }
        let jobs = std::mem::take(&mut group);
        let new: Vec<NewTicket> = jobs.iter().map(|j| j.new.clone()).collect();
        match write_group(&pool, &new).await {
            Ok(tickets) => {
                hub.wake();
                hub.work_available();
                for (job, ticket) in jobs.into_iter().zip(tickets) {
                    let _ = job.reply.send(Ok(ticket));
                }
            }
            // One at a time, so that each create gets its own answer (and one bad row cannot
            // fail the others).
            Err(_) => {
                for job in jobs {
                    let result = write_group(&pool, std::slice::from_ref(&job.new)).await;
                    if result.is_ok() {
                        hub.wake();
                        hub.work_available();
                    }
                    let _ = job.reply.send(result.map(|mut t| t.remove(0)));
                }
            }
        }
    }
}

/// The tickets and their `ticket.created` events, in one transaction.
async fn write_group(pool: &PgPool, new: &[NewTicket]) -> Result<Vec<Ticket>, DeskError> {
    let mut tx = pool.begin().await?;
    let tickets = crate::db::tickets::insert_many(&mut tx, new).await?;
    if tickets.len() != new.len() {
        return Err(DeskError::Db(sqlx::Error::RowNotFound));
    }
    // Each ticket was inserted with seq 1 of its log reserved for this event.
    let events: Vec<ReservedEvent> = tickets
        .iter()
        .map(|t| ReservedEvent::new(t, 1, kind::TICKET_CREATED, None, serde_json::json!({ "ticket": t })))
        .collect();
    crate::db::events::insert_reserved(&mut tx, &[], &events).await?;
    tx.commit().await?;
    Ok(tickets)
}
