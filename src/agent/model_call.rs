//! One model response, with the retry policy: retryable errors back off (Retry-After wins) and try
//! again, unless output was already shown to clients; exhausted or terminal errors fail the
//! ticket. Text, thinking and tool-call deltas go to the hub as they arrive (each counts as shown
//! output); a cancel keeps the text shown so far.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use chrono::Utc;

use super::step_state::Charged;
use super::step_state::Step;
use super::{aborted, request, Flow};
use crate::db;
use crate::domain::event::kind;
use crate::domain::{ContentBlock, EventData, NewEvent, TicketEvent, TicketUsage};
use crate::events::hub;
use crate::llm::{self, Delta, LlmError, LlmErrorKind, ModelRequest, ModelResponse, Provider};
use crate::net::backoff::Backoff;
use crate::telemetry::metric;
use crate::telemetry::trace::{ChatResult, ChildSpan};

/// How often an empty or unfinished answer is sent again, whatever the agent's
/// `max_request_retries`.
const MAX_EMPTY_RETRIES: u32 = 2;

/// A failed request waits the agent's `request_retry_delay_ms`·2^(n−1) plus up to a quarter, at
/// most 32 s; a provider's Retry-After replaces the backoff, under the same cap.
fn model_retry(first: Duration) -> Backoff {
    Backoff::doubling(first, Duration::from_secs(32)).with_jitter(0.25)
}

pub(super) enum ModelOutcome {
    Response(ModelResponse),
    /// The provider reported a full context window (compaction may help).
    Overflow(LlmError),
}

/// The retry policy of one model request: which failures are sent again, how often and after
/// how long. Pure: `call_model` does what it says.
struct RetryPolicy {
    /// The agent's `max_request_retries`.
    max_retries: u32,
    backoff: Backoff,
    /// Failed attempts so far, and of those the empty or unfinished answers.
    attempts: u32,
    empty: u32,
}

/// What follows a failed attempt.
#[derive(Debug, PartialEq)]
enum AfterFailure {
    /// Send it again after `delay`; this was retry `tries` of `limit`.
    Retry { tries: u32, limit: u32, delay: Duration },
    /// Fail the ticket with this message.
    GiveUp { message: String },
}

impl RetryPolicy {
    fn new(max_retries: u32, first_delay: Duration) -> RetryPolicy {
        RetryPolicy {
            max_retries,
            backoff: model_retry(first_delay),
            attempts: 0,
            empty: 0,
        }
    }

    /// Counts the failed attempt `err`; `shown` says whether any of its output reached clients.
    fn after(&mut self, err: &LlmError, shown: bool) -> AfterFailure {
        self.attempts += 1;
        // What an unfinished stream or an empty reply (blank text) showed is not an answer: it
        // is sent again all the same (watchers see the new reply's deltas after the old ones;
        // only a whole reply is kept).
        let empty_reply = err.kind == LlmErrorKind::EmptyResponse;
        let partial = shown && !err.unfinished && !empty_reply;
        // An empty or unfinished answer is retried a few times only: a server that answers
        // nothing usually does so for every repeat of the same request.
        let (tries, limit) = if empty_reply || err.unfinished {
            self.empty += 1;
            (self.empty, MAX_EMPTY_RETRIES)
        } else {
            (self.attempts, self.max_retries)
        };
        let retryable = err.kind.is_retryable();
        if retryable && !partial && tries <= limit {
            let delay = self.backoff.delay_or_hint(tries, err.retry_after);
            return AfterFailure::Retry { tries, limit, delay };
        }
        let message = if partial && retryable {
            format!(
                "{} (after partial output, so the request was not repeated)",
                err.message
            )
        } else if retryable {
            format!("{} (gave up after {limit} retries)", err.message)
        } else {
            err.message.clone()
        };
        AfterFailure::GiveUp { message }
    }
}

/// One attempt's answer as the stream left it.
struct Attempt {
    /// None when a cancel or a lost claim stopped it.
    result: Option<Result<ModelResponse, LlmError>>,
    sent: Instant,
    /// When its first output came, after `sent`.
    first_output: Option<Duration>,
    /// Whether any of its output reached clients.
    shown: bool,
}

impl Step<'_> {
    /// Sends `request` and streams the answer, in retries under the agent's policy (above);
    /// prices the request before anything is sent and settles what it cost after.
    pub(super) async fn call_model(&self, provider: &dyn Provider, request: &ModelRequest) -> Flow<ModelOutcome> {
        let provider_label = self.agent.provider.as_deref().unwrap_or(provider.name());
        // Priced (and, under a budget, reserved) before anything is sent: a request that does
        // not fit is never sent, and the ticket waits.
        let mut charge = Box::pin(self.charge_for(provider_label, request)).await?;
        // What this request's failed attempts used (an empty reply's tokens) and cost.
        let mut spent = TicketUsage::default();
        let started = EventData::RequestStarted {
            model: self.agent.model.clone(),
        };
        Box::pin(self.append_events(vec![NewEvent::new(Some(self.name()), started)])).await?;
        let mut policy = RetryPolicy::new(
            self.agent.max_request_retries.max(0) as u32,
            Duration::from_millis(self.agent.request_retry_delay_ms.max(0) as u64),
        );
        // The text shown so far, kept if a cancel stops the response.
        let mut streamed = String::new();
        loop {
            let chat = self.span.chat(provider.name(), &self.agent.model);
            let attempt = Box::pin(self.attempt(provider, request, &mut streamed)).await?;
            let (sent, first_output) = (attempt.sent, attempt.first_output);
            let record = |outcome: &'static str| {
                let model = (provider_label, self.agent.model.as_str());
                metric::model_request(self.ticket.project.0, model, outcome, sent.elapsed(), first_output);
            };
            // The error, and what the provider reported the failed request used.
            let (err, used): (LlmError, TicketUsage) = match attempt.result {
                None => {
                    record("cancelled");
                    chat.fail("cancelled", "the ticket was cancelled or its claim lost");
                    // It was sent: it counts (added when the step ends, `keep_failed_requests`).
                    self.count_failed_request(TicketUsage::default());
                    Box::pin(self.settle(&mut charge, &spent)).await?;
                    return Box::pin(self.keep_cancelled_text(streamed)).await;
                }
                Some(Ok(mut response)) if !response.is_empty() => {
                    if attempt.shown {
                        // The live text reaches watchers in other processes before the events
                        // this response leads to (the last of which ends their streams).
                        Box::pin(self.rt.hub.flush_deltas()).await;
                    }
                    request::estimate_usage(request, &mut response);
                    let usage = request::ticket_usage(&response.usage, 1, !response.usage_reported);
                    let usage = self.priced(&charge, usage, true);
                    let events = Box::pin(self.settle(&mut charge, &spent.plus(&usage))).await?;
                    self.record_response(provider_label, request, &response, &chat, (sent, first_output), &usage);
                    self.set_charged(Charged {
                        price: charge.price.take(),
                        events,
                    });
                    return Ok(ModelOutcome::Response(response));
                }
                // Nothing to act on is never a question for humans: sent again as an empty 200.
                // What the provider reported it used still counts.
                Some(Ok(empty)) => (
                    llm::empty_reply(provider.name()),
                    self.priced(&charge, request::ticket_usage(&empty.usage, 0, false), false),
                ),
                Some(Err(err)) => (err, TicketUsage::default()),
            };
            record(err.kind.as_str());
            if chat.is_recording() {
                chat.fail(err.kind.as_str(), &llm::excerpt(&err.message, 300));
            }
            drop(chat);
            // A request that failed was still sent: it counts, in the metrics too.
            self.record_cost(provider_label, &used);
            spent = spent.plus(&used);
            self.count_failed_request(used);
            if err.kind == LlmErrorKind::ContextWindowExceeded {
                self.log_failure(provider, &err, "context window exceeded");
                let events = Box::pin(self.settle(&mut charge, &spent)).await?;
                Box::pin(self.append_thresholds(events)).await?;
                return Ok(ModelOutcome::Overflow(err));
            }
            match policy.after(&err, attempt.shown) {
                AfterFailure::Retry { tries, limit, delay } => {
                    // A cancel during the next attempt keeps only that attempt's text.
                    streamed.clear();
                    self.log_failure(provider, &err, "retrying");
                    let retried = EventData::RequestRetried {
                        attempt: tries,
                        max_attempts: limit,
                        kind: err.kind.as_str().into(),
                        message: err.message.clone(),
                        delay_ms: delay.as_millis() as u64,
                    };
                    Box::pin(self.append_events(vec![NewEvent::new(Some(self.name()), retried)])).await?;
                    tokio::select! {
                        biased;
                        _ = self.signals.abort.cancelled() => return aborted(),
                        _ = tokio::time::sleep(delay) => {}
                    }
                }
                AfterFailure::GiveUp { message } => {
                    self.log_failure(provider, &err, "giving up");
                    let events = Box::pin(self.settle(&mut charge, &spent)).await?;
                    Box::pin(self.append_thresholds(events)).await?;
                    return Box::pin(self.fail_request(err.kind.into(), &message)).await;
                }
            }
        }
    }

    /// One attempt: a provider slot held while it streams, its deltas published (and its text
    /// added to `streamed`) as they come, stopped by a cancel or a lost claim.
    async fn attempt(&self, provider: &dyn Provider, request: &ModelRequest, streamed: &mut String) -> Flow<Attempt> {
        // Held for this attempt only: a retry's backoff leaves the slot to others.
        let slot = Box::pin(self.take_slot(provider)).await?;
        let sent = Instant::now();
        let mut first_output = None;
        let shown = AtomicBool::new(false);
        let mut on_delta = |delta: Delta| {
            if self.signals.abort.is_cancelled() {
                return;
            }
            first_output.get_or_insert_with(|| sent.elapsed());
            shown.store(true, Ordering::Relaxed);
            if let Delta::Text(text) = &delta {
                streamed.push_str(text);
            }
            self.publish_delta(delta);
        };
        let result = tokio::select! {
            biased;
            _ = self.signals.abort.cancelled() => None,
            r = provider.stream(request, &mut on_delta, self.rt.stream_idle) => Some(r),
        };
        drop(slot);
        Ok(Attempt {
            result,
            sent,
            first_output,
            shown: shown.load(Ordering::Relaxed),
        })
    }

    /// The metrics and the `chat` span of a response.
    fn record_response(
        &self,
        provider: &str,
        request: &ModelRequest,
        response: &ModelResponse,
        chat: &ChildSpan,
        (sent, first_output): (Instant, Option<Duration>),
        priced: &TicketUsage,
    ) {
        let model = &self.agent.model;
        let project = self.ticket.project.0;
        metric::model_request(project, (provider, model), "ok", sent.elapsed(), first_output);
        let cost_usd = self.record_cost(provider, priced);
        let usage = &response.usage;
        metric::tokens(
            project,
            provider,
            model,
            [
                ("input", usage.input_tokens),
                ("output", usage.output_tokens),
                ("cache_read", usage.cache_read_tokens),
                ("cache_creation", usage.cache_creation_tokens),
            ],
        );
        if !chat.is_recording() {
            return;
        }
        chat.chat_result(ChatResult {
            response_model: &response.model,
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            finish_reason: response.stop_reason.as_str(),
            cost_usd,
        });
        chat.content(|| {
            let messages: Vec<serde_json::Value> = request
                .messages
                .iter()
                .map(|m| {
                    let role = match m.role {
                        llm::Role::User => "user",
                        llm::Role::Assistant => "assistant",
                    };
                    serde_json::json!({ "role": role, "parts": m.content })
                })
                .collect();
            let calls: Vec<serde_json::Value> = response
                .tool_calls
                .iter()
                .map(|c| serde_json::json!({ "type": "tool_call", "id": c.id, "name": c.name, "arguments": c.arguments }))
                .collect();
            let mut parts = vec![serde_json::json!({ "type": "text", "content": response.text })];
            parts.extend(calls);
            let output = serde_json::json!([{ "role": "assistant", "parts": parts }]);
            vec![
                ("gen_ai.system_instructions", request.system.clone()),
                ("gen_ai.input.messages", serde_json::Value::Array(messages).to_string()),
                ("gen_ai.output.messages", output.to_string()),
            ]
        });
    }

    /// The response was stopped: after a cancel, the text it had shown stays in the transcript
    /// (`db::claims::store_cancelled_output` checks that it was a cancel, not a lost claim).
    async fn keep_cancelled_text<T>(&self, streamed: String) -> Flow<T> {
        if !streamed.is_empty() {
            let content = [ContentBlock::text(streamed)];
            if db::claims::store_cancelled_output(&self.rt.pool, self.fence, self.name(), &content).await? {
                self.rt.hub.wake();
            }
        }
        aborted()
    }

    /// One warn line per failed request, with what an operator needs to find the cause.
    pub(super) fn log_failure(&self, provider: &dyn Provider, err: &LlmError, action: &str) {
        tracing::warn!(
            ticket = %self.ticket.key,
            agent = %self.agent.name,
            model = %self.agent.model,
            provider = %self.agent.provider.as_deref().unwrap_or(provider.name()),
            status = err.status,
            kind = %err.kind.as_str(),
            body = %llm::excerpt(&err.message, 300),
            "model request failed; {action}"
        );
    }

    /// A live-only delta to the ticket's subscribers (never stored).
    fn publish_delta(&self, delta: Delta) {
        if !self.rt.hub.wants_deltas() {
            return;
        }
        let (delta_kind, data) = match &delta {
            Delta::Text(t) => (kind::TEXT_DELTA, hub::delta_data(t)),
            Delta::Thinking(t) => (kind::THINKING_DELTA, hub::delta_data(t)),
            Delta::ToolCall {
                call_id,
                tool_name,
                delta,
            } => (
                kind::TOOL_CALL_DELTA,
                hub::tool_call_delta_data(call_id, tool_name, delta),
            ),
        };
        let event = TicketEvent {
            ticket_id: Some(self.ticket.id),
            ticket_key: Some(self.ticket.key.clone()),
            seq: None,
            kind: delta_kind.to_owned(),
            agent: Some(self.agent.name.clone()),
            at: Utc::now(),
            data,
        };
        let labels = self.ticket.labels.clone();
        self.rt
            .hub
            .publish_delta(self.ticket.project, event, labels, Some(self.agent.name.clone()));
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{AfterFailure, RetryPolicy, MAX_EMPTY_RETRIES};
    use crate::llm::{LlmError, LlmErrorKind};

    fn error(kind: LlmErrorKind) -> LlmError {
        LlmError::new(kind, "it failed")
    }

    #[test]
    fn a_retryable_failure_is_sent_again_until_the_agents_limit() {
        let mut policy = RetryPolicy::new(2, Duration::from_millis(100));
        let err = error(LlmErrorKind::ServerError);
        for tries in 1..=2 {
            match policy.after(&err, false) {
                AfterFailure::Retry { tries: t, limit, delay } => {
                    assert_eq!((t, limit), (tries, 2));
                    assert!(delay >= Duration::from_millis(100) * 2u32.pow(tries - 1));
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(
            policy.after(&err, false),
            AfterFailure::GiveUp {
                message: "it failed (gave up after 2 retries)".into()
            }
        );
    }

    #[test]
    fn a_failure_after_output_was_shown_is_not_repeated() {
        let mut policy = RetryPolicy::new(5, Duration::from_millis(1));
        let AfterFailure::GiveUp { message } = policy.after(&error(LlmErrorKind::StreamInterrupted), true) else {
            panic!("a shown answer was sent again");
        };
        assert!(message.contains("after partial output"), "{message}");
    }

    #[test]
    fn a_terminal_failure_is_never_retried() {
        let mut policy = RetryPolicy::new(5, Duration::from_millis(1));
        assert_eq!(
            policy.after(&error(LlmErrorKind::AuthenticationFailed), false),
            AfterFailure::GiveUp {
                message: "it failed".into()
            }
        );
    }

    #[test]
    fn empty_answers_have_a_small_limit_of_their_own() {
        let mut policy = RetryPolicy::new(10, Duration::from_millis(1));
        let empty = error(LlmErrorKind::EmptyResponse);
        for _ in 0..MAX_EMPTY_RETRIES {
            assert!(matches!(policy.after(&empty, true), AfterFailure::Retry { .. }));
        }
        assert!(matches!(policy.after(&empty, true), AfterFailure::GiveUp { .. }));
    }

    #[test]
    fn a_retry_after_hint_replaces_the_backoff() {
        let mut policy = RetryPolicy::new(3, Duration::from_millis(100));
        let mut err = error(LlmErrorKind::RateLimited);
        err.retry_after = Some(Duration::from_secs(7));
        assert_eq!(
            policy.after(&err, false),
            AfterFailure::Retry {
                tries: 1,
                limit: 3,
                delay: Duration::from_secs(7)
            }
        );
    }
}
