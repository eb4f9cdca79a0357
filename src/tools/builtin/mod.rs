//! The built-in tools every agent may get, one file each. Names and parameters are part of the
//! public contract with models and must stay stable.

pub mod ask_human;
mod close_ticket;
mod handover_ticket;
mod manage_tickets;
mod params;
mod read_tickets;
mod shape;
mod text;
mod view;

use std::sync::Arc;

pub use ask_human::AskHuman;
pub use close_ticket::CloseTicket;
pub use handover_ticket::HandoverTicket;
pub use manage_tickets::ManageTickets;
pub use read_tickets::ReadTickets;
pub use shape::{Builtin, BuiltinTool};

use super::Tool;

pub const CLOSE_TICKET: &str = "close_ticket";
pub const HANDOVER_TICKET: &str = "handover_ticket";
pub const READ_TICKETS: &str = "read_tickets";
pub const MANAGE_TICKETS: &str = "manage_tickets";

pub const ASK_HUMAN: &str = "ask_human";

/// The built-in tools an agent gets when it names none.
pub const BUILTIN_TOOLS: [&str; 4] = [CLOSE_TICKET, HANDOVER_TICKET, READ_TICKETS, MANAGE_TICKETS];
/// Every built-in tool: the defaults, and those an agent gets only by naming them.
pub const ALL_BUILTIN_TOOLS: [&str; 5] = [CLOSE_TICKET, HANDOVER_TICKET, READ_TICKETS, MANAGE_TICKETS, ASK_HUMAN];

/// Sub-tickets get the same attempt budget as tickets created over the API by default.
pub(crate) use crate::domain::ticket::DEFAULT_MAX_ATTEMPTS;
/// Long fields (a schema, an error) shown to the model are cut to this many characters.
const MAX_FIELD_CHARS: usize = 2000;

/// The built-in tools, in [`ALL_BUILTIN_TOOLS`] order. Each builds its input schema when created.
pub fn all() -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(Builtin::<CloseTicket>::new()),
        Arc::new(Builtin::<HandoverTicket>::new()),
        Arc::new(Builtin::<ReadTickets>::new()),
        Arc::new(Builtin::<ManageTickets>::new()),
        Arc::new(Builtin::<AskHuman>::new()),
    ]
}
