//! Group commit of the loop's event-only writes (`request.started`, `request.retried`, …), each
//! fenced by its claim (see `group`).

use sqlx::PgPool;
use uuid::Uuid;

use super::group::{FencedWrite, GroupWriter};
use crate::db;
use crate::db::claims::Fence;
use crate::domain::NewEvent;

/// The most appends one statement takes.
const MAX_GROUP: usize = 256;

/// Events to append to a claimed ticket's log.
pub struct Append {
    pub fence: Fence,
    pub events: Vec<NewEvent>,
}

impl FencedWrite for Append {
    fn fence(&self) -> Fence {
        self.fence
    }

    async fn write_group(pool: &PgPool, writes: &[Append]) -> Result<Vec<Uuid>, sqlx::Error> {
        let appends: Vec<(Fence, &[NewEvent])> = writes.iter().map(|w| (w.fence, w.events.as_slice())).collect();
        db::events::append_fenced_many(pool, &appends).await
    }
}

pub type EventAppender = GroupWriter<Append>;

impl GroupWriter<Append> {
    /// Starts the writer (one: an append is small, and a group of them commits quickly).
    pub fn start(pool: PgPool) -> EventAppender {
        GroupWriter::spawn(pool, MAX_GROUP, 1)
    }

    /// Appends `events` if the claim still holds; false (nothing written) when it was lost.
    pub async fn append(&self, fence: Fence, events: Vec<NewEvent>) -> Result<bool, sqlx::Error> {
        self.write(Append { fence, events }).await
    }
}
