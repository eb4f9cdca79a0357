//! Who is asking, in which project, and what they may do: desk tokens (`AGENTDESK_API_TOKENS`)
//! act in the project the `AgentDesk-Project` header names, project tokens (`adk_…`) in their
//! own. Every `/v1` handler reads its project from the [`Caller`] this puts on the request, so no
//! handler can act outside it; `/mcp` and `/a2a` resolve theirs the same way.
//!
//! Project tokens are kept as SHA-256 hashes; a lookup is cached for at most
//! [`GRANT_TTL`], so a revoked token is refused by every process within that time. When a token
//! was last used is batched: one UPDATE for all tokens used every [`TOUCH_INTERVAL`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::auth::{bearer, token_scope, Scope};
use super::error::ApiError;
use super::AppState;
use crate::db;
use crate::domain::project::{Project, ProjectId, RateLimit, TokenScope, DEFAULT_PROJECT};

/// The header a desk token names its project with.
pub const PROJECT_HEADER: &str = "agentdesk-project";
/// How a project token starts.
pub const TOKEN_PREFIX: &str = "adk_";
/// The longest a token lookup or a project's settings are reused before being read again.
pub const GRANT_TTL: Duration = Duration::from_secs(1);
const TOUCH_INTERVAL: Duration = Duration::from_secs(5);

/// What the request's token is.
#[derive(Clone, Debug)]
pub enum Credential {
    /// A desk token (or no token on a desk without tokens); `read_only` for `read:` ones.
    Desk { read_only: bool },
    /// A project token of the project the caller acts in.
    Project {
        id: Uuid,
        scopes: Vec<TokenScope>,
        rate_limit: Option<RateLimit>,
    },
}

/// The request's project and token, put on every `/v1` request by [`admit`].
#[derive(Clone, Debug)]
pub struct Caller {
    pub project: Arc<Project>,
    pub credential: Credential,
}

/// What a request needs to be allowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    Read,
    Write,
    Approve,
    Admin,
    /// Managing projects and prices: desk tokens only.
    Desk,
}

impl Caller {
    pub fn project_id(&self) -> ProjectId {
        self.project.id
    }

    pub fn may(&self, need: Need) -> bool {
        match &self.credential {
            Credential::Desk { read_only } => !read_only || need == Need::Read,
            Credential::Project { scopes, .. } => {
                let has = |s: TokenScope| scopes.contains(&s) || scopes.contains(&TokenScope::Admin);
                match need {
                    Need::Read => !scopes.is_empty(),
                    Need::Write => has(TokenScope::Write),
                    Need::Approve => has(TokenScope::Approve),
                    Need::Admin => has(TokenScope::Admin),
                    Need::Desk => false,
                }
            }
        }
    }

    pub fn is_desk(&self) -> bool {
        matches!(self.credential, Credential::Desk { .. })
    }

    /// Whether it may act in `project` (a path naming one): a desk token in any, a project token
    /// in its own. Another project is 404 to a project token, never 403, so its existence is
    /// not revealed.
    pub fn sees(&self, project: &Project) -> bool {
        self.is_desk() || self.project.id == project.id
    }

    /// As `/mcp` and A2A ask: may it write (create, comment, cancel)?
    pub fn scope(&self) -> Scope {
        if self.may(Need::Write) {
            Scope::Full
        } else {
            Scope::Read
        }
    }
}

/// The handlers' view of the caller: taken from the request, where [`admit`] put it.
impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Caller, ApiError> {
        parts.extensions.get::<Caller>().cloned().ok_or(ApiError::Internal)
    }
}

/// What `/v1` route a request needs, by method and path.
pub fn need(method: &Method, path: &str) -> Need {
    let path = in_v1(path);
    let reads = matches!(*method, Method::GET | Method::HEAD);
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    match segments.as_slice() {
        ["projects", _, "tokens", ..] => Need::Admin,
        ["projects", _, "usage"] => Need::Read,
        ["projects", ..] | ["prices", ..] if !reads => Need::Desk,
        _ if reads => Need::Read,
        ["tickets", _, "approvals", ..] | ["tickets", _, "questions", ..] => Need::Approve,
        ["tickets", ..] | ["experiments", ..] => Need::Write,
        _ => Need::Admin,
    }
}

/// What was read of the database, and when (None: it did not exist then); an entry is used for
/// `GRANT_TTL`, and the whole map is dropped rather than grow past `MAX_CACHED`.
struct Cache<K, V>(Mutex<HashMap<K, (Instant, Option<V>)>>);

const MAX_CACHED: usize = 10_000;

impl<K: std::hash::Hash + Eq, V: Clone> Cache<K, V> {
    fn new() -> Cache<K, V> {
        Cache(Mutex::default())
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<K, (Instant, Option<V>)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What was read less than `GRANT_TTL` ago, if anything.
    fn fresh<Q: std::hash::Hash + Eq + ?Sized>(&self, key: &Q) -> Option<Option<V>>
    where
        K: std::borrow::Borrow<Q>,
    {
        let entries = self.entries();
        let (at, value) = entries.get(key)?;
        (at.elapsed() < GRANT_TTL).then(|| value.clone())
    }

    fn keep(&self, key: K, value: Option<V>) {
        let mut entries = self.entries();
        if entries.len() > MAX_CACHED {
            entries.clear();
        }
        entries.insert(key, (Instant::now(), value));
    }

    fn clear(&self) {
        self.entries().clear();
    }
}

/// The desk's tokens and projects, as requests are checked against them.
pub struct Access {
    pool: PgPool,
    desk_tokens: Vec<String>,
    grants: Cache<[u8; 32], db::projects::TokenGrant>,
    projects: Cache<String, Arc<Project>>,
    projects_by_id: Cache<ProjectId, Arc<Project>>,
    used: Mutex<HashMap<Uuid, DateTime<Utc>>>,
}

impl Access {
    pub fn start(pool: PgPool, desk_tokens: Vec<String>, shutdown: CancellationToken) -> Arc<Access> {
        let access = Arc::new(Access {
            pool,
            desk_tokens,
            grants: Cache::new(),
            projects: Cache::new(),
            projects_by_id: Cache::new(),
            used: Mutex::default(),
        });
        tokio::spawn(touch_tokens(access.clone(), shutdown));
        access
    }

    /// Forgets what it read of projects (after a change here: other processes re-read theirs
    /// within `GRANT_TTL`).
    pub fn projects_changed(&self) {
        self.projects.clear();
        self.projects_by_id.clear();
    }

    /// Forgets a token (revoked here: refused at once in this process).
    pub fn tokens_changed(&self) {
        self.grants.clear();
    }

    /// A project by name, read at most `GRANT_TTL` ago.
    pub async fn project(&self, name: &str) -> Result<Option<Arc<Project>>, ApiError> {
        if let Some(project) = self.projects.fresh(name) {
            return Ok(project);
        }
        let project = db::projects::find_by_name(&self.pool, name).await?.map(Arc::new);
        self.projects.keep(name.to_owned(), project.clone());
        Ok(project)
    }

    pub async fn project_by_id(&self, id: ProjectId) -> Result<Option<Arc<Project>>, ApiError> {
        if let Some(project) = self.projects_by_id.fresh(&id) {
            return Ok(project);
        }
        let project = db::projects::find_by_id(&self.pool, id).await?.map(Arc::new);
        self.projects_by_id.keep(id, project.clone());
        Ok(project)
    }

    async fn grant(&self, token: &str) -> Result<Option<db::projects::TokenGrant>, ApiError> {
        let hash: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(grant) = self.grants.fresh(&hash) {
            return Ok(grant);
        }
        // The lookup is by hash through a unique index: the secret is never compared byte by
        // byte, so its timing reveals nothing of a stored token.
        let grant = db::projects::find_token(&self.pool, &hash).await?;
        self.grants.keep(hash, grant.clone());
        Ok(grant)
    }

    /// The caller of a request with these headers: 401 for an unknown, expired or revoked token,
    /// 404 for an unknown project, 403 for a project token naming another project.
    pub async fn caller(&self, headers: &HeaderMap) -> Result<Caller, ApiError> {
        let named = headers
            .get(PROJECT_HEADER)
            .map(|v| {
                v.to_str()
                    .map(str::trim)
                    .map_err(|_| ApiError::BadRequest("the AgentDesk-Project header must be text".into()))
            })
            .transpose()?
            .filter(|v| !v.is_empty());
        let presented = bearer(headers);
        if let Some(token) = presented.filter(|t| t.starts_with(TOKEN_PREFIX)) {
            let grant = self.grant(token).await?.ok_or(ApiError::Unauthorized)?;
            if grant.expires_at.is_some_and(|at| at <= Utc::now()) {
                return Err(ApiError::Unauthorized);
            }
            let project = self.project_by_id(grant.project).await?.ok_or(ApiError::Unauthorized)?;
            if named.is_some_and(|name| name != project.name) {
                return Err(ApiError::Forbidden(
                    "a project token acts in its own project only; drop the AgentDesk-Project header or name its project".into(),
                ));
            }
            self.used
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(grant.id, Utc::now());
            return Ok(Caller {
                project,
                credential: Credential::Project {
                    id: grant.id,
                    scopes: grant.scopes,
                    rate_limit: grant.rate_limit,
                },
            });
        }
        let read_only = if self.desk_tokens.is_empty() {
            false
        } else {
            match presented.and_then(|token| token_scope(token, &self.desk_tokens)) {
                Some(Scope::Full) => false,
                Some(Scope::Read) => true,
                None => return Err(ApiError::Unauthorized),
            }
        };
        let name = named.unwrap_or(DEFAULT_PROJECT);
        let project = self
            .project(name)
            .await?
            .ok_or_else(|| ApiError::NotFound(format!("no project {name:?} (the AgentDesk-Project header)")))?;
        Ok(Caller {
            project,
            credential: Credential::Desk { read_only },
        })
    }

    /// Takes one request from the caller's token bucket and its project's, where they have one.
    /// An unlimited caller costs no database round trip. Answers the headers to add, or the 429.
    pub async fn take(&self, caller: &Caller) -> Result<Option<RateHeaders>, Response> {
        let mut tightest: Option<RateHeaders> = None;
        let token_limit = match &caller.credential {
            Credential::Project {
                id,
                rate_limit: Some(limit),
                ..
            } => Some((format!("token:{id}"), *limit)),
            _ => None,
        };
        let project_limit = caller
            .project
            .rate_limit
            .map(|limit| (format!("project:{}", caller.project.id), limit));
        for (key, limit) in token_limit.into_iter().chain(project_limit) {
            let (taken, left) = db::projects::take_from_bucket(&self.pool, &key, &limit)
                .await
                .map_err(|e| ApiError::from(e).into_response())?;
            let headers = RateHeaders::new(&limit, left);
            if !taken {
                return Err(headers.refusal());
            }
            if tightest.as_ref().is_none_or(|t| headers.remaining < t.remaining) {
                tightest = Some(headers);
            }
        }
        Ok(tightest)
    }
}

/// The `RateLimit-*` headers of one bucket.
#[derive(Clone, Debug)]
pub struct RateHeaders {
    limit: u32,
    remaining: u64,
    /// Seconds until the bucket is full again.
    reset: u64,
    /// Seconds until one request is allowed (at least 1).
    retry_after: u64,
}

impl RateHeaders {
    fn new(limit: &RateLimit, left: f64) -> RateHeaders {
        let left = left.max(0.0);
        let rate = limit.requests_per_s;
        RateHeaders {
            limit: limit.burst,
            remaining: left.floor() as u64,
            reset: ((f64::from(limit.burst) - left) / rate).ceil().max(0.0) as u64,
            retry_after: ((1.0 - left) / rate).ceil().max(1.0) as u64,
        }
    }

    pub fn apply(&self, headers: &mut HeaderMap) {
        headers.insert("ratelimit-limit", HeaderValue::from(self.limit));
        headers.insert("ratelimit-remaining", HeaderValue::from(self.remaining));
        headers.insert("ratelimit-reset", HeaderValue::from(self.reset));
    }

    fn refusal(&self) -> Response {
        let mut response = ApiError::RateLimited(format!(
            "rate limit reached ({} requests in a burst); try again in {} s",
            self.limit, self.retry_after
        ))
        .into_response();
        self.apply(response.headers_mut());
        response
            .headers_mut()
            .insert(axum::http::header::RETRY_AFTER, HeaderValue::from(self.retry_after));
        response
    }
}

/// A path as the `/v1` router sees it (without `/v1`, which nesting strips) or as sent.
fn in_v1(path: &str) -> &str {
    path.strip_prefix("/v1").unwrap_or(path)
}

/// The `/v1` gate: resolves the caller, checks what the route needs, takes from the rate
/// limits, and puts the caller on the request for the handler.
pub async fn admit(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let caller = match state.access.caller(req.headers()).await {
        Ok(caller) => caller,
        Err(refused) => return refused.into_response(),
    };
    // Another project's paths are 404 to a project token, whatever its scopes: its existence is
    // never revealed.
    if let (Credential::Project { .. }, Some(named)) = (&caller.credential, path_project(req.uri().path())) {
        if named != caller.project.name {
            return ApiError::NotFound(format!("no project {named:?}")).into_response();
        }
    }
    let need = need(req.method(), req.uri().path());
    if !caller.may(need) {
        return ApiError::Forbidden(match need {
            Need::Desk => "only a desk token may manage projects and prices".into(),
            Need::Read => "this token may not read".into(),
            _ if matches!(caller.credential, Credential::Desk { .. }) => {
                "this token may only read (GET requests and event streams)".into()
            }
            _ => format!("this token's scopes do not allow this request (it needs {need:?})").to_lowercase(),
        })
        .into_response();
    }
    run_admitted(&state, caller, req, next).await
}

/// The end of every gate (`/v1`'s and `/mcp`'s): takes from the caller's rate limits, puts the
/// caller on the request for the handler, and marks the answer with the `RateLimit-*` headers.
pub async fn run_admitted(state: &AppState, caller: Caller, mut req: Request, next: Next) -> Response {
    let limits = match state.access.take(&caller).await {
        Ok(limits) => limits,
        Err(refused) => return refused,
    };
    // Every answer names the project it acted in (the board shows a project token's project).
    let project = HeaderValue::from_str(&caller.project.name).ok();
    req.extensions_mut().insert(caller);
    let mut response = next.run(req).await;
    if let Some(limits) = limits {
        limits.apply(response.headers_mut());
    }
    if let Some(project) = project {
        response.headers_mut().insert(PROJECT_HEADER, project);
    }
    response
}

/// The project a `/v1/projects/{project}…` path names.
fn path_project(path: &str) -> Option<&str> {
    in_v1(path)
        .strip_prefix("/projects/")?
        .split('/')
        .next()
        .filter(|p| !p.is_empty())
}

/// A new project token: `adk_` and 32 random bytes, base64url without padding, and its hash.
pub fn new_token() -> (String, [u8; 32]) {
    let mut bytes = [0u8; 32];
    rand::fill(&mut bytes);
    let token = format!(
        "{TOKEN_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    );
    let hash = Sha256::digest(token.as_bytes()).into();
    (token, hash)
}

/// Writes when tokens were last used, batched: a request never waits for it.
async fn touch_tokens(access: Arc<Access>, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = tokio::time::sleep(TOUCH_INTERVAL) => {}
        }
        let used: Vec<(Uuid, DateTime<Utc>)> = access.used.lock().unwrap_or_else(|e| e.into_inner()).drain().collect();
        if !used.is_empty() {
            if let Err(e) = db::projects::touch_tokens(&access.pool, &used).await {
                tracing::warn!(error = %e, "could not record when tokens were last used");
            }
        }
        if shutdown.is_cancelled() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_projects_with_or_without_v1() {
        assert_eq!(path_project("/projects/ops/tokens"), Some("ops"));
        assert_eq!(path_project("/v1/projects/ops"), Some("ops"));
        assert_eq!(path_project("/projects"), None);
    }

    #[test]
    fn routes_need_what_the_contract_says() {
        assert_eq!(need(&Method::GET, "/v1/tickets"), Need::Read);
        assert_eq!(need(&Method::POST, "/v1/tickets"), Need::Write);
        assert_eq!(need(&Method::POST, "/v1/tickets/TICKET-1/comments"), Need::Write);
        assert_eq!(need(&Method::POST, "/v1/tickets/TICKET-1/approvals/c1"), Need::Approve);
        assert_eq!(need(&Method::PUT, "/v1/agents/a"), Need::Admin);
        assert_eq!(need(&Method::POST, "/v1/projects"), Need::Desk);
        assert_eq!(need(&Method::GET, "/v1/projects/ops"), Need::Read);
        assert_eq!(need(&Method::GET, "/v1/projects/ops/tokens"), Need::Admin);
        assert_eq!(need(&Method::GET, "/v1/projects/ops/usage"), Need::Read);
        assert_eq!(need(&Method::PUT, "/v1/prices/m"), Need::Desk);
    }

    #[test]
    fn tokens_are_long_and_url_safe() {
        let (token, hash) = new_token();
        assert!(token.starts_with(TOKEN_PREFIX) && token.len() >= 4 + 43);
        assert!(token[4..]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        assert_eq!(hash, <[u8; 32]>::from(Sha256::digest(token.as_bytes())));
    }
}
