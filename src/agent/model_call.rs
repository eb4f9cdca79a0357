//! One model response, with the retry policy: retryable errors back off (Retry-After wins) and try
//! again, unless output was already shown to clients; exhausted or terminal errors fail the
//! ticket. Text and thinking deltas go to the hub as they arrive.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use chrono::Utc;

use super::step::Step;
use super::{aborted, request, Flow};
use crate::domain::event::kind;
use crate::domain::{EventData, NewEvent, TicketEvent};
use crate::llm::{self, Delta, LlmError, LlmErrorKind, ModelRequest, ModelResponse, Provider};

/// How often an empty answer is sent again, whatever the agent's `max_request_retries`.
const MAX_EMPTY_RETRIES: u32 = 2;

pub(super) enum ModelOutcome {
    Response(ModelResponse),
    /// The provider reported a full context window (compaction may help).
    Overflow(LlmError),
}

impl Step<'_> {
    pub(super) async fn call_model(&self, provider: &dyn Provider, request: &ModelRequest) -> Flow<ModelOutcome> {
        let started = EventData::RequestStarted {
            model: self.agent.model.clone(),
        };
        self.append_events(vec![NewEvent::new(Some(self.name()), started)])
            .await?;
        let max_retries = self.agent.max_request_retries.max(0) as u32;
        let base_delay = Duration::from_millis(self.agent.request_retry_delay_ms.max(0) as u64);
        let mut attempt = 0u32;
        let mut empty = 0u32;
        loop {
            let shown = AtomicBool::new(false);
            let mut on_delta = |delta: Delta| {
                if self.signals.abort.is_cancelled() {
                    return;
                }
                shown.store(true, Ordering::Relaxed);
                self.publish_delta(delta);
            };
            let result = tokio::select! {
                biased;
                _ = self.signals.abort.cancelled() => return aborted(),
                r = provider.stream(request, &mut on_delta, self.rt.stream_idle) => r,
            };
            let err: LlmError = match result {
                Ok(mut response) => {
                    request::estimate_usage(request, &mut response);
                    return Ok(ModelOutcome::Response(response));
                }
                Err(err) => err,
            };
            // A request that failed was still sent: it counts.
            self.count_failed_request();
            if err.kind == LlmErrorKind::ContextWindowExceeded {
                self.log_failure(provider, &err, "context window exceeded");
                return Ok(ModelOutcome::Overflow(err));
            }
            attempt += 1;
            let partial = shown.load(Ordering::Relaxed);
            // An empty answer is retried a few times only: a server that answers nothing usually
            // does so for every repeat of the same request.
            let (tries, limit) = if err.kind == LlmErrorKind::EmptyResponse {
                empty += 1;
                (empty, MAX_EMPTY_RETRIES)
            } else {
                (attempt, max_retries)
            };
            if err.kind.is_retryable() && !partial && tries <= limit {
                let delay = llm::backoff_delay(tries, base_delay, err.retry_after);
                self.log_failure(provider, &err, "retrying");
                let retried = EventData::RequestRetried {
                    attempt: tries,
                    max_attempts: limit,
                    kind: err.kind.as_str().into(),
                    message: err.message.clone(),
                    delay_ms: delay.as_millis() as u64,
                };
                self.append_events(vec![NewEvent::new(Some(self.name()), retried)])
                    .await?;
                tokio::select! {
                    biased;
                    _ = self.signals.abort.cancelled() => return aborted(),
                    _ = tokio::time::sleep(delay) => continue,
                }
            }
            self.log_failure(provider, &err, "giving up");
            let message = if partial && err.kind.is_retryable() {
                format!(
                    "{} (after partial output, so the request was not repeated)",
                    err.message
                )
            } else if err.kind.is_retryable() {
                format!("{} (gave up after {limit} retries)", err.message)
            } else {
                err.message.clone()
            };
            return self.fail_request(err.kind.as_str(), &message).await;
        }
    }

    /// One warn line per failed request, with what an operator needs to find the cause.
    pub(super) fn log_failure(&self, provider: &dyn Provider, err: &LlmError, action: &str) {
        tracing::warn!(
            ticket = %self.ticket.key,
            agent = %self.agent.name,
            model = %self.agent.model,
            provider = self.agent.provider.as_deref().unwrap_or(provider.name()),
            status = err.status,
            kind = err.kind.as_str(),
            body = %llm::excerpt(&err.message, 300),
            "model request failed; {action}"
        );
    }

    /// A live-only delta to the ticket's subscribers (never stored).
    fn publish_delta(&self, delta: Delta) {
        let (delta_kind, text) = match delta {
            Delta::Text(t) => (kind::TEXT_DELTA, t),
            Delta::Thinking(t) => (kind::THINKING_DELTA, t),
        };
        let event = TicketEvent {
            ticket_id: self.ticket.id,
            ticket_key: self.ticket.key.clone(),
            seq: None,
            kind: delta_kind.to_owned(),
            agent: Some(self.agent.name.clone()),
            at: Utc::now(),
            data: crate::events::hub::delta_data(&text),
        };
        let labels = self.ticket.labels.clone();
        self.rt.hub.publish_delta(event, labels, Some(self.agent.name.clone()));
    }
}
