//! `/v1/providers`: named model providers (local servers, gateways, more hosted accounts) beside
//! the built-in `openai` and `anthropic`, which come from the environment and are read-only here.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::error::{ApiError, ApiResult, ErrorBody};
use super::extract::{ApiJson, ApiPath, ApiQuery};
use super::pagination::{page_of_names, NamePageQuery};
use super::AppState;
use crate::db;
use crate::domain::agent::is_valid_agent_name;
use crate::domain::provider::{
    ProviderKind, BUILTIN_PROVIDERS, DEFAULT_PROVIDER_TIMEOUT_MS, MAX_PROVIDER_CONCURRENCY, MAX_PROVIDER_TIMEOUT_MS,
    MIN_PROVIDER_TIMEOUT_MS,
};
use crate::domain::{ProjectId, ProviderDef};
use crate::llm::{anthropic, openai, Providers};

#[derive(Deserialize, ToSchema)]
pub struct PutProvider {
    pub kind: ProviderKind,
    #[schema(schema_with = super::formats::provider_base_url)]
    pub base_url: String,
    /// Usually a template, `${env:NAME}`, replaced from the service's environment when a request
    /// is sent; stored and shown as given. Null or omitted: no key is sent.
    #[schema(example = "${env:LOCAL_KEY}")]
    pub api_key: Option<String>,
    /// Extra request headers; values may hold `${env:NAME}` templates.
    #[serde(default)]
    #[schema(schema_with = super::formats::header_map)]
    pub headers: BTreeMap<String, String>,
    /// Overall limit of one model request: 1000 to 3600000 ms, default 600000.
    #[schema(minimum = 1000, maximum = 3600000)]
    pub timeout_ms: Option<i64>,
    /// Model requests in flight to this provider at most, across every process (1 to 1024);
    /// more wait their turn in order of arrival. Null or omitted: no limit. Local servers that
    /// serve one request at a time (llama-cpp-python) need 1.
    #[schema(minimum = 1, maximum = 1024)]
    pub max_concurrent: Option<i64>,
}

#[derive(Serialize, ToSchema)]
pub struct ProviderList {
    pub items: Vec<ProviderDef>,
    /// Always null: every provider is in `items`.
    pub next_cursor: Option<String>,
}

/// The wire format (`openai` or `anthropic`) of the provider `name` names in `project`: a
/// built-in one, or one defined there; 422 naming the rule otherwise. What an agent and a replay
/// may name.
pub async fn provider_kind(state: &AppState, project: ProjectId, name: &str) -> ApiResult<String> {
    if BUILTIN_PROVIDERS.contains(&name) {
        return Ok(name.to_owned());
    }
    match db::providers::get(&state.pool, project, name).await? {
        Some(def) => Ok(def.kind.as_str().to_owned()),
        None => Err(ApiError::Validation(format!(
            "unknown provider {name:?}: use openai, anthropic or a provider defined with PUT /v1/providers/{{name}}"
        ))),
    }
}

fn validation(message: String) -> ApiError {
    ApiError::Validation(message)
}

fn builtin_refused(name: &str) -> ApiError {
    ApiError::Conflict(format!(
        "provider {name:?} is built in and configured from the environment ({}_API_KEY, {}_BASE_URL); \
         define another name",
        name.to_ascii_uppercase(),
        name.to_ascii_uppercase()
    ))
}

/// A built-in provider as the environment configures it; its key shown as the variable it reads.
fn builtin(providers: &Providers, name: &str) -> ProviderDef {
    let env = name.to_ascii_uppercase();
    let (base_url, has_key, configured) = match providers.builtin(name) {
        Some((url, key)) => (url.to_owned(), key, true),
        None if name == "anthropic" => (anthropic::DEFAULT_BASE_URL.to_owned(), false, false),
        None => (openai::DEFAULT_BASE_URL.to_owned(), false, false),
    };
    ProviderDef {
        name: name.to_owned(),
        kind: ProviderKind::parse(name).unwrap_or(ProviderKind::Openai),
        base_url,
        api_key: has_key.then(|| format!("${{env:{env}_API_KEY}}")),
        headers: BTreeMap::new(),
        timeout_ms: None,
        max_concurrent: providers.builtin_max_concurrent(name).map(i64::from),
        builtin: true,
        configured,
        created_at: None,
        updated_at: None,
    }
}

fn validate(name: &str, req: PutProvider) -> ApiResult<ProviderDef> {
    if !is_valid_agent_name(name) {
        return Err(validation(format!(
            "invalid provider name {name:?}: use 1 to 64 letters, digits, '-', '_' or '.'"
        )));
    }
    super::formats::check_url_length(req.base_url.trim()).map_err(validation)?;
    let url = reqwest::Url::parse(req.base_url.trim())
        .map_err(|e| validation(format!("base_url {:?} is not a URL: {e}", req.base_url)))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none_or(str::is_empty) {
        return Err(validation(format!(
            "base_url must be an http or https URL with a host, not {:?}",
            req.base_url
        )));
    }
    let timeout_ms = req.timeout_ms.unwrap_or(DEFAULT_PROVIDER_TIMEOUT_MS);
    if !(MIN_PROVIDER_TIMEOUT_MS..=MAX_PROVIDER_TIMEOUT_MS).contains(&timeout_ms) {
        return Err(validation(format!(
            "timeout_ms must be between {MIN_PROVIDER_TIMEOUT_MS} and {MAX_PROVIDER_TIMEOUT_MS}"
        )));
    }
    if let Some(n) = req
        .max_concurrent
        .filter(|n| !(1..=MAX_PROVIDER_CONCURRENCY).contains(n))
    {
        return Err(validation(format!(
            "max_concurrent must be between 1 and {MAX_PROVIDER_CONCURRENCY}, or null for no limit, not {n}"
        )));
    }
    super::formats::check(&req.headers).map_err(validation)?;
    let api_key = req.api_key.filter(|k| !k.is_empty());
    if api_key.as_deref().is_some_and(|k| HeaderValue::from_str(k).is_err()) {
        return Err(validation("api_key must be printable text".into()));
    }
    Ok(ProviderDef {
        name: name.to_owned(),
        kind: req.kind,
        base_url: req.base_url.trim().to_owned(),
        api_key,
        headers: req.headers,
        timeout_ms: Some(timeout_ms),
        max_concurrent: req.max_concurrent,
        builtin: false,
        configured: true,
        created_at: None,
        updated_at: None,
    })
}

/// Define or replace a named provider
///
/// Takes effect with the next model request of every agent that names it, in every process.
#[utoipa::path(put, path = "/providers/{name}", tag = "providers", request_body = PutProvider,
    params(("name" = String, Path, description = "Letters, digits, '-', '_' and '.'; at most 64; not openai or anthropic",
        pattern = "^[a-zA-Z0-9._-]{1,64}$")),
    responses((status = 201, description = "Created", body = ProviderDef, headers(("AgentDesk-Warning" = String,
            description = "Present when the key or a header names a variable this process's environment does not set"))),
        (status = 200, description = "Replaced", body = ProviderDef, headers(("AgentDesk-Warning" = String,
            description = "Present when the key or a header names a variable this process's environment does not set"))),
        (status = 409, description = "A built-in provider's name", body = ErrorBody),
        (status = 422, body = ErrorBody), (status = 400, body = ErrorBody)))]
pub async fn put_provider(
    State(state): State<AppState>,
    caller: super::access::Caller,
    ApiPath(name): ApiPath<String>,
    ApiJson(req): ApiJson<PutProvider>,
) -> ApiResult<Response> {
    if BUILTIN_PROVIDERS.contains(&name.as_str()) {
        return Err(builtin_refused(&name));
    }
    let def = validate(&name, req)?;
    let (def, created) = db::providers::upsert(&state.pool, caller.project_id(), &def).await?;
    let status = if created { StatusCode::CREATED } else { StatusCode::OK };
    let warning = unset_secrets(&def).map(|w| [(crate::http::routable::WARNING, w)]);
    Ok((status, warning, Json(def)).into_response())
}

/// What to say of a provider whose key or headers name variables this process does not set: its
/// requests would go out with an empty secret. (A worker in another process may have them.)
pub fn unset_secrets(def: &ProviderDef) -> Option<String> {
    let templates = def.api_key.iter().chain(def.headers.values()).map(String::as_str);
    let unset = crate::net::secrets::unset_env_vars(templates);
    (!unset.is_empty()).then(|| {
        format!(
            "provider {:?} names {} that this process's environment does not set: its requests go out \
             with an empty value unless the processes that run agents set it",
            def.name,
            unset
                .iter()
                .map(|n| format!("${{env:{n}}}"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    })
}

/// Get a provider
#[utoipa::path(get, path = "/providers/{name}", tag = "providers",
    params(("name" = String, Path)),
    responses((status = 200, body = ProviderDef), (status = 404, body = ErrorBody)))]
pub async fn get_provider(
    State(state): State<AppState>,
    caller: super::access::Caller,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<Json<ProviderDef>> {
    if BUILTIN_PROVIDERS.contains(&name.as_str()) {
        return Ok(Json(builtin(&state.providers, &name)));
    }
    db::providers::get(&state.pool, caller.project_id(), &name)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::NotFound(format!("no provider {name:?}")))
}

/// List providers: the built-in ones, then the defined ones by name
#[utoipa::path(get, path = "/providers", tag = "providers", params(NamePageQuery),
    responses((status = 200, body = ProviderList), (status = 400, body = ErrorBody)))]
pub async fn list_providers(
    State(state): State<AppState>,
    caller: super::access::Caller,
    ApiQuery(q): ApiQuery<NamePageQuery>,
) -> ApiResult<Json<ProviderList>> {
    let mut all: Vec<ProviderDef> = BUILTIN_PROVIDERS
        .iter()
        .map(|name| builtin(&state.providers, name))
        .collect();
    all.extend(db::providers::all(&state.pool, caller.project_id()).await?);
    let builtin_first = |name: &str| {
        BUILTIN_PROVIDERS
            .iter()
            .position(|b| *b == name)
            .unwrap_or(BUILTIN_PROVIDERS.len())
    };
    let (items, next_cursor) = page_of_names(&q, all, |p| &p.name, builtin_first)?;
    Ok(Json(ProviderList { items, next_cursor }))
}

/// Delete a named provider
#[utoipa::path(delete, path = "/providers/{name}", tag = "providers",
    params(("name" = String, Path)),
    responses((status = 204, description = "Deleted"), (status = 404, body = ErrorBody),
        (status = 409, description = "A built-in provider, or one that agents use", body = ErrorBody)))]
pub async fn delete_provider(
    State(state): State<AppState>,
    caller: super::access::Caller,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<StatusCode> {
    if BUILTIN_PROVIDERS.contains(&name.as_str()) {
        return Err(builtin_refused(&name));
    }
    let users = db::agents::using_provider(&state.pool, caller.project_id(), &name).await?;
    if !users.is_empty() {
        return Err(ApiError::Conflict(format!(
            "provider {name:?} is used by agents {}: change their provider first",
            users.join(", ")
        )));
    }
    if db::providers::delete(&state.pool, caller.project_id(), &name).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!("no provider {name:?}")))
    }
}
