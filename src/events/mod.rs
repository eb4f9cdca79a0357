//! Live fan-out of the event log: one reader per process follows the log (woken by LISTEN/NOTIFY,
//! with polling as a fallback) and broadcasts each event once, pre-serialised, to every
//! subscriber in the process. Token deltas travel the same hub, in memory only.

pub mod deltas;
pub mod frames;
pub mod hub;
mod peers;
mod reader;
pub mod settle;
pub mod stream;

pub use frames::{EventBatch, HubMessage, StreamItem};
pub use hub::EventHub;
