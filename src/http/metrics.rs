//! `GET /metrics` (the Prometheus text format) and the middleware that counts and traces every
//! request by its route template.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use opentelemetry::context::FutureExt as _;
use sqlx::PgPool;

use super::error::{ApiError, ApiResult, ErrorBody};
use super::AppState;
use crate::db;
use crate::telemetry::{metric, trace};

/// The Prometheus text format's media type.
const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Metrics of this process in the Prometheus text format
///
/// Each API and worker process serves its own (scrape them all); the `agentdesk_tickets` gauge
/// is read from the database at each scrape.
#[utoipa::path(get, path = "/metrics", tag = "health",
    responses(
        (status = 200, description = "The Prometheus text format (version 0.0.4)", body = String, content_type = "text/plain"),
        (status = 401, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn metrics(State(state): State<AppState>) -> ApiResult<Response> {
    scrape(&state.pool).await
}

async fn scrape(pool: &PgPool) -> ApiResult<Response> {
    let counts = db::tickets::count_by_status(pool).await?;
    let (enabled, paused) = db::schedules::count(pool).await?;
    let mut text = metric::render();
    // Written here rather than through the process's recorder: they belong to this service's
    // database and pool, and a process may run several services (the tests do).
    let size = pool.size();
    let idle = pool.num_idle() as u32;
    let connections = [
        ("idle", idle),
        ("in_use", size.saturating_sub(idle)),
        ("max", pool.options().get_max_connections()),
    ];
    let tickets = (
        metric::TICKETS,
        "Tickets by project and status, read from the database when scraped",
    );
    // By the bounded `project` label: the projects past its limit are summed into `_other`.
    let mut by_label: std::collections::BTreeMap<(String, &'static str), i64> = Default::default();
    for (project, status, n) in counts {
        *by_label.entry((metric::project_label(project.0), status)).or_default() += n;
    }
    let counts = by_label.iter().map(|((p, s), n)| (p.as_str(), *s, *n));
    metric::write_project_gauge(&mut text, tickets, "status", counts);
    let schedules = (
        metric::SCHEDULES,
        "Schedules by state (enabled, paused), read from the database when scraped",
    );
    metric::write_gauge(
        &mut text,
        schedules,
        "state",
        [("enabled", enabled), ("paused", paused)],
    );
    let pool_gauge = (
        metric::DB_POOL,
        "Database pool connections by state (idle, in_use, max)",
    );
    metric::write_gauge(
        &mut text,
        pool_gauge,
        "state",
        connections.map(|(s, n)| (s, i64::from(n))),
    );
    Ok(([(header::CONTENT_TYPE, TEXT_FORMAT)], text).into_response())
}

/// `GET /metrics` alone, with the API's tokens, for `AGENTDESK_METRICS_ADDR` (a worker process
/// has no API to serve it on).
pub fn standalone(pool: PgPool, tokens: Vec<String>) -> Router {
    let tokens: Arc<[String]> = tokens.into();
    let handler = move |req: Request| {
        let (pool, tokens) = (pool.clone(), tokens.clone());
        async move {
            if let Err(refused) = super::auth::check(&req, &tokens) {
                return refused.into_response();
            }
            scrape(&pool).await.into_response()
        }
    };
    Router::new().route("/metrics", get(handler)).fallback(|| async {
        ApiError::NotFound(
            "no such endpoint: this address serves /metrics (a worker's also /healthz and /readyz)".into(),
        )
    })
}

/// Counts the request under its route template (`/v1/tickets/{ticket}`, never the path: ids
/// would make a series per ticket), and with tracing on, runs it inside a server span that
/// continues the caller's `traceparent`.
pub async fn observe(req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = req.method().clone();
    let route = req.extensions().get::<MatchedPath>().map(|p| p.as_str().to_owned());
    let span = if trace::enabled() {
        let header = |name| req.headers().get(name).and_then(|v| v.to_str().ok());
        trace::http_server_span(
            method.as_str(),
            route.as_deref(),
            req.uri().path(),
            header("traceparent"),
            header("tracestate"),
        )
    } else {
        None
    };
    let response = match &span {
        Some(span) => next.run(req).with_context(span.cx.clone()).await,
        None => next.run(req).await,
    };
    let status = response.status().as_u16();
    if let Some(span) = span {
        span.end(status);
    }
    let route = route.unwrap_or_else(|| metric::UNMATCHED_ROUTE.to_owned());
    metric::http_request(method.as_str(), route, status, started.elapsed());
    response
}
