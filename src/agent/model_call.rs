//! One model response, with the retry policy: retryable errors back off (Retry-After wins) and try
//! again, unless output was already shown to clients; exhausted or terminal errors fail the
//! ticket. Text, thinking and tool-call deltas go to the hub as they arrive (each counts as shown
//! output); a cancel keeps the text shown so far.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use chrono::Utc;

use super::state::Charged;
use super::state::Step;
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

impl Step<'_> {
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
        let max_retries = self.agent.max_request_retries.max(0) as u32;
        let base_delay = Duration::from_millis(self.agent.request_retry_delay_ms.max(0) as u64);
        let mut attempt = 0u32;
        // The text shown so far, kept if a cancel stops the response.
        let mut streamed = String::new();
        let mut empty = 0u32;
        loop {
            // Held for this attempt only: a retry's backoff leaves the slot to others.
            let slot = Box::pin(self.take_slot(provider)).await?;
            let chat = self.span.chat(provider.name(), &self.agent.model);
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
            let Some(result) = result else {
                metric::model_request(
                    self.ticket.project.0,
                    (provider_label, &self.agent.model),
                    "cancelled",
                    sent.elapsed(),
                    first_output,
                );
                chat.fail("cancelled", "the ticket was cancelled or its claim lost");
                // It was sent: it counts (added when the step ends, `keep_failed_requests`).
                self.count_failed_request(TicketUsage::default());
                Box::pin(self.settle(&mut charge, &spent)).await?;
                return Box::pin(self.keep_cancelled_text(streamed)).await;
            };
            // The error, and what the provider reported the failed request used.
            let (err, used): (LlmError, TicketUsage) = match result {
                Ok(mut response) if !response.is_empty() => {
                    if shown.load(Ordering::Relaxed) {
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
                Ok(empty) => (
                    llm::empty_reply(provider.name()),
                    self.priced(&charge, request::ticket_usage(&empty.usage, 0, false), false),
                ),
                Err(err) => (err, TicketUsage::default()),
            };
            metric::model_request(
                self.ticket.project.0,
                (provider_label, &self.agent.model),
                err.kind.as_str(),
                sent.elapsed(),
                first_output,
            );
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
            attempt += 1;
            // What an unfinished stream or an empty reply (blank text) showed is not an answer: it
            // is sent again all the same (watchers see the new reply's deltas after the old ones;
            // only a whole reply is kept).
            let empty_reply = err.kind == LlmErrorKind::EmptyResponse;
            let partial = shown.load(Ordering::Relaxed) && !err.unfinished && !empty_reply;
            // An empty or unfinished answer is retried a few times only: a server that answers
            // nothing usually does so for every repeat of the same request.
            let (tries, limit) = if empty_reply || err.unfinished {
                empty += 1;
                (empty, MAX_EMPTY_RETRIES)
            } else {
                (attempt, max_retries)
            };
            if err.kind.is_retryable() && !partial && tries <= limit {
                // A cancel during the next attempt keeps only that attempt's text.
                streamed.clear();
                let delay = model_retry(base_delay).delay_or_hint(tries, err.retry_after);
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
                    _ = tokio::time::sleep(delay) => continue,
                }
            }
            self.log_failure(provider, &err, "giving up");
            let events = Box::pin(self.settle(&mut charge, &spent)).await?;
            Box::pin(self.append_thresholds(events)).await?;
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
            return Box::pin(self.fail_request(err.kind.into(), &message)).await;
        }
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
