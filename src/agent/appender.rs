//! Group commit of the loop's event-only writes (`request.started`, `request.retried`, …): the
//! appends that many running tickets ask for at about the same time go to the database as one
//! fenced statement and one commit. A caller continues only after its group committed.

use sqlx::PgPool;
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use crate::db;
use crate::db::claims::Fence;
use crate::domain::NewEvent;

/// The most appends one statement takes.
const MAX_GROUP: usize = 256;

struct Job {
    fence: Fence,
    events: Vec<NewEvent>,
    reply: oneshot::Sender<Result<bool, sqlx::Error>>,
}

#[derive(Clone)]
pub struct EventAppender {
    jobs: mpsc::Sender<Job>,
}

impl EventAppender {
    /// Starts the writer; it ends when every `EventAppender` is dropped and the queue is drained.
    pub fn start(pool: PgPool) -> EventAppender {
        let (jobs, rx) = mpsc::channel(4 * MAX_GROUP);
        tokio::spawn(writer(pool, rx));
        EventAppender { jobs }
    }

    /// Appends `events` if the claim still holds; false (nothing written) when it was lost.
    pub async fn append(&self, fence: Fence, events: Vec<NewEvent>) -> Result<bool, sqlx::Error> {
        let (reply, answer) = oneshot::channel();
        let job = Job { fence, events, reply };
        self.jobs.send(job).await.map_err(|_| sqlx::Error::PoolClosed)?;
        answer.await.map_err(|_| sqlx::Error::PoolClosed)?
    }
}

async fn writer(pool: PgPool, mut rx: mpsc::Receiver<Job>) {
    let mut group = Vec::with_capacity(MAX_GROUP);
    // Whatever queued while the previous group committed forms the next one.
    while rx.recv_many(&mut group, MAX_GROUP).await > 0 {
        let jobs = std::mem::take(&mut group);
        let appends: Vec<(Fence, Vec<NewEvent>)> = jobs.iter().map(|j| (j.fence, j.events.clone())).collect();
        match db::events::append_fenced_many(&pool, &appends).await {
            Ok(held) => {
                let held: std::collections::HashSet<Uuid> = held.into_iter().collect();
                for job in jobs {
                    let _ = job.reply.send(Ok(held.contains(&job.fence.ticket_id)));
                }
            }
            // One at a time, so that each caller gets its own answer.
            Err(_) => {
                for job in jobs {
                    let f = job.fence;
                    let result = db::events::append_fenced(&pool, f.ticket_id, f.generation, &job.events).await;
                    let _ = job.reply.send(result);
                }
            }
        }
    }
}
