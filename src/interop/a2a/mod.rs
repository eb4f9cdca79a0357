//! The desk as an A2A (Agent2Agent v1.0) agent: its card at `/.well-known/agent-card.json`, the
//! HTTP+JSON binding under `/a2a` and the JSON-RPC binding at `/a2a/jsonrpc`.
//!
//! A task is a ticket (the task id is the ticket id). A message without a task id creates one; a
//! message for a task that waits for input is a comment on it. The ticket's result is the task's
//! artifact, its comments are the task's history. Both bindings share the operations below and
//! differ only in how they frame requests, answers and errors.

mod error;
mod jsonrpc;
mod rest;
pub mod wire;

use std::collections::VecDeque;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Json;
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use tokio::sync::broadcast::error::RecvError;
use uuid::Uuid;

pub use error::A2aError;
use wire::{
    Artifact, ListTasksRequest, ListTasksResponse, Message, Part, SendMessageRequest, StreamResponse, Task,
    TaskArtifactUpdateEvent, TaskState, TaskStatus, TaskStatusUpdateEvent,
};

use crate::db;
use crate::db::tickets::ListFilter;
use crate::domain::{Author, Comment, ContentBlock, Status, Ticket, TicketRef};
use crate::events::HubMessage;
use crate::http::auth::{caller_scope, Scope};
use crate::http::error::ApiError;
use crate::http::pagination::{Cursor, Page};
use crate::http::AppState;
use crate::transitions::{self, Created};

/// The ticket metadata key holding a client's `contextId`.
const CONTEXT_KEY: &str = "a2a_context_id";
/// Tasks a list returns at most per page, and by default.
const MAX_PAGE: i64 = 100;
const DEFAULT_PAGE: i64 = 50;

pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/.well-known/agent-card.json", get(agent_card))
        .route("/a2a/jsonrpc", post(jsonrpc::endpoint))
        .route("/a2a/message:send", post(rest::send))
        .route("/a2a/message:stream", post(rest::stream))
        .route("/a2a/tasks", get(rest::list))
        .route(
            "/a2a/tasks/{task}",
            get(rest::get_task_or_subscribe).post(rest::task_action),
        )
}

/// What a caller may do: read tokens may get, list and subscribe.
fn require(headers: &HeaderMap, state: &AppState, writes: bool) -> Result<(), A2aError> {
    match caller_scope(headers, &state.config.api_tokens)? {
        Scope::Full => Ok(()),
        Scope::Read if !writes => Ok(()),
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

// ---- The agent card ----

/// The desk's agent card: public (it holds no secrets), one skill per agent.
async fn agent_card(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let agents = match db::agents::all(&state.pool).await {
        Ok(agents) => agents,
        Err(err) => return ApiError::from(err).into_response(),
    };
    let base = base_url(&state, &headers);
    let skills: Vec<Value> = agents
        .iter()
        .map(|agent| {
            let tags = if agent.labels.is_empty() {
                vec![agent.name.clone()]
            } else {
                agent.labels.clone()
            };
            let description = if agent.role.trim().is_empty() {
                format!("The desk's agent {}.", agent.name)
            } else {
                agent.role.clone()
            };
            json!({"id": agent.name, "name": agent.name, "description": description, "tags": tags})
        })
        .collect();
    let mut card = json!({
        "name": "agentdesk",
        "description": "A ticket desk worked by AI agents. Send a message to open a task (a ticket); \
                        answer its questions with follow-up messages. Name an agent with metadata.skill.",
        "version": env!("CARGO_PKG_VERSION"),
        "supportedInterfaces": [
            {"url": format!("{base}/a2a"), "protocolBinding": "HTTP+JSON", "protocolVersion": wire::PROTOCOL_VERSION},
            {"url": format!("{base}/a2a/jsonrpc"), "protocolBinding": "JSONRPC", "protocolVersion": wire::PROTOCOL_VERSION},
        ],
        "capabilities": {"streaming": true, "pushNotifications": false},
        "defaultInputModes": ["text/plain", "application/json"],
        "defaultOutputModes": ["text/plain", "application/json"],
        "skills": skills,
    });
    if !state.config.api_tokens.is_empty() {
        card["securitySchemes"] = json!({"bearer": {"httpAuthSecurityScheme": {
            "scheme": "Bearer",
            "description": "A token of AGENTDESK_API_TOKENS; a read: token may only get, list and subscribe."
        }}});
        card["securityRequirements"] = json!([{"schemes": {"bearer": {"list": []}}}]);
    }
    ([(header::CACHE_CONTROL, "no-cache")], Json(card)).into_response()
}

/// `AGENTDESK_PUBLIC_URL`, else the request's scheme and host (as a proxy in front forwards them).
fn base_url(state: &AppState, headers: &HeaderMap) -> String {
    if let Some(url) = &state.config.public_url {
        return url.clone();
    }
    let first = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(',').next())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    };
    let scheme = first("x-forwarded-proto")
        .filter(|p| p == "http" || p == "https")
        .unwrap_or_else(|| "http".into());
    let host = first("x-forwarded-host")
        .or_else(|| first("host"))
        .filter(|h| h.chars().all(|c| c.is_ascii_alphanumeric() || "-.:[]_".contains(c)))
        .unwrap_or_else(|| "localhost".into());
    format!("{scheme}://{host}")
}

// ---- Tickets as tasks ----

pub fn state_of(ticket: &Ticket) -> TaskState {
    match ticket.status {
        Status::Todo => TaskState::Submitted,
        Status::InProgress => TaskState::Working,
        Status::Waiting => TaskState::InputRequired,
        Status::Done => TaskState::Completed,
        Status::Failed => TaskState::Failed,
        Status::Cancelled => TaskState::Canceled,
    }
}

/// The ticket statuses a task state names (none for states a ticket never has).
fn statuses_of(state: TaskState) -> Vec<Status> {
    Status::ALL
        .into_iter()
        .filter(|status| {
            let probe = match status {
                Status::Todo => TaskState::Submitted,
                Status::InProgress => TaskState::Working,
                Status::Waiting => TaskState::InputRequired,
                Status::Done => TaskState::Completed,
                Status::Failed => TaskState::Failed,
                Status::Cancelled => TaskState::Canceled,
            };
            probe == state
        })
        .collect()
}

fn timestamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

fn context_of(ticket: &Ticket) -> String {
    ticket
        .metadata
        .get(CONTEXT_KEY)
        .and_then(Value::as_str)
        .map_or_else(|| ticket.id.to_string(), str::to_owned)
}

fn agent_message(ticket: &Ticket, text: String) -> Message {
    Message {
        message_id: format!("{}-status-{}", ticket.id, ticket.updated_at.timestamp_micros()),
        context_id: Some(context_of(ticket)),
        task_id: Some(ticket.id.to_string()),
        role: wire::ROLE_AGENT.into(),
        parts: vec![Part::text(text)],
        metadata: None,
    }
}

/// What the task's status says to its client: the question or approvals a waiting ticket waits
/// on, or why a ticket failed.
fn status_message(ticket: &Ticket, last_words: Option<&str>) -> Option<Message> {
    let text = match ticket.status {
        Status::Waiting if !ticket.pending_approvals.is_empty() => {
            let calls: Vec<String> = ticket
                .pending_approvals
                .iter()
                .map(|p| format!("{} ({})", p.tool_name, p.call_id))
                .collect();
            format!("Waiting for approval of: {}", calls.join(", "))
        }
        Status::Waiting => last_words.unwrap_or("The agent is waiting for an answer.").to_owned(),
        Status::Failed => ticket
            .error
            .as_ref()
            .map(|e| format!("{}: {}", e.kind, e.message))
            .unwrap_or_else(|| "failed".into()),
        _ => return None,
    };
    Some(agent_message(ticket, text))
}

fn status_of(ticket: &Ticket, last_words: Option<&str>) -> TaskStatus {
    TaskStatus {
        state: state_of(ticket),
        message: status_message(ticket, last_words),
        timestamp: timestamp(ticket.updated_at),
    }
}

/// The result as the task's one artifact: a text part for a string, a data part otherwise.
fn artifact_of(ticket: &Ticket) -> Option<Artifact> {
    let result = ticket.result.as_ref()?;
    let part = match result {
        Value::String(text) => Part::text(text.clone()),
        other => Part::data(other.clone()),
    };
    Some(Artifact {
        artifact_id: format!("{}-result", ticket.id),
        name: "result".into(),
        parts: vec![part],
    })
}

/// The text a comment shows a client: its text blocks (tool calls and results are the agent's
/// own business).
fn comment_text(comment: &Comment) -> Option<String> {
    let texts: Vec<&str> = comment
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text { text } if !text.trim().is_empty() => Some(text.as_str()),
            _ => None,
        })
        .collect();
    (!texts.is_empty()).then(|| texts.join("\n"))
}

fn history_of(ticket: &Ticket, comments: &[Comment]) -> Vec<Message> {
    let context = context_of(ticket);
    // The task becomes the transcript's first comment when an agent first claims the ticket;
    // until then the history starts with it all the same.
    let unclaimed = ticket.started_at.is_none().then(|| Message {
        message_id: ticket.id.to_string(),
        context_id: Some(context.clone()),
        task_id: Some(ticket.id.to_string()),
        role: wire::ROLE_USER.into(),
        parts: vec![Part::text(ticket.task_text())],
        metadata: None,
    });
    let messages = comments.iter().filter_map(|comment| {
        let text = comment_text(comment)?;
        let role = match comment.author {
            Author::User => wire::ROLE_USER,
            Author::Assistant | Author::System => wire::ROLE_AGENT,
        };
        Some(Message {
            message_id: comment.id.to_string(),
            context_id: Some(context.clone()),
            task_id: Some(ticket.id.to_string()),
            role: role.into(),
            parts: vec![Part::text(text)],
            metadata: None,
        })
    });
    unclaimed.into_iter().chain(messages).collect()
}

/// How much of the history to show: None all of it, Some(0) none.
#[derive(Clone, Copy)]
struct HistoryLength(Option<i64>);

impl HistoryLength {
    fn parse(n: Option<i64>) -> Result<HistoryLength, A2aError> {
        match n {
            Some(n) if n < 0 => Err(A2aError::InvalidParams("historyLength must not be negative".into())),
            other => Ok(HistoryLength(other)),
        }
    }
}

/// The ticket as a task; reads its transcript when the history or a waiting question needs it.
async fn task_of(state: &AppState, ticket: &Ticket, history: HistoryLength) -> Result<Task, A2aError> {
    let wants_history = history.0 != Some(0);
    let asks = ticket.status == Status::Waiting && ticket.pending_approvals.is_empty();
    let comments = if wants_history || asks {
        db::comments::all(&state.pool, ticket.id).await?
    } else {
        Vec::new()
    };
    let last_words = comments
        .iter()
        .rev()
        .find(|c| c.author == Author::Assistant)
        .and_then(comment_text);
    let mut messages = if wants_history {
        history_of(ticket, &comments)
    } else {
        Vec::new()
    };
    if let Some(n) = history.0 {
        let keep = (n as usize).min(messages.len());
        messages.drain(..messages.len() - keep);
    }
    Ok(Task {
        id: ticket.id.to_string(),
        context_id: context_of(ticket),
        status: status_of(ticket, last_words.as_deref()),
        artifacts: artifact_of(ticket).into_iter().collect(),
        history: messages,
        metadata: Some(json!({"key": ticket.key, "labels": ticket.labels})),
    })
}

async fn find_task(state: &AppState, id: &str) -> Result<Ticket, A2aError> {
    let not_found = || A2aError::TaskNotFound(format!("no task {id:?}"));
    // Task ids are ticket ids; a key works too, for people typing them.
    let reference = TicketRef::parse(id).ok_or_else(not_found)?;
    db::tickets::find(&state.pool, &reference).await?.ok_or_else(not_found)
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
async fn accept_message(state: &AppState, request: &SendMessageRequest) -> Result<Ticket, A2aError> {
    let message = &request.message;
    if message.message_id.trim().is_empty() {
        return Err(A2aError::InvalidParams("message.messageId is required".into()));
    }
    if message.parts.is_empty() {
        return Err(A2aError::InvalidParams("message.parts must not be empty".into()));
    }
    if let Some(task_id) = message.task_id.as_deref().filter(|id| !id.is_empty()) {
        let ticket = find_task(state, task_id).await?;
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
        crate::http::tickets::comment(state, &ticket.id.to_string(), Author::User, text).await?;
        return Ok(transitions::find(&state.pool, &ticket.id.to_string()).await?);
    }

    // The message's metadata, else the request's.
    let mut metadata = object(message.metadata.as_ref(), "message.metadata")?;
    if metadata.is_empty() {
        metadata = object(request.metadata.as_ref(), "metadata")?;
    }
    let labels = labels_from(&metadata)?;
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
    match crate::http::tickets::create(state, body, Some(key), None).await {
        Ok(Created::New(ticket) | Created::Repeat(ticket)) => Ok(ticket),
        Err(ApiError::Conflict(_)) => Err(A2aError::InvalidParams(format!(
            "messageId {:?} was already used for another message",
            message.message_id
        ))),
        Err(err) => Err(err.into()),
    }
}

/// `SendMessage`: the task once it is terminal or needs input (unless `returnImmediately`).
pub async fn send_message(state: &AppState, request: SendMessageRequest) -> Result<Task, A2aError> {
    let config = request.configuration.as_ref();
    let history = HistoryLength::parse(config.and_then(|c| c.history_length))?;
    let immediately = config.and_then(|c| c.return_immediately).unwrap_or(false);
    let ticket = accept_message(state, &request).await?;
    let limit = if immediately {
        Duration::ZERO
    } else {
        super::LONGEST_WAIT
    };
    let ticket = super::settled_ticket(state, ticket, limit).await?;
    task_of(state, &ticket, history).await
}

pub async fn get_task(state: &AppState, id: &str, history: Option<i64>) -> Result<Task, A2aError> {
    let history = HistoryLength::parse(history)?;
    let ticket = find_task(state, id).await?;
    task_of(state, &ticket, history).await
}

pub async fn cancel_task(state: &AppState, id: &str) -> Result<Task, A2aError> {
    let ticket = find_task(state, id).await?;
    if state_of(&ticket).is_terminal() {
        return Err(A2aError::TaskNotCancelable(format!(
            "task {id} is already {}",
            ticket.status.as_str()
        )));
    }
    let ticket = match transitions::cancel(&state.pool, &ticket.id.to_string()).await {
        Ok(ticket) => ticket,
        // It finished meanwhile.
        Err(transitions::DeskError::Conflict(message)) => return Err(A2aError::TaskNotCancelable(message)),
        Err(err) => return Err(err.into()),
    };
    state.hub.wake();
    task_of(state, &ticket, HistoryLength(None)).await
}

pub async fn list_tasks(state: &AppState, request: ListTasksRequest) -> Result<ListTasksResponse, A2aError> {
    let page_size = request.page_size.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&page_size) {
        return Err(A2aError::InvalidParams(format!("pageSize must be 1 to {MAX_PAGE}")));
    }
    let history = HistoryLength::parse(request.history_length)?;
    // A list shows no history unless asked for.
    let history = HistoryLength(Some(history.0.unwrap_or(0)));
    let token = request.page_token.as_deref().filter(|t| !t.is_empty());
    let page =
        Page::parse(None, token).map_err(|_| A2aError::InvalidParams("pageToken is not one of this list's".into()))?;
    let after_number = match page.cursor {
        None => None,
        Some(c) => Some(
            c.as_number()
                .ok_or_else(|| A2aError::InvalidParams("pageToken is not one of this list's".into()))?,
        ),
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
        descending: true,
        after_number,
        limit: page_size,
        ..ListFilter::default()
    };
    let (tickets, next) = db::tickets::list(&state.pool, &filter).await?;
    let total_size = db::tickets::count(&state.pool, &filter).await?;
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
        next_page_token: next.map(|n| Cursor::number(n).encode()).unwrap_or_default(),
        page_size,
        total_size,
    })
}

// ---- Streams ----

/// An item of a task's stream: an event, or a keep-alive when nothing happened for a while.
pub enum StreamItem {
    Event(Box<StreamResponse>),
    KeepAlive,
}

/// The task's stream: the task as it is, then its status changes (and its artifact, when it is
/// done) until it is terminal or needs input. Changes are read from the ticket itself whenever
/// the hub carries one of its events, so the last state is never missed even if several changes
/// arrive together.
pub fn task_stream(state: AppState, ticket: Ticket) -> impl futures::Stream<Item = StreamItem> + Send {
    struct Follow {
        state: AppState,
        live: tokio::sync::broadcast::Receiver<HubMessage>,
        ticket_id: Uuid,
        last: Option<TaskState>,
        pending: VecDeque<StreamItem>,
        ended: bool,
        start: Option<Ticket>,
    }
    let live = state.hub.subscribe();
    let follow = Follow {
        ticket_id: ticket.id,
        state,
        live,
        last: None,
        pending: VecDeque::new(),
        ended: false,
        start: Some(ticket),
    };
    futures::stream::unfold(follow, |mut f| async move {
        loop {
            if let Some(item) = f.pending.pop_front() {
                return Some((item, f));
            }
            if f.ended {
                return None;
            }
            // The first snapshot is read after subscribing (above), so nothing falls between.
            let ticket = match f.start.take() {
                Some(ticket) => match db::tickets::find(&f.state.pool, &TicketRef::Id(ticket.id)).await {
                    Ok(Some(fresh)) => fresh,
                    Ok(None) | Err(_) => ticket,
                },
                None => {
                    let wake = tokio::select! {
                        wake = wait_for_change(&mut f.live, f.ticket_id, f.state.config.sse_ping) => wake,
                        // Shutting down: end the stream, as the desk's own streams do.
                        _ = f.state.shutdown.cancelled() => Wake::Closed,
                    };
                    match wake {
                        Wake::Closed => return None,
                        Wake::Ping => return Some((StreamItem::KeepAlive, f)),
                        Wake::Changed => {}
                    }
                    match db::tickets::find(&f.state.pool, &TicketRef::Id(f.ticket_id)).await {
                        Ok(Some(ticket)) => ticket,
                        // Deleted (retention), or the database is away: the client resubscribes.
                        Ok(None) | Err(_) => return None,
                    }
                }
            };
            let now = state_of(&ticket);
            if f.last == Some(now) {
                continue;
            }
            let first = f.last.is_none();
            f.last = Some(now);
            let task = match task_of(&f.state, &ticket, HistoryLength(if first { None } else { Some(0) })).await {
                Ok(task) => task,
                Err(_) => return None,
            };
            if first {
                f.pending
                    .push_back(StreamItem::Event(Box::new(StreamResponse::Task(task))));
            } else {
                if let Some(artifact) = task.artifacts.first() {
                    f.pending
                        .push_back(StreamItem::Event(Box::new(StreamResponse::ArtifactUpdate(
                            TaskArtifactUpdateEvent {
                                task_id: task.id.clone(),
                                context_id: task.context_id.clone(),
                                artifact: artifact.clone(),
                                last_chunk: true,
                            },
                        ))));
                }
                f.pending
                    .push_back(StreamItem::Event(Box::new(StreamResponse::StatusUpdate(
                        TaskStatusUpdateEvent {
                            task_id: task.id,
                            context_id: task.context_id,
                            status: task.status,
                        },
                    ))));
            }
            f.ended = now.ends_stream();
        }
    })
}

enum Wake {
    Changed,
    Ping,
    Closed,
}

/// Until the hub carries one of the ticket's persisted events (or lagged, and may have dropped
/// one), or `ping` passes.
async fn wait_for_change(
    live: &mut tokio::sync::broadcast::Receiver<HubMessage>,
    ticket_id: Uuid,
    ping: Duration,
) -> Wake {
    let deadline = tokio::time::Instant::now() + ping;
    loop {
        match tokio::time::timeout_at(deadline, live.recv()).await {
            Err(_) => return Wake::Ping,
            Ok(Ok(HubMessage::Events(batch))) if batch.items.iter().any(|i| i.event.ticket_id == ticket_id) => {
                return Wake::Changed
            }
            Ok(Ok(_)) => {}
            Ok(Err(RecvError::Lagged(_))) => return Wake::Changed,
            Ok(Err(RecvError::Closed)) => return Wake::Closed,
        }
    }
}

/// `SendStreamingMessage`: accepts the message, then streams its task.
pub async fn stream_message(
    state: &AppState,
    request: SendMessageRequest,
) -> Result<impl futures::Stream<Item = StreamItem> + Send, A2aError> {
    let ticket = accept_message(state, &request).await?;
    Ok(task_stream(state.clone(), ticket))
}

/// `SubscribeToTask`: a task that is already terminal has nothing more to stream.
pub async fn subscribe(state: &AppState, id: &str) -> Result<impl futures::Stream<Item = StreamItem> + Send, A2aError> {
    let ticket = find_task(state, id).await?;
    if state_of(&ticket).is_terminal() {
        return Err(A2aError::UnsupportedOperation(format!(
            "task {id} is in a terminal state ({}); GetTask returns it",
            ticket.status.as_str()
        )));
    }
    Ok(task_stream(state.clone(), ticket))
}
