//! Model providers behind one streaming interface.
//!
//! Each provider speaks its own wire format (OpenAI chat completions, Anthropic Messages) and
//! normalises the stream into a [`ModelResponse`]; failures are normalised into [`LlmError`]
//! kinds so the caller can decide on retries without knowing which provider it talked to.
//!
//! The files import each other only one way: the shared types (`types`, `error`, `provider`)
//! come first, the HTTP plumbing and the wire formats next, the registries last. This file only
//! re-exports them.

pub mod anthropic;
mod configured;
mod endpoint;
mod error;
pub mod grammar_safe;
mod http;
pub mod named;
pub mod openai;
mod provider;
mod stream;
mod types;
mod wire;

pub use crate::domain::ContentBlock;
pub use configured::Providers;
pub use endpoint::HttpProvider;
pub use error::{empty_reply, LlmError, LlmErrorKind};
pub use provider::Provider;
pub use types::{Delta, Message, ModelRequest, ModelResponse, Role, StopReason, ToolCall, ToolChoice, ToolSpec, Usage};

/// The start of `s`, at most `max` bytes (on a char boundary), for log lines.
pub fn excerpt(s: &str, max: usize) -> String {
    http::truncate(s, max)
}

/// Known context windows: claude-* 200_000, gpt-4o*/gpt-4o-mini 128_000, gpt-4.1* 1_047_576,
/// gpt-5* 400_000, o1/o3/o4* 200_000, mistral-large* 131_072; unknown None.
pub fn known_context_window(model: &str) -> Option<u32> {
    // Routers and local servers often prefix the vendor ("openai/gpt-4o"); the window is the
    // model's own.
    let m = model.rsplit('/').next().unwrap_or(model).to_ascii_lowercase();
    let m = m.as_str();
    if m.starts_with("claude-") {
        Some(200_000)
    } else if m.starts_with("gpt-4o") {
        Some(128_000)
    } else if m.starts_with("gpt-4.1") {
        Some(1_047_576)
    } else if m.starts_with("gpt-5") {
        Some(400_000)
    } else if ["o1", "o3", "o4"]
        .iter()
        .any(|p| m == *p || m.starts_with(&format!("{p}-")))
    {
        Some(200_000)
    } else if m.starts_with("mistral-large") {
        Some(131_072)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_windows() {
        assert_eq!(known_context_window("claude-sonnet-4-5"), Some(200_000));
        assert_eq!(known_context_window("gpt-4o"), Some(128_000));
        assert_eq!(known_context_window("gpt-4o-mini"), Some(128_000));
        assert_eq!(known_context_window("gpt-4.1-mini"), Some(1_047_576));
        assert_eq!(known_context_window("gpt-5-mini"), Some(400_000));
        assert_eq!(known_context_window("o3-mini"), Some(200_000));
        assert_eq!(known_context_window("o1"), Some(200_000));
        assert_eq!(known_context_window("mistral-large-latest"), Some(131_072));
        assert_eq!(known_context_window("openai/gpt-4o"), Some(128_000));
        assert_eq!(known_context_window("llama3.1:8b"), None);
        assert_eq!(known_context_window("o10"), None);
    }
}
