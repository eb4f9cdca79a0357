//! `/v1/tickets`: create, read, list, edit, cancel, retry, comments.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use utoipa::{IntoParams, ToSchema};

use super::access::Caller;
use super::error::{ApiError, ApiResult, ErrorBody};
use super::extract::{ApiJson, ApiPath, ApiQuery};
use super::pagination::{Cursor, NumberPageQuery, Page};
use super::AppState;
use crate::db;
use crate::db::tickets::{ListFilter, NewTicket, TicketPatch};
use crate::domain::project::Project;
use crate::domain::{Author, Comment, ProjectId, Status, Ticket, TicketRef};
use crate::telemetry::trace;
use crate::transitions::{self, Created, DeskError};

impl From<DeskError> for ApiError {
    fn from(err: DeskError) -> ApiError {
        match err {
            DeskError::NotFound(r) => ApiError::ticket_not_found(&r),
            DeskError::Conflict(m) => ApiError::Conflict(m),
            DeskError::Missing(m) => ApiError::NotFound(m),
            DeskError::Invalid(m) => ApiError::Validation(m),
            DeskError::Db(e) => e.into(),
        }
    }
}

#[derive(Deserialize, ToSchema)]
pub struct CreateTicket {
    #[schema(schema_with = super::formats::task)]
    pub task: Value,
    /// Duplicates are dropped.
    #[serde(default)]
    #[schema(schema_with = super::formats::labels)]
    pub labels: Vec<String>,
    /// Higher is claimed first.
    #[serde(default)]
    #[schema(minimum = -2147483648, maximum = 2147483647)]
    pub priority: i32,
    /// JSON Schema (draft 2020-12) the result must satisfy.
    #[serde(default)]
    pub schema: Option<Value>,
    /// The parent ticket's id or key.
    #[serde(default)]
    pub parent: Option<String>,
    /// A JSON object kept with the ticket.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Value>,
    /// 1 to 100; default 3.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 100)]
    pub max_attempts: Option<i32>,
    /// Seconds after creation when the ticket fails with `deadline_exceeded`, whatever it is
    /// doing (1 to 315360000, ten years); null or omitted: no deadline.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 315360000)]
    pub deadline_secs: Option<i32>,
    /// The most this ticket's requests may cost, in US dollars (at least 0); null or omitted: no
    /// limit of its own. A request whose worst case does not fit is not sent: the ticket waits
    /// (`waiting_for: "budget"`) until the budget is raised with PATCH.
    #[serde(default)]
    #[schema(value_type = Option<f64>, minimum = 0, maximum = 1000000000)]
    pub budget_usd: Option<crate::domain::Usd>,
    /// The agent that works it (it must exist): the ticket goes to that agent only, as a label
    /// with its name would.
    #[serde(default)]
    pub agent: Option<String>,
    /// With `agent`: the version of that agent every claim runs (pinned), instead of its latest.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 2147483647)]
    pub agent_version: Option<i32>,
}

/// The longest deadline: ten years.
pub const MAX_DEADLINE_SECS: i32 = 315_360_000;

pub use crate::domain::ticket::DEFAULT_MAX_ATTEMPTS;

/// Canonical JSON (object keys sorted) so that an idempotent repeat matches whatever its key order.
fn canonical_hash(value: &Value) -> String {
    fn write(v: &Value, out: &mut String) {
        match v {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                out.push('{');
                for (i, k) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push(':');
                    write(&map[k], out);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(item, out);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut text = String::new();
    write(value, &mut text);
    hex::encode(Sha256::digest(text.as_bytes()))
}

const MAX_IDEMPOTENCY_KEY_LEN: usize = 255;

/// 1 to 255 visible ASCII characters (`^[!-~]{1,255}$`, as the document says).
pub(crate) fn is_idempotency_key(key: &str) -> bool {
    (1..=MAX_IDEMPOTENCY_KEY_LEN).contains(&key.len()) && key.bytes().all(|b| b.is_ascii_graphic())
}

/// Create a ticket
#[utoipa::path(post, path = "/tickets", tag = "tickets",
    request_body = CreateTicket,
    params(("Idempotency-Key" = Option<String>, Header, min_length = 1, max_length = 255, pattern = "^[!-~]{1,255}$",
        description = "1 to 255 visible ASCII characters. A repeat with the same key and body returns the first ticket (200); the same key with another body is 409.")),
    responses(
        (status = 201, description = "Created", body = Ticket, headers(("AgentDesk-Warning" = String, description = "Present when the ticket is todo and no agent takes its labels: it waits until an agent's labels (or name) match"))),
        (status = 200, description = "An idempotent repeat: the ticket created first", body = Ticket,
            headers(("AgentDesk-Warning" = String, description = "Present when the ticket is todo and no agent takes its labels: it waits until an agent's labels (or name) match"))),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn create_ticket(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult<Response> {
    let idempotency_key = match headers.get("idempotency-key") {
        None => None,
        Some(v) => {
            let key = std::str::from_utf8(v.as_bytes())
                .ok()
                .filter(|k| is_idempotency_key(k))
                .ok_or_else(|| {
                    ApiError::BadRequest("Idempotency-Key must be 1 to 255 visible ASCII characters".into())
                })?;
            Some(key.to_owned())
        }
    };
    let traceparent = headers.get("traceparent").and_then(|v| v.to_str().ok());
    let (status, ticket) = match create(&state, &caller.project, body, idempotency_key, traceparent).await? {
        Created::New(ticket) => (StatusCode::CREATED, ticket),
        Created::Repeat(ticket) => (StatusCode::OK, ticket),
    };
    let warning = state.route_check.header(&state.pool, &ticket).await?;
    Ok((status, warning.map(|w| [w]), Json(ticket)).into_response())
}

/// Creates a ticket from a `CreateTicket` body: the one way in for `POST /v1/tickets`, the MCP
/// server's `create_ticket` and A2A's messages, so each checks the same rules and keeps the same
/// guarantees (idempotency, durable before acknowledged).
pub async fn create(
    state: &AppState,
    project: &Project,
    body: Value,
    idempotency_key: Option<String>,
    traceparent: Option<&str>,
) -> ApiResult<Created> {
    let hash = canonical_hash(&body);
    let req: CreateTicket = super::extract::typed(body)?;
    transitions::check_task(&req.task).map_err(ApiError::Validation)?;
    let mut labels = req.labels;
    let pinned = named_agent(state, project, req.agent.as_deref(), req.agent_version).await?;
    if let Some(agent) = &req.agent {
        // Routed like a label with its name: to that agent only.
        labels.push(agent.clone());
    }
    let labels = transitions::normalize_labels(labels).map_err(ApiError::Validation)?;
    if let Some(schema) = &req.schema {
        transitions::check_schema(schema).map_err(ApiError::Validation)?;
    }
    let metadata = match req.metadata {
        None | Some(Value::Null) => Value::Object(Default::default()),
        Some(m @ Value::Object(_)) => m,
        Some(_) => return Err(ApiError::Validation("metadata must be a JSON object".into())),
    };
    let max_attempts = req.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS);
    if !(1..=100).contains(&max_attempts) {
        return Err(ApiError::Validation("max_attempts must be between 1 and 100".into()));
    }
    if let Some(secs) = req.deadline_secs {
        if !(1..=MAX_DEADLINE_SECS).contains(&secs) {
            return Err(ApiError::Validation(format!(
                "deadline_secs must be between 1 and {MAX_DEADLINE_SECS}"
            )));
        }
    }

    // Its spans continue the caller's trace (through this request's span when tracing is on).
    let trace_context = trace::ticket_trace_context(traceparent);
    let plain = idempotency_key.is_none() && req.parent.is_none();
    // A create over the day's quota is refused before anything is written.
    super::projects::admit_ticket(&state.pool, project).await?;
    let new = NewTicket {
        project: project.id,
        task: req.task,
        labels,
        priority: req.priority,
        schema: req.schema,
        parent_id: None,
        metadata,
        max_attempts,
        reporter: "user".into(),
        idempotency: idempotency_key.map(|k| (k, hash)),
        trace_context,
        deadline_secs: req.deadline_secs,
    };
    let budget = super::agents::non_negative_usd("budget_usd", req.budget_usd)?;
    if plain && budget.is_none() && pinned.is_none() {
        // One statement on a writer's connection, shared with the creates arriving alongside it.
        return Ok(Created::New(state.intake.create(new).await?));
    }
    let extras = db::tickets::Extras {
        budget_usd: budget,
        agent_version: pinned,
        replay: None,
    };
    let created = transitions::create_with(&state.pool, new, req.parent.as_deref(), extras).await?;
    if let Created::New(_) = created {
        state.hub.wake();
        state.hub.work_available();
    }
    Ok(created)
}

/// A create's `agent` and `agent_version`: the agent must exist in the project, and the version
/// (which needs the agent) too. The version to pin, if any.
pub(super) async fn named_agent(
    state: &AppState,
    project: &Project,
    agent: Option<&str>,
    version: Option<i32>,
) -> ApiResult<Option<i32>> {
    let Some(name) = agent else {
        return match version {
            Some(_) => Err(ApiError::Validation(
                "agent_version needs agent: name the agent whose version the ticket runs".into(),
            )),
            None => Ok(None),
        };
    };
    if db::agents::get(&state.pool, project.id, name).await?.is_none() {
        return Err(ApiError::Validation(format!(
            "agent {name:?} does not exist in this project (define it with PUT /v1/agents/{name})"
        )));
    }
    let Some(version) = version else {
        return Ok(None);
    };
    if db::agents::version(&state.pool, project.id, name, version)
        .await?
        .is_none()
    {
        return Err(ApiError::Validation(format!(
            "agent {name:?} has no version {version} (see GET /v1/agents/{name}/versions)"
        )));
    }
    Ok(Some(version))
}

#[derive(Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListTicketsQuery {
    /// Comma-separated statuses.
    #[param(
        pattern = r"^(\s*(todo|in_progress|waiting|done|failed|cancelled)\s*(,\s*(todo|in_progress|waiting|done|failed|cancelled)\s*)*|\s*)$"
    )]
    pub status: Option<String>,
    pub label: Option<String>,
    pub agent: Option<String>,
    /// Parent ticket id (UUID) or key (`TICKET-42`, `OPS-7`).
    #[param(
        pattern = "^([A-Za-z]{1,10}-[0-9]{1,18}|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$"
    )]
    pub parent: Option<String>,
    /// Case-insensitive search in the task.
    pub q: Option<String>,
    /// `asc` (creation order, default) or `desc`.
    #[param(pattern = "^(asc|desc)?$")]
    pub order: Option<String>,
    /// 1 to 200, default 50.
    #[param(value_type = Option<i64>, minimum = 1, maximum = 200)]
    pub limit: Option<String>,
    /// A `next_cursor` of this list (the same form as `NumberPageQuery`'s).
    #[param(pattern = "^(6e(3[0-9]){1,18})?$")]
    pub cursor: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct TicketList {
    pub items: Vec<Ticket>,
    pub next_cursor: Option<String>,
}

/// List tickets
#[utoipa::path(get, path = "/tickets", tag = "tickets", params(ListTicketsQuery),
    responses((status = 200, body = TicketList), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
pub async fn list_tickets(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<ListTicketsQuery>,
) -> ApiResult<Json<TicketList>> {
    Ok(Json(list(&state, caller.project_id(), q).await?))
}

/// One page of tickets: `GET /v1/tickets`, and the MCP server's `list_tickets`.
pub async fn list(state: &AppState, project: ProjectId, q: ListTicketsQuery) -> ApiResult<TicketList> {
    let page = Page::parse(q.limit.as_deref(), q.cursor.as_deref())?;
    let statuses = match q.status.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        None => vec![],
        Some(list) => list
            .split(',')
            .map(|s| {
                Status::parse(s.trim()).ok_or_else(|| {
                    ApiError::BadRequest(format!(
                        "unknown status {s:?}: expected todo, in_progress, waiting, done, failed or cancelled"
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?,
    };
    let descending = match q.order.as_deref() {
        None | Some("" | "asc") => false,
        Some("desc") => true,
        Some(other) => {
            return Err(ApiError::BadRequest(format!(
                "order must be asc or desc, not {other:?}"
            )))
        }
    };
    let parent_id = match q.parent.as_deref() {
        None => None,
        Some(p) => match TicketRef::parse(p) {
            Some(r) => match db::tickets::find(&state.pool, project, &r).await? {
                Some(parent) => Some(parent.id),
                None => {
                    return Ok(TicketList {
                        items: vec![],
                        next_cursor: None,
                    })
                }
            },
            None => {
                return Err(ApiError::BadRequest(format!(
                    "parent {p:?} is neither a ticket id nor a key"
                )))
            }
        },
    };
    let after_number = match page.cursor {
        None => None,
        Some(c) => Some(c.as_number().ok_or_else(Page::bad_cursor)?),
    };
    let filter = ListFilter {
        project,
        statuses,
        label: q.label,
        agent: q.agent,
        parent_id,
        query: q.q.filter(|s| !s.is_empty()),
        context_id: None,
        descending,
        after_number,
        limit: page.limit,
    };
    let (items, next) = db::tickets::list(&state.pool, &filter).await?;
    Ok(TicketList {
        items,
        next_cursor: next.map(|n| Cursor::number(n).encode()),
    })
}

/// Get a ticket
#[utoipa::path(get, path = "/tickets/{ticket}", tag = "tickets",
    params(("ticket" = String, Path, description = "Ticket id or key (TICKET-7)")),
    responses((status = 200, body = Ticket, headers(("AgentDesk-Warning" = String, description = "Present when the ticket is todo and no agent takes its labels: it waits until an agent's labels (or name) match"))),
        (status = 404, body = ErrorBody), (status = 401, body = ErrorBody)))]
pub async fn get_ticket(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(reference): ApiPath<String>,
) -> ApiResult<Response> {
    let ticket = transitions::find(&state.pool, caller.project_id(), &reference).await?;
    let warning = state.route_check.header(&state.pool, &ticket).await?;
    Ok((warning.map(|w| [w]), Json(ticket)).into_response())
}

fn double_option<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<Value>>, D::Error> {
    Option::<Value>::deserialize(d).map(|v| Some(v.filter(|v| !v.is_null())))
}

/// Only these fields may change: a status changes through cancel, retry and comments, so a
/// body that names another field is refused (422) rather than answered as if it had applied.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchTicket {
    /// Any JSON but null or a blank string.
    #[serde(default, deserialize_with = "double_option")]
    #[schema(schema_with = super::formats::task)]
    pub task: Option<Option<Value>>,
    #[schema(schema_with = super::formats::labels)]
    pub labels: Option<Vec<String>>,
    #[schema(minimum = -2147483648, maximum = 2147483647)]
    pub priority: Option<i32>,
    /// A JSON Schema, or null to remove it.
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<Object>)]
    pub schema: Option<Option<Value>>,
    /// A JSON object.
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Value>,
    /// US dollars (at least 0), or null to remove the budget. A ticket waiting for its budget
    /// goes back to `todo` when it is raised or removed.
    #[serde(default, deserialize_with = "double_option_usd")]
    #[schema(value_type = Option<f64>, minimum = 0, maximum = 1000000000)]
    pub budget_usd: Option<Option<crate::domain::Usd>>,
}

fn double_option_usd<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<crate::domain::Usd>>, D::Error> {
    Option::<crate::domain::Usd>::deserialize(d).map(Some)
}

/// Edit a todo or waiting ticket
#[utoipa::path(patch, path = "/tickets/{ticket}", tag = "tickets", request_body = PatchTicket,
    params(("ticket" = String, Path, description = "Ticket id or key")),
    responses((status = 200, body = Ticket), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 422, body = ErrorBody), (status = 400, body = ErrorBody)))]
pub async fn patch_ticket(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(reference): ApiPath<String>,
    ApiJson(req): ApiJson<PatchTicket>,
) -> ApiResult<Json<Ticket>> {
    let task = match req.task {
        None => None,
        Some(None) => return Err(ApiError::Validation("task must not be null".into())),
        Some(Some(task)) => {
            transitions::check_task(&task).map_err(ApiError::Validation)?;
            Some(task)
        }
    };
    let labels = req
        .labels
        .map(transitions::normalize_labels)
        .transpose()
        .map_err(ApiError::Validation)?;
    if let Some(Some(schema)) = &req.schema {
        transitions::check_schema(schema).map_err(ApiError::Validation)?;
    }
    if let Some(m) = &req.metadata {
        if !m.is_object() {
            return Err(ApiError::Validation("metadata must be a JSON object".into()));
        }
    }
    let patch = TicketPatch {
        task,
        labels,
        priority: req.priority,
        schema: req.schema,
        metadata: req.metadata,
        budget_usd: match req.budget_usd {
            Some(Some(b)) => Some(super::agents::non_negative_usd("budget_usd", Some(b))?),
            other => other,
        },
    };
    Ok(Json(
        transitions::patch(&state.pool, caller.project_id(), &reference, patch).await?,
    ))
}

/// Cancel a ticket
///
/// `todo`/`waiting` tickets are cancelled at once; for an `in_progress` ticket the claim ends here
/// and its worker aborts the model stream and running tools. Cancelling a cancelled ticket returns it.
#[utoipa::path(post, path = "/tickets/{ticket}/cancel", tag = "tickets",
    params(("ticket" = String, Path, description = "Ticket id or key")),
    responses((status = 200, body = Ticket), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn cancel_ticket(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(reference): ApiPath<String>,
) -> ApiResult<Json<Ticket>> {
    let ticket = transitions::cancel(&state.pool, caller.project_id(), &reference).await?;
    state.hub.wake();
    Ok(Json(ticket))
}

/// Retry a failed or cancelled ticket
#[utoipa::path(post, path = "/tickets/{ticket}/retry", tag = "tickets",
    params(("ticket" = String, Path, description = "Ticket id or key")),
    responses((status = 200, body = Ticket), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn retry_ticket(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(reference): ApiPath<String>,
) -> ApiResult<Json<Ticket>> {
    let ticket = transitions::retry(&state.pool, caller.project_id(), &reference).await?;
    state.hub.wake();
    Ok(Json(ticket))
}

#[derive(Serialize, ToSchema)]
pub struct CommentList {
    pub items: Vec<Comment>,
    pub next_cursor: Option<String>,
}

/// The transcript
#[utoipa::path(get, path = "/tickets/{ticket}/comments", tag = "comments",
    params(("ticket" = String, Path, description = "Ticket id or key"), NumberPageQuery),
    responses((status = 200, body = CommentList), (status = 404, body = ErrorBody), (status = 400, body = ErrorBody)))]
pub async fn list_comments(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(reference): ApiPath<String>,
    ApiQuery(q): ApiQuery<NumberPageQuery>,
) -> ApiResult<Json<CommentList>> {
    let page = Page::parse(q.limit.as_deref(), q.cursor.as_deref())?;
    let ticket = transitions::find(&state.pool, caller.project_id(), &reference).await?;
    let after = match page.cursor {
        None => 0,
        Some(c) => c.as_number().ok_or_else(Page::bad_cursor)?,
    };
    let (items, more) = db::comments::list(&state.pool, ticket.id, after, page.limit).await?;
    let next_cursor = if more {
        items.last().map(|c| Cursor::number(c.seq).encode())
    } else {
        None
    };
    Ok(Json(CommentList { items, next_cursor }))
}

#[derive(Deserialize, ToSchema)]
pub struct CreateComment {
    /// Not blank; at most 512 KiB.
    #[schema(min_length = 1, pattern = r"\S")]
    pub text: String,
    /// `user` (default) or `system`.
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^(user|system)$")]
    pub author: Option<String>,
}

pub const MAX_COMMENT_LEN: usize = 512 * 1024;

/// Comment on a ticket
///
/// A `waiting` ticket goes back to `todo`; an `in_progress` ticket's agent sees the comment on its
/// next model request; a finished ticket is reopened to `todo`.
#[utoipa::path(post, path = "/tickets/{ticket}/comments", tag = "comments", request_body = CreateComment,
    params(("ticket" = String, Path, description = "Ticket id or key")),
    responses((status = 201, body = Comment), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody),
        (status = 400, body = ErrorBody), (status = 413, body = ErrorBody)))]
pub async fn create_comment(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(reference): ApiPath<String>,
    ApiJson(req): ApiJson<CreateComment>,
) -> ApiResult<(StatusCode, Json<Comment>)> {
    let author = match req.author.as_deref() {
        None | Some("user") => Author::User,
        Some("system") => Author::System,
        Some(other) => {
            return Err(ApiError::Validation(format!(
                "author must be user or system, not {other:?}"
            )))
        }
    };
    Ok((
        StatusCode::CREATED,
        Json(comment(&state, caller.project_id(), &reference, author, req.text).await?),
    ))
}

/// Adds a comment from outside the desk: the endpoint above, MCP's `comment_ticket` and A2A's
/// follow-up messages.
pub async fn comment(
    state: &AppState,
    project: ProjectId,
    reference: &str,
    author: Author,
    text: String,
) -> ApiResult<Comment> {
    if text.trim().is_empty() {
        return Err(ApiError::Validation("text must not be empty".into()));
    }
    if text.len() > MAX_COMMENT_LEN {
        return Err(ApiError::Validation("text is longer than 512 KiB".into()));
    }
    let (comment, _) = transitions::add_comment(&state.pool, project, reference, author, text).await?;
    state.hub.wake();
    Ok(comment)
}

/// The whole output of a tool call that was too large to show the model
#[utoipa::path(get, path = "/tickets/{ticket}/outputs/{call_id}", tag = "tickets",
    params(("ticket" = String, Path, description = "Ticket id or key"), ("call_id" = String, Path, description = "The tool call's id")),
    responses((status = 200, description = "The output, as text", content_type = "text/plain", body = String),
        (status = 404, body = ErrorBody)))]
pub async fn get_output(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((reference, call_id)): ApiPath<(String, String)>,
) -> ApiResult<Response> {
    let ticket = transitions::find(&state.pool, caller.project_id(), &reference).await?;
    let output = db::outputs::get(&state.pool, ticket.id, &call_id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("{} has no stored output for call {call_id:?}", ticket.key)))?;
    Ok((
        [(axum::http::header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        output,
    )
        .into_response())
}
