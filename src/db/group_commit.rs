//! Group commit: writes that many callers ask for at about the same time go to the database as
//! one statement and one commit. A caller continues only after its group committed, so an
//! acknowledged write is durable. A group that fails is written again one write at a time, so
//! that each caller gets its own answer and one bad row fails only its own write.
//!
//! Used for new tickets (`transitions::intake`) and for the agent loops' fenced writes (event
//! appends, step results): each is a `GroupWrite`.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, PgPool, Postgres};
use tokio::sync::{mpsc, oneshot, Mutex};

/// How long a writer keeps its connection with nothing to write (when the pool allows it, see
/// `db::may_keep_connection`): longer than the gaps between writes on a quiet desk.
const KEEP_IDLE: Duration = Duration::from_millis(500);

/// A write that can share a statement with others of its kind.
pub trait GroupWrite: Sized + Send + Sync + 'static {
    /// What the caller of one write learns.
    type Reply: Send + 'static;

    /// Writes all of `writes` with one commit (on `conn`, outside any transaction); one reply per
    /// write, in order.
    fn write_group(
        conn: &mut PgConnection,
        writes: &[Self],
    ) -> impl Future<Output = Result<Vec<Self::Reply>, sqlx::Error>> + Send;
}

/// `W::write_group` on the writer's connection, taken from the pool when it has none; a
/// connection whose write failed goes back (the pool's check drops it if it is broken).
async fn write_with<W: GroupWrite>(
    pool: &PgPool,
    conn: &mut Option<PoolConnection<Postgres>>,
    writes: &[W],
) -> Result<Vec<W::Reply>, sqlx::Error> {
    let c = match conn {
        Some(c) => c,
        None => conn.insert(pool.acquire().await?),
    };
    let result = W::write_group(c, writes).await;
    if let Err(err) = &result {
        // A kept connection is the first to meet a Postgres restart: the retries one by one
        // then take pinged connections from the pool instead of other dead ones.
        if super::is_connection_lost(err) {
            super::note_connection_loss();
        }
        *conn = None;
    }
    result
}

/// A write, when it was queued, and where its answer goes.
type Job<W> = (
    W,
    Instant,
    oneshot::Sender<Result<<W as GroupWrite>::Reply, sqlx::Error>>,
);

/// Hands writes to the writer tasks; clones share them.
pub struct GroupWriter<W: GroupWrite> {
    jobs: mpsc::Sender<Job<W>>,
}

impl<W: GroupWrite> Clone for GroupWriter<W> {
    fn clone(&self) -> Self {
        GroupWriter {
            jobs: self.jobs.clone(),
        }
    }
}

impl<W: GroupWrite> GroupWriter<W> {
    /// Starts `writers` tasks, each writing groups of up to `max_group`: a write that arrives
    /// while a group commits joins the next group, on another writer if one is free. They end
    /// when every handle is dropped and the queue is drained. `stage` names them in the metrics
    /// (`metric::DB_STAGES`).
    pub fn spawn(pool: PgPool, stage: &'static str, max_group: usize, writers: usize) -> GroupWriter<W> {
        Self::spawn_with(pool, stage, max_group, writers, || {})
    }

    /// `spawn`, calling `committed` after each commit, before the callers hear of it: what must
    /// follow a commit (waking the workers) happens even when a caller stopped waiting.
    pub fn spawn_with(
        pool: PgPool,
        stage: &'static str,
        max_group: usize,
        writers: usize,
        committed: impl Fn() + Send + Sync + 'static,
    ) -> GroupWriter<W> {
        let (jobs, rx) = mpsc::channel(4 * max_group);
        let rx = Arc::new(Mutex::new(rx));
        let committed: Arc<dyn Fn() + Send + Sync> = Arc::new(committed);
        for _ in 0..writers {
            tokio::spawn(writer(pool.clone(), stage, rx.clone(), max_group, committed.clone()));
        }
        GroupWriter { jobs }
    }

    /// Makes the write, in a group with whatever else is waiting.
    pub async fn write(&self, write: W) -> Result<W::Reply, sqlx::Error> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send((write, Instant::now(), reply))
            .await
            .map_err(|_| sqlx::Error::PoolClosed)?;
        answer.await.map_err(|_| sqlx::Error::PoolClosed)?
    }
}

async fn writer<W: GroupWrite>(
    pool: PgPool,
    stage: &'static str,
    rx: Arc<Mutex<mpsc::Receiver<Job<W>>>>,
    max_group: usize,
    committed: Arc<dyn Fn() + Send + Sync>,
) {
    let mut group = Vec::with_capacity(max_group);
    let keep = super::may_keep_connection(&pool);
    let mut conn: Option<PoolConnection<Postgres>> = None;
    loop {
        // Whatever queued while the previous group committed forms the next one. A kept
        // connection goes back to the pool once nothing came for a while.
        let received = if conn.is_some() {
            // Cancel-safe: nothing is taken from the queue when the wait ends first.
            match tokio::time::timeout(KEEP_IDLE, async {
                rx.lock().await.recv_many(&mut group, max_group).await
            })
            .await
            {
                Ok(n) => n,
                Err(_) => {
                    conn = None;
                    continue;
                }
            }
        } else {
            rx.lock().await.recv_many(&mut group, max_group).await
        };
        if received == 0 {
            return;
        }
        let started = Instant::now();
        let mut queued = Vec::with_capacity(group.len());
        let (writes, replies): (Vec<W>, Vec<_>) = group
            .drain(..)
            .map(|(write, at, reply)| {
                queued.push(started.saturating_duration_since(at));
                (write, reply)
            })
            .unzip();
        let first = write_with(&pool, &mut conn, &writes).await;
        crate::telemetry::metric::db_batch(stage, writes.len(), started.elapsed(), queued);
        if !keep {
            conn = None;
        }
        match first {
            Ok(answers) if answers.len() == writes.len() => {
                committed();
                for (answer, reply) in answers.into_iter().zip(replies) {
                    let _ = reply.send(Ok(answer));
                }
            }
            // A failed group (or, defensively, one answered short) is written one at a time.
            _ => {
                for (write, reply) in writes.iter().zip(replies) {
                    let alone = write_with(&pool, &mut conn, std::slice::from_ref(write))
                        .await
                        .and_then(|mut answers| answers.pop().ok_or(sqlx::Error::RowNotFound));
                    if !keep {
                        conn = None;
                    }
                    if alone.is_ok() {
                        committed();
                    }
                    let _ = reply.send(alone);
                }
            }
        }
    }
}

/// The replies of fenced writes (`Reply = bool`): whether each write's claim held, given the
/// tickets whose writes the statement made.
pub fn held(fences: impl Iterator<Item = super::fence::Fence>, written: Vec<uuid::Uuid>) -> Vec<bool> {
    let written: std::collections::HashSet<uuid::Uuid> = written.into_iter().collect();
    fences.map(|fence| written.contains(&fence.ticket_id)).collect()
}
