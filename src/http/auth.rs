//! Bearer tokens for `/v1/*`.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::error::ApiError;
use super::AppState;

/// Compares digests in constant time, so neither content nor length leaks through timing.
pub(super) fn token_matches(presented: &str, tokens: &[String]) -> bool {
    let presented = Sha256::digest(presented.as_bytes());
    tokens.iter().fold(false, |found, t| {
        found | bool::from(Sha256::digest(t.as_bytes()).ct_eq(&presented))
    })
}

pub async fn require_token(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if authorized(&req, &state.config.api_tokens) {
        next.run(req).await
    } else {
        ApiError::Unauthorized.into_response()
    }
}

/// Whether the request may pass: no tokens are configured, or it presents one of them.
pub(super) fn authorized(req: &Request, tokens: &[String]) -> bool {
    if tokens.is_empty() {
        return true;
    }
    let presented = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim);
    presented.is_some_and(|token| token_matches(token, tokens))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_configured_tokens_match() {
        let tokens = vec!["alpha".to_owned(), "beta".to_owned()];
        assert!(token_matches("beta", &tokens));
        assert!(!token_matches("bet", &tokens));
        assert!(!token_matches("", &tokens));
    }
}
