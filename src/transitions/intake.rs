//! Group commit of new tickets: creates that arrive together share one transaction (two
//! statements and one commit for the whole group, see `db::group`), so a burst of clients costs
//! the database about what one client does. A create is answered only after its group commits,
//! so every acknowledged ticket and its `ticket.created` event are durable.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use sqlx::{Connection, PgConnection, PgPool};

use super::DeskError;
use crate::db::events::ReservedEvent;
use crate::db::group::{GroupWrite, GroupWriter};
use crate::db::tickets::NewTicket;
use crate::domain::{EventData, Ticket};
use crate::events::EventHub;

/// The most tickets one transaction takes.
const MAX_GROUP: usize = 128;
/// Groups written at once: a create that arrives while a group commits starts the next group at
/// once instead of waiting for that commit (which would add its latency to every create).
const WRITERS: usize = 4;

/// Creates in flight at which a create joins a group instead of writing on its own: alone, its
/// own transaction answers sooner; in a crowd, shared commits answer more of them.
const GROUP_FROM: usize = 4;

/// Hands new tickets to the writer tasks; cloned into every request.
#[derive(Clone)]
pub struct Intake {
    writer: GroupWriter<NewTicket>,
    in_flight: Arc<AtomicUsize>,
}

/// Counts a create as in flight until dropped.
pub struct InFlight {
    count: Arc<AtomicUsize>,
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
        self.count.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Intake {
    /// Starts the writers. They end once every `Intake` is dropped and the queue is drained.
    pub fn start(pool: PgPool, hub: EventHub) -> Intake {
        // Once per committed group: the new tickets' events are in the log and the workers have
        // work, whether or not their callers still wait.
        let committed = move || {
            hub.wake();
            hub.work_available();
        };
        Intake {
            writer: GroupWriter::spawn_with(pool, MAX_GROUP, WRITERS, committed),
            in_flight: Default::default(),
        }
    }

    /// Marks a create as in flight (until the guard is dropped).
    pub fn enter(&self) -> InFlight {
        let before = self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight {
            count: self.in_flight.clone(),
            crowded: before + 1 >= GROUP_FROM,
        }
    }

    /// Creates a ticket without an idempotency key (its group's commit wakes the workers).
    pub async fn create(&self, new: NewTicket) -> Result<Ticket, DeskError> {
        Ok(self.writer.write(new).await?)
    }
}

impl GroupWrite for NewTicket {
    type Reply = Ticket;

    /// The tickets and their `ticket.created` events, in one transaction.
    async fn write_group(conn: &mut PgConnection, new: &[NewTicket]) -> Result<Vec<Ticket>, sqlx::Error> {
        let mut tx = conn.begin().await?;
        let tickets = crate::db::tickets::insert_many(&mut tx, new).await?;
        if tickets.len() != new.len() {
            return Err(sqlx::Error::RowNotFound);
        }
        // Each ticket was inserted with seq 1 of its log reserved for this event.
        let events: Vec<ReservedEvent> = tickets
            .iter()
            .map(|t| ReservedEvent::new(t, 1, None, EventData::TicketCreated { ticket: t.clone() }))
            .collect();
        crate::db::events::insert_reserved(&mut tx, &[], &events).await?;
        tx.commit().await?;
        Ok(tickets)
    }
}
