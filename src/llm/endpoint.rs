//! What every HTTP model provider shares, whatever its wire format: where it is (the base URL),
//! its key, the extra headers and timeout of a provider defined over the API, its concurrency
//! limit, and the client that keeps its connections. A wire format ([`WireFormat`]) adds only
//! its request body, its stream parser and how it sends the key, so a new one is one new file.

use std::marker::PhantomData;
use std::time::Duration;

use reqwest::header::ACCEPT;
use serde::Serialize;

use super::error::LlmError;
use super::provider::Provider;
use super::stream::{self, StreamParser};
use super::types::{Delta, ModelRequest, ModelResponse};
use crate::net::expand_env;

/// How a wire format sends the API key.
#[derive(Clone, Copy, Debug)]
pub(crate) enum KeyHeader {
    /// `Authorization: Bearer <key>`.
    Bearer,
    /// The key as the value of this header.
    Named(&'static str),
}

/// One provider API: the path requests go to, its fixed headers, its request body and the
/// reading of its event stream.
pub(crate) trait WireFormat: Send + Sync + 'static {
    /// The provider's name, as [`Provider::name`] gives it.
    const NAME: &'static str;
    /// Where requests are posted, after the base URL.
    const PATH: &'static str;
    /// Headers every request carries (an API version), sent first.
    const HEADERS: &'static [(&'static str, &'static str)] = &[];
    const KEY_HEADER: KeyHeader;

    /// The base URL as configured, trimmed, made into the one requests are sent to.
    fn base_url(trimmed: String) -> String {
        trimmed
    }

    /// The request body, borrowing from the request.
    fn body(req: &ModelRequest) -> impl Serialize + '_;

    /// Accumulates one response; it keeps the key to redact it from error messages.
    fn parser<'k>(model: &str, api_key: Option<&'k str>) -> impl StreamParser + 'k;
}

/// What a provider adds to every request: headers (values are `${env:NAME}` templates, expanded
/// as the request is sent) and an overall timeout.
#[derive(Clone, Debug, Default)]
struct Extras {
    headers: Vec<(String, String)>,
    timeout: Option<Duration>,
}

/// A model provider reached over HTTP that speaks the wire format `W`.
pub struct HttpProvider<W> {
    base_url: String,
    /// `base_url` and the format's path, parsed once: parsing it per request was a measurable
    /// share of a short ticket's CPU. None when it does not parse; then each request parses the
    /// text again and fails as it always did.
    endpoint: Option<reqwest::Url>,
    /// A key, or a `${env:NAME}` template expanded per request.
    api_key: Option<String>,
    client: reqwest::Client,
    extras: Extras,
    /// Model requests in flight to this provider at most, across every process (see
    /// `agent::capacity`); None: no limit.
    max_concurrent: Option<u32>,
    format: PhantomData<fn() -> W>,
}

// Not derived: a derive would ask the format marker to be Clone.
impl<W> Clone for HttpProvider<W> {
    fn clone(&self) -> Self {
        HttpProvider {
            base_url: self.base_url.clone(),
            endpoint: self.endpoint.clone(),
            api_key: self.api_key.clone(),
            client: self.client.clone(),
            extras: self.extras.clone(),
            max_concurrent: self.max_concurrent,
            format: PhantomData,
        }
    }
}

// The wire formats stay inside the crate; outside it a provider is named by its alias (`OpenAi`,
// `Anthropic`), which satisfies the bound.
#[expect(private_bounds, reason = "the wire formats are crate-private")]
impl<W: WireFormat> HttpProvider<W> {
    /// An empty key counts as none (local servers need no key).
    pub fn new(base_url: String, api_key: Option<String>) -> Self {
        let base_url = W::base_url(base_url.trim().trim_end_matches('/').to_string());
        HttpProvider {
            endpoint: reqwest::Url::parse(&format!("{base_url}{}", W::PATH)).ok(),
            base_url,
            api_key: api_key.filter(|k| !k.is_empty()),
            client: client(false),
            extras: Extras::default(),
            max_concurrent: None,
            format: PhantomData,
        }
    }

    /// Extra headers (templates) and an overall timeout for each request.
    pub fn with_extras(mut self, headers: Vec<(String, String)>, timeout: Option<Duration>) -> Self {
        self.extras = Extras { headers, timeout };
        self
    }

    /// Requests go over HTTP/2 from the first byte, all of them multiplexed on one connection (the
    /// server must speak it, also over plain http). Off, each request in flight holds an
    /// HTTP/1.1 connection of its own: a file descriptor and its buffers, per ticket waiting on
    /// the model.
    pub fn with_http2(mut self, http2: bool) -> Self {
        self.client = client(http2);
        self
    }

    /// At most `n` model requests in flight to this provider across every process; None: no limit.
    pub fn with_max_concurrent(mut self, n: Option<u32>) -> Self {
        self.max_concurrent = n;
        self
    }

    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    pub fn has_key(&self) -> bool {
        self.api_key.is_some()
    }

    /// The streaming POST of `body`, with the key (already expanded) and the extras.
    fn request(&self, body: &impl Serialize, api_key: Option<&str>) -> reqwest::RequestBuilder {
        let mut rb = match &self.endpoint {
            Some(url) => self.client.post(url.clone()),
            None => self.client.post(format!("{}{}", self.base_url, W::PATH)),
        };
        for (name, value) in W::HEADERS {
            rb = rb.header(*name, *value);
        }
        rb = rb.header(ACCEPT, "text/event-stream").json(body);
        if let Some(key) = api_key {
            rb = match W::KEY_HEADER {
                KeyHeader::Bearer => rb.bearer_auth(key),
                KeyHeader::Named(name) => rb.header(name, key),
            };
        }
        for (name, value) in &self.extras.headers {
            rb = rb.header(name.as_str(), expand_env(value).as_ref());
        }
        match self.extras.timeout {
            Some(timeout) => rb.timeout(timeout),
            None => rb,
        }
    }
}

#[async_trait::async_trait]
impl<W: WireFormat> Provider for HttpProvider<W> {
    fn name(&self) -> &'static str {
        W::NAME
    }

    fn max_concurrent(&self) -> Option<u32> {
        self.max_concurrent
    }

    async fn stream(
        &self,
        req: &ModelRequest,
        on_delta: &mut (dyn FnMut(Delta) + Send),
        idle_timeout: Duration,
    ) -> Result<ModelResponse, LlmError> {
        let key = self.api_key.as_deref().map(expand_env);
        let key = key.as_deref();
        let rb = self.request(&W::body(req), key);
        stream::run(rb, idle_timeout, key, W::parser(&req.model, key), on_delta).await
    }
}

/// Bytes a provider may send on its HTTP/2 connection before the desk reads them: a bound, not an
/// allocation (only frames the loops have not read yet are held).
const HTTP2_CONNECTION_WINDOW: u32 = 64 << 20;
/// The same for one response.
const HTTP2_STREAM_WINDOW: u32 = 1 << 20;

/// One client per provider so connections (and TLS sessions) are reused across turns. No overall
/// timeout: a long answer legitimately streams for minutes; silence is caught by the idle timeout.
///
/// HTTP/2 only when asked for: the client keeps one HTTP/2 connection per host and does not open a
/// second when the server's limit of streams per connection is reached, so against a server with
/// a small limit, negotiating it by itself would queue requests that HTTP/1.1 sends at once.
fn client(http2: bool) -> reqwest::Client {
    let builder = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .pool_max_idle_per_host(64)
        .pool_idle_timeout(Duration::from_secs(90))
        .tcp_nodelay(true);
    let builder = if http2 {
        // Pings keep a connection that carries only silent streams (a model thinking for
        // minutes) from being dropped by a proxy, and find a dead one. A wide connection window:
        // the client takes a connection down (GOAWAY, `too_many_data_frames`) when more small
        // DATA frames wait unread than half that window allows, and thousands of streams
        // finishing at once each bring a frame per token.
        builder
            .http2_prior_knowledge()
            .http2_keep_alive_interval(Duration::from_secs(30))
            .http2_keep_alive_while_idle(true)
            .http2_initial_connection_window_size(HTTP2_CONNECTION_WINDOW)
            .http2_initial_stream_window_size(HTTP2_STREAM_WINDOW)
    } else {
        builder.http1_only()
    };
    builder
        .build()
        .expect("the HTTP client configuration is static and valid")
}
