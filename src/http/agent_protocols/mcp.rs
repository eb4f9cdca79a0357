//! `/mcp`: the desk as a Model Context Protocol server (rmcp over streamable HTTP), so that an
//! assistant (Claude Desktop, an IDE, another agent) can hand it work and follow it.
//!
//! Revisions 2025-06-18 and 2025-11-25 open a session with `initialize`; 2026-07-28 requests
//! stand alone (per-request `_meta`, `Mcp-Method`/`Mcp-Name` headers, `server/discover`), which
//! rmcp handles. Every request presents a token of `AGENTDESK_API_TOKENS` (when set); a `read:`
//! token sees and may call only the tools that read.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, CustomRequest, CustomResult, ErrorData,
    Implementation, ListResourceTemplatesResult, ListToolsResult, PaginatedRequestParams, ProtocolVersion,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, ResourceContents, ResourceTemplate,
    ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::RoleServer;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use utoipa::{PartialSchema, ToSchema};

use crate::db;
use crate::domain::ProjectId;
use crate::domain::{Author, Comment, Ticket};
use crate::http::access::Caller;
use crate::http::approvals::AnswerApproval;
use crate::http::auth::Scope;
use crate::http::error::ApiError;
use crate::http::tickets::{CreateTicket, ListTicketsQuery};
use crate::http::AppState;
use crate::transitions::{self, Created};

/// The revisions served: the two with a session, and the stateless one.
const REVISIONS: &[ProtocolVersion] = &[
    ProtocolVersion::V_2025_06_18,
    ProtocolVersion::V_2025_11_25,
    ProtocolVersion::V_2026_07_28,
];

/// How many of a ticket's comments `get_ticket` shows.
const COMMENTS_SHOWN: i64 = 20;
/// The template of the one resource kind.
const TICKET_RESOURCE: &str = "agentdesk://tickets/{ticket}";
const TICKET_RESOURCE_PREFIX: &str = "agentdesk://tickets/";

/// `/mcp`, as an axum router: the rmcp service behind the desk's tokens.
pub fn routes(state: AppState) -> axum::Router<AppState> {
    let server = DeskServer { state: state.clone() };
    let config = StreamableHttpServerConfig::default()
        // The desk's own tokens guard it; a desk answers on whatever name it is deployed under.
        .disable_allowed_hosts()
        .with_max_request_body_bytes(crate::http::BODY_LIMIT)
        .with_cancellation_token(state.shutdown.child_token());
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn(unreadable_body_is_bad_request))
        .layer(axum::middleware::from_fn(ended_session_is_no_content))
        .layer(axum::middleware::from_fn_with_state(state, require_caller))
        // rmcp's transport answers its refusals in plain text.
        .layer(axum::middleware::from_fn(crate::http::error::plain_errors_in_api_shape))
}

/// rmcp answers 415 both to a body that is not JSON by its content type and to a JSON body it
/// cannot read as a message (malformed JSON, a batch, `{}`). The second is a malformed request,
/// 400 `bad_request` as everywhere else in the API.
async fn unreadable_body_is_bad_request(request: Request, next: Next) -> Response {
    let says_json = request
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes().starts_with(b"application/json"));
    let response = next.run(request).await;
    if !says_json || response.status() != axum::http::StatusCode::UNSUPPORTED_MEDIA_TYPE {
        return response;
    }
    let text = axum::body::to_bytes(response.into_body(), 16 * 1024)
        .await
        .unwrap_or_default();
    ApiError::BadRequest(format!(
        "the body is not a JSON-RPC message: {}",
        String::from_utf8_lossy(&text).trim()
    ))
    .into_response()
}

/// rmcp answers a session's end (`DELETE /mcp`) with 202; the official SDKs take 200 or 204 as
/// success and log anything else as a failed termination (Python's "Session termination failed:
/// 202" on every close). Nothing is left to accept later: the session is gone, so 204.
async fn ended_session_is_no_content(request: Request, next: Next) -> Response {
    let deleting = request.method() == axum::http::Method::DELETE;
    let response = next.run(request).await;
    if !deleting || response.status() != axum::http::StatusCode::ACCEPTED {
        return response;
    }
    let (mut parts, _) = response.into_parts();
    parts.status = axum::http::StatusCode::NO_CONTENT;
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    parts.headers.remove(axum::http::header::CONTENT_TYPE);
    Response::from_parts(parts, axum::body::Body::empty())
}

/// 401 without a valid token (when tokens are set); otherwise notes the caller (its project and
/// scopes) for the handler, after the rate limits. Read tokens pass: every MCP request is a POST,
/// and what they may do is decided per tool.
async fn require_caller(State(state): State<AppState>, request: Request, next: Next) -> Response {
    match state.access.caller(request.headers()).await {
        Ok(caller) => crate::http::access::run_admitted(&state, caller, request, next).await,
        Err(refused) => refused.into_response(),
    }
}

/// The caller `require_caller` noted; None is unreachable behind it, and is refused.
fn caller(context: &RequestContext<RoleServer>) -> Option<Caller> {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Caller>())
        .cloned()
}

fn scope(context: &RequestContext<RoleServer>) -> Scope {
    // The safe reading of a missing caller is the narrow one.
    caller(context).map_or(Scope::Read, |caller| caller.scope())
}

#[derive(Clone)]
struct DeskServer {
    state: AppState,
}

/// `get_ticket`, `cancel_ticket`, `retry_ticket`: a ticket by id or key.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct TicketArgs {
    /// The ticket's id or key (`TICKET-7`).
    #[schema(min_length = 1)]
    ticket: String,
}

/// `list_tickets`: the filters of `GET /v1/tickets`, newest first.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct ListArgs {
    /// Comma-separated statuses: todo, in_progress, waiting, done, failed, cancelled.
    status: Option<String>,
    /// Tickets with this label.
    label: Option<String>,
    /// Case-insensitive search in the task.
    q: Option<String>,
    /// 1 to 200, default 50.
    #[schema(minimum = 1, maximum = 200)]
    limit: Option<u32>,
    /// A `next_cursor` of an earlier page.
    cursor: Option<String>,
}

/// `comment_ticket`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct CommentArgs {
    /// The ticket's id or key.
    #[schema(min_length = 1)]
    ticket: String,
    /// Not blank; at most 512 KiB. A waiting ticket goes back to work with it.
    #[schema(min_length = 1)]
    text: String,
}

/// `answer_approval`: the body of `POST /v1/tickets/{ticket}/approvals/{call_id}` with its ticket
/// and call.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct ApprovalArgs {
    /// The ticket's id or key.
    #[schema(min_length = 1)]
    ticket: String,
    /// The waiting call's id, as in the ticket's `pending_approvals`.
    #[schema(min_length = 1)]
    call_id: String,
    /// true runs the call with the ticket's next claim; false returns it to the model as an
    /// error result holding `reason`.
    approve: bool,
    /// Shown to the model (a denial) and in the `tool.approved`/`tool.denied` event.
    #[schema(max_length = 4000)]
    reason: Option<String>,
}

/// A ticket with the end of its transcript.
#[derive(Serialize)]
struct TicketWithComments {
    #[serde(flatten)]
    ticket: Ticket,
    comments: Vec<Comment>,
}

/// The tools, each with whether it only reads.
struct ToolSpec {
    name: &'static str,
    title: &'static str,
    description: &'static str,
    reads: bool,
    input: fn() -> Map<String, Value>,
}

const TOOLS: &[ToolSpec] = &[
    ToolSpec {
        name: "create_ticket",
        title: "Create a ticket",
        description: "Creates a ticket for the desk's agents. With wait_secs (0 to 300), answers once the ticket is done, failed, cancelled or waiting for an answer, or when the time is up; otherwise at once.",
        reads: false,
        input: create_ticket_schema,
    },
    ToolSpec {
        name: "get_ticket",
        title: "Get a ticket",
        description: "A ticket by id or key (TICKET-7), with its last 20 comments.",
        reads: true,
        input: || object_schema::<TicketArgs>(),
    },
    ToolSpec {
        name: "list_tickets",
        title: "List tickets",
        description: "Tickets, newest first, filtered by status, label or a text search: {items, next_cursor}.",
        reads: true,
        input: || object_schema::<ListArgs>(),
    },
    ToolSpec {
        name: "comment_ticket",
        title: "Comment on a ticket",
        description: "Adds a comment to a ticket's transcript: the answer to a waiting ticket's question, or guidance for its agent. A waiting or finished ticket goes back to work.",
        reads: false,
        input: || object_schema::<CommentArgs>(),
    },
    ToolSpec {
        name: "cancel_ticket",
        title: "Cancel a ticket",
        description: "Cancels a ticket; a running one stops at once.",
        reads: false,
        input: || object_schema::<TicketArgs>(),
    },
    ToolSpec {
        name: "retry_ticket",
        title: "Retry a ticket",
        description: "Puts a failed or cancelled ticket back in the queue.",
        reads: false,
        input: || object_schema::<TicketArgs>(),
    },
    ToolSpec {
        name: "answer_approval",
        title: "Approve or deny a tool call",
        description: "Answers a tool call that waits for a person's approval (see the ticket's pending_approvals).",
        reads: false,
        input: || object_schema::<ApprovalArgs>(),
    },
];

/// A type's schema as JSON: the same one the OpenAPI document gives it.
fn object_schema<T: PartialSchema>() -> Map<String, Value> {
    match serde_json::to_value(T::schema()) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    }
}

/// `CreateTicket` (the body of `POST /v1/tickets`) with `wait_secs` and `idempotency_key`.
fn create_ticket_schema() -> Map<String, Value> {
    let mut schema = object_schema::<CreateTicket>();
    if let Some(Value::Object(properties)) = schema.get_mut("properties") {
        properties.insert(
            "wait_secs".into(),
            json!({
                "type": "integer", "minimum": 0, "maximum": super::LONGEST_WAIT.as_secs(), "default": 0,
                "description": "Seconds to wait for the ticket to be done, failed, cancelled or waiting (0: answer at once)."
            }),
        );
        properties.insert(
            "idempotency_key".into(),
            json!({
                "type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[!-~]{1,255}$",
                "description": "As the Idempotency-Key header of POST /v1/tickets: a repeat with the same key and arguments returns the first ticket; the same key with other arguments is a conflict."
            }),
        );
    }
    schema
}

/// A successful result: the JSON as `structuredContent` and as text.
fn success(value: Value) -> CallToolResult {
    let text = value.to_string();
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(value);
    result
}

/// An API error as a tool result the model can read: `isError` with `{code, message}`.
fn failure(err: ApiError) -> CallToolResult {
    let body = json!({"error": {"code": err.code(), "message": err.to_string()}});
    let mut result = CallToolResult::error(vec![ContentBlock::text(body.to_string())]);
    result.structured_content = Some(body);
    result
}

/// Arguments read as `T`; a mismatch is the API's 422, as over REST.
fn arguments<T: serde::de::DeserializeOwned>(args: Map<String, Value>) -> Result<T, ApiError> {
    serde_json::from_value(Value::Object(args)).map_err(|err| ApiError::Validation(format!("arguments: {err}")))
}

fn to_json<T: Serialize>(value: &T) -> Result<Value, ApiError> {
    serde_json::to_value(value).map_err(|_| ApiError::Internal)
}

impl DeskServer {
    async fn run(&self, caller: &Caller, tool: &str, args: Map<String, Value>) -> Result<Value, ApiError> {
        let state = &self.state;
        let project = caller.project_id();
        match tool {
            "create_ticket" => {
                let mut args = args;
                let wait = match args.remove("wait_secs") {
                    None | Some(Value::Null) => 0,
                    Some(value) => value
                        .as_u64()
                        .filter(|secs| *secs <= super::LONGEST_WAIT.as_secs())
                        .ok_or_else(|| ApiError::Validation("wait_secs must be an integer from 0 to 300".into()))?,
                };
                let key = match args.remove("idempotency_key") {
                    None | Some(Value::Null) => None,
                    Some(Value::String(key)) if crate::http::tickets::is_idempotency_key(&key) => Some(key),
                    Some(_) => {
                        return Err(ApiError::Validation(
                            "idempotency_key must be 1 to 255 visible ASCII characters".into(),
                        ))
                    }
                };
                let ticket =
                    match crate::http::tickets::create(state, &caller.project, Value::Object(args), key, None).await? {
                        Created::New(ticket) | Created::Repeat(ticket) => ticket,
                    };
                to_json(&super::settled_ticket(state, ticket, Duration::from_secs(wait)).await?)
            }
            "get_ticket" => {
                let TicketArgs { ticket } = arguments(args)?;
                to_json(&self.ticket_with_comments(project, &ticket).await?)
            }
            "list_tickets" => {
                let list: ListArgs = arguments(args)?;
                // An argument out of range is invalid like one of the wrong type (the query's
                // own check would call it a bad request).
                let most = crate::http::pagination::MAX_LIMIT;
                if list.limit.is_some_and(|n| !(1..=most).contains(&i64::from(n))) {
                    return Err(ApiError::Validation(format!("limit must be from 1 to {most}")));
                }
                let query = ListTicketsQuery {
                    status: list.status,
                    label: list.label,
                    q: list.q,
                    order: Some("desc".into()),
                    limit: list.limit.map(|n| n.to_string()),
                    cursor: list.cursor,
                    ..Default::default()
                };
                to_json(&crate::http::tickets::list(state, project, query).await?)
            }
            "comment_ticket" => {
                let CommentArgs { ticket, text } = arguments(args)?;
                to_json(&crate::http::tickets::comment(state, project, &ticket, Author::User, text).await?)
            }
            "cancel_ticket" => {
                let TicketArgs { ticket } = arguments(args)?;
                let ticket = transitions::cancel(&state.pool, project, &ticket).await?;
                state.hub.wake();
                to_json(&ticket)
            }
            "retry_ticket" => {
                let TicketArgs { ticket } = arguments(args)?;
                let ticket = transitions::retry(&state.pool, project, &ticket).await?;
                state.hub.wake();
                to_json(&ticket)
            }
            "answer_approval" => {
                let ApprovalArgs {
                    ticket,
                    call_id,
                    approve,
                    reason,
                } = arguments(args)?;
                let answer = AnswerApproval { approve, reason };
                to_json(&crate::http::approvals::answer(state, project, &ticket, &call_id, answer).await?)
            }
            _ => Err(ApiError::NotFound(format!("no tool {tool:?}"))),
        }
    }

    async fn ticket_with_comments(&self, project: ProjectId, reference: &str) -> Result<TicketWithComments, ApiError> {
        let ticket = transitions::find(&self.state.pool, project, reference).await?;
        let comments = db::comments::latest(&self.state.pool, ticket.id, COMMENTS_SHOWN).await?;
        Ok(TicketWithComments { ticket, comments })
    }
}

impl ServerHandler for DeskServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_resources().build())
            .with_server_info(Implementation::new("agentdesk", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "A ticket desk worked by AI agents. Create a ticket with a task, then follow it with \
                 get_ticket (or create_ticket's wait_secs); answer a waiting ticket's question with \
                 comment_ticket.",
            )
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(REVISIONS)
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        TOOLS.iter().find(|spec| spec.name == name).map(tool)
    }

    /// rmcp hands over the requests it could not read as a method it knows. For a method of the
    /// request's revision, that means params of the wrong shape: JSON-RPC's -32602 (invalid
    /// params). Any other method is -32601 (no such method), which the stateless revision
    /// answers with HTTP 404; it has no `initialize`, `ping`, `logging/setLevel` or resource
    /// subscriptions.
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        const SESSION_METHODS: &[&str] = &[
            "initialize",
            "ping",
            "server/discover",
            "tools/list",
            "tools/call",
            "resources/list",
            "resources/templates/list",
            "resources/read",
            "resources/subscribe",
            "resources/unsubscribe",
            "prompts/list",
            "prompts/get",
            "completion/complete",
            "logging/setLevel",
        ];
        const STATELESS_METHODS: &[&str] = &[
            "server/discover",
            "subscriptions/listen",
            "tools/list",
            "tools/call",
            "resources/list",
            "resources/templates/list",
            "resources/read",
            "prompts/list",
            "prompts/get",
            "completion/complete",
        ];
        let known = if is_stateless(&context) {
            STATELESS_METHODS
        } else {
            SESSION_METHODS
        };
        if known.contains(&request.method.as_str()) {
            Err(ErrorData::invalid_params(
                format!("the params of {} are not of the shape it takes", request.method),
                None,
            ))
        } else {
            Err(ErrorData::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                request.method,
                None,
            ))
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let full = scope(&context) == Scope::Full;
        let tools = TOOLS.iter().filter(|spec| full || spec.reads).map(tool).collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(spec) = TOOLS.iter().find(|spec| spec.name == request.name) else {
            return Err(ErrorData::invalid_params(format!("no tool {:?}", request.name), None));
        };
        if !spec.reads && scope(&context) != Scope::Full {
            let refused = ApiError::Forbidden(format!("this token may only read; {} changes the desk", spec.name));
            return Ok(failure(refused).into());
        }
        let Some(caller) = caller(&context) else {
            return Ok(failure(ApiError::Unauthorized).into());
        };
        let args = request.arguments.unwrap_or_default();
        let result = match self.run(&caller, spec.name, args).await {
            Ok(value) => success(value),
            Err(err) => failure(err),
        };
        Ok(result.into())
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            ResourceTemplate::new(TICKET_RESOURCE, "ticket")
                .with_title("A ticket with its transcript")
                .with_description("A ticket (by id or key) with its whole transcript, as JSON.")
                .with_mime_type("application/json"),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        // The error names the URI in its data, as SEP-2164 asks.
        let not_found = || {
            ErrorData::resource_not_found(
                format!("no resource {:?}", request.uri),
                Some(json!({"uri": request.uri})),
            )
        };
        let reference = request.uri.strip_prefix(TICKET_RESOURCE_PREFIX).ok_or_else(not_found)?;
        let Some(caller) = caller(&context) else {
            return Err(not_found());
        };
        let ticket = match transitions::find(&self.state.pool, caller.project_id(), reference).await {
            Ok(ticket) => ticket,
            Err(transitions::DeskError::NotFound(_)) => return Err(not_found()),
            Err(err) => return Err(ErrorData::internal_error(ApiError::from(err).to_string(), None)),
        };
        let comments = db::comments::all(&self.state.pool, ticket.id)
            .await
            .map_err(|err| ErrorData::internal_error(ApiError::from(err).to_string(), None))?;
        let text = serde_json::to_string(&TicketWithComments { ticket, comments })
            .map_err(|_| ErrorData::internal_error("internal error", None))?;
        Ok(ReadResourceResult::new(vec![
            ResourceContents::text(text, request.uri.clone()).with_mime_type("application/json")
        ])
        .into())
    }
}

/// Whether the request speaks the stateless revision (2026-07-28 or later): its
/// `MCP-Protocol-Version` header says so, and rmcp has checked that it agrees with the request's
/// `_meta`.
fn is_stateless(context: &RequestContext<RoleServer>) -> bool {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.headers.get("mcp-protocol-version"))
        .and_then(|value| value.to_str().ok())
        // Revisions are dates: later ones sort after.
        .is_some_and(|version| version >= ProtocolVersion::V_2026_07_28.as_str())
}

fn tool(spec: &ToolSpec) -> Tool {
    let annotations = if spec.reads {
        ToolAnnotations::new().read_only(true).open_world(false)
    } else {
        ToolAnnotations::new()
            .read_only(false)
            .destructive(spec.name == "cancel_ticket")
            .open_world(false)
    };
    Tool::new(spec.name, spec.description, (spec.input)())
        .with_title(spec.title)
        .with_annotations(annotations)
}
