//! A2A's HTTP+JSON binding under `/a2a`: `message:send`, `message:stream`, `tasks`,
//! `tasks/{id}`, `tasks/{id}:cancel` and `tasks/{id}:subscribe` (GET or POST).

use std::convert::Infallible;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use futures::StreamExt;
use serde_json::{Map, Value};

use super::wire::{ListTasksRequest, SendMessageRequest, SendMessageResponse, TaskIdRequest};
use super::{A2aError, StreamItem};
use crate::http::error::ApiError;
use crate::http::AppState;

/// A request body: JSON of `T` (any content type: clients send `application/json` or
/// `application/a2a+json`).
fn body<T: serde::de::DeserializeOwned>(bytes: &Bytes) -> Result<T, A2aError> {
    let value: Value =
        serde_json::from_slice(bytes).map_err(|err| A2aError::Parse(format!("the body is not JSON: {err}")))?;
    serde_json::from_value(value).map_err(|err| A2aError::InvalidParams(err.to_string()))
}

/// The query string as a JSON object of strings, read as `T`.
fn query<T: serde::de::DeserializeOwned>(raw: Option<&str>) -> Result<T, A2aError> {
    let map: Map<String, Value> = url::form_urlencoded::parse(raw.unwrap_or("").as_bytes())
        .filter(|(name, _)| !name.eq_ignore_ascii_case("A2A-Version"))
        .map(|(name, value)| (name.into_owned(), Value::String(value.into_owned())))
        .collect();
    serde_json::from_value(Value::Object(map)).map_err(|err| A2aError::InvalidParams(err.to_string()))
}

/// The `{id}` of a task's path. One that cannot be read (not UTF-8) names no task: 404, as on
/// `/v1`.
fn task_in(path: Result<Path<String>, PathRejection>) -> Result<String, A2aError> {
    path.map(|Path(task)| task)
        .map_err(|_| A2aError::TaskNotFound("no such task: the path is not UTF-8".into()))
}

fn sse<S>(items: S) -> Response
where
    S: futures::Stream<Item = StreamItem> + Send + 'static,
{
    let frames = items.map(|item| {
        Ok::<_, Infallible>(match item {
            StreamItem::Event(event) => {
                let json = serde_json::to_string(&*event).unwrap_or_default();
                Bytes::from(format!("data: {json}\n\n"))
            }
            StreamItem::KeepAlive => Bytes::from_static(b": ping\n\n"),
        })
    });
    crate::http::events::sse_response(frames)
}

fn answer<T: serde::Serialize>(result: Result<T, A2aError>) -> Response {
    match result {
        Ok(value) => Json(value).into_response(),
        Err(err) => err.into_response(),
    }
}

/// `POST /a2a/message:send`
pub async fn send(State(state): State<AppState>, headers: HeaderMap, RawQuery(q): RawQuery, bytes: Bytes) -> Response {
    answer(
        async {
            let caller = super::require(&headers, &state, true).await?;
            super::check_version(&headers, q.as_deref())?;
            let request: SendMessageRequest = body(&bytes)?;
            let task = super::send_message(&state, &caller, request).await?;
            Ok(SendMessageResponse { task })
        }
        .await,
    )
}

/// `POST /a2a/message:stream`
pub async fn stream(
    State(state): State<AppState>,
    headers: HeaderMap,
    RawQuery(q): RawQuery,
    bytes: Bytes,
) -> Response {
    let started = async {
        let caller = super::require(&headers, &state, true).await?;
        super::check_version(&headers, q.as_deref())?;
        let request: SendMessageRequest = body(&bytes)?;
        super::stream_message(&state, &caller, request).await
    }
    .await;
    match started {
        Ok(items) => sse(items),
        Err(err) => err.into_response(),
    }
}

/// `GET /a2a/tasks`
pub async fn list(State(state): State<AppState>, headers: HeaderMap, RawQuery(q): RawQuery) -> Response {
    answer(
        async {
            let caller = super::require(&headers, &state, false).await?;
            super::check_version(&headers, q.as_deref())?;
            let request: ListTasksRequest = query(q.as_deref())?;
            super::list_tasks(&state, &caller, request).await
        }
        .await,
    )
}

/// `GET /a2a/tasks/{id}` and `GET /a2a/tasks/{id}:subscribe`
pub async fn get_task_or_subscribe(
    State(state): State<AppState>,
    headers: HeaderMap,
    task: Result<Path<String>, PathRejection>,
    RawQuery(q): RawQuery,
) -> Response {
    get_or_subscribe(&state, &headers, task_in(task), q.as_deref()).await
}

async fn get_or_subscribe(
    state: &AppState,
    headers: &HeaderMap,
    task: Result<String, A2aError>,
    q: Option<&str>,
) -> Response {
    let task = match task {
        Ok(task) => task,
        Err(not_found) => return not_found.into_response(),
    };
    if let Some(id) = task.strip_suffix(":subscribe") {
        return subscribe(state, headers, q, id).await;
    }
    answer(
        async {
            let caller = super::require(headers, state, false).await?;
            super::check_version(headers, q)?;
            let request: TaskIdRequest = query(q)?;
            super::get_task(state, &caller, &task, request.history_length).await
        }
        .await,
    )
}

/// `POST /a2a/tasks/{id}:cancel` and `POST /a2a/tasks/{id}:subscribe`. The body (a cancel's
/// `{"id"}`, or nothing) is read, though the path says all: a response sent before the body is
/// read closes the connection, which a client may already be reusing for its next request.
pub async fn task_action(
    State(state): State<AppState>,
    headers: HeaderMap,
    task: Result<Path<String>, PathRejection>,
    RawQuery(q): RawQuery,
    _body: Bytes,
) -> Response {
    act_on_task(&state, &headers, task_in(task), q.as_deref()).await
}

async fn act_on_task(
    state: &AppState,
    headers: &HeaderMap,
    task: Result<String, A2aError>,
    q: Option<&str>,
) -> Response {
    let task = match task {
        Ok(task) => task,
        Err(not_found) => return not_found.into_response(),
    };
    if let Some(id) = task.strip_suffix(":subscribe") {
        return subscribe(state, headers, q, id).await;
    }
    answer(
        async {
            let Some(id) = task.strip_suffix(":cancel") else {
                return Err(A2aError::MethodNotFound(format!(
                    "POST /a2a/tasks/{task} is not an operation: use {task}:cancel or {task}:subscribe"
                )));
            };
            let caller = super::require(headers, state, true).await?;
            super::check_version(headers, q)?;
            super::cancel_task(state, &caller, id).await
        }
        .await,
    )
}

async fn subscribe(state: &AppState, headers: &HeaderMap, q: Option<&str>, id: &str) -> Response {
    let started = async {
        let caller = super::require(headers, state, false).await?;
        super::check_version(headers, q)?;
        super::subscribe(state, &caller, id).await
    }
    .await;
    match started {
        Ok(items) => sse(items),
        Err(err) => err.into_response(),
    }
}

/// The routes under a tenant, `/a2a/{tenant}/…`: the agent card's interfaces carry the project's
/// name as `tenant`, and clients put it in the path. It names the project as the
/// `AgentDesk-Project` header does (a project token naming another project is refused the same).
fn in_tenant(tenant: &str, mut headers: HeaderMap) -> Result<HeaderMap, A2aError> {
    let value = axum::http::HeaderValue::from_str(tenant)
        .map_err(|_| A2aError::from(ApiError::NotFound(format!("no project {tenant:?}"))))?;
    headers.insert(crate::http::access::PROJECT_HEADER, value);
    Ok(headers)
}

/// A tenant path that cannot be read (not UTF-8) names no project.
fn no_tenant() -> Response {
    A2aError::from(ApiError::NotFound("no such project: the path is not UTF-8".into())).into_response()
}

/// `POST /a2a/{tenant}/message:send`
pub async fn send_in(
    state: State<AppState>,
    tenant: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    q: RawQuery,
    bytes: Bytes,
) -> Response {
    let Ok(Path(tenant)) = tenant else { return no_tenant() };
    match in_tenant(&tenant, headers) {
        Ok(headers) => send(state, headers, q, bytes).await,
        Err(refused) => refused.into_response(),
    }
}

/// `POST /a2a/{tenant}/message:stream`
pub async fn stream_in(
    state: State<AppState>,
    tenant: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    q: RawQuery,
    bytes: Bytes,
) -> Response {
    let Ok(Path(tenant)) = tenant else { return no_tenant() };
    match in_tenant(&tenant, headers) {
        Ok(headers) => stream(state, headers, q, bytes).await,
        Err(refused) => refused.into_response(),
    }
}

/// `GET /a2a/{tenant}/tasks`
pub async fn list_in(
    state: State<AppState>,
    tenant: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    q: RawQuery,
) -> Response {
    let Ok(Path(tenant)) = tenant else { return no_tenant() };
    match in_tenant(&tenant, headers) {
        Ok(headers) => list(state, headers, q).await,
        Err(refused) => refused.into_response(),
    }
}

/// `GET /a2a/{tenant}/tasks/{id}` (and `…:subscribe`)
pub async fn get_task_or_subscribe_in(
    State(state): State<AppState>,
    path: Result<Path<(String, String)>, PathRejection>,
    headers: HeaderMap,
    RawQuery(q): RawQuery,
) -> Response {
    let Ok(Path((tenant, task))) = path else {
        return no_tenant();
    };
    match in_tenant(&tenant, headers) {
        Ok(headers) => get_or_subscribe(&state, &headers, Ok(task), q.as_deref()).await,
        Err(refused) => refused.into_response(),
    }
}

/// `POST /a2a/{tenant}/tasks/{id}:cancel` (and `…:subscribe`)
pub async fn task_action_in(
    State(state): State<AppState>,
    path: Result<Path<(String, String)>, PathRejection>,
    headers: HeaderMap,
    RawQuery(q): RawQuery,
    _body: Bytes,
) -> Response {
    let Ok(Path((tenant, task))) = path else {
        return no_tenant();
    };
    match in_tenant(&tenant, headers) {
        Ok(headers) => act_on_task(&state, &headers, Ok(task), q.as_deref()).await,
        Err(refused) => refused.into_response(),
    }
}
