//! Comments are a ticket's transcript: the agent conversation is rebuilt from them on every request.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

/// Who wrote a comment. `system` comments are notes of the service itself (kept through compaction).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Author {
    User,
    Assistant,
    System,
}

impl Author {
    pub fn as_str(self) -> &'static str {
        match self {
            Author::User => "user",
            Author::Assistant => "assistant",
            Author::System => "system",
        }
    }

    pub fn parse(s: &str) -> Option<Author> {
        match s {
            "user" => Some(Author::User),
            "assistant" => Some(Author::Assistant),
            "system" => Some(Author::System),
            _ => None,
        }
    }
}

/// One block of a comment; the same shape the providers' messages are built from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    Text {
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    ToolResult {
        tool_use_id: String,
        output: String,
        #[serde(default)]
        is_error: bool,
    },
    /// A model's reasoning; the signature is sent back verbatim (providers reject altered blocks).
    Thinking {
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
}

impl ContentBlock {
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock::Text { text: text.into() }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct Comment {
    pub id: Uuid,
    pub ticket_id: Uuid,
    /// Position in the ticket's transcript: 1, 2, 3 …
    pub seq: i64,
    pub author: Author,
    /// The agent that wrote an assistant comment, else null.
    pub agent: Option<String>,
    pub content: Vec<ContentBlock>,
    pub created_at: DateTime<Utc>,
}
