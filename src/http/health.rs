//! Liveness, readiness and statistics.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::error::{ApiError, ApiResult, ErrorBody};
use super::AppState;
use crate::db;
use crate::db::desk_stats::Stats;

/// Liveness
#[utoipa::path(get, path = "/healthz", tag = "health", security(()),
    responses((status = 200, description = "The process is up")))]
pub async fn healthz() -> Json<serde_json::Value> {
    Json(json!({ "status": "ok" }))
}

/// Readiness: the database is reachable and migrated
#[utoipa::path(get, path = "/readyz", tag = "health", security(()),
    responses((status = 200, description = "Ready"), (status = 503, body = ErrorBody)))]
pub async fn readyz(State(state): State<AppState>) -> Response {
    if db::is_ready(&state.pool).await {
        (StatusCode::OK, Json(json!({ "status": "ready" }))).into_response()
    } else {
        ApiError::Unavailable.into_response()
    }
}

/// What a worker-only process serves on its listen address: liveness and readiness (the database
/// is reachable), for container health checks and Kubernetes probes, open like the API's; the
/// caller adds `/metrics` (with the API's tokens).
pub fn worker_router(pool: sqlx::PgPool) -> axum::Router {
    use axum::routing::get;
    axum::Router::new()
        .route("/healthz", get(healthz))
        .route(
            "/readyz",
            get(|State(pool): State<sqlx::PgPool>| async move {
                if db::is_ready(&pool).await {
                    (StatusCode::OK, Json(json!({ "status": "ready" }))).into_response()
                } else {
                    ApiError::Unavailable.into_response()
                }
            }),
        )
        .with_state(pool)
}

/// Ticket statistics, overall and per label and agent
#[utoipa::path(get, path = "/stats", tag = "stats",
    responses((status = 200, body = Stats), (status = 401, body = ErrorBody)))]
pub async fn stats(State(state): State<AppState>, caller: super::access::Caller) -> ApiResult<Json<Stats>> {
    let mut stats = db::desk_stats::compute(&state.pool, caller.project_id()).await?;
    stats.storage = db::retention::storage(&state.pool).await?;
    Ok(Json(stats))
}
