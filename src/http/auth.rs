//! Bearer tokens for `/v1/*`, each with a scope: a token configured as `read:TOKEN` may only read.

use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::error::ApiError;
use super::AppState;

/// The prefix of a configured token that may only read.
pub const READ_SCOPE_PREFIX: &str = "read:";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// `GET` (and `HEAD`) requests, event streams included.
    Read,
    /// Everything.
    Full,
}

/// The scope of the presented token, or None when it is none of the configured ones. Compares
/// digests in constant time, and every configured token every time, so neither content, length
/// nor position leaks through timing.
pub(super) fn token_scope(presented: &str, tokens: &[String]) -> Option<Scope> {
    let presented = Sha256::digest(presented.as_bytes());
    let (mut full, mut read) = (false, false);
    for configured in tokens {
        let (scope, token) = match configured.strip_prefix(READ_SCOPE_PREFIX) {
            Some(token) => (Scope::Read, token),
            None => (Scope::Full, configured.as_str()),
        };
        let same = bool::from(Sha256::digest(token.as_bytes()).ct_eq(&presented));
        match scope {
            Scope::Full => full |= same,
            Scope::Read => read |= same,
        }
    }
    if full {
        Some(Scope::Full)
    } else if read {
        Some(Scope::Read)
    } else {
        None
    }
}

/// Whether a request only reads: `GET`/`HEAD` (event streams are `GET`s).
fn reads_only(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD)
}

pub async fn require_token(State(state): State<AppState>, req: Request, next: Next) -> Response {
    match check(&req, &state.config.api_tokens) {
        Ok(()) => next.run(req).await,
        Err(refused) => refused.into_response(),
    }
}

/// Whether the request may pass: no tokens are configured, or it presents one whose scope allows
/// its method. The same rule for `/v1/*` and every `/metrics` listener.
pub(super) fn check(req: &Request, tokens: &[String]) -> Result<(), ApiError> {
    match caller_scope(req.headers(), tokens)? {
        Scope::Full => Ok(()),
        Scope::Read if reads_only(req.method()) => Ok(()),
        Scope::Read => Err(ApiError::Forbidden(
            "this token may only read (GET requests and event streams)".into(),
        )),
    }
}

/// The request's bearer token, if it presents one.
pub(super) fn bearer(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim)
}

/// The scope of the request's desk token: `Full` when no tokens are configured, 401 when it
/// presents none of them (`/metrics`; the API's own requests go through `access::admit`).
fn caller_scope(headers: &axum::http::HeaderMap, tokens: &[String]) -> Result<Scope, ApiError> {
    if tokens.is_empty() {
        return Ok(Scope::Full);
    }
    bearer(headers)
        .and_then(|token| token_scope(token, tokens))
        .ok_or(ApiError::Unauthorized)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_configured_tokens_match_with_their_scope() {
        let tokens = vec!["alpha".to_owned(), "read:beta".to_owned()];
        assert_eq!(token_scope("alpha", &tokens), Some(Scope::Full));
        assert_eq!(token_scope("beta", &tokens), Some(Scope::Read));
        assert_eq!(token_scope("read:beta", &tokens), None);
        assert_eq!(token_scope("bet", &tokens), None);
        assert_eq!(token_scope("", &tokens), None);
    }
}
