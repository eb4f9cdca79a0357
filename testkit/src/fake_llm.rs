//! A scripted model server speaking the OpenAI chat-completions and Anthropic Messages streaming
//! wire formats over real HTTP.
//!
//! Integration tests and the benchmark point the real providers at it, so everything between the
//! agent loop and the socket (SSE framing, timeouts, error classification) is exercised. Faults
//! are real too: delays are sleeps, stalls keep the connection open, drops abort it.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;

/// One request the fake received.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    pub path: String,
    /// Header names lowercased; a repeated header keeps its values joined by ", ".
    pub headers: BTreeMap<String, String>,
    /// The body parsed as JSON (a JSON string holding the raw text when it was not JSON).
    pub body: Value,
    /// The client's address; the same port across requests means a reused connection.
    pub peer: SocketAddr,
}

impl RecordedRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(&name.to_ascii_lowercase()).map(String::as_str)
    }
}

type Responder = Arc<dyn Fn(&Value) -> Reply + Send + Sync>;

struct Shared {
    state: Mutex<State_>,
    /// Requests received, kept or not.
    count: watch::Sender<usize>,
    next_id: AtomicU64,
    /// Whether each request's copy is kept for `requests()`.
    keep: AtomicBool,
    /// Requests being answered now, and the most at once so far.
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    /// When each answer held back by a `first_byte_delay` or a `first_token_delay` began.
    first_bytes: Mutex<Vec<std::time::SystemTime>>,
}

/// A request being answered: counted from its arrival until its answer's body ends.
struct InFlight(Arc<Shared>);

impl InFlight {
    fn enter(shared: &Arc<Shared>) -> InFlight {
        let now = shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        shared.max_in_flight.fetch_max(now, Ordering::SeqCst);
        InFlight(shared.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

#[derive(Default)]
struct State_ {
    queue: VecDeque<Reply>,
    keyed: Vec<(String, Reply)>,
    responder: Option<Responder>,
    /// The reply to every request no scripted one matches, ahead of the responder.
    reply: Option<Reply>,
    /// `reply` rendered, per endpoint, model and usage option: a fixed reply is rendered once, so
    /// its answers repeat their ids (each request gets its own ids otherwise).
    rendered: HashMap<(Endpoint, String, bool), Bytes>,
    requests: Vec<RecordedRequest>,
}

struct Handle {
    shared: Arc<Shared>,
    addr: SocketAddr,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// Handle to a running fake server; clones share it. The server stops when the last clone is
/// dropped.
#[derive(Clone)]
pub struct FakeLlm {
    inner: Arc<Handle>,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Endpoint {
    OpenAi,
    Anthropic,
}

impl FakeLlm {
    /// Binds 127.0.0.1 on a free port and serves in a background task.
    pub async fn start() -> FakeLlm {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the fake model server to a local port");
        let addr = listener.local_addr().expect("local address of a bound socket");
        let (count, _) = watch::channel(0usize);
        let shared = Arc::new(Shared {
            state: Mutex::new(State_::default()),
            count,
            next_id: AtomicU64::new(1),
            keep: AtomicBool::new(true),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            first_bytes: Mutex::new(Vec::new()),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(openai_handler))
            .route("/v1/messages", post(anthropic_handler))
            .with_state(shared.clone());
        let server = tokio::spawn(serve(listener, app));
        FakeLlm {
            inner: Arc::new(Handle { shared, addr, server }),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.inner.addr
    }

    /// `http://127.0.0.1:PORT/v1` — serves `POST /v1/chat/completions`.
    pub fn openai_base_url(&self) -> String {
        format!("http://{}/v1", self.inner.addr)
    }

    /// `http://127.0.0.1:PORT` — serves `POST /v1/messages`.
    pub fn anthropic_base_url(&self) -> String {
        format!("http://{}", self.inner.addr)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State_> {
        lock(&self.inner.shared)
    }

    /// Queues a scripted reply; replies are consumed first-in first-out across both endpoints.
    pub fn push(&self, reply: Reply) {
        self.state().queue.push_back(reply);
    }

    /// Reserves a reply for the next request whose body text contains `key`; checked before the
    /// shared queue, so concurrent agents working different tickets each get their own script.
    pub fn push_for(&self, key: &str, reply: Reply) {
        self.state().keyed.push((key.to_string(), reply));
    }

    /// Answers every request no scripted reply matches with `reply` (a responder that needs no look
    /// at the request, which then is not parsed).
    pub fn set_reply(&self, reply: Reply) {
        let mut st = self.state();
        st.reply = Some(reply);
        st.rendered.clear();
    }

    /// Answers requests no scripted reply matches.
    pub fn set_responder(&self, f: impl Fn(&Value) -> Reply + Send + Sync + 'static) {
        self.state().responder = Some(Arc::new(f));
    }

    /// Whether requests are kept for `requests()` (the default). A benchmark sending thousands
    /// turns it off: the copies would cost it memory and CPU that no test of it needs.
    pub fn keep_requests(&self, keep: bool) {
        self.inner.shared.keep.store(keep, Ordering::Relaxed);
    }

    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state().requests.clone()
    }

    /// Requests received, kept or not.
    pub fn request_count(&self) -> usize {
        *self.inner.shared.count.borrow()
    }

    /// The most requests answered at once so far (from arrival until the answer's body ended).
    pub fn max_in_flight(&self) -> usize {
        self.inner.shared.max_in_flight.load(Ordering::SeqCst)
    }

    /// When each answer held back by `Reply::first_byte_delay` or `Reply::first_token_delay`
    /// began (its first byte, or its first event), in the order they arrived.
    pub fn first_byte_times(&self) -> Vec<std::time::SystemTime> {
        self.inner
            .shared
            .first_bytes
            .lock()
            .map(|t| t.clone())
            .unwrap_or_default()
    }

    /// Requests being answered now.
    pub fn in_flight(&self) -> usize {
        self.inner.shared.in_flight.load(Ordering::SeqCst)
    }

    /// Waits until at least `n` requests have arrived; false on timeout.
    pub async fn wait_for_requests(&self, n: usize, timeout: Duration) -> bool {
        let mut rx = self.inner.shared.count.subscribe();
        let reached = tokio::time::timeout(timeout, async { rx.wait_for(|c| *c >= n).await.is_ok() }).await;
        reached.unwrap_or(false)
    }
}

/// Serves HTTP/1.1 and HTTP/2 without TLS (prior knowledge) on each connection, with no limit on
/// the streams of one HTTP/2 connection: a benchmark holds tens of thousands of slow answers on
/// one connection, as a hosted provider does for a client that speaks HTTP/2.
async fn serve(listener: tokio::net::TcpListener, app: Router) {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use tower::ServiceExt as _;

    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder.http2().max_concurrent_streams(None);
    let builder = Arc::new(builder);
    loop {
        let (socket, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            // Out of file descriptors, or a connection reset before it was taken: try again soon.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = socket.set_nodelay(true);
        let app = app.clone();
        let builder = builder.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |mut req: axum::http::Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(ConnectInfo(peer));
                app.clone().oneshot(req.map(Body::new))
            });
            if let Err(err) = builder.serve_connection(TokioIo::new(socket), service).await {
                // A client that goes away mid-response is ordinary; anything else is worth seeing.
                if !err.to_string().contains("connection reset") {
                    eprintln!("fake model server: a connection from {peer} ended with an error: {err}");
                }
            }
        });
    }
}

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, State_> {
    // A panicking responder must not take every later test request down with it.
    shared.state.lock().unwrap_or_else(|e| e.into_inner())
}

async fn openai_handler(
    State(s): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(s, Endpoint::OpenAi, peer, uri, headers, body).await
}

async fn anthropic_handler(
    State(s): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(s, Endpoint::Anthropic, peer, uri, headers, body).await
}

async fn handle(
    shared: Arc<Shared>,
    endpoint: Endpoint,
    peer: SocketAddr,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let in_flight = InFlight::enter(&shared);
    let raw = String::from_utf8_lossy(&body);
    // The few fields the rendering needs; the whole body is parsed only for a record or a responder.
    let head: RequestHead = serde_json::from_str(&raw).unwrap_or_default();
    let parse = || serde_json::from_str(&raw).unwrap_or_else(|_| Value::String(raw.to_string()));
    let recorded = shared.keep.load(Ordering::Relaxed).then(|| RecordedRequest {
        path: uri.path().to_string(),
        headers: joined_headers(&headers),
        body: parse(),
        peer,
    });
    let cache_key = (endpoint, model_of(&head), include_usage(&head));
    let (scripted, responder) = {
        let mut st = lock(&shared);
        st.requests.extend(recorded);
        shared.count.send_modify(|n| *n += 1);
        let scripted = match st.keyed.iter().position(|(k, _)| raw.contains(k.as_str())) {
            Some(i) => Some(st.keyed.remove(i).1),
            None => st.queue.pop_front(),
        };
        if scripted.is_none() {
            if let Some(body) = st.rendered.get(&cache_key) {
                return whole_stream(body.clone());
            }
        }
        (scripted.ok_or_else(|| st.reply.clone()), st.responder.clone())
    };
    let (reply, fixed) = match (scripted, responder) {
        (Ok(r), _) => (r, false),
        (Err(Some(r)), _) => (r, true),
        (Err(None), Some(f)) => (f(&parse()), false),
        // Ending the turn cleanly keeps an unscripted agent from looping on retries.
        (Err(None), None) => (Reply::text("(no scripted reply)"), false),
    };

    if !reply.first_byte_delay.is_zero() {
        tokio::time::sleep(reply.first_byte_delay).await;
        if let Ok(mut times) = shared.first_bytes.lock() {
            times.push(std::time::SystemTime::now());
        }
    }
    if let Some(status) = reply.error_status {
        return error_response(endpoint, status, &reply);
    }
    if reply.empty {
        return whole_stream(Bytes::new());
    }
    let mut frames = match endpoint {
        Endpoint::OpenAi => render_openai(&reply, &head, &shared.next_id),
        Endpoint::Anthropic => render_anthropic(&reply, &head, &shared.next_id),
    };
    if let (false, Some(first)) = (reply.first_token_delay.is_zero(), frames.first_mut()) {
        first.delay += reply.first_token_delay;
        if let Ok(mut times) = shared.first_bytes.lock() {
            times.push(std::time::SystemTime::now() + reply.first_token_delay);
        }
    }
    if frames.iter().any(|f| !f.delay.is_zero()) || reply.is_faulty() {
        return stream_response(paced_body(frames, &reply, in_flight));
    }
    let body = Bytes::from(frames.into_iter().map(|f| f.text).collect::<String>());
    if fixed && reply.first_byte_delay.is_zero() {
        lock(&shared).rendered.insert(cache_key, body.clone());
    }
    whole_stream(body)
}

/// Nothing to wait for: the whole event stream as one body, sent in one write.
fn whole_stream(body: Bytes) -> Response {
    stream_response(Body::from(body))
}

/// Header names lowercased; a repeated header's values joined by ", ".
fn joined_headers(headers: &HeaderMap) -> BTreeMap<String, String> {
    let mut joined: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in headers {
        let v = String::from_utf8_lossy(value.as_bytes()).into_owned();
        joined
            .entry(name.as_str().to_ascii_lowercase())
            .and_modify(|e| {
                e.push_str(", ");
                e.push_str(&v);
            })
            .or_insert(v);
    }
    joined
}

fn error_response(endpoint: Endpoint, status: u16, reply: &Reply) -> Response {
    let (etype, code, message) = if reply.context_overflow {
        match endpoint {
            Endpoint::OpenAi => (
                "invalid_request_error",
                "context_length_exceeded",
                "This model's maximum context length is 128000 tokens. However, your messages resulted in 131072 tokens. Please reduce the length of the messages.",
            ),
            Endpoint::Anthropic => (
                "invalid_request_error",
                "",
                "prompt is too long: 210000 tokens > 200000 maximum",
            ),
        }
    } else {
        match (endpoint, status) {
            (Endpoint::OpenAi, 429) => ("requests", "rate_limit_exceeded", "Rate limit reached for requests"),
            (Endpoint::OpenAi, 401) => ("invalid_request_error", "invalid_api_key", "Incorrect API key provided"),
            (Endpoint::OpenAi, 403) => (
                "invalid_request_error",
                "unsupported_country_region_territory",
                "Country, region, or territory not supported",
            ),
            (Endpoint::OpenAi, 404) => (
                "invalid_request_error",
                "model_not_found",
                "The model does not exist or you do not have access to it.",
            ),
            (Endpoint::OpenAi, s) if s >= 500 => (
                "server_error",
                "server_error",
                "The server had an error while processing your request.",
            ),
            (Endpoint::OpenAi, _) => ("invalid_request_error", "invalid_request", "Invalid request"),
            (Endpoint::Anthropic, 400) => ("invalid_request_error", "", "Invalid request"),
            (Endpoint::Anthropic, 401) => ("authentication_error", "", "invalid x-api-key"),
            (Endpoint::Anthropic, 403) => (
                "permission_error",
                "",
                "Your API key does not have permission to use the specified resource.",
            ),
            (Endpoint::Anthropic, 404) => ("not_found_error", "", "model: not-a-model"),
            (Endpoint::Anthropic, 413) => (
                "request_too_large",
                "",
                "Request exceeds the maximum allowed number of bytes.",
            ),
            (Endpoint::Anthropic, 429) => (
                "rate_limit_error",
                "",
                "Number of request tokens has exceeded your per-minute rate limit",
            ),
            (Endpoint::Anthropic, 529) => ("overloaded_error", "", "Overloaded"),
            (Endpoint::Anthropic, s) if s >= 500 => ("api_error", "", "Internal server error"),
            (Endpoint::Anthropic, _) => ("invalid_request_error", "", "Invalid request"),
        }
    };
    let body = match endpoint {
        Endpoint::OpenAi => {
            json!({"error": {"message": message, "type": etype, "param": null, "code": if code.is_empty() { Value::Null } else { json!(code) }}})
        }
        Endpoint::Anthropic => {
            json!({"type": "error", "error": {"type": etype, "message": message}})
        }
    };
    let body = reply.error_body.clone().unwrap_or_else(|| body.to_string());
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some(secs) = reply.retry_after {
        resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    resp
}

/// One SSE frame and how long to wait before sending it.
struct Frame {
    text: String,
    delay: Duration,
}

fn stream_response(body: Body) -> Response {
    let mut resp = Response::new(body);
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

/// The frames one by one at their times, with the reply's faults.
fn paced_body(frames: Vec<Frame>, reply: &Reply, in_flight: InFlight) -> Body {
    let (tx, rx) = mpsc::channel::<Result<Bytes, io::Error>>(32);
    let (stall, drop_at, garbage) = (reply.stall_after, reply.drop_after, reply.garbage_after);
    tokio::spawn(async move {
        // Counted until the body ends.
        let _in_flight = in_flight;
        let mut due = Instant::now();
        let total = frames.len();
        let mut frames = frames.into_iter();
        for i in 0..=total {
            if stall == Some(i) {
                // Silent but open, until the client gives up and hangs up.
                tx.closed().await;
                return;
            }
            if drop_at == Some(i) {
                // Let what was sent reach the socket, then fail the body: hyper aborts the
                // connection without the terminating chunk.
                tokio::time::sleep(Duration::from_millis(20)).await;
                let _ = tx
                    .send(Err(io::Error::new(
                        io::ErrorKind::ConnectionReset,
                        "fake model server dropped the connection",
                    )))
                    .await;
                return;
            }
            if garbage == Some(i) {
                let _ = tx.send(Ok(Bytes::from_static(b"data: {not json\n\n"))).await;
                return;
            }
            let Some(frame) = frames.next() else { return };
            if !frame.delay.is_zero() {
                // Scheduled against a running deadline so pacing does not drift.
                due += frame.delay;
                tokio::time::sleep_until(due).await;
            }
            if tx.send(Ok(Bytes::from(frame.text))).await.is_err() {
                return;
            }
        }
    });
    Body::from_stream(ReceiverStream::new(rx))
}

#[derive(Clone, Debug)]
struct FakeCall {
    id: Option<String>,
    name: String,
    args: String,
}

/// A scripted answer, rendered as OpenAI chunks or Anthropic events depending on the endpoint.
#[derive(Clone, Debug, Default)]
pub struct Reply {
    text: String,
    thinking: Vec<(String, String)>,
    calls: Vec<FakeCall>,
    usage: Option<(u64, u64)>,
    cache: (u64, u64),
    chunk_delay: Duration,
    pace: Option<(u32, usize)>,
    first_byte_delay: Duration,
    first_token_delay: Duration,
    stall_after: Option<usize>,
    drop_after: Option<usize>,
    garbage_after: Option<usize>,
    error_status: Option<u16>,
    context_overflow: bool,
    retry_after: Option<u64>,
    error_event: Option<String>,
    stop_reason: Option<String>,
    no_usage: bool,
    no_finish: bool,
    empty: bool,
    error_body: Option<String>,
}

impl Reply {
    /// A text answer, streamed in a few content deltas.
    pub fn text(s: &str) -> Reply {
        Reply {
            text: s.to_string(),
            ..Default::default()
        }
    }

    /// One tool call; its id is `call_<n>` unless set with [`Reply::with_call_id`].
    pub fn tool_call(name: &str, args: Value) -> Reply {
        Reply::tool_calls(vec![(name, args)])
    }

    /// Several tool calls in one message.
    pub fn tool_calls(calls: Vec<(&str, Value)>) -> Reply {
        Reply {
            calls: calls
                .into_iter()
                .map(|(name, args)| FakeCall {
                    id: None,
                    name: name.to_string(),
                    args: args.to_string(),
                })
                .collect(),
            ..Default::default()
        }
    }

    /// A tool call whose arguments are exactly this text (e.g. truncated JSON).
    pub fn raw_tool_call(name: &str, raw_args: &str) -> Reply {
        Reply {
            calls: vec![FakeCall {
                id: None,
                name: name.to_string(),
                args: raw_args.to_string(),
            }],
            ..Default::default()
        }
    }

    /// Sets the id of the last tool call.
    pub fn with_call_id(mut self, id: &str) -> Reply {
        if let Some(c) = self.calls.last_mut() {
            c.id = Some(id.to_string());
        }
        self
    }

    /// Text before the tool calls.
    pub fn with_text(mut self, s: &str) -> Reply {
        self.text = s.to_string();
        self
    }

    /// A thinking block (Anthropic: with its signature; OpenAI: as reasoning_content deltas).
    pub fn with_thinking(mut self, text: &str, signature: &str) -> Reply {
        self.thinking.push((text.to_string(), signature.to_string()));
        self
    }

    pub fn usage(mut self, input: u64, output: u64) -> Reply {
        self.usage = Some((input, output));
        self
    }

    /// Prompt-cache token counts (OpenAI reports only the read count).
    pub fn cache_tokens(mut self, read: u64, creation: u64) -> Reply {
        self.cache = (read, creation);
        self
    }

    /// Sleep between chunks.
    pub fn chunk_delay(mut self, d: Duration) -> Reply {
        self.chunk_delay = d;
        self
    }

    /// Streams `total_tokens` text deltas paced at `n` per second (for benchmarks).
    pub fn tokens_per_second(mut self, n: u32, total_tokens: usize) -> Reply {
        self.pace = Some((n.max(1), total_tokens));
        self
    }

    /// Wait before sending the response headers.
    pub fn first_byte_delay(mut self, d: Duration) -> Reply {
        self.first_byte_delay = d;
        self
    }

    /// Send the headers at once, then nothing until the first event after `d`: a reasoning model
    /// thinking before its first token.
    pub fn first_token_delay(mut self, d: Duration) -> Reply {
        self.first_token_delay = d;
        self
    }

    /// Send that many chunks, then go silent with the connection kept open.
    pub fn stall_after(mut self, chunks: usize) -> Reply {
        self.stall_after = Some(chunks);
        self
    }

    /// Send that many chunks, then close the connection abruptly.
    pub fn drop_after(mut self, chunks: usize) -> Reply {
        self.drop_after = Some(chunks);
        self
    }

    /// Send that many chunks, then a `data: {not json` line.
    pub fn garbage_after(mut self, chunks: usize) -> Reply {
        self.garbage_after = Some(chunks);
        self
    }

    /// An HTTP error with the provider's JSON error body.
    pub fn status(code: u16) -> Reply {
        Reply {
            error_status: Some(code),
            ..Default::default()
        }
    }

    /// A `Retry-After` header (seconds) on an error reply.
    pub fn retry_after(mut self, secs: u64) -> Reply {
        self.retry_after = Some(secs);
        self
    }

    /// 400 with the provider's context-length error.
    pub fn context_overflow() -> Reply {
        Reply {
            error_status: Some(400),
            context_overflow: true,
            ..Default::default()
        }
    }

    /// A mid-stream error of this type (e.g. "overloaded_error"): Anthropic `event: error` after
    /// a ping; OpenAI a data line with `{"error":{..}}`.
    pub fn error_event(kind: &str) -> Reply {
        Reply {
            error_event: Some(kind.to_string()),
            ..Default::default()
        }
    }

    /// Either vocabulary is accepted ("end_turn"/"stop", "tool_use"/"tool_calls",
    /// "max_tokens"/"length", "refusal"/"content_filter"); it is translated per endpoint.
    pub fn with_stop_reason(mut self, r: &str) -> Reply {
        self.stop_reason = Some(r.to_string());
        self
    }

    /// Reports no usage at all, as some local servers do (OpenAI: no usage chunk even when asked;
    /// Anthropic: no usage fields).
    pub fn without_usage(mut self) -> Reply {
        self.no_usage = true;
        self
    }

    /// Ends without the model's finish reason, as llama-cpp-python ends a request it interrupts
    /// (OpenAI: no `finish_reason`, then `[DONE]`; Anthropic: a null `stop_reason`).
    pub fn without_finish(mut self) -> Reply {
        self.no_finish = true;
        self
    }

    /// A 200 event stream with nothing in it.
    pub fn empty() -> Reply {
        Reply {
            empty: true,
            ..Default::default()
        }
    }

    /// An HTTP error (see [`Reply::status`]) whose body is exactly this text.
    pub fn with_error_body(mut self, body: &str) -> Reply {
        self.error_body = Some(body.to_string());
        self
    }

    fn text_pieces(&self) -> Vec<String> {
        match self.pace {
            Some((_, total)) => {
                const WORDS: [&str; 8] = ["the ", "agent ", "reads ", "a ", "ticket ", "and ", "writes ", "code "];
                (0..total).map(|i| WORDS[i % WORDS.len()].to_string()).collect()
            }
            None => split_pieces(&self.text, 3),
        }
    }

    /// Whether the reply stalls, drops or garbles its stream.
    fn is_faulty(&self) -> bool {
        self.stall_after.is_some() || self.drop_after.is_some() || self.garbage_after.is_some()
    }

    fn text_delay(&self) -> Duration {
        let pace = self
            .pace
            .map(|(n, _)| Duration::from_secs_f64(1.0 / f64::from(n)))
            .unwrap_or_default();
        self.chunk_delay.max(pace)
    }

    fn usage_numbers(&self) -> (u64, u64) {
        self.usage.unwrap_or(match self.pace {
            Some((_, total)) => (10, total as u64),
            None => (10, 5),
        })
    }

    fn call_ids(&self, next_id: &AtomicU64) -> Vec<String> {
        self.calls
            .iter()
            .map(|c| {
                c.id.clone()
                    .unwrap_or_else(|| format!("call_{}", next_id.fetch_add(1, Ordering::Relaxed)))
            })
            .collect()
    }
}

/// Splits `s` into up to `n` pieces at char boundaries (never empty pieces).
fn split_pieces(s: &str, n: usize) -> Vec<String> {
    if s.is_empty() {
        return Vec::new();
    }
    let chars: Vec<(usize, char)> = s.char_indices().collect();
    let n = n.clamp(1, chars.len());
    let mut cuts: Vec<usize> = (1..n).map(|k| chars[k * chars.len() / n].0).collect();
    cuts.dedup();
    let mut out = Vec::new();
    let mut start = 0;
    for c in cuts {
        out.push(s[start..c].to_string());
        start = c;
    }
    out.push(s[start..].to_string());
    out
}

/// What the rendering reads of a request.
#[derive(Default, serde::Deserialize)]
struct RequestHead {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
}

#[derive(Default, serde::Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

fn include_usage(req: &RequestHead) -> bool {
    req.stream_options
        .as_ref()
        .and_then(|o| o.include_usage)
        .unwrap_or(false)
}

fn model_of(req: &RequestHead) -> String {
    req.model
        .as_deref()
        .filter(|m| !m.is_empty())
        .unwrap_or("fake-model")
        .to_string()
}

fn render_openai(reply: &Reply, req: &RequestHead, next_id: &AtomicU64) -> Vec<Frame> {
    let model = model_of(req);
    let id = format!("chatcmpl-fake{}", next_id.fetch_add(1, Ordering::Relaxed));
    let created = chrono::Utc::now().timestamp();
    let chunk = |delta: Value, finish: Value| {
        json!({
            "id": id, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        })
    };
    let mut frames: Vec<Frame> = Vec::new();
    let mut push = |v: Value, delay: Duration| {
        frames.push(Frame {
            text: format!("data: {v}\n\n"),
            delay,
        })
    };
    let gap = reply.chunk_delay;
    push(
        chunk(json!({"role": "assistant", "content": ""}), Value::Null),
        Duration::ZERO,
    );
    for (text, _signature) in &reply.thinking {
        for piece in split_pieces(text, 3) {
            push(chunk(json!({"reasoning_content": piece}), Value::Null), gap);
        }
    }
    for piece in reply.text_pieces() {
        push(chunk(json!({"content": piece}), Value::Null), reply.text_delay());
    }
    if let Some(kind) = &reply.error_event {
        push(
            json!({"error": {"message": format!("fake {kind}"), "type": kind, "param": null, "code": kind}}),
            gap,
        );
        return frames;
    }
    let ids = reply.call_ids(next_id);
    for (i, (call, call_id)) in reply.calls.iter().zip(&ids).enumerate() {
        push(
            chunk(
                json!({"tool_calls": [{"index": i, "id": call_id, "type": "function",
                    "function": {"name": call.name, "arguments": ""}}]}),
                Value::Null,
            ),
            gap,
        );
        for frag in split_pieces(&call.args, 3) {
            push(
                chunk(
                    json!({"tool_calls": [{"index": i, "function": {"arguments": frag}}]}),
                    Value::Null,
                ),
                gap,
            );
        }
    }
    let finish = match reply.stop_reason.as_deref() {
        Some("end_turn") | Some("stop_sequence") => "stop".to_string(),
        Some("tool_use") => "tool_calls".to_string(),
        Some("max_tokens") => "length".to_string(),
        Some("refusal") => "content_filter".to_string(),
        Some(other) => other.to_string(),
        None if reply.calls.is_empty() => "stop".to_string(),
        None => "tool_calls".to_string(),
    };
    if !reply.no_finish {
        push(chunk(json!({}), json!(finish)), gap);
    }
    if include_usage(req) && !reply.no_usage {
        let (input, output) = reply.usage_numbers();
        push(
            json!({
                "id": id, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [],
                "usage": {
                    "prompt_tokens": input, "completion_tokens": output,
                    "total_tokens": input + output,
                    "prompt_tokens_details": {"cached_tokens": reply.cache.0},
                },
            }),
            gap,
        );
    }
    frames.push(Frame {
        text: "data: [DONE]\n\n".to_string(),
        delay: gap,
    });
    frames
}

fn render_anthropic(reply: &Reply, req: &RequestHead, next_id: &AtomicU64) -> Vec<Frame> {
    let model = model_of(req);
    let (input, output) = reply.usage_numbers();
    let mut frames: Vec<Frame> = Vec::new();
    let mut push = |event: &str, v: Value, delay: Duration| {
        frames.push(Frame {
            text: format!("event: {event}\ndata: {v}\n\n"),
            delay,
        })
    };
    let gap = reply.chunk_delay;
    push(
        "message_start",
        json!({"type": "message_start", "message": {
            "id": format!("msg_fake{}", next_id.fetch_add(1, Ordering::Relaxed)),
            "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": null, "stop_sequence": null,
            "usage": if reply.no_usage { Value::Null } else { json!({"input_tokens": input, "output_tokens": 1,
                      "cache_read_input_tokens": reply.cache.0,
                      "cache_creation_input_tokens": reply.cache.1}) },
        }}),
        Duration::ZERO,
    );
    push("ping", json!({"type": "ping"}), gap);
    if let Some(kind) = &reply.error_event {
        let message = match kind.as_str() {
            "overloaded_error" => "Overloaded".to_string(),
            other => format!("fake {other}"),
        };
        push(
            "error",
            json!({"type": "error", "error": {"type": kind, "message": message}}),
            gap,
        );
        return frames;
    }
    let mut index = 0usize;
    for (text, signature) in &reply.thinking {
        push(
            "content_block_start",
            json!({"type": "content_block_start", "index": index,
                   "content_block": {"type": "thinking", "thinking": ""}}),
            gap,
        );
        for piece in split_pieces(text, 3) {
            push(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index,
                       "delta": {"type": "thinking_delta", "thinking": piece}}),
                gap,
            );
        }
        push(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index,
                   "delta": {"type": "signature_delta", "signature": signature}}),
            gap,
        );
        push(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
            gap,
        );
        index += 1;
    }
    let pieces = reply.text_pieces();
    if !pieces.is_empty() {
        push(
            "content_block_start",
            json!({"type": "content_block_start", "index": index,
                   "content_block": {"type": "text", "text": ""}}),
            gap,
        );
        for piece in pieces {
            push(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index,
                       "delta": {"type": "text_delta", "text": piece}}),
                reply.text_delay(),
            );
        }
        push(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
            gap,
        );
        index += 1;
    }
    let ids = reply.call_ids(next_id);
    for (call, call_id) in reply.calls.iter().zip(&ids) {
        push(
            "content_block_start",
            json!({"type": "content_block_start", "index": index,
                   "content_block": {"type": "tool_use", "id": call_id, "name": call.name, "input": {}}}),
            gap,
        );
        let mut frags = vec![String::new()];
        frags.extend(split_pieces(&call.args, 3));
        for frag in frags {
            push(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index,
                       "delta": {"type": "input_json_delta", "partial_json": frag}}),
                gap,
            );
        }
        push(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
            gap,
        );
        index += 1;
    }
    let stop = match reply.stop_reason.as_deref() {
        Some("stop") => "end_turn".to_string(),
        Some("tool_calls") => "tool_use".to_string(),
        Some("length") => "max_tokens".to_string(),
        Some("content_filter") => "refusal".to_string(),
        Some(other) => other.to_string(),
        None if reply.calls.is_empty() => "end_turn".to_string(),
        None => "tool_use".to_string(),
    };
    let stop = if reply.no_finish { Value::Null } else { json!(stop) };
    push(
        "message_delta",
        if reply.no_usage {
            json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}})
        } else {
            json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
                   "usage": {"output_tokens": output}})
        },
        gap,
    );
    push("message_stop", json!({"type": "message_stop"}), gap);
    frames
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_pieces_respects_char_boundaries() {
        assert_eq!(split_pieces("", 3), Vec::<String>::new());
        assert_eq!(split_pieces("ab", 3), vec!["a", "b"]);
        let s = "héllo wörld ✓";
        for n in 1..20 {
            let p = split_pieces(s, n);
            assert_eq!(p.concat(), s);
            assert!(p.iter().all(|x| !x.is_empty()));
        }
    }
}
