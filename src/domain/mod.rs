//! Pure types of agentdesk and their rules; no IO here.

pub mod comment;

pub use comment::{Author, Comment, ContentBlock};
