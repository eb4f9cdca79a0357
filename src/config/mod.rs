//! One typed configuration, from command-line options, each of which can also be set by an
//! environment variable (also from `.env`). Secrets are never printed.

mod host;
mod values;

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, CommandFactory, FromArgMatches, Parser};

pub use host::HostEnv;
use values::{
    address, boolean, claimers, days, interval, log_format, max_concurrent, optional_address, parsed, path, positive,
    public_url, runtime_threads, seconds, seconds_list, text, Setting,
};
pub use values::{Address, Days, MaxConcurrent, SecondsList};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        })
    }
}

#[derive(Clone)]
pub struct Config {
    /// None: run a private PostgreSQL under `data_dir` (see `embedded_pg`).
    pub database_url: Option<String>,
    pub addr: SocketAddr,
    /// Tickets one process works on at once.
    pub workers: usize,
    /// Claim statements that may run at once while a backlog lasts (`AGENTDESK_CLAIMERS`; default
    /// `stage_parallelism(1)`: one per four cores, at most 4).
    pub claimers: usize,
    pub lease: Duration,
    pub stream_idle: Duration,
    /// Bearer tokens as configured; one written `read:TOKEN` may only read (GET and streams).
    pub api_tokens: Vec<String>,
    /// Serve an API without tokens on an address other than loopback (`AGENTDESK_ALLOW_NO_AUTH`).
    pub allow_no_auth: bool,
    /// Model of the `default` agent created when no agent exists.
    pub model: Option<String>,
    pub log_format: LogFormat,
    /// Interval of `: ping` comments on SSE streams (at most 15 s).
    pub sse_ping: Duration,
    /// How long running steps may take to finish on shutdown before their tickets are released.
    pub shutdown_grace: Duration,
    /// Where the embedded database keeps its data.
    pub data_dir: PathBuf,
    pub db_max_connections: u32,
    /// Threads of the async runtime that runs the process's tasks.
    pub runtime_threads: usize,
    /// Providers and agents applied at start-up (`AGENTDESK_AGENTS_FILE`), as `agents apply` does.
    pub agents_file: Option<PathBuf>,
    /// Outbound requests made on a user's behalf (HTTP tools, MCP servers, webhooks) may reach
    /// loopback, private, link-local and metadata addresses (`AGENTDESK_ALLOW_PRIVATE_URLS`).
    pub allow_private_urls: bool,
    /// Delays before a failed webhook delivery's retries; after the last, the event is given up.
    pub webhook_retry: Vec<Duration>,
    /// Limit of one webhook delivery attempt.
    pub webhook_timeout: Duration,
    /// How long a process holds an endpoint's deliveries without renewing its lease: the claims'
    /// lease (`AGENTDESK_LEASE_SECS`), so a dead process's deliveries resume as soon as its tickets.
    pub webhook_lease: Duration,
    /// Webhook deliveries in flight at once in one process.
    pub webhook_concurrency: usize,
    /// MCP servers read at start-up (`AGENTDESK_MCP_CONFIG`): a `{"mcpServers": …}` JSON file.
    pub mcp_config: Option<PathBuf>,
    /// Whether MCP connections may reach private addresses; None: `AGENTDESK_ALLOW_PRIVATE_URLS`
    /// decides (tests set it here, since the environment is shared by parallel tests).
    pub mcp_allow_private: Option<bool>,
    /// Also serve `GET /metrics` here (for worker processes, which serve no API).
    pub metrics_addr: Option<SocketAddr>,
    /// How many projects get a `project` label of their own in `/metrics`; the rest share
    /// `_other` (`AGENTDESK_METRICS_PROJECTS`).
    pub metrics_projects: usize,
    /// The built-in providers (`OPENAI_API_KEY`/`OPENAI_BASE_URL`, `ANTHROPIC_API_KEY`/
    /// `ANTHROPIC_BASE_URL`); each is configured when its key or its base URL is set.
    pub openai: BuiltInProvider,
    pub anthropic: BuiltInProvider,
    /// The address clients reach the desk at (`AGENTDESK_PUBLIC_URL`), without a trailing `/`:
    /// the base of the A2A card's endpoints. None: each request's own scheme and host.
    pub public_url: Option<String>,
    /// Host names besides this machine's that a desk without tokens answers
    /// (`AGENTDESK_ALLOWED_HOSTS`, lower case; `.example.com` also names its subdomains, `*` any host).
    pub allowed_hosts: Vec<String>,
    /// How long a request to a non-streaming endpoint may take before it is answered 503.
    pub request_timeout: Duration,
    /// Model requests in flight to the built-in providers at most, across every process
    /// (`AGENTDESK_OPENAI_MAX_CONCURRENT`, `AGENTDESK_ANTHROPIC_MAX_CONCURRENT`); None: no limit.
    pub openai_max_concurrent: Option<u32>,
    pub anthropic_max_concurrent: Option<u32>,
    /// Finished tickets and webhook delivery records older than this are deleted
    /// (`AGENTDESK_RETENTION_DAYS`); None keeps everything.
    pub retention: Option<Duration>,
    /// The host's own variables (`HOSTNAME`, `AGENTDESK_CONTAINER`, `AGENTDESK_PG_BINDIR`).
    pub host: HostEnv,
}

/// `AGENTDESK_WEBHOOK_RETRY_SECS`'s default.
pub const DEFAULT_WEBHOOK_RETRY_SECS: &str = "5,300,1800,7200,18000,36000,36000";

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("database_url", &self.database_url.as_ref().map(|_| "<set>"))
            .field("addr", &self.addr)
            .field("workers", &self.workers)
            .field("lease", &self.lease)
            .field("stream_idle", &self.stream_idle)
            .field("api_tokens", &format!("<{} tokens>", self.api_tokens.len()))
            .field("model", &self.model)
            .field("log_format", &self.log_format)
            .finish_non_exhaustive()
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            database_url: None,
            addr: LOOPBACK_ADDR,
            workers: 64,
            claimers: stage_parallelism(1),
            lease: Duration::from_secs(60),
            stream_idle: Duration::from_secs(90),
            api_tokens: vec![],
            allow_no_auth: false,
            model: None,
            log_format: LogFormat::Text,
            sse_ping: Duration::from_secs(10),
            // Under Docker's default stop timeout (10 s), so the release finishes before the kill.
            shutdown_grace: Duration::from_secs(8),
            data_dir: PathBuf::from(".agentdesk"),
            db_max_connections: default_db_connections(),
            runtime_threads: default_runtime_threads(),
            agents_file: None,
            allow_private_urls: false,
            webhook_retry: DEFAULT_WEBHOOK_RETRY_SECS
                .split(',')
                .map(|s| Duration::from_secs(s.parse().unwrap_or(5)))
                .collect(),
            webhook_timeout: Duration::from_secs(15),
            webhook_lease: Duration::from_secs(60),
            webhook_concurrency: 64,
            mcp_config: None,
            openai: BuiltInProvider::default(),
            anthropic: BuiltInProvider::default(),
            public_url: None,
            allowed_hosts: vec![],
            mcp_allow_private: None,
            metrics_addr: None,
            metrics_projects: crate::telemetry::metric::DEFAULT_PROJECT_LABELS,
            // Above the longest call-out an endpoint makes (an MCP server's handshake, 30 s), so
            // that its own error answers first; under the 60 s of common proxies and balancers.
            request_timeout: Duration::from_secs(45),
            openai_max_concurrent: None,
            anthropic_max_concurrent: None,
            retention: None,
            host: HostEnv::from_env(),
        }
    }
}

/// The pool's default size: 4 connections per core, at least 16 and at most 64. On a small machine
/// 16 keep Postgres busy; on a bigger one the steps' commits, the claims and the event reads
/// queue for connections unless the pool grows with the cores. At most 64, so that one process
/// stays well inside Postgres's default `max_connections` (100).
pub fn default_db_connections() -> u32 {
    let cores = std::thread::available_parallelism().map_or(4, |n| n.get()) as u32;
    (cores * 4).clamp(16, 64)
}

/// How many statements of one batched stage (the claims; the steps' group commits) may run at
/// once: one per four cores, from `min` to 4. Each such statement runs in one Postgres backend, so
/// on a big machine a stage that runs one at a time caps the desk at about a batch per statement
/// (BENCHMARKS.md, round 19), while on a small one statements side by side only share the same
/// cores and make smaller batches.
pub fn stage_parallelism(min: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cores / 4).clamp(min, 4)
}

/// The runtime's default size: one thread per core (what tokio would choose).
///
/// Fewer threads cost less CPU on a quiet desk: a parked thread woken by a message (a database
/// reply, a request, a model's bytes) wakes a second one to look for work, for each message of
/// each ticket. On 2 cores one thread costs a quarter less of agentdesk's own CPU per quiet ticket
/// than two, but about a tenth fewer tickets per second at saturation, most likely because the
/// kernel shares the cores among runnable threads and one thread weighs less against the busy
/// Postgres backends beside it (BENCHMARKS.md, round 13). The default keeps the throughput;
/// `AGENTDESK_RUNTIME_THREADS` trades it.
pub fn default_runtime_threads() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

/// Where the API listens with no tokens and no address given: only this machine can reach it.
pub const LOOPBACK_ADDR: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 8080);
/// Where the API listens with tokens and no address given.
pub const ALL_INTERFACES_ADDR: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 8080);

/// Options of every subcommand.
#[derive(Args, Clone)]
#[command(next_help_heading = "Global options")]
pub struct GlobalArgs {
    /// Postgres connection string; unset: an embedded PostgreSQL under --data-dir
    #[arg(long, global = true, env = "DATABASE_URL", hide_env_values = true, value_name = "URL",
        value_parser = Setting(text))]
    pub database_url: Option<String>,
    /// Where the embedded PostgreSQL keeps its data
    #[arg(long, global = true, env = "AGENTDESK_DATA_DIR", value_name = "DIR",
        default_value_os_t = Config::default().data_dir, value_parser = Setting(path))]
    pub data_dir: PathBuf,
    /// Log format: text or json (the level comes from RUST_LOG)
    #[arg(long, global = true, env = "AGENTDESK_LOG_FORMAT", value_name = "FORMAT",
        default_value_t = Config::default().log_format, value_parser = Setting(log_format))]
    pub log_format: LogFormat,
}

/// Where the API listens.
#[derive(Args, Clone)]
pub struct ListenArgs {
    /// Listen address (port 0 picks a free port and logs it); unset: 127.0.0.1:8080 without
    /// tokens, 0.0.0.0:8080 with tokens
    #[arg(long, env = "AGENTDESK_ADDR", value_name = "ADDR", value_parser = Setting(address))]
    pub addr: Option<Address>,
}

impl ListenArgs {
    /// The address given, if one was.
    pub fn given(&self) -> Option<SocketAddr> {
        self.addr.and_then(|a| a.0)
    }

    /// The address given, or the loopback default.
    pub fn addr_or_default(&self) -> SocketAddr {
        self.given().unwrap_or(LOOPBACK_ADDR)
    }
}

/// Options of the processes that serve the API or work tickets.
#[derive(Args, Clone)]
pub struct ServerArgs {
    #[command(flatten)]
    pub listen: ListenArgs,
    /// Tickets this process works on at once
    #[arg(long, env = "AGENTDESK_WORKERS", value_name = "N", allow_negative_numbers = true,
        default_value_t = Config::default().workers, value_parser = Setting(parsed::<usize>))]
    pub workers: usize,
    /// A claim's lease, in seconds; renewed while the worker works
    #[arg(long, env = "AGENTDESK_LEASE_SECS", value_name = "SECS", allow_negative_numbers = true,
        default_value_t = Config::default().lease.as_secs_f64(), value_parser = Setting(interval))]
    pub lease_secs: f64,
    /// A model stream silent this long (seconds) is a stall
    #[arg(long, env = "AGENTDESK_STREAM_IDLE_SECS", value_name = "SECS", allow_negative_numbers = true,
        default_value_t = Config::default().stream_idle.as_secs_f64(), value_parser = Setting(interval))]
    pub stream_idle_secs: f64,
    /// Comma-separated bearer tokens; when set, every /v1/* request needs one
    #[arg(long, env = "AGENTDESK_API_TOKENS", hide_env_values = true, value_name = "TOKENS",
        value_parser = Setting(text))]
    pub api_tokens: Option<String>,
    /// Allow an API without tokens on an address other than loopback (true or false)
    #[arg(long, env = "AGENTDESK_ALLOW_NO_AUTH", value_name = "BOOL", default_value_t = false,
        action = clap::ArgAction::Set, value_parser = Setting(boolean))]
    pub allow_no_auth: bool,
    /// Model of the `default` agent created when no agent exists; unset: by the provider found
    #[arg(long, env = "AGENTDESK_MODEL", value_name = "MODEL", value_parser = Setting(text))]
    pub model: Option<String>,
    /// Interval of `: ping` comments on event streams, in seconds (at most 15)
    #[arg(long, env = "AGENTDESK_SSE_PING_SECS", value_name = "SECS", allow_negative_numbers = true,
        default_value_t = Config::default().sse_ping.as_secs_f64(), value_parser = Setting(interval))]
    pub sse_ping_secs: f64,
    /// On shutdown, how long (seconds) running steps may finish before their tickets are released
    #[arg(long, env = "AGENTDESK_SHUTDOWN_GRACE_SECS", value_name = "SECS", allow_negative_numbers = true,
        default_value_t = Config::default().shutdown_grace.as_secs_f64(), value_parser = Setting(seconds))]
    pub shutdown_grace_secs: f64,
    /// Size of the process's Postgres connection pool (default: 4 per core, 16 to 64)
    #[arg(long, env = "AGENTDESK_DB_MAX_CONNECTIONS", value_name = "N", allow_negative_numbers = true,
        default_value_t = Config::default().db_max_connections, value_parser = Setting(positive::<u32>))]
    pub db_max_connections: u32,
    /// Threads that run the process's tasks (default: one per core)
    #[arg(long, env = "AGENTDESK_RUNTIME_THREADS", value_name = "N", allow_negative_numbers = true,
        default_value_t = Config::default().runtime_threads, value_parser = Setting(runtime_threads))]
    pub runtime_threads: usize,
    /// Claim statements that may run at once while tickets wait (default: one per four cores, 1 to
    /// 4; at most 16)
    #[arg(long, env = "AGENTDESK_CLAIMERS", value_name = "N", allow_negative_numbers = true,
        default_value_t = Config::default().claimers, value_parser = Setting(claimers))]
    pub claimers: usize,
    /// A YAML or JSON file of providers, tools, MCP servers, agents and schedules applied at
    /// start-up, as `agentdesk agents apply` does; a bad file stops start-up
    #[arg(long, env = "AGENTDESK_AGENTS_FILE", value_name = "FILE", value_parser = Setting(text))]
    pub agents_file: Option<String>,
    /// Let HTTP tools, MCP servers and webhooks reach loopback, private, link-local and metadata addresses
    #[arg(long, env = "AGENTDESK_ALLOW_PRIVATE_URLS", value_name = "BOOL",
        default_value_t = false, action = clap::ArgAction::Set, value_parser = Setting(boolean))]
    pub allow_private_urls: bool,
    /// Comma-separated delays (seconds) before a failed webhook delivery's retries
    #[arg(long, env = "AGENTDESK_WEBHOOK_RETRY_SECS", value_name = "SECS,…",
        default_value = DEFAULT_WEBHOOK_RETRY_SECS, value_parser = Setting(seconds_list))]
    pub webhook_retry_secs: SecondsList,
    /// Limit of one webhook delivery attempt, in seconds
    #[arg(long, env = "AGENTDESK_WEBHOOK_TIMEOUT_SECS", value_name = "SECS", allow_negative_numbers = true,
        default_value_t = Config::default().webhook_timeout.as_secs_f64(), value_parser = Setting(seconds))]
    pub webhook_timeout_secs: f64,
    /// Webhook deliveries in flight at once in this process
    #[arg(long, env = "AGENTDESK_WEBHOOK_CONCURRENCY", value_name = "N", allow_negative_numbers = true,
        default_value_t = Config::default().webhook_concurrency, value_parser = Setting(positive::<usize>))]
    pub webhook_concurrency: usize,
    /// A JSON file of MCP servers, `{"mcpServers": {"name": {"url", "headers"} | {"command",
    /// "args", "env"}}}`, read at start-up; the only way to define stdio servers
    #[arg(long, env = "AGENTDESK_MCP_CONFIG", value_name = "FILE", value_parser = Setting(text))]
    pub mcp_config: Option<String>,
    /// Also serve GET /metrics on this address, with the same tokens (a worker process serves no
    /// API, and so no metrics without it)
    #[arg(long, env = "AGENTDESK_METRICS_ADDR", value_name = "ADDR", value_parser = Setting(optional_address))]
    pub metrics_addr: Option<String>,
    /// How many projects get a `project` label of their own in /metrics; the rest share `_other`
    #[arg(long, env = "AGENTDESK_METRICS_PROJECTS", value_name = "N", allow_negative_numbers = true,
        default_value_t = Config::default().metrics_projects, value_parser = Setting(positive::<usize>))]
    pub metrics_projects: usize,
    /// API key of the built-in `openai` provider (OpenAI, or any OpenAI-compatible server)
    #[arg(long, env = "OPENAI_API_KEY", value_name = "KEY", hide_env_values = true, value_parser = Setting(text))]
    pub openai_api_key: Option<String>,
    /// Base URL of the built-in `openai` provider (default https://api.openai.com/v1); a local
    /// server needs no key
    #[arg(long, env = "OPENAI_BASE_URL", value_name = "URL", value_parser = Setting(text))]
    pub openai_base_url: Option<String>,
    /// API key of the built-in `anthropic` provider
    #[arg(long, env = "ANTHROPIC_API_KEY", value_name = "KEY", hide_env_values = true, value_parser = Setting(text))]
    pub anthropic_api_key: Option<String>,
    /// Base URL of the built-in `anthropic` provider (default https://api.anthropic.com)
    #[arg(long, env = "ANTHROPIC_BASE_URL", value_name = "URL", value_parser = Setting(text))]
    pub anthropic_base_url: Option<String>,
    /// The http(s) address clients reach the desk at (e.g. https://desk.example.com): the base of
    /// the URLs in the A2A agent card; unset: each request's scheme and host
    #[arg(long, env = "AGENTDESK_PUBLIC_URL", value_name = "URL", value_parser = Setting(public_url))]
    pub public_url: Option<String>,
    /// Comma-separated host names, besides localhost and this machine's addresses, that a desk
    /// without tokens answers (`.example.com` includes its subdomains, `*` any host); other Host
    /// headers are refused with 403, so that a web page cannot reach the desk through DNS rebinding
    #[arg(long, env = "AGENTDESK_ALLOWED_HOSTS", value_name = "HOSTS", value_parser = Setting(text))]
    pub allowed_hosts: Option<String>,
    /// How long (seconds) a request to a non-streaming endpoint may take before it is answered 503
    #[arg(long, env = "AGENTDESK_REQUEST_TIMEOUT_SECS", value_name = "SECS", allow_negative_numbers = true,
        default_value_t = Config::default().request_timeout.as_secs_f64(), value_parser = Setting(interval))]
    pub request_timeout_secs: f64,
    /// Model requests in flight to the built-in `openai` provider at most, across every process
    /// (1 to 1024; more wait their turn); unset: no limit
    #[arg(long, env = "AGENTDESK_OPENAI_MAX_CONCURRENT", value_name = "N", allow_negative_numbers = true,
        value_parser = Setting(max_concurrent))]
    pub openai_max_concurrent: Option<MaxConcurrent>,
    /// Model requests in flight to the built-in `anthropic` provider at most, across every
    /// process (1 to 1024; more wait their turn); unset: no limit
    #[arg(long, env = "AGENTDESK_ANTHROPIC_MAX_CONCURRENT", value_name = "N", allow_negative_numbers = true,
        value_parser = Setting(max_concurrent))]
    pub anthropic_max_concurrent: Option<MaxConcurrent>,
    /// Speak HTTP/2 to the built-in `openai` provider on one connection, from the first byte (also
    /// over plain http, which an HTTP/2 server must then accept); false: HTTP/1.1, a connection per
    /// request in flight (true or false)
    #[arg(long, env = "AGENTDESK_OPENAI_HTTP2", value_name = "BOOL", default_value_t = false,
        action = clap::ArgAction::Set, value_parser = Setting(boolean))]
    pub openai_http2: bool,
    /// The same for the built-in `anthropic` provider (true or false)
    #[arg(long, env = "AGENTDESK_ANTHROPIC_HTTP2", value_name = "BOOL", default_value_t = false,
        action = clap::ArgAction::Set, value_parser = Setting(boolean))]
    pub anthropic_http2: bool,
    /// Delete tickets finished more than this many days ago (a decimal number, e.g. 30 or 0.5),
    /// with their comments, events and tool outputs, and older webhook delivery records; unset:
    /// keep everything
    #[arg(long, env = "AGENTDESK_RETENTION_DAYS", value_name = "DAYS", value_parser = Setting(days))]
    pub retention_days: Option<Days>,
}

/// A built-in provider's key and base URL, as configured (blank is unset). Not `Debug`: it holds
/// a secret.
#[derive(Clone, Default)]
pub struct BuiltInProvider {
    pub api_key: Option<String>,
    pub base_url: Option<String>,
    /// Speak HTTP/2 from the first byte (`AGENTDESK_OPENAI_HTTP2`, `AGENTDESK_ANTHROPIC_HTTP2`).
    pub http2: bool,
}

impl BuiltInProvider {
    fn new(api_key: &Option<String>, base_url: &Option<String>, http2: bool) -> BuiltInProvider {
        let set = |v: &Option<String>| v.as_deref().map(str::trim).filter(|v| !v.is_empty()).map(str::to_owned);
        BuiltInProvider {
            api_key: set(api_key),
            base_url: set(base_url),
            http2,
        }
    }

    /// A key or a base URL is set (a local server needs no key).
    pub fn is_configured(&self) -> bool {
        self.api_key.is_some() || self.base_url.is_some()
    }
}

/// Every setting, for `Config::from_lookup`.
#[derive(Parser)]
#[command(no_binary_name = true)]
struct Settings {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(flatten)]
    server: ServerArgs,
}

impl Config {
    /// The configuration these options give; what they do not cover keeps its default.
    pub fn from_args(global: &GlobalArgs, server: Option<&ServerArgs>) -> Config {
        let mut config = Config {
            database_url: global.database_url.clone().filter(|url| !url.is_empty()),
            data_dir: global.data_dir.clone(),
            log_format: global.log_format,
            ..Config::default()
        };
        if let Some(server) = server {
            config.workers = server.workers;
            config.lease = Duration::from_secs_f64(server.lease_secs);
            config.stream_idle = Duration::from_secs_f64(server.stream_idle_secs);
            config.api_tokens = server
                .api_tokens
                .iter()
                .flat_map(|tokens| tokens.split(','))
                .map(|token| token.trim().to_owned())
                .filter(|token| !token.is_empty() && *token != "read:")
                .collect();
            config.allow_no_auth = server.allow_no_auth;
            config.addr = server.listen.given().unwrap_or(if config.api_tokens.is_empty() {
                LOOPBACK_ADDR
            } else {
                ALL_INTERFACES_ADDR
            });
            config.model = server.model.clone().filter(|model| !model.is_empty());
            config.sse_ping = Duration::from_secs_f64(server.sse_ping_secs).min(Duration::from_secs(15));
            config.shutdown_grace = Duration::from_secs_f64(server.shutdown_grace_secs);
            config.db_max_connections = server.db_max_connections;
            config.runtime_threads = server.runtime_threads;
            config.claimers = server.claimers;
            config.agents_file = server
                .agents_file
                .as_deref()
                .filter(|f| !f.is_empty())
                .map(PathBuf::from);
            config.allow_private_urls = server.allow_private_urls;
            config.webhook_retry = server
                .webhook_retry_secs
                .0
                .iter()
                .map(|s| Duration::from_secs_f64(*s))
                .collect();
            config.webhook_timeout = Duration::from_secs_f64(server.webhook_timeout_secs);
            config.webhook_concurrency = server.webhook_concurrency;
            config.mcp_config = server
                .mcp_config
                .as_deref()
                .filter(|f| !f.is_empty())
                .map(PathBuf::from);
            config.metrics_addr = server.metrics_addr.as_deref().and_then(|a| a.parse().ok());
            config.metrics_projects = server.metrics_projects;
            config.openai = BuiltInProvider::new(&server.openai_api_key, &server.openai_base_url, server.openai_http2);
            config.anthropic = BuiltInProvider::new(
                &server.anthropic_api_key,
                &server.anthropic_base_url,
                server.anthropic_http2,
            );
            config.public_url = server.public_url.clone().filter(|u| !u.is_empty());
            config.allowed_hosts = server
                .allowed_hosts
                .iter()
                .flat_map(|hosts| hosts.split(','))
                .map(|host| host.trim().to_ascii_lowercase())
                .filter(|host| !host.is_empty())
                .collect();
            config.request_timeout = Duration::from_secs_f64(server.request_timeout_secs);
            config.openai_max_concurrent = server.openai_max_concurrent.and_then(|n| n.0);
            config.anthropic_max_concurrent = server.anthropic_max_concurrent.and_then(|n| n.0);
            config.retention = server
                .retention_days
                .and_then(|days| days.0)
                .map(|days| Duration::from_secs_f64(days * 86400.0));
            // A dead process's webhook endpoints are taken over after the same lease as its tickets.
            config.webhook_lease = config.lease;
        }
        config
    }

    /// Refuses an API open to the network with no token: anyone who reaches it could spend the
    /// model keys. One line naming both ways out.
    pub fn check_exposure(&self) -> Result<(), String> {
        if self.api_tokens.is_empty() && !self.addr.ip().is_loopback() && !self.allow_no_auth {
            return Err(format!(
                "refusing to serve the API on {} without tokens: set AGENTDESK_API_TOKENS (e.g. `openssl rand -hex 32`), \
                 or set AGENTDESK_ALLOW_NO_AUTH=true to allow an open API",
                self.addr
            ));
        }
        Ok(())
    }

    /// Reads the environment; a malformed value is an error naming the variable.
    pub fn from_env() -> Result<Config, String> {
        Config::from_lookup(|name| std::env::var(name).ok())
    }

    /// Every setting, by the name of its variable, parsed as the command line parses it.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config, String> {
        // Every option goes on the command line, an unset one as an empty value (the default), so
        // that only `get` is read, not the process's environment.
        let command = Settings::command();
        let args: Vec<String> = command
            .get_arguments()
            .filter_map(|arg| {
                let value = get(arg.get_env()?.to_str()?).unwrap_or_default();
                Some(format!("--{}={value}", arg.get_long()?))
            })
            .collect();
        // The parsers' own message names the variable; clap's adds the option's name around it.
        let message = |err: clap::Error| match std::error::Error::source(&err) {
            Some(source) => source.to_string(),
            None => err.to_string(),
        };
        let matches = command.try_get_matches_from(args).map_err(message)?;
        let settings = Settings::from_arg_matches(&matches).map_err(message)?;
        let mut config = Config::from_args(&settings.global, Some(&settings.server));
        config.host = HostEnv::from_lookup(get);
        Ok(config)
    }
}

#[cfg(test)]
mod tests;
