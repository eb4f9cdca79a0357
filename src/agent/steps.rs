//! Group commit of step results (`db::claims::store_steps`), each fenced by its claim (see
//! `group`).

use sqlx::PgPool;
use uuid::Uuid;

use super::group::{FencedWrite, GroupWriter};
use crate::db;
use crate::db::claims::{Fence, StepWrite};

/// The most step results one statement takes.
const MAX_GROUP: usize = 64;
/// Groups written at once: a step result carries comments and several events, so a group takes
/// a while to commit, and the next one starts beside it.
const WRITERS: usize = 2;

impl FencedWrite for StepWrite {
    fn fence(&self) -> Fence {
        self.fence
    }

    async fn write_group(pool: &PgPool, writes: &[StepWrite]) -> Result<Vec<Uuid>, sqlx::Error> {
        db::claims::store_steps(&mut *pool.acquire().await?, writes).await
    }
}

pub type StepWriter = GroupWriter<StepWrite>;

impl GroupWriter<StepWrite> {
    pub fn start(pool: PgPool) -> StepWriter {
        GroupWriter::spawn(pool, MAX_GROUP, WRITERS)
    }

    /// Stores the step if the claim still holds; false (nothing written) when it was lost.
    pub async fn store(&self, write: StepWrite) -> Result<bool, sqlx::Error> {
        self.write(write).await
    }
}
