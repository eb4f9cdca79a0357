//! The HTTP API: routers per resource, the error type, extractors, SSE and OpenAPI.

pub mod agents;
pub mod auth;
pub mod error;
pub mod events;
pub mod extract;
pub mod health;
pub mod openapi;
pub mod pagination;
pub mod tickets;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::trace::TraceLayer;
use utoipa::OpenApi;
use utoipa_scalar::{Scalar, Servable};

use crate::config::Config;
use crate::events::EventHub;
use crate::llm::Providers;
use error::ApiError;

/// Request bodies larger than this are refused with 413.
pub const BODY_LIMIT: usize = 1024 * 1024;

#[derive(Clone)]
pub struct AppState {
    pub pool: PgPool,
    pub hub: EventHub,
    pub config: Arc<Config>,
    pub providers: Arc<Providers>,
    /// Group-commits plain creates.
    pub intake: crate::transitions::intake::Intake,
    /// Cancelled on shutdown: ends SSE streams so graceful shutdown does not hang on them.
    pub shutdown: CancellationToken,
}

pub fn router(state: AppState) -> Router {
    let v1 = Router::new()
        .route("/tickets", post(tickets::create_ticket).get(tickets::list_tickets))
        .route(
            "/tickets/{ticket}",
            get(tickets::get_ticket).patch(tickets::patch_ticket),
        )
        .route("/tickets/{ticket}/cancel", post(tickets::cancel_ticket))
        .route("/tickets/{ticket}/retry", post(tickets::retry_ticket))
        .route(
            "/tickets/{ticket}/comments",
            get(tickets::list_comments).post(tickets::create_comment),
        )
        .route("/tickets/{ticket}/events", get(events::ticket_events))
        .route("/tickets/{ticket}/outputs/{call_id}", get(tickets::get_output))
        .route("/events", get(events::global_events))
        .route("/agents", get(agents::list_agents))
        .route(
            "/agents/{name}",
            get(agents::get_agent)
                .put(agents::put_agent)
                .delete(agents::delete_agent),
        )
        .route("/stats", get(health::stats))
        .fallback(not_found)
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), auth::require_token));

    Router::new()
        .nest("/v1", v1)
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/openapi.json", get(openapi_json))
        .merge(Scalar::with_url("/docs", openapi::ApiDoc::openapi()))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(CatchPanicLayer::custom(|_| ApiError::Internal.into_response()))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

async fn openapi_json() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], openapi::document_json()).into_response()
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
