//! Group commit of step results: the stores (`db::claims::store_steps`) that many running tickets
//! ask for at about the same time go to the database as one statement and one commit. A caller
//! continues only after its group committed, so an acknowledged step is durable.

use sqlx::PgPool;
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use crate::db;
use crate::db::claims::StepWrite;

/// The most step results one statement takes.
const MAX_GROUP: usize = 64;
/// Groups written at once: a store that arrives while a group commits starts the next group
/// instead of waiting for that commit.
const WRITERS: usize = 2;

struct Job {
    write: StepWrite,
    reply: oneshot::Sender<Result<bool, sqlx::Error>>,
}

#[derive(Clone)]
pub struct StepWriter {
    jobs: mpsc::Sender<Job>,
}

impl StepWriter {
    /// Starts the writers; they end when every `StepWriter` is dropped and the queue is drained.
    pub fn start(pool: PgPool) -> StepWriter {
        let (jobs, rx) = mpsc::channel(4 * MAX_GROUP);
        let rx = std::sync::Arc::new(tokio::sync::Mutex::new(rx));
        for _ in 0..WRITERS {
            tokio::spawn(writer(pool.clone(), rx.clone()));
        }
        StepWriter { jobs }
    }

    /// Stores the step if the claim still holds; false (nothing written) when it was lost.
    pub async fn store(&self, write: StepWrite) -> Result<bool, sqlx::Error> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send(Job { write, reply })
            .await
            .map_err(|_| sqlx::Error::PoolClosed)?;
        answer.await.map_err(|_| sqlx::Error::PoolClosed)?
    }
}

async fn writer(pool: PgPool, rx: std::sync::Arc<tokio::sync::Mutex<mpsc::Receiver<Job>>>) {
    let mut group = Vec::with_capacity(MAX_GROUP);
    loop {
        // Whatever queued while the other writer was busy forms the next group.
        if rx.lock().await.recv_many(&mut group, MAX_GROUP).await == 0 {
            return;
        }
        let (writes, replies): (Vec<StepWrite>, Vec<_>) =
            group.drain(..).map(|job: Job| (job.write, job.reply)).unzip();
        let stored = match pool.acquire().await {
            Ok(mut conn) => db::claims::store_steps(&mut conn, &writes).await,
            Err(err) => Err(err),
        };
        match stored {
            Ok(held) => {
                let held: std::collections::HashSet<Uuid> = held.into_iter().collect();
                for (write, reply) in writes.iter().zip(replies) {
                    let _ = reply.send(Ok(held.contains(&write.fence.ticket_id)));
                }
            }
            // One at a time, so that each caller gets its own answer (and one bad row cannot
            // fail the others).
            Err(_) => {
                for (write, reply) in writes.iter().zip(replies) {
                    let result = match pool.acquire().await {
                        Ok(mut conn) => db::claims::store_step(&mut conn, write).await,
                        Err(err) => Err(err),
                    };
                    let _ = reply.send(result);
                }
            }
        }
    }
}
