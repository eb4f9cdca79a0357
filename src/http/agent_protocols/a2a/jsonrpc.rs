//! A2A's JSON-RPC 2.0 binding at `POST /a2a/jsonrpc`. Errors are JSON-RPC error objects sent with
//! HTTP 200, as clients expect; only a missing or read-only token is an HTTP error.

use std::convert::Infallible;

use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use futures::StreamExt;
use serde_json::{json, Value};

use super::wire::{ListTasksRequest, SendMessageRequest, SendMessageResponse, TaskIdRequest};
use super::{A2aError, StreamItem};
use crate::http::AppState;

/// Methods a read token may call.
const READING: &[&str] = &["GetTask", "ListTasks", "SubscribeToTask"];
/// Methods that answer with an event stream.
const STREAMING: &[&str] = &["SendStreamingMessage", "SubscribeToTask"];
const PUSH_CONFIG: &[&str] = &[
    "CreateTaskPushNotificationConfig",
    "GetTaskPushNotificationConfig",
    "ListTaskPushNotificationConfigs",
    "DeleteTaskPushNotificationConfig",
];

fn read_params<T: serde::de::DeserializeOwned>(params: Value) -> Result<T, A2aError> {
    let params = if params.is_null() { json!({}) } else { params };
    serde_json::from_value(params).map_err(|err| A2aError::InvalidParams(err.to_string()))
}

fn success(id: &Value, result: Value) -> Response {
    Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response()
}

fn failure(id: &Value, err: A2aError) -> Response {
    if err.is_http_level() {
        return err.into_response();
    }
    Json(json!({"jsonrpc": "2.0", "id": id, "error": err.rpc_error()})).into_response()
}

/// A stream whose every event is a JSON-RPC response carrying a `StreamResponse`.
fn sse<S>(id: Value, items: S) -> Response
where
    S: futures::Stream<Item = StreamItem> + Send + 'static,
{
    let frames = items.map(move |item| {
        Ok::<_, Infallible>(match item {
            StreamItem::Event(event) => {
                let json = json!({"jsonrpc": "2.0", "id": id, "result": &*event});
                Bytes::from(format!("data: {json}\n\n"))
            }
            StreamItem::KeepAlive => Bytes::from_static(b": ping\n\n"),
        })
    });
    crate::http::events::sse_response(frames)
}

/// Whether the client reads the answer as an event stream (`Accept: text/event-stream`).
fn wants_stream(headers: &HeaderMap) -> bool {
    headers
        .get_all(axum::http::header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|value| value.to_ascii_lowercase().contains("text/event-stream"))
}

/// A streaming method's refusal: to a client that asked for an event stream, a stream whose one
/// event is the JSON-RPC error (an SSE client reads nothing else); otherwise the plain answer.
/// A missing or read-only token stays an HTTP error.
fn stream_failure(headers: &HeaderMap, id: Value, err: A2aError) -> Response {
    if err.is_http_level() || !wants_stream(headers) {
        return failure(&id, err);
    }
    let json = json!({"jsonrpc": "2.0", "id": id, "error": err.rpc_error()});
    let frame = Bytes::from(format!("data: {json}\n\n"));
    crate::http::events::sse_response(futures::stream::once(async move { Ok::<_, Infallible>(frame) }))
}

/// A call's `(id, method, params)`, or the error to answer with.
fn envelope(bytes: &Bytes) -> Result<(Value, String, Value), (Value, A2aError)> {
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|err| (Value::Null, A2aError::Parse(format!("the body is not JSON: {err}"))))?;
    let Value::Object(mut call) = value else {
        return Err((
            Value::Null,
            A2aError::InvalidRequest("a request is one JSON-RPC 2.0 object (batches are not supported)".into()),
        ));
    };
    let id = match call.remove("id") {
        None => Value::Null,
        Some(id @ (Value::String(_) | Value::Number(_) | Value::Null)) => id,
        Some(_) => {
            return Err((
                Value::Null,
                A2aError::InvalidRequest("id must be a string, a number or null".into()),
            ))
        }
    };
    if call.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err((id, A2aError::InvalidRequest("jsonrpc must be \"2.0\"".into())));
    }
    let Some(Value::String(method)) = call.remove("method") else {
        return Err((id, A2aError::InvalidRequest("method must be a string".into())));
    };
    let params = call.remove("params").unwrap_or(Value::Null);
    if !(params.is_object() || params.is_null()) {
        return Err((id, A2aError::InvalidParams("params must be an object".into())));
    }
    Ok((id, method, params))
}

pub async fn endpoint(
    State(state): State<AppState>,
    headers: HeaderMap,
    RawQuery(q): RawQuery,
    bytes: Bytes,
) -> Response {
    // The token comes first: a caller without one learns nothing, not even about its JSON.
    if let Err(err) = super::require(&headers, &state, false).await {
        return err.into_response();
    }
    let (id, method, params) = match envelope(&bytes) {
        Ok(call) => call,
        Err((id, err)) => return failure(&id, err),
    };
    let caller = match super::require(&headers, &state, !READING.contains(&method.as_str())).await {
        Ok(caller) => caller,
        Err(err) => return failure(&id, err),
    };
    let caller = &caller;
    if let Err(err) = super::check_version(&headers, q.as_deref()) {
        return if STREAMING.contains(&method.as_str()) {
            stream_failure(&headers, id, err)
        } else {
            failure(&id, err)
        };
    }
    let state = &state;
    match method.as_str() {
        "SendMessage" => respond(
            &id,
            async {
                let request: SendMessageRequest = read_params(params)?;
                let task = super::send_message(state, caller, request).await?;
                Ok(SendMessageResponse { task })
            }
            .await,
        ),
        "SendStreamingMessage" => {
            let started = async {
                let request: SendMessageRequest = read_params(params)?;
                super::stream_message(state, caller, request).await
            }
            .await;
            match started {
                Ok(items) => sse(id, items),
                Err(err) => stream_failure(&headers, id, err),
            }
        }
        "SubscribeToTask" => {
            let started = async {
                let request: TaskIdRequest = read_params(params)?;
                super::subscribe(state, caller, &request.id).await
            }
            .await;
            match started {
                Ok(items) => sse(id, items),
                Err(err) => stream_failure(&headers, id, err),
            }
        }
        "GetTask" => respond(
            &id,
            async {
                let request: TaskIdRequest = read_params(params)?;
                super::get_task(state, caller, &request.id, request.history_length).await
            }
            .await,
        ),
        "ListTasks" => respond(
            &id,
            async {
                let request: ListTasksRequest = read_params(params)?;
                super::list_tasks(state, caller, request).await
            }
            .await,
        ),
        "CancelTask" => respond(
            &id,
            async {
                let request: TaskIdRequest = read_params(params)?;
                super::cancel_task(state, caller, &request.id).await
            }
            .await,
        ),
        m if PUSH_CONFIG.contains(&m) => failure(&id, A2aError::PushNotificationNotSupported),
        "GetExtendedAgentCard" => failure(
            &id,
            A2aError::UnsupportedOperation("the desk has no extended agent card".into()),
        ),
        other => failure(&id, A2aError::MethodNotFound(format!("no method {other:?}"))),
    }
}

fn respond<T: serde::Serialize>(id: &Value, result: Result<T, A2aError>) -> Response {
    match result.and_then(|value| {
        serde_json::to_value(value).map_err(|_| A2aError::Api(crate::http::error::ApiError::Internal))
    }) {
        Ok(result) => success(id, result),
        Err(err) => failure(id, err),
    }
}
