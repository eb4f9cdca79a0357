//! Pure types of agentdesk and their rules; no IO here.

pub mod agent;
pub mod comment;
pub mod event;
pub mod experiment;
pub mod failure;
pub mod link;
pub mod mcp_server;
pub mod money;
pub mod price;
pub mod project;
pub mod provider;
pub mod question;
pub mod schedule;
pub mod ticket;
pub mod tool;
pub mod webhook;

pub use agent::Agent;
pub use comment::{Author, Comment, ContentBlock};
pub use event::{EventData, NewEvent, RequeueReason, TicketEvent, TokenUsage};
pub use failure::FailureKind;
pub use mcp_server::{McpServerDef, McpServerView, McpToolInfo, McpTransport, RequiresApproval};
pub use money::Usd;
pub use price::Price;
pub use project::ProjectId;
pub use provider::ProviderDef;
pub use question::{PendingQuestion, Question};
pub use ticket::{Status, Ticket, TicketError, TicketRef, TicketUsage};
pub use tool::{Approval, Decision, HttpMethod, HttpToolDef, PendingApproval};
