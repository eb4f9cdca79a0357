//! Group commit of the loops' fenced writes: the writes that many running tickets ask for at
//! about the same time go to the database as one statement and one commit. A caller continues
//! only after its group committed, so an acknowledged write is durable. A group that fails is
//! written again one write at a time, so that each caller gets its own answer and one bad row
//! fails only its own write.

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;

use sqlx::PgPool;
use tokio::sync::{mpsc, oneshot, Mutex};
use uuid::Uuid;

use crate::db::claims::Fence;

/// A write fenced by one claim that can share a statement with others.
pub trait FencedWrite: Sized + Send + Sync + 'static {
    /// The claim the write needs; nothing of it is written when the claim was lost.
    fn fence(&self) -> Fence;

    /// Writes all of `writes` in one statement (at most one per ticket); returns the tickets
    /// whose claim held, whose writes were made.
    fn write_group(pool: &PgPool, writes: &[Self]) -> impl Future<Output = Result<Vec<Uuid>, sqlx::Error>> + Send;
}

type Job<W> = (W, oneshot::Sender<Result<bool, sqlx::Error>>);

/// Hands writes to the writer tasks; clones share them.
pub struct GroupWriter<W> {
    jobs: mpsc::Sender<Job<W>>,
}

impl<W> Clone for GroupWriter<W> {
    fn clone(&self) -> Self {
        GroupWriter {
            jobs: self.jobs.clone(),
        }
    }
}

impl<W: FencedWrite> GroupWriter<W> {
    /// Starts `writers` tasks, each writing groups of up to `max_group`: a write that arrives
    /// while a group commits joins the next group, on another writer if one is free. They end
    /// when every handle is dropped and the queue is drained.
    pub fn spawn(pool: PgPool, max_group: usize, writers: usize) -> GroupWriter<W> {
        let (jobs, rx) = mpsc::channel(4 * max_group);
        let rx = Arc::new(Mutex::new(rx));
        for _ in 0..writers {
            tokio::spawn(writer(pool.clone(), rx.clone(), max_group));
        }
        GroupWriter { jobs }
    }

    /// Makes the write if its claim still holds; false (nothing written) when it was lost.
    pub async fn write(&self, write: W) -> Result<bool, sqlx::Error> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send((write, reply))
            .await
            .map_err(|_| sqlx::Error::PoolClosed)?;
        answer.await.map_err(|_| sqlx::Error::PoolClosed)?
    }
}

async fn writer<W: FencedWrite>(pool: PgPool, rx: Arc<Mutex<mpsc::Receiver<Job<W>>>>, max_group: usize) {
    let mut group = Vec::with_capacity(max_group);
    loop {
        // Whatever queued while the previous group committed forms the next one.
        if rx.lock().await.recv_many(&mut group, max_group).await == 0 {
            return;
        }
        let (writes, replies): (Vec<W>, Vec<_>) = group.drain(..).unzip();
        match W::write_group(&pool, &writes).await {
            Ok(held) => {
                let held: HashSet<Uuid> = held.into_iter().collect();
                for (write, reply) in writes.iter().zip(replies) {
                    let _ = reply.send(Ok(held.contains(&write.fence().ticket_id)));
                }
            }
            Err(_) => {
                for (write, reply) in writes.iter().zip(replies) {
                    let alone = W::write_group(&pool, std::slice::from_ref(write)).await;
                    let _ = reply.send(alone.map(|held| !held.is_empty()));
                }
            }
        }
    }
}
