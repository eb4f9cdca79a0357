//! Shared by the integration tests: a running service on a fresh database, JSON request helpers,
//! and a server-sent events client that exposes every frame the server sends.

// Each test file uses a different part of this module.
#![allow(dead_code)]

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::Duration;

pub mod echo_desk;
pub mod logs;
pub mod mcp_client;
pub mod postgres;
pub mod tool_server;

use agentdesk::app::{App, Mode};
use agentdesk::config::Config;
use agentdesk::llm::Providers;
use futures::StreamExt;
use reqwest::header::HeaderMap;
pub use reqwest::StatusCode;
use serde_json::Value;
use sqlx::PgPool;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Logs go to the test output when `RUST_LOG` is set, which helps when a test fails.
fn init_tracing() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("RUST_LOG").is_some() {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
                .with_test_writer()
                .try_init();
        }
    });
}

/// A running agentdesk on its own empty database.
pub struct TestApp {
    /// Base URL, e.g. `http://127.0.0.1:41234`.
    pub url: String,
    pub client: reqwest::Client,
    /// For event streams, which stay open longer than any request timeout.
    pub stream_client: reqwest::Client,
    /// A pool of its own on the test database, for assertions behind the API's back.
    pub pool: PgPool,
    pub database_url: String,
    /// Sent as a bearer token by the request helpers (the first configured token, if any).
    pub token: Option<String>,
    app: Option<App>,
}

/// Row counts of the tables a request may change; equal snapshots mean a request changed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub tickets: i64,
    pub comments: i64,
    pub events: i64,
    pub agents: i64,
}

/// The OpenAI-compatible provider pointed at a fake model server, and no other.
pub fn fake_providers(llm: &testkit::fake_llm::FakeLlm) -> Providers {
    Providers::new(
        Some(agentdesk::llm::openai::OpenAi::new(llm.openai_base_url(), None)),
        None,
    )
}

impl TestApp {
    /// The API alone (no worker claims anything) with the test defaults.
    pub async fn spawn() -> TestApp {
        TestApp::spawn_mode(Mode::Api, |_| {}).await
    }

    /// The API alone, with the test defaults changed by `configure`.
    pub async fn spawn_with(configure: impl FnOnce(&mut Config)) -> TestApp {
        TestApp::spawn_mode(Mode::Api, configure).await
    }

    /// Defaults: listens on 127.0.0.1:0, a fresh database, `: ping` every second, 8 connections.
    pub async fn spawn_mode(mode: Mode, configure: impl FnOnce(&mut Config)) -> TestApp {
        let providers = Providers::from_config(&Config::from_env().expect("the environment's configuration"));
        TestApp::spawn_full(mode, providers, configure).await
    }

    /// API and workers with the OpenAI-compatible provider pointed at a fake model server.
    pub async fn spawn_with_llm(llm: &testkit::fake_llm::FakeLlm, configure: impl FnOnce(&mut Config)) -> TestApp {
        TestApp::spawn_full(Mode::Serve, fake_providers(llm), configure).await
    }

    pub async fn spawn_full(mode: Mode, providers: Providers, configure: impl FnOnce(&mut Config)) -> TestApp {
        init_tracing();
        let database_url = testkit::testing::fresh_database()
            .await
            .expect("create a test database");
        let mut config = Config {
            database_url: Some(database_url.clone()),
            addr: "127.0.0.1:0".parse().unwrap(),
            sse_ping: Duration::from_secs(1),
            db_max_connections: 8,
            shutdown_grace: Duration::from_secs(2),
            ..Config::default()
        };
        configure(&mut config);
        let database_url = config.database_url.clone().expect("a database URL");
        let token = config.api_tokens.first().cloned();
        let app = App::start(config, mode, providers).await.expect("start agentdesk");
        let url = if app.addr.is_some() { app.url() } else { String::new() };
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(4)
            .connect(&database_url)
            .await
            .expect("connect to the test database");
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .expect("an HTTP client");
        let stream_client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .build()
            .expect("an HTTP client");
        TestApp {
            url,
            client,
            stream_client,
            pool,
            database_url,
            token,
            app: Some(app),
        }
    }

    pub fn app(&self) -> &App {
        self.app.as_ref().expect("the app is running")
    }

    /// Stops the service as a signal would, and waits for it.
    pub async fn shutdown(mut self) {
        if let Some(app) = self.app.take() {
            app.shutdown().await;
        }
        self.pool.close().await;
    }

    /// Tickets this service's workers are running now: 0 once every loop they claimed has ended
    /// (after its last write).
    pub fn running_tickets(&self) -> usize {
        self.app().running_tickets()
    }

    /// Waits until this service's workers run no ticket (30 s at most).
    pub async fn wait_idle(&self) {
        let what = Describe(|| format!("the workers to be idle ({} running)", self.running_tickets()));
        eventually(what, Duration::from_secs(30), || async {
            (self.running_tickets() == 0).then_some(())
        })
        .await
    }

    /// Waits until the event hub has read every event committed so far (30 s at most): a stream
    /// "from now" opened afterwards starts after them, and they have been sent to the streams
    /// open before.
    pub async fn wait_events_read(&self) {
        let mut conn = self.pool.acquire().await.expect("a connection");
        let head = agentdesk::db::events::head(&mut conn)
            .await
            .expect("read the log's head");
        drop(conn);
        let hub = &self.app().hub;
        let what = Describe(|| format!("the event hub to read up to {head} (at {})", hub.position()));
        eventually(what, Duration::from_secs(30), || async {
            (hub.position() >= head).then_some(())
        })
        .await
    }

    /// `GET /metrics` as text. The counters are the process's: every service a test binary
    /// starts counts in them.
    pub async fn metrics(&self) -> String {
        let response = self.request(reqwest::Method::GET, "/metrics").send().await;
        response.expect("scrape /metrics").text().await.expect("read /metrics")
    }

    pub fn endpoint(&self, path: &str) -> String {
        format!("{}{}", self.url, path)
    }

    /// A request to `path` carrying the helper's token, if any.
    pub fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let builder = self.client.request(method, self.endpoint(path));
        match &self.token {
            Some(t) => builder.bearer_auth(t),
            None => builder,
        }
    }

    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        send(self.request(reqwest::Method::GET, path)).await
    }

    pub async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        send(self.request(reqwest::Method::POST, path).json(&body)).await
    }

    /// A POST with a body sent exactly as given (e.g. malformed JSON).
    pub async fn post_raw(&self, path: &str, body: impl Into<reqwest::Body>) -> (StatusCode, Value) {
        send(
            self.request(reqwest::Method::POST, path)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body),
        )
        .await
    }

    pub async fn patch(&self, path: &str, body: Value) -> (StatusCode, Value) {
        send(self.request(reqwest::Method::PATCH, path).json(&body)).await
    }

    pub async fn put(&self, path: &str, body: Value) -> (StatusCode, Value) {
        send(self.request(reqwest::Method::PUT, path).json(&body)).await
    }

    pub async fn delete(&self, path: &str) -> (StatusCode, Value) {
        send(self.request(reqwest::Method::DELETE, path)).await
    }

    /// Creates a ticket, insisting on 201.
    pub async fn create_ticket(&self, body: Value) -> Value {
        let (status, ticket) = self.post("/v1/tickets", body.clone()).await;
        assert_eq!(status, StatusCode::CREATED, "creating {body}: {ticket}");
        ticket
    }

    /// Adds a comment, insisting on 201.
    pub async fn comment(&self, ticket: &str, text: &str) -> Value {
        let (status, comment) = self
            .post(
                &format!("/v1/tickets/{ticket}/comments"),
                serde_json::json!({ "text": text }),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "commenting on {ticket}: {comment}");
        comment
    }

    /// Follows `next_cursor` from `path` (which may already have a query) and returns every item.
    pub async fn list_all(&self, path: &str) -> Vec<Value> {
        let sep = if path.contains('?') { '&' } else { '?' };
        let mut items = vec![];
        let mut cursor: Option<String> = None;
        for _ in 0..10_000 {
            let page_path = match &cursor {
                Some(c) => format!("{path}{sep}cursor={c}"),
                None => path.to_owned(),
            };
            let (status, page) = self.get(&page_path).await;
            assert_eq!(status, StatusCode::OK, "GET {page_path}: {page}");
            items.extend(page["items"].as_array().expect("items").iter().cloned());
            match page["next_cursor"].as_str() {
                Some(c) => cursor = Some(c.to_owned()),
                None => return items,
            }
        }
        panic!("{path}: the pages never end");
    }

    pub async fn counts(&self) -> Counts {
        let count = |table: &'static str| {
            let pool = self.pool.clone();
            async move {
                sqlx::query_scalar::<_, i64>(&format!("SELECT count(*) FROM {table}"))
                    .fetch_one(&pool)
                    .await
                    .expect("count rows")
            }
        };
        Counts {
            tickets: count("tickets").await,
            comments: count("comments").await,
            events: count("events").await,
            agents: count("agents").await,
        }
    }

    /// Opens an SSE stream at `path` (with the helper's token).
    pub async fn sse(&self, path: &str, last_event_id: Option<&str>) -> SseClient {
        let mut request = self.stream_client.get(self.endpoint(path));
        if let Some(t) = &self.token {
            request = request.bearer_auth(t);
        }
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        let mut client = SseClient::open(request)
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        assert!(
            client.wait_ready(Duration::from_secs(5)).await,
            "GET {path}: no retry hint"
        );
        client
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        // A test that panicked still stops its streams and background tasks.
        if let Some(app) = &self.app {
            app.shutdown.cancel();
        }
    }
}

/// Sends a request and reads the answer as JSON (an empty body is `null`, other text a string).
pub async fn send(request: reqwest::RequestBuilder) -> (StatusCode, Value) {
    let response = request.send().await.expect("send the request");
    let status = response.status();
    let bytes = response.bytes().await.expect("read the response body");
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
    };
    (status, body)
}

/// Asserts an error answer: the status and `{"error": {"code", "message"}}` with this code.
#[track_caller]
pub fn assert_error(answer: &(StatusCode, Value), status: StatusCode, code: &str) {
    let (got, body) = answer;
    assert_eq!(*got, status, "expected {status} {code}, got {got}: {body}");
    assert_eq!(body["error"]["code"], code, "error code of {body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(!message.is_empty(), "an error has a message: {body}");
}

/// One SSE event with data.
#[derive(Debug, Clone)]
pub struct SseEvent {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: Value,
}

impl SseEvent {
    pub fn kind(&self) -> &str {
        self.data["kind"].as_str().unwrap_or_default()
    }

    pub fn seq(&self) -> Option<i64> {
        self.data["seq"].as_i64()
    }

    pub fn ticket_id(&self) -> &str {
        self.data["ticket_id"].as_str().unwrap_or_default()
    }
}

#[derive(Default)]
struct SseState {
    pings: AtomicUsize,
    ended: AtomicBool,
    /// The connection is over (events may still wait in the channel).
    closed: AtomicBool,
    retry_ms: Mutex<Option<u64>>,
    error: Mutex<Option<String>>,
}

/// A server-sent events client over a reqwest byte stream. Frames are parsed in a background task
/// so waiting with a timeout never loses a half-read frame; dropping the client closes the
/// connection.
pub struct SseClient {
    pub status: StatusCode,
    pub headers: HeaderMap,
    events: mpsc::UnboundedReceiver<SseEvent>,
    state: Arc<SseState>,
    reader: tokio::task::AbortHandle,
    last_id: Option<String>,
}

impl SseClient {
    /// Connects to `url`, resuming after `last_event_id` when given.
    pub async fn connect(url: &str, last_event_id: Option<&str>) -> anyhow::Result<SseClient> {
        let client = reqwest::Client::new();
        let mut request = client.get(url);
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        SseClient::open(request).await
    }

    /// Sends `request` and follows its event stream; any answer but 200 is an error with its body.
    pub async fn open(request: reqwest::RequestBuilder) -> anyhow::Result<SseClient> {
        let response = request
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .send()
            .await?;
        let status = response.status();
        if status != StatusCode::OK {
            let body = response.text().await.unwrap_or_default();
            anyhow::bail!("status {status}: {body}");
        }
        let headers = response.headers().clone();
        let state = Arc::new(SseState::default());
        let (tx, events) = mpsc::unbounded_channel();
        let reader = tokio::spawn(read_frames(response, tx, state.clone())).abort_handle();
        Ok(SseClient {
            status,
            headers,
            events,
            state,
            reader,
            last_id: None,
        })
    }

    /// Waits for the server's first frame, the `retry:` hint: from then on the stream's starting
    /// point is fixed, so events written afterwards are sure to be sent.
    pub async fn wait_ready(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while self.retry_ms().is_none() {
            if Instant::now() >= deadline || self.state.closed.load(Ordering::SeqCst) {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        true
    }

    /// The next event with data, or None when `timeout` passes or the stream has ended.
    pub async fn next_event(&mut self, timeout: Duration) -> Option<SseEvent> {
        match tokio::time::timeout(timeout, self.events.recv()).await {
            Ok(Some(event)) => {
                if event.id.is_some() {
                    self.last_id.clone_from(&event.id);
                }
                Some(event)
            }
            Ok(None) => {
                self.state.ended.store(true, Ordering::SeqCst);
                None
            }
            Err(_) => None,
        }
    }

    /// Events until one satisfies `pred` (included), the stream ends, or `timeout` passes overall.
    pub async fn collect_until(&mut self, mut pred: impl FnMut(&SseEvent) -> bool, timeout: Duration) -> Vec<SseEvent> {
        let deadline = Instant::now() + timeout;
        let mut out = vec![];
        while let Some(event) = self
            .next_event(deadline.saturating_duration_since(Instant::now()))
            .await
        {
            let done = pred(&event);
            out.push(event);
            if done {
                break;
            }
        }
        out
    }

    /// Exactly `n` events, or fewer if the stream ends or `timeout` passes first.
    pub async fn collect_n(&mut self, n: usize, timeout: Duration) -> Vec<SseEvent> {
        let mut left = n;
        if n == 0 {
            return vec![];
        }
        self.collect_until(
            |_| {
                left -= 1;
                left == 0
            },
            timeout,
        )
        .await
    }

    /// Every event that arrives within `window`.
    pub async fn collect_for(&mut self, window: Duration) -> Vec<SseEvent> {
        self.collect_until(|_| false, window).await
    }

    /// The `id:` of the last event received: the cursor to resume from.
    pub fn last_id(&self) -> Option<&str> {
        self.last_id.as_deref()
    }

    pub fn saw_ping(&self) -> bool {
        self.pings() > 0
    }

    pub fn pings(&self) -> usize {
        self.state.pings.load(Ordering::SeqCst)
    }

    /// The last `retry:` hint.
    pub fn retry_ms(&self) -> Option<u64> {
        *self.state.retry_ms.lock().unwrap()
    }

    /// Whether the server closed the stream and every event before that was taken.
    pub fn ended(&self) -> bool {
        self.state.ended.load(Ordering::SeqCst)
    }

    /// Why the stream broke off, when it did not end cleanly.
    pub fn error(&self) -> Option<String> {
        self.state.error.lock().unwrap().clone()
    }

    /// Waits until the server closes the stream, returning the events still received; None if it
    /// is still open after `timeout`.
    pub async fn wait_end(&mut self, timeout: Duration) -> Option<Vec<SseEvent>> {
        let deadline = Instant::now() + timeout;
        let mut rest = vec![];
        loop {
            if let Some(event) = self
                .next_event(deadline.saturating_duration_since(Instant::now()))
                .await
            {
                rest.push(event);
                continue;
            }
            if self.ended() {
                return Some(rest);
            }
            if Instant::now() >= deadline {
                return None;
            }
        }
    }
}

impl Drop for SseClient {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// Reads the byte stream into events with the desk's own parser (`net::sse`).
async fn read_frames(response: reqwest::Response, tx: mpsc::UnboundedSender<SseEvent>, state: Arc<SseState>) {
    let mut bytes = response.bytes_stream();
    let mut parser = agentdesk::net::sse::Parser::new();
    let mut frames = vec![];
    while let Some(chunk) = bytes.next().await {
        let chunk = match chunk {
            Ok(c) => c,
            Err(err) => {
                *state.error.lock().unwrap() = Some(err.to_string());
                break;
            }
        };
        parser.feed(&chunk, &mut frames);
        // The desk's only comment is its keep-alive ping.
        state.pings.store(parser.comments, Ordering::SeqCst);
        if let Some(ms) = parser.retry_ms {
            *state.retry_ms.lock().unwrap() = Some(ms);
        }
        for frame in frames.drain(..) {
            let data = serde_json::from_str(&frame.data).unwrap_or(Value::String(frame.data));
            let _ = tx.send(SseEvent {
                // This event's own id, not the one it inherited.
                id: frame.has_id.then(|| frame.id.unwrap_or_default()),
                event: frame.event,
                data,
            });
        }
    }
    state.closed.store(true, Ordering::SeqCst);
    // Dropping `tx` tells the client the stream is over.
}

/// Polls `probe` every 20 ms until it returns `Some`, and returns that; panics naming `what` (and
/// how long it waited) once `within` has passed. Tests wait on facts with it, never on a sleep.
/// `what` is formatted only then: `Describe` lets it show the state last seen.
pub async fn eventually<T, F, Fut>(what: impl std::fmt::Display, within: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        let waited = started.elapsed();
        assert!(waited < within, "waited {waited:?} in vain for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A description made when it is shown, e.g. with the state a probe saw last.
pub struct Describe<F: Fn() -> String>(pub F);

impl<F: Fn() -> String> std::fmt::Display for Describe<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&(self.0)())
    }
}

/// The value of a Prometheus series on `page` (its name with any labels, exactly as the text
/// format writes them, e.g. `agentdesk_requeues_total{reason="retry"}`); 0 when it is absent.
pub fn metric_value(page: &str, series: &str) -> f64 {
    page.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Polls a ticket until it has `status` (20 s at most).
pub async fn wait_status(app: &TestApp, key: &str, status: &str) -> Value {
    let last = &Mutex::new(Value::Null);
    let what = Describe(|| format!("{key} to become {status}: {}", last.lock().unwrap()));
    eventually(what, Duration::from_secs(20), || async move {
        let (code, ticket) = app.get(&format!("/v1/tickets/{key}")).await;
        let found = code == StatusCode::OK && ticket["status"] == status;
        *last.lock().unwrap() = ticket.clone();
        found.then_some(ticket)
    })
    .await
}

/// The kinds of a ticket's persisted events, in seq order.
pub async fn event_kinds(app: &TestApp, ticket_id: &str) -> Vec<String> {
    sqlx::query_scalar("SELECT kind FROM events WHERE ticket_id = $1::uuid ORDER BY seq")
        .bind(ticket_id)
        .fetch_all(&app.pool)
        .await
        .unwrap()
}

/// The `data` of a ticket's persisted events of one kind, in seq order.
pub async fn event_data(app: &TestApp, ticket_id: &str, kind: &str) -> Vec<Value> {
    sqlx::query_scalar("SELECT data FROM events WHERE ticket_id = $1::uuid AND kind = $2 ORDER BY seq")
        .bind(ticket_id)
        .bind(kind)
        .fetch_all(&app.pool)
        .await
        .unwrap()
}

/// Where `kind` first stands in `kinds`.
pub fn position(kinds: &[String], kind: &str) -> usize {
    kinds
        .iter()
        .position(|k| k == kind)
        .unwrap_or_else(|| panic!("no {kind} in {kinds:?}"))
}

/// A port nothing listens on now, for a process the test starts.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child process (the binary, run by a test) killed when the test ends, however it ends.
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits until `base` answers `/readyz` with success; panics after `within`.
pub async fn wait_ready(client: &reqwest::Client, base: &str, within: Duration) {
    eventually(format!("{base} to become ready"), within, || async move {
        let answer = client.get(format!("{base}/readyz")).send().await;
        answer.ok().filter(|r| r.status().is_success()).map(drop)
    })
    .await
}

/// Creates a ticket on the service at `base` (for tests that run the binary) and returns it.
pub async fn create_ticket_at(client: &reqwest::Client, base: &str, body: Value) -> Value {
    let (status, ticket) = send(client.post(format!("{base}/v1/tickets")).json(&body)).await;
    assert_eq!(status, StatusCode::CREATED, "creating {body}: {ticket}");
    ticket
}

/// Polls the service at `base` (another process) until ticket `key` has `status`; returns the
/// ticket. Panics with the ticket as last seen once `deadline` has passed.
pub async fn wait_status_at(client: &reqwest::Client, base: &str, key: &str, status: &str, deadline: Instant) -> Value {
    let last = &Mutex::new(Value::Null);
    let what = Describe(|| format!("{key} to become {status}: {}", last.lock().unwrap()));
    let within = deadline.saturating_duration_since(Instant::now());
    eventually(what, within, || async move {
        let (_, ticket) = send(client.get(format!("{base}/v1/tickets/{key}"))).await;
        let found = ticket["status"] == status;
        *last.lock().unwrap() = ticket.clone();
        found.then_some(ticket)
    })
    .await
}

/// Runs the real binary (`agentdesk serve`) against `database_url` on `port`, its model server at
/// `llm_base_url`, with a 2 s lease, 16 workers and `env` on top; its log goes to `log`.
pub fn spawn_binary(
    database_url: &str,
    llm_base_url: &str,
    port: u16,
    log: &str,
    env: &[(&str, &str)],
) -> std::process::Child {
    let log = std::fs::File::create(log).unwrap();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_agentdesk"));
    command
        .arg("serve")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("DATABASE_URL", database_url)
        .env("OPENAI_BASE_URL", llm_base_url)
        .env("AGENTDESK_ADDR", format!("127.0.0.1:{port}"))
        .env("AGENTDESK_LEASE_SECS", "2")
        .env("AGENTDESK_WORKERS", "16")
        .env("RUST_LOG", "info");
    for (name, value) in env {
        command.env(name, value);
    }
    command
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start the agentdesk binary")
}
