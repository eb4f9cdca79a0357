//! The streaming skeleton the providers share: send the request, check the answer, read its SSE
//! events under the idle timeout, hand each parsed chunk to the provider's [`StreamParser`], and
//! let the parser finish the [`ModelResponse`].

use std::collections::VecDeque;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use serde::Deserialize;

use super::error::{LlmError, LlmErrorKind};
use super::http;
use super::types::{Delta, ModelResponse};
use crate::net::sse;

/// What the stream does after a chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flow {
    Continue,
    /// The provider's end-of-message event: stop reading.
    Stop,
}

/// A provider's reading of its wire format: the chunk type each event's data is parsed into, and
/// the state that accumulates chunks into a response.
pub(crate) trait StreamParser: Send {
    /// The provider's name, for error messages.
    const PROVIDER: &'static str;
    /// Event data that ends the stream without being JSON (OpenAI's `[DONE]`).
    const END_MARKER: Option<&'static str> = None;

    /// One event's data, parsed once; it may borrow from the data.
    type Chunk<'a>: Deserialize<'a>;

    /// `event` is the SSE `event:` field, `data` the (trimmed) text the chunk was parsed from.
    fn on_chunk(
        &mut self,
        event: Option<&str>,
        chunk: Self::Chunk<'_>,
        data: &str,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<Flow, LlmError>;

    /// `stopped`: the stream ended with the end marker or a [`Flow::Stop`], not merely with the
    /// end of the body.
    fn finish(self, stopped: bool) -> Result<ModelResponse, LlmError>;
}

/// Streams one response: sends `rb`, feeds its events to `parser` and returns what it finishes.
pub(crate) async fn run<P: StreamParser>(
    rb: reqwest::RequestBuilder,
    idle: Duration,
    api_key: Option<&str>,
    mut parser: P,
    on_delta: &mut (dyn FnMut(Delta) + Send),
) -> Result<ModelResponse, LlmError> {
    let resp = http::send(P::PROVIDER, rb, idle, api_key).await?;
    let mut events = EventStream::new(P::PROVIDER, resp, idle);
    let (mut stopped, mut any) = (false, false);
    while let Some(ev) = events.next().await? {
        any |= !ev.data.trim().is_empty();
        if feed(&mut parser, ev.event.as_deref(), &ev.data, on_delta)? == Flow::Stop {
            stopped = true;
            events.drain().await;
            break;
        }
    }
    if !any {
        // Not a stream that broke off: the server sent nothing at all (llama-cpp-python does
        // this when its own streaming fails).
        return Err(http::empty_response(P::PROVIDER));
    }
    parser.finish(stopped)
}

/// Hands one event to the parser: blank data is skipped, the end marker stops, anything else must
/// parse as the provider's chunk.
pub(crate) fn feed<P: StreamParser>(
    parser: &mut P,
    event: Option<&str>,
    data: &str,
    on_delta: &mut (dyn FnMut(Delta) + Send),
) -> Result<Flow, LlmError> {
    let data = data.trim();
    if data.is_empty() {
        return Ok(Flow::Continue);
    }
    if P::END_MARKER == Some(data) {
        return Ok(Flow::Stop);
    }
    let chunk = serde_json::from_str::<P::Chunk<'_>>(data).map_err(|e| {
        LlmError::new(
            LlmErrorKind::ResponseMalformed,
            format!(
                "{}: unparseable event data ({e}): {}",
                P::PROVIDER,
                http::truncate(data, 200)
            ),
        )
    })?;
    parser.on_chunk(event, chunk, data, on_delta)
}

/// The stream ended (cleanly, as far as HTTP is concerned) without the model's finish: `what`
/// says what was missing.
pub(crate) fn interrupted(provider: &str, what: &str) -> LlmError {
    LlmError {
        unfinished: true,
        ..LlmError::new(
            LlmErrorKind::StreamInterrupted,
            format!("{provider}: stream ended before {what}"),
        )
    }
}

/// The most of one model response's body read: far above what any model's output limit makes
/// (a million tokens of text is a few MiB, twice over when the last event repeats it), and the
/// bound on everything the response accumulates (text, thinking, tool call arguments), so a
/// server that never stops cannot make the worker hold more.
const MAX_RESPONSE_BYTES: usize = 32 * 1024 * 1024;

type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes, reqwest::Error>> + Send>>;

/// The SSE events of a response body, with the idle timeout applied between network reads.
struct EventStream {
    provider: &'static str,
    body: ByteStream,
    parser: sse::Parser,
    pending: VecDeque<sse::Frame>,
    idle: Duration,
    ended: bool,
    /// Bytes of the body so far, held to `MAX_RESPONSE_BYTES`.
    received: usize,
}

impl EventStream {
    fn new(provider: &'static str, resp: reqwest::Response, idle: Duration) -> Self {
        EventStream {
            provider,
            body: Box::pin(resp.bytes_stream()),
            parser: sse::Parser::new(),
            pending: VecDeque::new(),
            idle,
            ended: false,
            received: 0,
        }
    }

    /// The next event; `Ok(None)` when the body ended (cleanly, as far as HTTP is concerned).
    async fn next(&mut self) -> Result<Option<sse::Frame>, LlmError> {
        loop {
            if let Some(ev) = self.pending.pop_front() {
                return Ok(Some(ev));
            }
            if self.ended {
                return Ok(None);
            }
            let mut out = Vec::new();
            match tokio::time::timeout(self.idle, self.body.next()).await {
                Err(_) => {
                    return Err(LlmError::new(
                        LlmErrorKind::StreamStalled,
                        format!("{}: stream silent for {} ms", self.provider, self.idle.as_millis()),
                    ))
                }
                Ok(Some(Ok(bytes))) => {
                    self.received += bytes.len();
                    if self.received > MAX_RESPONSE_BYTES {
                        return Err(LlmError::new(
                            LlmErrorKind::ResponseMalformed,
                            format!(
                                "{}: the response is larger than {} MiB; given up",
                                self.provider,
                                MAX_RESPONSE_BYTES >> 20
                            ),
                        ));
                    }
                    self.parser.feed(&bytes, &mut out)
                }
                Ok(Some(Err(e))) => {
                    return Err(LlmError::new(
                        LlmErrorKind::StreamInterrupted,
                        format!("{}: stream broke off: {e}", self.provider),
                    ))
                }
                Ok(None) => {
                    self.parser.finish(&mut out);
                    self.ended = true;
                }
            }
            self.pending.extend(out);
        }
    }

    /// Reads the (normally already arriving) end of the body after the final event, so the
    /// connection goes back to the pool instead of being torn down; bounded so a server that
    /// keeps the stream open costs little.
    async fn drain(&mut self) {
        let _ = tokio::time::timeout(Duration::from_millis(250), async {
            while let Ok(Some(_)) = self.next().await {}
        })
        .await;
    }
}

/// Test support: runs `events` (SSE event name, data) through a parser as the stream would.
#[cfg(test)]
pub(crate) fn replay<P: StreamParser>(
    mut parser: P,
    events: &[(Option<&str>, &str)],
) -> (Result<ModelResponse, LlmError>, Vec<Delta>) {
    let mut deltas = Vec::new();
    let mut on_delta = |d: Delta| deltas.push(d);
    let mut stopped = false;
    for (event, data) in events {
        match feed(&mut parser, *event, data, &mut on_delta) {
            Ok(Flow::Continue) => {}
            Ok(Flow::Stop) => {
                stopped = true;
                break;
            }
            Err(e) => return (Err(e), deltas),
        }
    }
    (parser.finish(stopped), deltas)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 200 event stream whose body is `head` followed by `filler` without end.
    fn endless_response(head: &'static [u8], filler: &'static [u8]) -> reqwest::Response {
        let first = futures::stream::once(async move { Ok::<_, std::io::Error>(Bytes::from_static(head)) });
        let rest = futures::stream::repeat_with(move || Ok(Bytes::from(filler.repeat(64 * 1024 / filler.len()))));
        let body = reqwest::Body::wrap_stream(first.chain(rest));
        reqwest::Response::from(::http::Response::new(body))
    }

    async fn read_until_error(resp: reqwest::Response) -> LlmError {
        let mut events = EventStream::new("test", resp, Duration::from_secs(5));
        loop {
            match events.next().await {
                Ok(Some(_)) => {}
                Ok(None) => panic!("an endless body ended"),
                Err(e) => return e,
            }
        }
    }

    #[tokio::test]
    async fn one_endless_line_is_given_up_at_the_limit() {
        let err = read_until_error(endless_response(b"data: ", b"x")).await;
        assert_eq!(err.kind, LlmErrorKind::ResponseMalformed);
        assert!(err.message.contains("larger than 32 MiB"), "{}", err.message);
    }

    #[tokio::test]
    async fn endless_small_events_are_given_up_at_the_limit() {
        let filler: &'static [u8] = b"data: {\"choices\":[{\"delta\":{\"content\":\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}}]}\n\n";
        let err = read_until_error(endless_response(b"", filler)).await;
        assert_eq!(err.kind, LlmErrorKind::ResponseMalformed);
    }
}
