//! The board: a web page over the API, served at `/` from assets compiled into the binary (plain
//! HTML, CSS and JavaScript modules; no build step, nothing loaded from elsewhere).

use axum::extract::Path;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use super::error::ApiError;
use super::AppState;

/// Each asset: its name under `/board/`, its content type and its text.
const ASSETS: &[(&str, &str, &str)] = &[
    (
        "errors.js",
        "text/javascript; charset=utf-8",
        include_str!("board/errors.js"),
    ),
    ("app.js", "text/javascript; charset=utf-8", include_str!("board/app.js")),
    ("api.js", "text/javascript; charset=utf-8", include_str!("board/api.js")),
    (
        "columns.js",
        "text/javascript; charset=utf-8",
        include_str!("board/columns.js"),
    ),
    (
        "ticket.js",
        "text/javascript; charset=utf-8",
        include_str!("board/ticket.js"),
    ),
    (
        "agents.js",
        "text/javascript; charset=utf-8",
        include_str!("board/agents.js"),
    ),
    (
        "schedules.js",
        "text/javascript; charset=utf-8",
        include_str!("board/schedules.js"),
    ),
    (
        "experiments.js",
        "text/javascript; charset=utf-8",
        include_str!("board/experiments.js"),
    ),
    ("dom.js", "text/javascript; charset=utf-8", include_str!("board/dom.js")),
    ("style.css", "text/css; charset=utf-8", include_str!("board/style.css")),
    ("icon.svg", "image/svg+xml", include_str!("board/icon.svg")),
];

const INDEX: &str = include_str!("board/index.html");

/// Everything the page loads comes from this origin; the API is called with `fetch` only.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'";

fn page(content_type: &'static str, body: &'static str) -> Response {
    compiled_in(content_type, body, CSP)
}

/// A file compiled into the binary (the board's, the API reference's), served under `csp`.
pub(super) fn compiled_in(content_type: &'static str, body: &'static str, csp: &'static str) -> Response {
    let mut response = body.into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    // The assets change with the binary: revalidate rather than run a stale page against a newer API.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(csp));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}

async fn index() -> Response {
    page("text/html; charset=utf-8", INDEX)
}

async fn asset(Path(name): Path<String>) -> Response {
    match ASSETS.iter().find(|(n, _, _)| *n == name) {
        Some((_, content_type, body)) => page(content_type, body),
        None => ApiError::NotFound("no such file".into()).into_response(),
    }
}

/// `GET /` and `GET /board/{file}`; no token needed (the page asks for one and sends it to `/v1`).
pub fn routes() -> Router<AppState> {
    Router::new().route("/", get(index)).route("/board/{file}", get(asset))
}
