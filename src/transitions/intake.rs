//! Group commit of new tickets (those without a parent or an idempotency key): creates that arrive
//! together share one statement and one commit (see `db::group_commit`), so a burst of clients costs the
//! database about what one client does; a create alone is one statement on a writer's kept
//! connection, one round trip. A create is answered only after its group commits, so every
//! acknowledged ticket and its `ticket.created` event are durable.

use sqlx::{PgConnection, PgPool};

use super::DeskError;
use crate::db::group_commit::{GroupWrite, GroupWriter};
use crate::db::tickets::NewTicket;
use crate::domain::Ticket;
use crate::events::EventHub;

/// The most tickets one transaction takes.
const MAX_GROUP: usize = 128;
/// Groups written at once: a create that arrives while a group commits starts the next group at
/// once instead of waiting for that commit (which would add its latency to every create).
const WRITERS: usize = 4;

/// Hands new tickets to the writer tasks; cloned into every request.
#[derive(Clone)]
pub struct Intake {
    writer: GroupWriter<NewTicket>,
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
            writer: GroupWriter::spawn_with(pool, "intake", MAX_GROUP, WRITERS, committed),
        }
    }

    /// Creates a ticket without an idempotency key (its group's commit wakes the workers).
    pub async fn create(&self, new: NewTicket) -> Result<Ticket, DeskError> {
        Ok(self.writer.write(new).await?)
    }
}

impl GroupWrite for NewTicket {
    type Reply = Ticket;

    /// The tickets and their `ticket.created` events: one statement, so one transaction.
    async fn write_group(conn: &mut PgConnection, new: &[NewTicket]) -> Result<Vec<Ticket>, sqlx::Error> {
        let tickets = crate::db::tickets::insert_many(conn, new).await?;
        if tickets.len() != new.len() {
            return Err(sqlx::Error::RowNotFound);
        }
        Ok(tickets)
    }
}
