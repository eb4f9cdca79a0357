//! The HTTP side of the streamable HTTP transport: rmcp drives the protocol (sessions, SSE
//! streams, reconnection), this client sends its messages through the desk's own `reqwest`
//! client, built by the address guard, so an MCP server on a forbidden address is refused at
//! connect time like any other outbound request.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use http::{HeaderName, HeaderValue, StatusCode};
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, ErrorData, ServerJsonRpcMessage};
use rmcp::transport::common::http_header::{
    EVENT_STREAM_MIME_TYPE, HEADER_LAST_EVENT_ID, HEADER_SESSION_ID, JSON_MIME_TYPE,
};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
};
use sse_stream::{Sse, SseStream};

use crate::net::guard::ForbiddenAddress;

/// Largest JSON response read whole (a tool result larger than this is refused by the transport).
const MAX_JSON_RESPONSE: usize = 16 * 1024 * 1024;
/// How much of an error body is kept for the message.
const MAX_ERROR_BODY: usize = 2048;

/// A guarded `reqwest` client speaking the streamable HTTP transport's requests.
#[derive(Clone)]
pub struct GuardedHttp(pub reqwest::Client);

type HttpError = StreamableHttpError<reqwest::Error>;

/// A failed request: the guard's refusal as its own text (rmcp hides the client error's
/// sources), anything else without the URL (it may hold an expanded secret).
fn client_error(err: reqwest::Error) -> HttpError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&err);
    while let Some(e) = source {
        if let Some(refused) = e.downcast_ref::<ForbiddenAddress>() {
            return StreamableHttpError::UnexpectedServerResponse(Cow::Owned(refused.to_string()));
        }
        source = e.source();
    }
    StreamableHttpError::Client(err.without_url())
}

fn content_type(response: &reqwest::Response) -> Option<String> {
    response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_ascii_lowercase)
}

fn is_media(content_type: Option<&str>, expected: &str) -> bool {
    content_type.is_some_and(|ct| ct.split(';').next().unwrap_or("").trim() == expected)
}

/// A server's event stream, given up (as a broken stream) once one event is larger than a
/// JSON response may be: a peer cannot make the process buffer without end.
fn sse(response: reqwest::Response) -> BoxStream<'static, Result<Sse, SseError>> {
    let body = crate::net::bounded::limit_sse_events(response.bytes_stream(), MAX_JSON_RESPONSE);
    SseStream::from_bytes_stream(body).boxed()
}

/// Reads at most `limit` bytes of a body; Err when it is longer (`ResponseBodyTooLarge`).
async fn read_limited(response: reqwest::Response, limit: usize) -> Result<Vec<u8>, HttpError> {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.try_next().await.map_err(client_error)? {
        if body.len() + chunk.len() > limit {
            return Err(StreamableHttpError::ResponseBodyTooLarge { max_size: limit });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The start of an error body, as text.
async fn error_prefix(response: reqwest::Response) -> String {
    let body = crate::net::bounded::read_prefix(response, MAX_ERROR_BODY).await;
    String::from_utf8_lossy(&body.map(|(body, _)| body).unwrap_or_default()).into_owned()
}

fn with_headers(
    mut request: reqwest::RequestBuilder,
    session_id: Option<&str>,
    auth_header: Option<String>,
    custom_headers: HashMap<HeaderName, HeaderValue>,
) -> reqwest::RequestBuilder {
    if let Some(session_id) = session_id {
        request = request.header(HEADER_SESSION_ID, session_id);
    }
    if let Some(token) = auth_header {
        request = request.bearer_auth(token);
    }
    for (name, value) in custom_headers {
        request = request.header(name.as_str(), value.as_bytes());
    }
    request
}

/// A legacy server (2025-xx) answers the 2026 `server/discover` probe with an HTTP 4xx, often
/// with an uncorrelated JSON-RPC error; rmcp's lifecycle needs it as the probe's error response
/// to fall back to the `initialize` handshake.
fn legacy_discover_answer(
    message: &ClientJsonRpcMessage,
    had_session: bool,
    status: StatusCode,
    body: &str,
) -> Option<StreamableHttpPostResponse> {
    if had_session || !status.is_client_error() || matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
        return None;
    }
    let ClientJsonRpcMessage::Request(request) = message else {
        return None;
    };
    if !matches!(request.request, ClientRequest::DiscoverRequest(_)) {
        return None;
    }
    let error = match serde_json::from_str::<ServerJsonRpcMessage>(body) {
        Ok(ServerJsonRpcMessage::Error(error)) => error.error,
        _ => ErrorData::invalid_request(format!("server/discover rejected with HTTP {status}"), None),
    };
    Some(StreamableHttpPostResponse::Json(
        ServerJsonRpcMessage::error(error, Some(request.id.clone())),
        None,
    ))
}

impl StreamableHttpClient for GuardedHttp {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        let request = self.0.post(uri.as_ref()).header(
            reqwest::header::ACCEPT,
            format!("{JSON_MIME_TYPE}, {EVENT_STREAM_MIME_TYPE}"),
        );
        let request = with_headers(request, session_id.as_deref(), auth_header, custom_headers);
        let response = request.json(&message).send().await.map_err(client_error)?;
        let status = response.status();
        if matches!(status, StatusCode::ACCEPTED | StatusCode::NO_CONTENT) {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if status == StatusCode::NOT_FOUND && session_id.is_some() {
            return Err(StreamableHttpError::SessionExpired);
        }
        let awaits_no_response = !matches!(message, ClientJsonRpcMessage::Request(_));
        let new_session = response
            .headers()
            .get(HEADER_SESSION_ID)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let content_type = content_type(&response);
        if !status.is_success() {
            let body = error_prefix(response).await;
            if let Some(answer) = legacy_discover_answer(&message, session_id.is_some(), status, &body) {
                return Ok(answer);
            }
            if let Ok(error @ ServerJsonRpcMessage::Error(_)) = serde_json::from_str::<ServerJsonRpcMessage>(&body) {
                return Ok(StreamableHttpPostResponse::Json(error, new_session));
            }
            return Err(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(format!(
                "HTTP {status}: {body}"
            ))));
        }
        if is_media(content_type.as_deref(), EVENT_STREAM_MIME_TYPE) {
            return Ok(StreamableHttpPostResponse::Sse(sse(response), new_session));
        }
        if awaits_no_response {
            // Nothing in the body is needed; servers answer notifications with 200 and anything.
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if !is_media(content_type.as_deref(), JSON_MIME_TYPE) {
            return Err(StreamableHttpError::UnexpectedContentType(content_type));
        }
        let body = read_limited(response, MAX_JSON_RESPONSE).await?;
        match serde_json::from_slice::<ServerJsonRpcMessage>(&body) {
            Ok(parsed) => Ok(StreamableHttpPostResponse::Json(parsed, new_session)),
            Err(e) => Err(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(format!(
                "the server's response is not JSON-RPC: {e}"
            )))),
        }
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), HttpError> {
        let request = with_headers(
            self.0.delete(uri.as_ref()),
            Some(&session_id),
            auth_header,
            custom_headers,
        );
        let response = request.send().await.map_err(client_error)?;
        if response.status() == StatusCode::METHOD_NOT_ALLOWED {
            return Ok(());
        }
        response.error_for_status().map_err(client_error)?;
        Ok(())
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, HttpError> {
        let mut request = self.0.get(uri.as_ref()).header(
            reqwest::header::ACCEPT,
            format!("{EVENT_STREAM_MIME_TYPE}, {JSON_MIME_TYPE}"),
        );
        if let Some(last_event_id) = last_event_id {
            request = request.header(HEADER_LAST_EVENT_ID, last_event_id);
        }
        let request = with_headers(request, session_id.as_deref(), auth_header, custom_headers);
        let response = request.send().await.map_err(client_error)?;
        if response.status() == StatusCode::METHOD_NOT_ALLOWED {
            return Err(StreamableHttpError::ServerDoesNotSupportSse);
        }
        let response = response.error_for_status().map_err(client_error)?;
        let content_type = content_type(&response);
        if !is_media(content_type.as_deref(), EVENT_STREAM_MIME_TYPE) {
            return Err(StreamableHttpError::UnexpectedContentType(content_type));
        }
        Ok(sse(response))
    }
}
