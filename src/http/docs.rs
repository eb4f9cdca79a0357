//! The API reference at `/docs`: Redoc (a standalone bundle, see `docs/README.md`) compiled into
//! the binary like the board, rendering `/openapi.json`; nothing is loaded from elsewhere, so the
//! page works on a machine without internet.

use std::sync::LazyLock;

use axum::response::Response;
use axum::routing::get;
use axum::Router;

use super::AppState;

const INDEX: &str = include_str!("docs/index.html");
const REDOC: &str = include_str!("docs/redoc.standalone.js");
/// The one thing the bundle loads from elsewhere: the logo beside its "API docs by Redocly" link,
/// which it shows unconditionally. The desk's icon stands in.
const REDOC_LOGO: &str = "https://cdn.redoc.ly/redoc/logo-mini.svg";
static REDOC_SERVED: LazyLock<String> = LazyLock::new(|| REDOC.replacen(REDOC_LOGO, "/board/icon.svg", 1));
const REDOC_LICENSES: &str = include_str!("docs/redoc.standalone.js.LICENSE.txt");

/// Everything from this origin. Redoc styles itself with `<style>` elements it writes (hence
/// 'unsafe-inline' for styles only) and runs its search index in a worker made from a blob.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
                   img-src 'self' data:; font-src 'self' data:; connect-src 'self'; worker-src blob:; \
                   form-action 'none'; frame-ancestors 'none'; base-uri 'none'";

fn page(content_type: &'static str, body: &'static str) -> Response {
    super::board::compiled_in(content_type, body, CSP)
}

/// `GET /docs` and its script; no token needed, like `/openapi.json` that the page reads.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/docs", get(|| async { page("text/html; charset=utf-8", INDEX) }))
        .route(
            "/docs/redoc.standalone.js",
            get(|| async { page("text/javascript; charset=utf-8", REDOC_SERVED.as_str()) }),
        )
        .route(
            "/docs/redoc.standalone.js.LICENSE.txt",
            get(|| async { page("text/plain; charset=utf-8", REDOC_LICENSES) }),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_served_bundle_loads_no_logo_from_elsewhere() {
        assert!(
            REDOC.contains(REDOC_LOGO),
            "the bundle's logo moved: see what it loads now"
        );
        assert!(!REDOC_SERVED.contains("cdn.redoc.ly"));
    }
}
