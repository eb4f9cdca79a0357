//! The streaming interface every model provider implements.

use std::time::Duration;

use super::error::LlmError;
use super::types::{Delta, ModelRequest, ModelResponse};

#[async_trait::async_trait]
pub trait Provider: Send + Sync {
    /// "openai" | "anthropic"
    fn name(&self) -> &'static str;

    /// Model requests in flight to this provider at most, across every process of the desk
    /// (`max_concurrent`); None: no limit.
    fn max_concurrent(&self) -> Option<u32> {
        None
    }

    /// Streams one model response. Each text, thinking and tool-call argument delta is passed to
    /// `on_delta` as it arrives.
    /// A stream silent for `idle_timeout` between chunks (or before the first) fails with StreamStalled.
    /// Dropping the future aborts the HTTP request (that is how cancel works).
    async fn stream(
        &self,
        req: &ModelRequest,
        on_delta: &mut (dyn FnMut(Delta) + Send),
        idle_timeout: Duration,
    ) -> Result<ModelResponse, LlmError>;
}
