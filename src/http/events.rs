//! Server-sent event streams: one ticket's log, or all tickets'.

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::Response;
use serde::Deserialize;
use utoipa::IntoParams;

use super::access::Caller;
use super::error::{ApiError, ApiResult, ErrorBody};
use super::extract::{ApiPath, ApiQuery};
use super::AppState;
use crate::db::events::GlobalCursor;
use crate::events::stream::{self, GlobalFilter};
use crate::transitions;

/// A `text/event-stream` response of `frames`; also A2A's streams.
pub(crate) fn sse_response<S>(frames: S) -> Response
where
    S: futures::Stream<Item = Result<bytes::Bytes, std::convert::Infallible>> + Send + 'static,
{
    use futures::StreamExt;
    // Counted in `sse_subscribers` until the body, and so the stream, is dropped.
    let subscriber = crate::telemetry::metric::SseSubscriber::open();
    let frames = frames.map(move |frame| {
        let _open = &subscriber;
        frame
    });
    let mut response = Response::new(Body::from_stream(frames));
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Proxies such as nginx would otherwise hold events back in their buffers.
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// The resume point: `Last-Event-ID` (sent by reconnecting EventSource clients) wins over
/// `?after=`; each is read with `parse`, so a malformed one is 400 even where the other wins.
fn resume_point<T>(
    headers: &HeaderMap,
    after: Option<&str>,
    parse: impl Fn(&str) -> ApiResult<T>,
) -> ApiResult<Option<T>> {
    let after = after.filter(|s| !s.is_empty()).map(&parse).transpose()?;
    match headers.get("last-event-id") {
        // An empty header is no header.
        Some(v) if !v.as_bytes().iter().all(u8::is_ascii_whitespace) => {
            let text = v
                .to_str()
                .map_err(|_| ApiError::BadRequest("Last-Event-ID is not readable".into()))?;
            parse(text.trim()).map(Some)
        }
        _ => Ok(after),
    }
}

/// An event `seq` as the document's pattern allows it: 1 to 18 digits (each fits an i64).
fn parse_seq(s: &str) -> Option<i64> {
    (s.len() <= 18 && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok())?
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct TicketEventsQuery {
    /// Replay events after this `seq` (like `Last-Event-ID`).
    #[param(pattern = "^[0-9]{0,18}$")]
    pub after: Option<String>,
}

/// A ticket's events (SSE)
///
/// Replays the ticket's persisted events (from the first, or after `Last-Event-ID` / `?after=`),
/// then streams live ones, including `text.delta`, `thinking.delta` and `tool_call.delta` while
/// the model streams. Each persisted event has SSE `id:` = its `seq`. The stream ends after the ticket's latest
/// event when that is `ticket.done`, `ticket.failed` or `ticket.cancelled`.
#[utoipa::path(get, path = "/tickets/{ticket}/events", tag = "events",
    params(("ticket" = String, Path, description = "Ticket id or key"), TicketEventsQuery,
        ("Last-Event-ID" = Option<String>, Header, description = "Resume after this seq", pattern = "^[0-9]{0,18}$")),
    responses((status = 200, description = "text/event-stream of TicketEvent objects", content_type = "text/event-stream", body = crate::domain::event::TicketEventSchema),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn ticket_events(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(reference): ApiPath<String>,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<TicketEventsQuery>,
) -> ApiResult<Response> {
    let after = resume_point(&headers, q.after.as_deref(), |s| {
        parse_seq(s).ok_or_else(|| {
            ApiError::BadRequest(format!(
                "after must be an event seq (a non-negative integer), not {s:?}"
            ))
        })
    })?
    .unwrap_or(0);
    let ticket = transitions::find(&state.pool, caller.project_id(), &reference).await?;
    let frames = stream::ticket(
        state.hub.clone(),
        ticket.id,
        after,
        state.config.sse_ping,
        state.shutdown.clone(),
    );
    Ok(sse_response(frames))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct GlobalEventsQuery {
    /// Resume after this cursor (an SSE `id:` of this stream); `0` starts with the oldest event
    /// the desk keeps.
    #[param(pattern = "^(0|[0-9]{1,18}-[0-9]{1,18})?$")]
    pub after: Option<String>,
    /// Comma-separated labels: events of tickets with any of them.
    pub label: Option<String>,
    /// Comma-separated agents: events of tickets last claimed by one of them.
    pub agent: Option<String>,
    /// Comma-separated kinds; an entry may end in `*` (`ticket.*`).
    pub kind: Option<String>,
}

fn comma_list(s: Option<&str>) -> Vec<String> {
    s.map(|s| {
        s.split(',')
            .map(|p| p.trim().to_owned())
            .filter(|p| !p.is_empty())
            .collect()
    })
    .unwrap_or_default()
}

/// All tickets' events (SSE)
///
/// Without a cursor it starts with new events; with the cursor `0` it starts with the oldest event
/// the desk keeps, then goes on live. SSE `id:` is an opaque cursor; resuming with
/// `Last-Event-ID` or `?after=` delivers every persisted event after it exactly once, each
/// ticket's events in `seq` order, even while many tickets write at once.
#[utoipa::path(get, path = "/events", tag = "events",
    params(GlobalEventsQuery, ("Last-Event-ID" = Option<String>, Header, description = "Resume after this cursor (`0`: from the oldest kept event)",
        pattern = "^(0|[0-9]{1,18}-[0-9]{1,18})?$")),
    responses((status = 200, description = "text/event-stream of TicketEvent objects", content_type = "text/event-stream", body = crate::domain::event::TicketEventSchema),
        (status = 400, body = ErrorBody)))]
pub async fn global_events(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<GlobalEventsQuery>,
) -> ApiResult<Response> {
    let after = resume_point(&headers, q.after.as_deref(), |s| {
        GlobalCursor::parse(s).ok_or_else(|| ApiError::BadRequest(format!("{s:?} is not a cursor of this stream")))
    })?;
    let filter = GlobalFilter {
        project: caller.project_id(),
        labels: comma_list(q.label.as_deref()),
        agents: comma_list(q.agent.as_deref()),
        kinds: comma_list(q.kind.as_deref()),
    };
    let frames = stream::global(
        state.hub.clone(),
        after,
        filter,
        state.config.sse_ping,
        state.shutdown.clone(),
    );
    Ok(sse_response(frames))
}
