//! The HTTP API: routers per resource, the error type, extractors, SSE and OpenAPI.

pub mod access;
pub mod agent_protocols;
pub mod agents;
pub mod approvals;
pub mod auth;
pub mod board;
pub mod cross_site;
pub mod docs;
pub mod error;
pub mod events;
pub mod experiments;
pub mod extract;
pub mod formats;
pub mod health;
pub mod links;
pub mod mcp_servers;
pub mod metrics;
pub mod openapi;
pub mod pagination;
pub mod prices;
pub mod projects;
pub mod providers;
pub mod questions;
pub mod replays;
pub mod routable;
pub mod schedules;
pub mod tickets;
pub mod tools;
pub mod webhooks;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::trace::TraceLayer;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::config::Config;
use crate::events::EventHub;
use crate::llm::Providers;
use error::ApiError;

/// Request bodies larger than this are refused with 413.
pub const BODY_LIMIT: usize = 1024 * 1024;
/// Requests whose headers (names and values together) are larger than this are refused with
/// 431. The connection layer refuses more than 100 headers, or about 400 KiB of them, by itself.
pub const HEADERS_LIMIT: usize = 32 * 1024;

/// What every handler shares, behind one `Arc`: axum clones the state for each extractor and
/// layer that asks for it, several times per request, and one reference count costs less than
/// one per service.
#[derive(Clone)]
pub struct AppState(Arc<ApiServices>);

impl AppState {
    pub fn new(services: ApiServices) -> AppState {
        AppState(Arc::new(services))
    }
}

impl std::ops::Deref for AppState {
    type Target = ApiServices;

    fn deref(&self) -> &ApiServices {
        &self.0
    }
}

pub struct ApiServices {
    pub pool: PgPool,
    /// Tokens and projects: who a request is and which project it acts in.
    pub access: Arc<access::Access>,
    pub hub: EventHub,
    pub config: Arc<Config>,
    pub providers: Arc<Providers>,
    /// Resolves agents' tool names (and checks them at `PUT /v1/agents`).
    pub catalog: crate::tools::catalog::ToolCatalog,
    /// The MCP servers and their connections.
    pub mcp: crate::mcp_client::McpHub,
    /// Group-commits plain creates.
    pub intake: crate::transitions::intake::Intake,
    /// Says whether an agent takes a waiting ticket (`routable`).
    pub route_check: routable::RouteCheck,
    /// The prices, as `/v1/prices` shows them (reloaded at once after a change here).
    pub prices: crate::db::prices::PriceBook,
    /// The projects' quotas as this process's workers check them (reloaded at once after a change
    /// here).
    pub projects: crate::db::projects::ProjectBook,
    /// Checks the signed links of calls that wait for approval (`/links/approvals/…`).
    pub links: crate::domain::link::Links,
    /// Cancelled on shutdown: ends SSE streams so graceful shutdown does not hang on them.
    pub shutdown: CancellationToken,
}

/// The `/v1` endpoints. Each one's path (relative to `/v1`) and method come from its handler's
/// `#[utoipa::path]`; `routes!` groups the handlers of one path.
fn v1_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::default()
        .routes(routes!(tickets::create_ticket, tickets::list_tickets))
        .routes(routes!(tickets::get_ticket, tickets::patch_ticket))
        .routes(routes!(tickets::cancel_ticket))
        .routes(routes!(tickets::retry_ticket))
        .routes(routes!(tickets::list_comments, tickets::create_comment))
        .routes(routes!(events::ticket_events))
        .routes(routes!(tickets::get_output))
        .routes(routes!(approvals::answer_approval))
        .routes(routes!(approvals::answer_approvals))
        .routes(routes!(questions::answer_question))
        .routes(routes!(replays::replay_ticket))
        .routes(routes!(experiments::create_experiment, experiments::list_experiments))
        .routes(routes!(experiments::get_experiment, experiments::delete_experiment))
        .routes(routes!(experiments::cancel_experiment))
        .routes(routes!(events::global_events))
        .routes(routes!(agents::list_agents))
        .routes(routes!(agents::get_agent, agents::put_agent, agents::delete_agent))
        .routes(routes!(agents::list_agent_versions))
        .routes(routes!(agents::get_agent_version))
        .routes(routes!(agents::rollback_agent))
        .routes(routes!(providers::list_providers))
        .routes(routes!(
            providers::get_provider,
            providers::put_provider,
            providers::delete_provider
        ))
        .routes(routes!(webhooks::create_webhook, webhooks::list_webhooks))
        .routes(routes!(
            webhooks::get_webhook,
            webhooks::patch_webhook,
            webhooks::delete_webhook
        ))
        .routes(routes!(webhooks::list_deliveries))
        .routes(routes!(webhooks::test_webhook))
        .routes(routes!(tools::list_tools))
        .routes(routes!(tools::get_tool, tools::put_tool, tools::delete_tool))
        .routes(routes!(mcp_servers::list_mcp_servers))
        .routes(routes!(
            mcp_servers::get_mcp_server,
            mcp_servers::put_mcp_server,
            mcp_servers::delete_mcp_server
        ))
        .routes(routes!(mcp_servers::refresh_mcp_server))
        .routes(routes!(schedules::create_schedule, schedules::list_schedules))
        .routes(routes!(
            schedules::get_schedule,
            schedules::patch_schedule,
            schedules::delete_schedule
        ))
        .routes(routes!(schedules::run_schedule))
        .routes(routes!(schedules::list_schedule_tickets))
        .routes(routes!(prices::list_prices))
        .routes(routes!(prices::get_price, prices::put_price, prices::delete_price))
        .routes(routes!(health::stats))
        .routes(routes!(projects::create_project, projects::list_projects))
        .routes(routes!(
            projects::get_project,
            projects::patch_project,
            projects::delete_project
        ))
        .routes(routes!(projects::create_token, projects::list_tokens))
        .routes(routes!(projects::revoke_token))
        .routes(routes!(projects::project_usage))
}

/// Every documented endpoint, with `v1` (the routes of `v1_routes`, with whatever route layers
/// the caller gave them) under `/v1`: the one place both the axum routes and the OpenAPI paths
/// come from.
fn documented(v1: OpenApiRouter<AppState>) -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .nest("/v1", v1)
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
}

/// `/metrics`, behind the same tokens as `/v1/*`.
fn metrics_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::default().routes(routes!(metrics::metrics))
}

pub fn router(state: AppState) -> Router {
    let v1 = v1_routes()
        .fallback(not_found)
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), access::admit));
    let scraped =
        metrics_routes().route_layer(axum::middleware::from_fn_with_state(state.clone(), auth::require_token));
    let (routes, mut api) = documented(v1).merge(scraped).split_for_parts();
    // The served document declares the security this service asks for.
    openapi::declare_common_responses(&mut api, !state.config.api_tokens.is_empty());
    let document = Bytes::from(openapi::to_json(&api));
    let openapi_json = move || {
        let document = document.clone();
        async move { ([(header::CONTENT_TYPE, "application/json")], document) }
    };

    routes
        .route("/openapi.json", get(openapi_json))
        .merge(docs::routes())
        .merge(board::routes())
        .merge(links::routes())
        .merge(agent_protocols::mcp::routes(state.clone()))
        .merge(agent_protocols::a2a::routes())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        // Inside the metrics, so that a request cut off shows there as a 503.
        .layer(axum::middleware::from_fn_with_state(state.clone(), time_limit))
        // Before any handler reads the request, so a refused cross-site request changes nothing;
        // inside the metrics, which count its refusals.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            cross_site::refuse_cross_site,
        ))
        // Per route (so it sees the matched template) and on the fallback.
        .layer(axum::middleware::from_fn(metrics::observe))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(axum::middleware::from_fn(limit_headers))
        .layer(CatchPanicLayer::custom(|_| ApiError::Internal.into_response()))
        // A link's path holds its token: it is logged without it.
        .layer(
            TraceLayer::new_for_http().make_span_with(|request: &axum::extract::Request| {
                let path = crate::domain::link::redacted(request.uri().path());
                tracing::debug_span!("request", method = %request.method(), path = %path)
            }),
        )
        .with_state(state)
}

/// Refuses requests with more than `HEADERS_LIMIT` bytes of headers before anything reads them.
async fn limit_headers(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let size: usize = request
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len())
        .sum();
    if size > HEADERS_LIMIT {
        return ApiError::HeadersTooLarge.into_response();
    }
    next.run(request).await
}

/// Answers 503 `timeout` when a request to a non-streaming endpoint takes longer than
/// `AGENTDESK_REQUEST_TIMEOUT_SECS` (a stuck lock, a database that stopped answering, a client
/// that trickles its body), so that clients and proxies get an answer and connections are not
/// held forever. Dropping the handler is safe: an open transaction rolls back, and a write that
/// already committed (or one queued for the group commit, which goes on without it) stays; a
/// create retried with the same Idempotency-Key is not repeated. Event streams are exempt: they
/// are meant to stay open; `/mcp` and `/a2a` calls that wait for a ticket get that wait on top.
async fn time_limit(
    axum::extract::State(state): axum::extract::State<AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let path = request.uri().path();
    if path.ends_with("/events") {
        return next.run(request).await;
    }
    let mut limit = state.config.request_timeout;
    if path.starts_with("/mcp") || path.starts_with("/a2a") {
        // Their calls may wait for a ticket to settle.
        limit += agent_protocols::LONGEST_WAIT;
    }
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => {
            tracing::warn!(limit_secs = limit.as_secs_f64(), "request timed out");
            ApiError::TimedOut(limit.as_secs_f64()).into_response()
        }
    }
}

async fn not_found() -> ApiError {
    ApiError::NotFound("no such endpoint".into())
}

async fn method_not_allowed() -> Response {
    let body = axum::Json(error::ErrorBody {
        error: error::ErrorDetail {
            code: "method_not_allowed",
            message: "method not allowed on this endpoint".into(),
        },
    });
    (axum::http::StatusCode::METHOD_NOT_ALLOWED, body).into_response()
}
