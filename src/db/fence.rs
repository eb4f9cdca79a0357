//! The fence of a claim: the ticket and the generation its claim bumped. Every write a worker
//! makes matches `(id, generation, status = 'in_progress')` (see `claims`), so a worker that lost
//! its claim writes nothing. Here alone, so that every writer can name it without the claims.

use uuid::Uuid;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fence {
    pub ticket_id: Uuid,
    pub generation: i64,
}
