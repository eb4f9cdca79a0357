//! The desk as an A2A (Agent2Agent v1.0) agent: its card at `/.well-known/agent-card.json`, the
//! HTTP+JSON binding under `/a2a` and the JSON-RPC binding at `/a2a/jsonrpc`.
//!
//! A task is a ticket (the task id is the ticket id). A message without a task id creates one; a
//! message for a task that waits for input is a comment on it. The ticket's result is the task's
//! artifact, its comments are the task's history. Both bindings share the operations below and
//! differ only in how they frame requests, answers and errors.

mod card;
mod error;
mod jsonrpc;
mod rest;
mod stream;
mod task;
pub mod wire;

use std::time::Duration;

use axum::http::HeaderMap;
use axum::routing::{get, post};
use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

pub use error::A2aError;
pub use stream::StreamItem;
use task::{context_of, find_task, state_of, statuses_of, task_of, HistoryLength};
use wire::{ListTasksRequest, ListTasksResponse, Part, SendMessageRequest, Task, TaskState};

use crate::db;
use crate::db::tickets::ListFilter;
use crate::domain::{Author, Ticket};
use crate::http::access::Caller;
use crate::http::auth::Scope;
use crate::http::error::ApiError;
use crate::http::pagination::Cursor;
use crate::http::AppState;
use crate::transitions::{self, Created};

/// The ticket metadata key holding a client's `contextId`.
const CONTEXT_KEY: &str = "a2a_context_id";
/// Tasks a list returns at most per page, and by default.
const MAX_PAGE: i64 = 100;
const DEFAULT_PAGE: i64 = 50;

pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/.well-known/agent-card.json", get(card::agent_card))
        .route("/a2a/jsonrpc", post(jsonrpc::endpoint))
        .route("/a2a/message:send", post(rest::send))
        .route("/a2a/message:stream", post(rest::stream))
        .route("/a2a/tasks", get(rest::list))
        .route(
            "/a2a/tasks/{task}",
            get(rest::get_task_or_subscribe).post(rest::task_action),
        )
        // The same under the agent card's `tenant` (a project's name).
        .route("/a2a/{tenant}/message:send", post(rest::send_in))
        .route("/a2a/{tenant}/message:stream", post(rest::stream_in))
        .route("/a2a/{tenant}/tasks", get(rest::list_in))
        .route(
            "/a2a/{tenant}/tasks/{task}",
            get(rest::get_task_or_subscribe_in).post(rest::task_action_in),
        )
        // axum's extractors answer in plain text (a body over 1 MiB).
        .layer(axum::middleware::from_fn(crate::http::error::plain_errors_in_api_shape))
}

/// What a caller may do: read tokens may get, list and subscribe.
async fn require(headers: &HeaderMap, state: &AppState, writes: bool) -> Result<Caller, A2aError> {
    let caller = state.access.caller(headers).await?;
    match caller.scope() {
        Scope::Full => Ok(caller),
        Scope::Read if !writes => Ok(caller),
        Scope::Read => {
            Err(ApiError::Forbidden("this token may only read (GetTask, ListTasks and SubscribeToTask)".into()).into())
        }
    }
}

/// `A2A-Version` (header or query): 1.x, or none (taken as the version spoken here).
fn check_version(headers: &HeaderMap, query: Option<&str>) -> Result<(), A2aError> {
    let from_query = query.and_then(|q| {
        url::form_urlencoded::parse(q.as_bytes())
            .find(|(name, _)| name.eq_ignore_ascii_case("A2A-Version"))
            .map(|(_, value)| value.into_owned())
    });
    let version = match headers.get("a2a-version") {
        Some(value) => Some(value.to_str().unwrap_or("?").trim().to_owned()),
        None => from_query,
    };
    match version.as_deref() {
        None | Some("") => Ok(()),
        Some(v) if v == "1" || v.starts_with("1.") => Ok(()),
        Some(v) => Err(A2aError::VersionNotSupported(format!(
            "A2A version {v:?} is not supported; this agent speaks {}",
            wire::PROTOCOL_VERSION
        ))),
    }
}

// ---- Operations ----

/// What a message asks for as a ticket's task: its text parts joined; else a single data part's
/// JSON (several: an array of them).
fn task_from_parts(parts: &[Part]) -> Result<Value, A2aError> {
    let texts: Vec<&str> = parts.iter().filter_map(|p| p.text.as_deref()).collect();
    if !texts.is_empty() {
        return Ok(Value::String(texts.join("\n")));
    }
    let mut data: Vec<Value> = parts.iter().filter_map(|p| p.data.clone()).collect();
    match data.len() {
        0 => Err(A2aError::InvalidParams(
            "the message has no text or data part (file parts are not read)".into(),
        )),
        1 => Ok(data.remove(0)),
        _ => Ok(Value::Array(data)),
    }
}

/// The text of a follow-up message, as a comment.
fn comment_from_parts(parts: &[Part]) -> Result<String, A2aError> {
    Ok(match task_from_parts(parts)? {
        Value::String(text) => text,
        data => data.to_string(),
    })
}

/// Whether metadata names a skill or labels (else the request's metadata may).
fn asks_for_labels(metadata: &Map<String, Value>) -> bool {
    ["skill", "labels"]
        .iter()
        .any(|key| metadata.get(*key).is_some_and(|v| !v.is_null()))
}

/// The labels a message asks for: `metadata.skill` (an agent's name) or `metadata.labels`.
fn labels_from(metadata: &Map<String, Value>) -> Result<Vec<String>, A2aError> {
    if let Some(skill) = metadata.get("skill").filter(|v| !v.is_null()) {
        let skill = skill
            .as_str()
            .ok_or_else(|| A2aError::InvalidParams("metadata.skill must be an agent's name".into()))?;
        return Ok(vec![skill.to_owned()]);
    }
    match metadata.get("labels") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| A2aError::InvalidParams("metadata.labels must be strings".into()))
            })
            .collect(),
        Some(_) => Err(A2aError::InvalidParams(
            "metadata.labels must be a list of strings".into(),
        )),
    }
}

fn object(value: Option<&Value>, what: &str) -> Result<Map<String, Value>, A2aError> {
    match value {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(map)) => Ok(map.clone()),
        Some(_) => Err(A2aError::InvalidParams(format!("{what} must be an object"))),
    }
}

/// Creates the ticket a message asks for, or comments on the task it names; returns the ticket.
async fn accept_message(state: &AppState, caller: &Caller, request: &SendMessageRequest) -> Result<Ticket, A2aError> {
    let message = &request.message;
    if message.message_id.trim().is_empty() {
        return Err(A2aError::InvalidParams("message.messageId is required".into()));
    }
    match message.role.as_str() {
        wire::ROLE_USER | wire::ROLE_AGENT => {}
        "" => {
            return Err(A2aError::InvalidParams(
                "message.role is required (ROLE_USER or ROLE_AGENT)".into(),
            ))
        }
        other => {
            return Err(A2aError::InvalidParams(format!(
                "message.role {other:?} is not ROLE_USER or ROLE_AGENT"
            )))
        }
    }
    if message.parts.is_empty() {
        return Err(A2aError::InvalidParams("message.parts must not be empty".into()));
    }
    if let Some(task_id) = message.task_id.as_deref().filter(|id| !id.is_empty()) {
        let ticket = find_task(state, caller.project_id(), task_id).await?;
        if let Some(context) = message.context_id.as_deref().filter(|c| !c.is_empty()) {
            if context != context_of(&ticket) {
                return Err(A2aError::InvalidParams(format!(
                    "contextId {context:?} is not the context of task {task_id}"
                )));
            }
        }
        if state_of(&ticket).is_terminal() {
            return Err(A2aError::UnsupportedOperation(format!(
                "task {task_id} is in a terminal state; send a message without a taskId to start a new one"
            )));
        }
        let text = comment_from_parts(&message.parts)?;
        crate::http::tickets::comment(state, caller.project_id(), &ticket.id.to_string(), Author::User, text).await?;
        return Ok(transitions::find(&state.pool, caller.project_id(), &ticket.id.to_string()).await?);
    }

    // The labels the message's metadata asks for, else those the request's does; the ticket
    // keeps the message's metadata, else the request's.
    let message_metadata = object(message.metadata.as_ref(), "message.metadata")?;
    let request_metadata = object(request.metadata.as_ref(), "metadata")?;
    let labels = if asks_for_labels(&message_metadata) {
        labels_from(&message_metadata)?
    } else {
        labels_from(&request_metadata)?
    };
    let mut metadata = if message_metadata.is_empty() {
        request_metadata
    } else {
        message_metadata
    };
    if let Some(context) = message.context_id.as_deref().filter(|c| !c.is_empty()) {
        metadata.insert(CONTEXT_KEY.into(), Value::String(context.to_owned()));
    }
    let body = json!({
        "task": task_from_parts(&message.parts)?,
        "labels": labels,
        "metadata": metadata,
    });
    // A client that sends the same message again (a retry after a lost answer) gets the same
    // task: the message id is the create's idempotency key.
    let key = format!("a2a-{}", hex::encode(Sha256::digest(message.message_id.as_bytes())));
    match crate::http::tickets::create(state, &caller.project, body, Some(key), None).await {
        Ok(Created::New(ticket) | Created::Repeat(ticket)) => Ok(ticket),
        Err(ApiError::Conflict(_)) => Err(A2aError::InvalidParams(format!(
            "messageId {:?} was already used for another message",
            message.message_id
        ))),
        Err(err) => Err(err.into()),
    }
}

/// `SendMessage`: the task once it is terminal or needs input (unless `returnImmediately`).
pub async fn send_message(state: &AppState, caller: &Caller, request: SendMessageRequest) -> Result<Task, A2aError> {
    let config = request.configuration.as_ref();
    let history = HistoryLength::parse(config.and_then(|c| c.history_length))?;
    let immediately = config.and_then(|c| c.return_immediately).unwrap_or(false);
    let ticket = accept_message(state, caller, &request).await?;
    let limit = if immediately {
        Duration::ZERO
    } else {
        super::LONGEST_WAIT
    };
    let ticket = super::settled_ticket(state, ticket, limit).await?;
    task_of(state, &ticket, history).await
}

pub async fn get_task(state: &AppState, caller: &Caller, id: &str, history: Option<i64>) -> Result<Task, A2aError> {
    let history = HistoryLength::parse(history)?;
    let ticket = find_task(state, caller.project_id(), id).await?;
    task_of(state, &ticket, history).await
}

pub async fn cancel_task(state: &AppState, caller: &Caller, id: &str) -> Result<Task, A2aError> {
    let ticket = find_task(state, caller.project_id(), id).await?;
    if state_of(&ticket).is_terminal() {
        return Err(A2aError::TaskNotCancelable(format!(
            "task {id} is already {}",
            ticket.status.as_str()
        )));
    }
    let ticket = match transitions::cancel(&state.pool, caller.project_id(), &ticket.id.to_string()).await {
        Ok(ticket) => ticket,
        // It finished meanwhile.
        Err(transitions::DeskError::Conflict(message)) => return Err(A2aError::TaskNotCancelable(message)),
        Err(err) => return Err(err.into()),
    };
    state.hub.wake();
    task_of(state, &ticket, HistoryLength(None)).await
}

/// `ListTasks`: the most recently updated first (by the status timestamp, as the
/// specification orders them), optionally only those updated at or after
/// `statusTimestampAfter`.
pub async fn list_tasks(
    state: &AppState,
    caller: &Caller,
    request: ListTasksRequest,
) -> Result<ListTasksResponse, A2aError> {
    let page_size = request.page_size.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&page_size) {
        return Err(A2aError::InvalidParams(format!("pageSize must be 1 to {MAX_PAGE}")));
    }
    let history = HistoryLength::parse(request.history_length)?;
    // A list shows no history unless asked for.
    let history = HistoryLength(Some(history.0.unwrap_or(0)));
    let after = match request.page_token.as_deref().filter(|t| !t.is_empty()) {
        None => None,
        Some(token) => Some(
            page_position(token)
                .ok_or_else(|| A2aError::InvalidParams("pageToken is not one of this list's".into()))?,
        ),
    };
    // Given, it is a timestamp: an empty one is refused like any other that is not one.
    let since = match request.status_timestamp_after.as_deref() {
        None => None,
        Some(text) => Some(timestamp_from(text).ok_or_else(|| {
            A2aError::InvalidParams(format!(
                "statusTimestampAfter {text:?} is not an RFC 3339 timestamp (such as 2026-01-31T09:30:00Z)"
            ))
        })?),
    };
    let statuses = match request.status {
        None | Some(TaskState::Unspecified) => Vec::new(),
        Some(task_state) => {
            let statuses = statuses_of(task_state);
            if statuses.is_empty() {
                // A state no ticket is ever in.
                return Ok(ListTasksResponse {
                    tasks: Vec::new(),
                    next_page_token: String::new(),
                    page_size,
                    total_size: 0,
                });
            }
            statuses
        }
    };
    let filter = ListFilter {
        statuses,
        context_id: request.context_id.filter(|c| !c.is_empty()),
        limit: page_size,
        ..ListFilter::new(caller.project_id())
    };
    let (tickets, next, total_size) = db::tickets::list_by_update(&state.pool, &filter, since, after).await?;
    let include_artifacts = request.include_artifacts.unwrap_or(false);
    let mut tasks = Vec::with_capacity(tickets.len());
    for ticket in &tickets {
        let mut task = task_of(state, ticket, history).await?;
        if !include_artifacts {
            task.artifacts.clear();
        }
        tasks.push(task);
    }
    Ok(ListTasksResponse {
        tasks,
        next_page_token: next.map(page_token).unwrap_or_default(),
        page_size,
        total_size,
    })
}

/// A page token names the last task of the page before: its status timestamp (in microseconds)
/// and ticket number.
fn page_token((at, number): db::tickets::UpdatePosition) -> String {
    Cursor::Name(format!("{}.{number}", at.timestamp_micros())).encode()
}

fn page_position(token: &str) -> Option<db::tickets::UpdatePosition> {
    let name = Cursor::decode(token)?.into_name()?;
    let (micros, number) = name.split_once('.')?;
    let at = DateTime::from_timestamp_micros(micros.parse().ok()?)?;
    Some((at, number.parse().ok()?))
}

/// An RFC 3339 timestamp (ProtoJSON's form of `google.protobuf.Timestamp`). In a query string
/// an unescaped `+` of the offset reads as a space: that is taken as the `+` it was.
fn timestamp_from(text: &str) -> Option<DateTime<Utc>> {
    let text = text.trim();
    DateTime::parse_from_rfc3339(text)
        .or_else(|_| DateTime::parse_from_rfc3339(&text.replace(' ', "+")))
        .ok()
        .map(|at| at.with_timezone(&Utc))
}

/// `SendStreamingMessage`: accepts the message, then streams its task.
pub async fn stream_message(
    state: &AppState,
    caller: &Caller,
    request: SendMessageRequest,
) -> Result<impl futures::Stream<Item = StreamItem> + Send, A2aError> {
    let ticket = accept_message(state, caller, &request).await?;
    // A task that no agent takes would keep the answer open for ever, as it would a blocking
    // send (`settled_ticket`): only the task as it is.
    let unclaimed = state
        .route_check
        .warning(&state.pool, &ticket)
        .await
        .map_err(ApiError::from)?
        .is_some();
    Ok(futures::StreamExt::take(
        stream::task_stream(state.clone(), ticket),
        if unclaimed { 1 } else { usize::MAX },
    ))
}

/// `SubscribeToTask`: a task that is already terminal has nothing more to stream.
pub async fn subscribe(
    state: &AppState,
    caller: &Caller,
    id: &str,
) -> Result<impl futures::Stream<Item = StreamItem> + Send, A2aError> {
    let ticket = find_task(state, caller.project_id(), id).await?;
    if state_of(&ticket).is_terminal() {
        return Err(A2aError::UnsupportedOperation(format!(
            "task {id} is in a terminal state ({}); GetTask returns it",
            ticket.status.as_str()
        )));
    }
    // Followed until it ends, even while no agent takes it: its labels may change.
    Ok(stream::task_stream(state.clone(), ticket))
}
