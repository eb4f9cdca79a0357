//! A step's state: what every part of a step (its files each add methods to it) works with.

use std::borrow::Cow;

use super::{Runtime, Signals, Streaks};
use crate::db::claims::Fence;
use crate::domain::{Agent, Ticket, TicketUsage};
use crate::telemetry::trace::AgentSpan;
use crate::tools::ToolRegistry;

/// What every part of a step works with: the process, the claim, the agent and the ticket as
/// the step read them, and the signals that stop it.
pub(super) struct Step<'a> {
    pub rt: &'a Runtime,
    pub fence: Fence,
    pub agent: Agent,
    pub ticket: Ticket,
    /// The agent's tools for this step (`tools::catalog`).
    pub tools: Cow<'static, ToolRegistry>,
    pub signals: &'a Signals,
    pub streaks: &'a Streaks,
    /// Requests of this step that failed (and what an empty reply reported it used), not yet
    /// added to the ticket's usage.
    pub failed_usage: std::sync::Mutex<TicketUsage>,
    /// The claim's `invoke_agent` span (inert when tracing is off).
    pub span: &'a AgentSpan,
    /// The latest response's price and the budget events its cost crossed (`charge`).
    pub charged: std::sync::Mutex<Charged>,
}

/// What the latest response's request was charged, for the step to store with it.
#[derive(Default)]
pub(super) struct Charged {
    pub price: Option<crate::domain::Price>,
    /// `budget.threshold` events its cost crossed.
    pub events: Vec<crate::domain::NewEvent>,
}
