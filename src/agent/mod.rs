//! The agent loop: one claimed ticket, step by step, until it is done, failed, waiting for a
//! human, or let go.
//!
//! A step: rebuild the messages from the transcript, stream one model response (text deltas go
//! out live), persist it, run its tool calls concurrently, persist their results. Every write is
//! a short transaction opened by `db::claims::fence`, so a worker that lost its claim writes
//! nothing; no connection is held while the model or a tool runs.

pub mod appender;
pub mod compaction;
pub mod group;
pub mod outputs;
pub mod steps;
pub mod transcript;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use serde_json::{json, Value};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::db;
use crate::db::claims::{Claim, Fence, Finish, Release};
use crate::domain::event::kind;
use crate::domain::{Agent, Author, Comment, ContentBlock, NewEvent, Status, Ticket, TicketEvent, TicketUsage};
use crate::events::EventHub;
use crate::llm::{self, Delta, LlmError, LlmErrorKind, ModelRequest, ModelResponse, Provider, Providers, ToolSpec};
use crate::tools::run::{self as tool_run, ToolContext, ToolOutcome};
use compaction::Reason;

/// What the loop needs from the process.
pub struct Runtime {
    pub pool: PgPool,
    /// Group-commits the loops' event-only writes.
    pub appender: appender::EventAppender,
    /// Group-commits the loops' step results.
    pub steps: steps::StepWriter,
    pub hub: EventHub,
    pub providers: Arc<Providers>,
    /// A model stream silent this long is a stall.
    pub stream_idle: Duration,
}

/// How the outside world stops a running ticket.
#[derive(Clone, Default)]
pub struct Signals {
    /// Stop now and write nothing more: the ticket was cancelled or the claim was lost.
    pub abort: CancellationToken,
    /// Finish the current step, then let the ticket go (shutdown).
    pub stop: CancellationToken,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunEnd {
    Done,
    Failed,
    Waiting,
    /// Let go on shutdown, back to `todo`.
    Released,
    /// Cancelled, or the claim was lost: nothing more was written.
    Aborted,
}

/// Step results that end the run early.
enum Flow<T> {
    Next(T),
    End(RunEnd),
}

macro_rules! next {
    ($e:expr) => {
        match $e {
            Flow::Next(v) => v,
            Flow::End(end) => return Ok(Flow::End(end)),
        }
    };
}

/// Opens the claim's fenced transaction (adding usage to the ticket's counters, if given), or
/// ends the run when the claim is gone.
macro_rules! fenced {
    ($rt:expr, $fence:expr) => {
        fenced!($rt, $fence, &TicketUsage::default())
    };
    ($rt:expr, $fence:expr, $usage:expr) => {
        match db::claims::fence_adding(&$rt.pool, $fence, $usage).await? {
            Some(tx) => tx,
            None => return Ok(Flow::End(RunEnd::Aborted)),
        }
    };
}

/// Runs a claimed ticket until it settles. A database error ends the run with Err; the caller may
/// run it again with the same claim and `resumed` set, and then everything is read again from the
/// database (what the claim returned may be out of date by then).
pub async fn run_ticket(rt: &Runtime, claim: &Claim, signals: &Signals, resumed: bool) -> Result<RunEnd, sqlx::Error> {
    let fence = claim.fence();
    // The first step of a new claim works from what the claim returned (the ticket, the agent,
    // a transcript it wrote), sparing the reads.
    let mut first = !resumed;
    loop {
        if signals.abort.is_cancelled() {
            return Ok(RunEnd::Aborted);
        }
        if signals.stop.is_cancelled() {
            return release(rt, fence, Release::Shutdown, &claim.agent).await;
        }
        if let Flow::End(end) = step(rt, claim, signals, std::mem::take(&mut first)).await? {
            return Ok(end);
        }
    }
}

/// Lets go of the ticket (waiting for a human, or shutdown).
pub async fn release(rt: &Runtime, fence: Fence, how: Release, agent: &str) -> Result<RunEnd, sqlx::Error> {
    let Some(mut tx) = db::claims::fence(&rt.pool, fence).await? else {
        return Ok(RunEnd::Aborted);
    };
    db::claims::release(&mut tx, fence, how, agent).await?;
    tx.commit().await?;
    rt.hub.wake();
    Ok(match how {
        Release::Waiting => RunEnd::Waiting,
        Release::Shutdown => RunEnd::Released,
    })
}

async fn step(rt: &Runtime, claim: &Claim, signals: &Signals, first: bool) -> Result<Flow<()>, sqlx::Error> {
    let fence = claim.fence();
    let agent_name = claim.agent.as_str();
    let state = if first {
        Some((claim.ticket.clone(), claim.generation))
    } else {
        db::claims::loop_state(&rt.pool, fence.ticket_id).await?
    };
    let Some((ticket, generation)) = state else {
        return Ok(Flow::End(RunEnd::Aborted));
    };
    if generation != fence.generation || ticket.status != Status::InProgress {
        return Ok(Flow::End(RunEnd::Aborted));
    }
    let definition = match &claim.definition {
        Some(agent) if first => Some(agent.clone()),
        _ => db::agents::get(&rt.pool, agent_name).await?,
    };
    let Some(agent) = definition else {
        let message = format!("agent {agent_name:?} no longer exists");
        return fail(rt, fence, agent_name, "agent_missing", &message, vec![]).await;
    };

    if let Some((policy, limit)) = policy_violation(&agent, &ticket) {
        let event = NewEvent::new(
            kind::POLICY_VIOLATED,
            Some(agent_name),
            json!({ "kind": policy, "limit": limit }),
        );
        let message = format!("the ticket reached the agent's {policy} limit ({limit}) before it was closed");
        return fail(rt, fence, agent_name, policy, &message, vec![event]).await;
    }

    let provider = match rt.providers.get(agent.provider.as_deref()) {
        Ok(p) => p,
        Err(err) => return fail_request(rt, fence, agent_name, err.kind.as_str(), &err.message).await,
    };

    let window = agent
        .context_window
        .map(|w| w as u64)
        .or_else(|| llm::known_context_window(&agent.model).map(u64::from));
    let transcript = match &claim.transcript {
        // As the claim wrote it: a comment posted since is seen by the next request, as one
        // posted during this request would be.
        Some(transcript) if first => transcript.clone(),
        _ => db::comments::all(&rt.pool, ticket.id).await?,
    };
    let mut request = build_request(&agent, &ticket, &transcript);
    let mut compacted = false;
    if let Some(window) = window {
        let estimated = compaction::estimate_tokens(&request);
        if let Some(reason) = compaction::trigger(estimated, window, ticket.usage.requests > 0) {
            if reason == Reason::Blocking {
                let data = json!({ "estimated_tokens": estimated, "threshold_tokens": compaction::blocking_threshold(window) });
                next!(
                    append_events(
                        rt,
                        fence,
                        &[NewEvent::new(kind::CONTEXT_LIMIT_EXCEEDED, Some(agent_name), data)]
                    )
                    .await?
                );
            }
            compacted = next!(
                compact(
                    rt,
                    fence,
                    &agent,
                    &ticket,
                    provider.as_ref(),
                    window,
                    reason,
                    estimated,
                    signals
                )
                .await?
            );
            request = build_request(&agent, &ticket, &db::comments::all(&rt.pool, ticket.id).await?);
            if compaction::estimate_tokens(&request) >= compaction::blocking_threshold(window) {
                return still_too_large(rt, fence, agent_name).await;
            }
        }
    }
    let response = match next!(call_model(rt, fence, &agent, &ticket, provider.as_ref(), &request, signals).await?) {
        ModelOutcome::Response(r) => r,
        ModelOutcome::Overflow(err) => {
            // Reactive: the provider says the context is full. Compact once and try again; a
            // second overflow right after a compaction fails the ticket.
            let Some(window) = window.filter(|_| !compacted) else {
                return overflow_failure(rt, fence, agent_name, &err, compacted).await;
            };
            let estimated = compaction::estimate_tokens(&request);
            next!(
                compact(
                    rt,
                    fence,
                    &agent,
                    &ticket,
                    provider.as_ref(),
                    window,
                    Reason::Reactive,
                    estimated,
                    signals
                )
                .await?
            );
            request = build_request(&agent, &ticket, &db::comments::all(&rt.pool, ticket.id).await?);
            match next!(call_model(rt, fence, &agent, &ticket, provider.as_ref(), &request, signals).await?) {
                ModelOutcome::Response(r) => r,
                ModelOutcome::Overflow(err) => return overflow_failure(rt, fence, agent_name, &err, true).await,
            }
        }
    };
    let calls = prepare_calls(&agent, &response);
    let record = record_response(&agent, &response, &calls);
    if calls.is_empty() {
        return settle_text_reply(rt, fence, &agent, &ticket, record).await;
    }
    let tool_usage = TicketUsage {
        tool_calls: calls.len() as i64,
        ..TicketUsage::default()
    };
    if calls.iter().all(PreparedCall::writes_nothing) {
        // Nothing these calls do writes (finishers apply at commit): run them first, then store
        // the response, the results and the outcome in one transaction. A crash before the commit
        // leaves no trace, exactly like a crash during the model call.
        let outcomes = next!(execute_tools(rt, fence, &agent, &ticket, &calls, signals).await?);
        let usage = record.usage.plus(&tool_usage);
        return store_results(rt, fence, &agent, &ticket, &calls, outcomes, Some(record), &usage).await;
    }
    // Tools with side effects: the response and `tool.started` are stored before they run.
    let usage = record.usage;
    let (assistant, events, carries) = record.into_step(ticket.id, &agent.name);
    let step = db::claims::StepResult {
        usage,
        comments: vec![assistant],
        events,
        carries,
        outcome: None,
    };
    if !rt
        .steps
        .store(db::claims::StepWrite {
            fence,
            agent: agent.name.clone(),
            step,
        })
        .await?
    {
        return Ok(Flow::End(RunEnd::Aborted));
    }
    rt.hub.wake();
    let outcomes = next!(execute_tools(rt, fence, &agent, &ticket, &calls, signals).await?);
    store_results(rt, fence, &agent, &ticket, &calls, outcomes, None, &tool_usage).await
}

fn build_request(agent: &Agent, ticket: &Ticket, comments: &[Comment]) -> ModelRequest {
    ModelRequest {
        model: agent.model.clone(),
        system: system_prompt(agent, ticket),
        messages: transcript::to_messages(comments),
        tools: tool_specs(agent),
        temperature: agent.temperature,
        max_tokens: agent.max_tokens.map(|m| m as u32),
        thinking_budget: agent.thinking_budget.map(|b| b as u32),
    }
}

const STILL_TOO_LARGE: &str = "context still exceeds window after compaction";

async fn still_too_large(rt: &Runtime, fence: Fence, agent: &str) -> Result<Flow<()>, sqlx::Error> {
    fail(rt, fence, agent, "context_window_exceeded", STILL_TOO_LARGE, vec![]).await
}

async fn overflow_failure(
    rt: &Runtime,
    fence: Fence,
    agent: &str,
    err: &LlmError,
    after_compaction: bool,
) -> Result<Flow<()>, sqlx::Error> {
    let message = if after_compaction {
        format!("{STILL_TOO_LARGE}: {}", err.message)
    } else {
        err.message.clone()
    };
    fail_request(rt, fence, agent, err.kind.as_str(), &message).await
}

/// Summarises the transcript and replaces it. Next(true) when compacted, Next(false) when a
/// proactive compaction failed (the request still fits); a failed blocking or reactive
/// compaction fails the ticket.
#[allow(clippy::too_many_arguments)]
async fn compact(
    rt: &Runtime,
    fence: Fence,
    agent: &Agent,
    ticket: &Ticket,
    provider: &dyn Provider,
    window: u64,
    reason: Reason,
    tokens_before: u64,
    signals: &Signals,
) -> Result<Flow<bool>, sqlx::Error> {
    let name = agent.name.as_str();
    next!(
        append_events(
            rt,
            fence,
            &[NewEvent::new(
                kind::COMPACTION_STARTED,
                Some(name),
                compaction::started_data(reason)
            )]
        )
        .await?
    );
    let comments = db::comments::all(&rt.pool, ticket.id).await?;
    let summariser = compaction::summariser_request(&agent.model, &comments, window);
    // One request, no tools, no retries: a failing summariser is reported, not hammered.
    let mut ignore_deltas = |_: Delta| {};
    let result = tokio::select! {
        biased;
        _ = signals.abort.cancelled() => return Ok(Flow::End(RunEnd::Aborted)),
        r = provider.stream(&summariser, &mut ignore_deltas, rt.stream_idle) => r,
    };
    let (usage, outcome) = match result {
        Ok(response) if !response.text.trim().is_empty() => (Some(response.usage), Ok(response.text)),
        Ok(response) => (
            Some(response.usage),
            Err("the summariser returned an empty summary".to_owned()),
        ),
        Err(err) => (None, Err(format!("{}: {}", err.kind.as_str(), err.message))),
    };
    let usage = usage.map(|u| ticket_usage(&u, 1)).unwrap_or_default();
    let mut tx = fenced!(rt, fence, &usage);
    let flow = match outcome {
        Ok(summary) => {
            // Only what the summariser saw is replaced: a comment written meanwhile stays.
            let summarised = comments.iter().map(|c| c.seq).max().unwrap_or(0);
            db::comments::delete_non_system(&mut tx, ticket.id, summarised).await?;
            let content = compaction::summary_comment(&summary);
            let comment = db::comments::insert(&mut tx, ticket.id, Author::User, None, &content).await?;
            let kept = db::comments::all(&mut *tx, ticket.id).await?;
            let tokens_after = compaction::estimate_tokens(&build_request(agent, ticket, &kept));
            db::events::append(&mut tx, ticket.id, &[
                NewEvent::new(kind::COMMENT_CREATED, Some(name), json!({ "comment": comment })),
                NewEvent::new(kind::COMPACTION_FINISHED, Some(name), json!({ "reason": reason.as_str(), "tokens_before": tokens_before, "tokens_after": tokens_after })),
            ]).await?;
            Flow::Next(true)
        }
        Err(message) => {
            let failed = NewEvent::new(
                kind::COMPACTION_FAILED,
                Some(name),
                json!({ "reason": reason.as_str(), "message": message }),
            );
            if reason == Reason::Proactive {
                db::events::append(&mut tx, ticket.id, &[failed]).await?;
                Flow::Next(false)
            } else {
                let outcome = Finish::Failed {
                    kind: "compaction_failed".into(),
                    message: format!("compaction failed: {message}"),
                };
                db::claims::finish(&mut tx, fence, &outcome, name, vec![failed]).await?;
                Flow::End(RunEnd::Failed)
            }
        }
    };
    tx.commit().await?;
    rt.hub.wake();
    Ok(flow)
}

fn ticket_usage(usage: &llm::Usage, requests: i64) -> TicketUsage {
    TicketUsage {
        input_tokens: usage.input_tokens as i64,
        output_tokens: usage.output_tokens as i64,
        cache_read_tokens: usage.cache_read_tokens as i64,
        cache_creation_tokens: usage.cache_creation_tokens as i64,
        requests,
        tool_calls: 0,
    }
}

fn system_prompt(agent: &Agent, ticket: &Ticket) -> String {
    let role = if agent.role.trim().is_empty() {
        crate::domain::agent::DEFAULT_AGENT_ROLE
    } else {
        agent.role.as_str()
    };
    let mut prompt = format!("{role}\n\nYou are working on ticket {}.", ticket.key);
    // In the system prompt, not the transcript, so that compaction cannot drop it.
    if let Some(schema) = &ticket.schema {
        prompt.push_str("\n\nThe result you pass to close_ticket must match this JSON Schema:\n");
        prompt.push_str(&serde_json::to_string_pretty(schema).unwrap_or_default());
    }
    prompt
}

/// The agent's tools, in its order. Built-in definitions never change, so their specs are built
/// once, the schema already serialised, and every request shares them.
fn tool_specs(agent: &Agent) -> Vec<ToolSpec> {
    static BUILTIN: std::sync::LazyLock<Vec<ToolSpec>> = std::sync::LazyLock::new(|| {
        crate::tools::BUILTIN_TOOLS
            .iter()
            .filter_map(|name| crate::tools::builtin(name))
            .map(|d| ToolSpec::new(d.name, &d.description, &d.input_schema))
            .collect()
    });
    agent
        .tools
        .iter()
        .filter_map(|name| BUILTIN.iter().find(|spec| spec.name == *name))
        .cloned()
        .collect()
}

/// The agent's limits, checked before each request: (kind, limit) of the first one reached.
fn policy_violation(agent: &Agent, ticket: &Ticket) -> Option<(&'static str, i64)> {
    let u = &ticket.usage;
    if let Some(max) = agent.max_turns.map(i64::from).filter(|max| u.requests >= *max) {
        return Some(("max_turns", max));
    }
    if let Some(max) = agent.max_input_tokens.filter(|max| u.input_tokens >= *max) {
        return Some(("max_input_tokens", max));
    }
    if let Some(max) = agent.max_output_tokens.filter(|max| u.output_tokens >= *max) {
        return Some(("max_output_tokens", max));
    }
    None
}

/// A model request that cannot succeed: `request.failed`, then the ticket fails with its kind.
async fn fail_request<T>(
    rt: &Runtime,
    fence: Fence,
    agent: &str,
    error_kind: &str,
    message: &str,
) -> Result<Flow<T>, sqlx::Error> {
    let event = NewEvent::new(
        kind::REQUEST_FAILED,
        Some(agent),
        json!({ "kind": error_kind, "message": message }),
    );
    fail(rt, fence, agent, error_kind, message, vec![event]).await
}

/// Ends the ticket `failed`, after `events`, in one fenced transaction.
async fn fail<T>(
    rt: &Runtime,
    fence: Fence,
    agent: &str,
    error_kind: &str,
    message: &str,
    events: Vec<NewEvent>,
) -> Result<Flow<T>, sqlx::Error> {
    let mut tx = fenced!(rt, fence);
    let outcome = Finish::Failed {
        kind: error_kind.to_owned(),
        message: message.to_owned(),
    };
    db::claims::finish(&mut tx, fence, &outcome, agent, events).await?;
    tx.commit().await?;
    rt.hub.wake();
    Ok(Flow::End(RunEnd::Failed))
}

async fn append_events(rt: &Runtime, fence: Fence, events: &[NewEvent]) -> Result<Flow<()>, sqlx::Error> {
    if !rt.appender.append(fence, events.to_vec()).await? {
        return Ok(Flow::End(RunEnd::Aborted));
    }
    rt.hub.wake();
    Ok(Flow::Next(()))
}

enum ModelOutcome {
    Response(ModelResponse),
    /// The provider reported a full context window (compaction may help).
    Overflow(LlmError),
}

/// One model response, with retries: retryable errors back off (Retry-After wins) and try again,
/// unless output was already shown to clients; exhausted or terminal errors fail the ticket.
async fn call_model(
    rt: &Runtime,
    fence: Fence,
    agent: &Agent,
    ticket: &Ticket,
    provider: &dyn Provider,
    request: &ModelRequest,
    signals: &Signals,
) -> Result<Flow<ModelOutcome>, sqlx::Error> {
    let name = agent.name.as_str();
    next!(
        append_events(
            rt,
            fence,
            &[NewEvent::new(
                kind::REQUEST_STARTED,
                Some(name),
                json!({ "model": agent.model })
            )]
        )
        .await?
    );
    let max_retries = agent.max_request_retries.max(0) as u32;
    let base_delay = Duration::from_millis(agent.request_retry_delay_ms.max(0) as u64);
    let mut attempt = 0u32;
    loop {
        let shown = AtomicBool::new(false);
        let labels = ticket.labels.clone();
        let mut on_delta = |delta: Delta| {
            if signals.abort.is_cancelled() {
                return;
            }
            shown.store(true, Ordering::Relaxed);
            let (delta_kind, text) = match delta {
                Delta::Text(t) => (kind::TEXT_DELTA, t),
                Delta::Thinking(t) => (kind::THINKING_DELTA, t),
            };
            let event = TicketEvent {
                ticket_id: ticket.id,
                ticket_key: ticket.key.clone(),
                seq: None,
                kind: delta_kind.to_owned(),
                agent: Some(name.to_owned()),
                at: Utc::now(),
                data: crate::events::hub::delta_data(&text),
            };
            rt.hub.publish_delta(event, labels.clone(), Some(name.to_owned()));
        };
        let result = tokio::select! {
            biased;
            _ = signals.abort.cancelled() => return Ok(Flow::End(RunEnd::Aborted)),
            r = provider.stream(request, &mut on_delta, rt.stream_idle) => r,
        };
        let err: LlmError = match result {
            Ok(response) => return Ok(Flow::Next(ModelOutcome::Response(response))),
            Err(err) if err.kind == LlmErrorKind::ContextWindowExceeded => {
                return Ok(Flow::Next(ModelOutcome::Overflow(err)))
            }
            Err(err) => err,
        };
        attempt += 1;
        let partial = shown.load(Ordering::Relaxed);
        if err.kind.is_retryable() && !partial && attempt <= max_retries {
            let delay = llm::backoff_delay(attempt, base_delay, err.retry_after);
            let event = NewEvent::new(
                kind::REQUEST_RETRIED,
                Some(name),
                json!({
                    "attempt": attempt, "max_attempts": max_retries, "kind": err.kind.as_str(),
                    "message": err.message, "delay_ms": delay.as_millis() as u64,
                }),
            );
            next!(append_events(rt, fence, &[event]).await?);
            tokio::select! {
                biased;
                _ = signals.abort.cancelled() => return Ok(Flow::End(RunEnd::Aborted)),
                _ = tokio::time::sleep(delay) => continue,
            }
        }
        let message = if partial && err.kind.is_retryable() {
            format!(
                "{} (after partial output, so the request was not repeated)",
                err.message
            )
        } else if err.kind.is_retryable() {
            format!("{} (gave up after {max_retries} retries)", err.message)
        } else {
            err.message.clone()
        };
        return fail_request(rt, fence, name, err.kind.as_str(), &message).await;
    }
}

/// A tool call as the model made it, with its input repaired and checked.
struct PreparedCall {
    id: String,
    name: String,
    /// The repaired input (what is run, stored and shown), or why it cannot run.
    input: Result<Value, (&'static str, String)>,
    shown_input: Value,
}

impl PreparedCall {
    /// Calls whose running writes nothing: reads, finishers (applied at commit), and calls that
    /// do not run at all.
    fn writes_nothing(&self) -> bool {
        use crate::tools::{CLOSE_TICKET, HANDOVER_TICKET, READ_TICKETS};
        self.input.is_err() || [CLOSE_TICKET, HANDOVER_TICKET, READ_TICKETS].contains(&self.name.as_str())
    }
}

fn prepare_calls(agent: &Agent, response: &ModelResponse) -> Vec<PreparedCall> {
    response
        .tool_calls
        .iter()
        .enumerate()
        .map(|(i, call)| {
            let id = if call.id.is_empty() {
                format!("call_{i}")
            } else {
                call.id.clone()
            };
            let definition = agent
                .tools
                .iter()
                .any(|t| t == &call.name)
                .then(|| crate::tools::builtin(&call.name))
                .flatten();
            let input = match definition {
                None => Err((
                    "unknown_tool",
                    format!("There is no tool named {:?} available to you.", call.name),
                )),
                Some(d) => crate::tools::prepare_tool_input(&call.name, &d.input_schema, &call.arguments)
                    .map_err(|m| ("invalid_input", m)),
            };
            let shown_input = match &input {
                Ok(v) => v.clone(),
                Err(_) => crate::tools::repair_json(&call.arguments).0,
            };
            PreparedCall {
                id,
                name: call.name.clone(),
                input,
                shown_input,
            }
        })
        .collect()
}

/// A model response as it is stored: the usage it adds, the assistant comment's content, and
/// the events that go around that comment in the log.
struct ResponseRecord {
    usage: TicketUsage,
    content: Vec<ContentBlock>,
    /// `request.finished`, logged before the comment.
    finished: NewEvent,
    /// `tool.started` of each call, logged after it.
    tool_started: Vec<NewEvent>,
}

impl ResponseRecord {
    /// The response as a step stores it (`claims::store_step`): the assistant comment, the events
    /// around it in log order, and which of them carries the comment (its index, 0).
    fn into_step(mut self, ticket_id: uuid::Uuid, agent: &str) -> (Comment, Vec<NewEvent>, Vec<Option<usize>>) {
        let content = std::mem::take(&mut self.content);
        let comment = db::claims::new_comment(ticket_id, Author::Assistant, Some(agent), content);
        let events = self.events(&comment, agent);
        let carries = events
            .iter()
            .map(|e| (e.kind == kind::COMMENT_CREATED).then_some(0))
            .collect();
        (comment, events, carries)
    }

    /// The events in log order, once the comment is stored.
    fn events(self, comment: &Comment, agent: &str) -> Vec<NewEvent> {
        let created = NewEvent::new(kind::COMMENT_CREATED, Some(agent), json!({ "comment": comment }));
        let mut events = vec![self.finished, created];
        events.extend(self.tool_started);
        events
    }
}

fn record_response(agent: &Agent, response: &ModelResponse, calls: &[PreparedCall]) -> ResponseRecord {
    let name = agent.name.as_str();
    let mut content: Vec<ContentBlock> = response.thinking.clone();
    if !response.text.is_empty() {
        content.push(ContentBlock::text(response.text.clone()));
    }
    for call in calls {
        content.push(ContentBlock::ToolUse {
            id: call.id.clone(),
            name: call.name.clone(),
            input: call.shown_input.clone(),
        });
    }
    let model = if response.model.is_empty() {
        agent.model.clone()
    } else {
        response.model.clone()
    };
    ResponseRecord {
        usage: ticket_usage(&response.usage, 1),
        content,
        finished: NewEvent::new(
            kind::REQUEST_FINISHED,
            Some(name),
            json!({ "model": model, "usage": response.usage, "stop_reason": response.stop_reason.as_str() }),
        ),
        tool_started: calls
            .iter()
            .map(|c| {
                NewEvent::new(
                    kind::TOOL_STARTED,
                    Some(name),
                    json!({ "tool_name": c.name, "call_id": c.id, "input": c.shown_input }),
                )
            })
            .collect(),
    }
}

/// Stores the assistant comment in the caller's fenced transaction (whose fence added the
/// usage) and returns the events describing the response, for the caller to append.
async fn write_response(
    tx: &mut sqlx::PgConnection,
    ticket: &Ticket,
    agent: &str,
    record: ResponseRecord,
) -> Result<Vec<NewEvent>, sqlx::Error> {
    let comment = db::comments::insert(tx, ticket.id, Author::Assistant, Some(agent), &record.content).await?;
    Ok(record.events(&comment, agent))
}

/// A reply without tool calls: on a schema-bound ticket a directive and a counted retry; otherwise
/// the agent is asking the humans something and the ticket waits for a comment.
async fn settle_text_reply(
    rt: &Runtime,
    fence: Fence,
    agent: &Agent,
    ticket: &Ticket,
    record: ResponseRecord,
) -> Result<Flow<()>, sqlx::Error> {
    let name = agent.name.as_str();
    let mut tx = fenced!(rt, fence, &record.usage);
    let mut events = write_response(&mut tx, ticket, name, record).await?;
    let end = if ticket.schema.is_some() {
        let detail =
            "This ticket needs a result that matches its JSON Schema: call close_ticket with it (or handover_ticket).";
        match schema_retry(&mut tx, agent, ticket, detail, &mut events).await? {
            Some(fail_message) => {
                let outcome = Finish::Failed {
                    kind: "max_schema_retries".into(),
                    message: fail_message,
                };
                db::claims::finish(&mut tx, fence, &outcome, name, events).await?;
                Flow::End(RunEnd::Failed)
            }
            None => {
                let directive = [ContentBlock::text(transcript::directive(detail))];
                let directive = db::comments::insert(&mut tx, ticket.id, Author::System, None, &directive).await?;
                events.push(NewEvent::new(
                    kind::COMMENT_CREATED,
                    Some(name),
                    json!({ "comment": directive }),
                ));
                db::events::append(&mut tx, ticket.id, &events).await?;
                Flow::Next(())
            }
        }
    } else {
        db::events::append(&mut tx, ticket.id, &events).await?;
        db::claims::release(&mut tx, fence, Release::Waiting, name).await?;
        Flow::End(RunEnd::Waiting)
    };
    tx.commit().await?;
    rt.hub.wake();
    Ok(end)
}

/// Counts a rejected reply on a schema-bound ticket: adds `schema.retried` to `events`, or, past
/// the agent's limit, `policy.violated` and returns the failure message.
async fn schema_retry(
    tx: &mut sqlx::PgConnection,
    agent: &Agent,
    ticket: &Ticket,
    detail: &str,
    events: &mut Vec<NewEvent>,
) -> Result<Option<String>, sqlx::Error> {
    let max = agent.max_schema_retries.max(0);
    let count = db::claims::bump_schema_retries(tx, ticket.id, false).await?;
    if count > max {
        events.push(NewEvent::new(
            kind::POLICY_VIOLATED,
            Some(&agent.name),
            json!({ "kind": "max_schema_retries", "limit": max }),
        ));
        return Ok(Some(format!(
            "no acceptable result after {max} schema retries: {detail}"
        )));
    }
    events.push(NewEvent::new(
        kind::SCHEMA_RETRIED,
        Some(&agent.name),
        json!({ "attempt": count, "max_attempts": max, "message": detail }),
    ));
    Ok(None)
}

/// Runs the calls concurrently; outcomes keep call order. Cancel aborts them.
async fn execute_tools(
    rt: &Runtime,
    fence: Fence,
    agent: &Agent,
    ticket: &Ticket,
    calls: &[PreparedCall],
    signals: &Signals,
) -> Result<Flow<Vec<ToolOutcome>>, sqlx::Error> {
    let ctx = ToolContext {
        pool: &rt.pool,
        fence,
        ticket,
        agent: &agent.name,
    };
    let runs = calls.iter().map(|call| async {
        match &call.input {
            Err((kind, message)) => ToolOutcome::Failed {
                kind,
                message: message.clone(),
            },
            Ok(input) => tool_run::run_builtin(&ctx, &call.name, input).await,
        }
    });
    tokio::select! {
        biased;
        _ = signals.abort.cancelled() => Ok(Flow::End(RunEnd::Aborted)),
        outcomes = futures::future::join_all(runs) => Ok(Flow::Next(outcomes)),
    }
}

/// Stores every result in one user comment; a finisher closes the ticket as its last event. With
/// `response`, the response that made the calls is stored first. Everything is one statement
/// (`claims::store_step`) that checks the claim and adds `usage`; alone, it is its own
/// transaction. Writes that must come first (a handover's new ticket, stored outputs, a schema
/// retry's count) open a fenced transaction around it.
#[allow(clippy::too_many_arguments)]
async fn store_results(
    rt: &Runtime,
    fence: Fence,
    agent: &Agent,
    ticket: &Ticket,
    calls: &[PreparedCall],
    outcomes: Vec<ToolOutcome>,
    response: Option<ResponseRecord>,
    usage: &TicketUsage,
) -> Result<Flow<()>, sqlx::Error> {
    let mut tx: Option<sqlx::Transaction<'static, sqlx::Postgres>> = None;
    let mut events = vec![];
    let name = agent.name.as_str();
    let mut outcomes = outcomes;
    let sizes: Vec<usize> = outcomes
        .iter()
        .map(|o| match o {
            ToolOutcome::Output(text) => text.len(),
            _ => 0,
        })
        .collect();
    let offloads = outputs::select_offloads(&sizes);

    for &i in &offloads {
        if let ToolOutcome::Output(text) = &mut outcomes[i] {
            // The whole output is kept for download; the model gets a stub with a preview.
            let Some(conn) = open_transaction(rt, fence, &mut tx).await? else {
                return Ok(Flow::End(RunEnd::Aborted));
            };
            db::outputs::store(conn, ticket.id, &calls[i].id, &calls[i].name, text).await?;
            *text = outputs::stub(&ticket.key, &calls[i].id, text);
        }
    }
    let mut results = Vec::with_capacity(calls.len());
    let mut closed_with: Option<Value> = None;
    let mut created_work = false;
    let mut schema_failure: Option<String> = None;
    for (call, outcome) in calls.iter().zip(outcomes) {
        let outcome = match outcome {
            ToolOutcome::Finish(_) if closed_with.is_some() => ToolOutcome::Failed {
                kind: "conflict",
                message: "This ticket was already closed by an earlier call in the same reply.".into(),
            },
            ToolOutcome::Finish(tool_run::Finisher::Close { result }) => {
                let output = tool_run::closed_output(ticket);
                closed_with = Some(result);
                ToolOutcome::Output(output)
            }
            ToolOutcome::Finish(finisher) => {
                created_work |= matches!(finisher, tool_run::Finisher::Handover { .. });
                let Some(conn) = open_transaction(rt, fence, &mut tx).await? else {
                    return Ok(Flow::End(RunEnd::Aborted));
                };
                let (output, result) = tool_run::apply_finisher(conn, fence, ticket, name, &finisher).await?;
                closed_with = Some(result);
                ToolOutcome::Output(output)
            }
            other => other,
        };
        match outcome {
            ToolOutcome::Output(output) => {
                events.push(NewEvent::new(
                    kind::TOOL_FINISHED,
                    Some(name),
                    json!({ "tool_name": call.name, "call_id": call.id, "output": output }),
                ));
                results.push(ContentBlock::ToolResult {
                    tool_use_id: call.id.clone(),
                    output,
                    is_error: false,
                });
            }
            ToolOutcome::Failed { kind: failure, message } => {
                if failure == "result_invalid" {
                    schema_failure = Some(message.clone());
                }
                events.push(NewEvent::new(
                    kind::TOOL_FAILED,
                    Some(name),
                    json!({ "tool_name": call.name, "call_id": call.id, "kind": failure, "message": message }),
                ));
                results.push(ContentBlock::ToolResult {
                    tool_use_id: call.id.clone(),
                    output: message,
                    is_error: true,
                });
            }
            ToolOutcome::Finish(_) => unreachable!("finishers were applied above"),
        }
    }
    let mut failed_message = None;
    if closed_with.is_none() {
        if let Some(detail) = &schema_failure {
            let Some(conn) = open_transaction(rt, fence, &mut tx).await? else {
                return Ok(Flow::End(RunEnd::Aborted));
            };
            match schema_retry(conn, agent, ticket, detail, &mut events).await? {
                Some(message) => failed_message = Some(message),
                None => results.push(ContentBlock::text(transcript::directive(detail))),
            }
        }
    }

    // In log order: the response (`request.finished`, its comment, `tool.started`), the tools'
    // events, the results' comment, then the outcome's event (added by `store_step`).
    let mut comments = vec![];
    let (mut logged, mut carries) = (vec![], vec![]);
    if let Some(response) = response {
        let (assistant, response_events, response_carries) = response.into_step(ticket.id, name);
        comments.push(assistant);
        logged.extend(response_events);
        carries.extend(response_carries);
    }
    carries.extend(events.iter().map(|_| None));
    logged.append(&mut events);
    let results_comment = db::claims::new_comment(ticket.id, Author::User, None, results);
    logged.push(NewEvent::new(
        kind::COMMENT_CREATED,
        Some(name),
        json!({ "comment": results_comment }),
    ));
    carries.push(Some(comments.len()));
    comments.push(results_comment);

    let (outcome, flow) = if let Some(result) = closed_with {
        (Some(Finish::Done(result)), Flow::End(RunEnd::Done))
    } else if let Some(message) = failed_message {
        let outcome = Finish::Failed {
            kind: "max_schema_retries".into(),
            message,
        };
        (Some(outcome), Flow::End(RunEnd::Failed))
    } else {
        (None, Flow::Next(()))
    };
    let write = db::claims::StepWrite {
        fence,
        agent: name.to_owned(),
        step: db::claims::StepResult {
            usage: *usage,
            comments,
            events: logged,
            carries,
            outcome,
        },
    };
    let held = match tx.as_mut() {
        Some(tx) => db::claims::store_step(tx, &write).await?,
        // Alone, it shares a commit with the other tickets' steps stored meanwhile.
        None => rt.steps.store(write).await?,
    };
    if !held {
        // An open transaction rolls back as it is dropped.
        return Ok(Flow::End(RunEnd::Aborted));
    }
    if let Some(tx) = tx {
        tx.commit().await?;
    }
    rt.hub.wake();
    if created_work {
        rt.hub.work_available();
    }
    Ok(flow)
}

/// The transaction of writes that must precede a step's result, opened on first use by taking
/// the claim's row lock (None when the claim is lost). Locking the ticket first, as every fenced
/// transaction does, keeps lock order: a handover's child insert share-locks the parent, and
/// holding that while a cancel waits for the parent's row would deadlock with the fence after it.
async fn open_transaction<'t>(
    rt: &Runtime,
    fence: Fence,
    slot: &'t mut Option<sqlx::Transaction<'static, sqlx::Postgres>>,
) -> Result<Option<&'t mut sqlx::PgConnection>, sqlx::Error> {
    let tx = match slot.take() {
        Some(tx) => tx,
        None => match db::claims::fence(&rt.pool, fence).await? {
            Some(tx) => tx,
            None => return Ok(None),
        },
    };
    Ok(Some(&mut **slot.insert(tx)))
}
