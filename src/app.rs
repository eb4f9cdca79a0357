//! Builds the running service: database, event hub, HTTP API and worker pool, with one shutdown
//! token. Shared by `main` and the tests.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use sqlx::PgPool;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::db;
use crate::domain::agent::{default_model, DEFAULT_AGENT_ROLE};
use crate::domain::Agent;
use crate::events::EventHub;
use crate::http::{self, ApiServices, AppState};
use crate::llm::Providers;
use crate::tools::BUILTIN_TOOLS;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// API and workers in one process.
    Serve,
    Api,
    Worker,
}

impl Mode {
    pub fn runs_api(self) -> bool {
        matches!(self, Mode::Serve | Mode::Api)
    }

    pub fn runs_workers(self) -> bool {
        matches!(self, Mode::Serve | Mode::Worker)
    }
}

pub struct App {
    /// Where the API listens (None in worker-only mode).
    pub addr: Option<SocketAddr>,
    /// Where a worker-only process serves `/healthz` and `/readyz` (None when it could not listen,
    /// or when this process runs the API, which serves them itself).
    pub health_addr: Option<SocketAddr>,
    pub pool: PgPool,
    pub hub: EventHub,
    pub shutdown: CancellationToken,
    /// The process's MCP servers (for the agent's tool resolution).
    pub mcp: crate::mcp_client::McpHub,
    config: Arc<Config>,
    tasks: Vec<JoinHandle<()>>,
    workers: Option<crate::worker::WorkerPool>,
}

impl App {
    /// Connects, migrates, and starts what `mode` runs. `database_url` must be resolved by now
    /// (the embedded database is started by the caller).
    pub async fn start(config: Config, mode: Mode, providers: Providers) -> anyhow::Result<App> {
        // The process's metrics recorder (once per process, whatever starts it).
        crate::telemetry::metric::install();
        crate::telemetry::metric::limit_project_labels(config.metrics_projects);
        if mode.runs_api() {
            config.check_exposure().map_err(anyhow::Error::msg)?;
        }
        let url = config.database_url.clone().context("DATABASE_URL is not set")?;
        let pool = db::connect(&url, config.db_max_connections)
            .await
            .context("cannot connect to the database")?;
        db::migrate(&pool).await.context("cannot apply database migrations")?;
        // The built-in providers' capacity comes with the rest of the configuration.
        let providers =
            Arc::new(providers.with_max_concurrent(config.openai_max_concurrent, config.anthropic_max_concurrent));
        ensure_default_agent(&pool, &config, &providers).await?;
        if mode.runs_workers() {
            warn_of_unset_secrets(&pool).await;
        }

        let config = Arc::new(config);
        let shutdown = CancellationToken::new();
        let hub = EventHub::new(pool.clone()).await?;
        let mut tasks = vec![
            tokio::spawn(hub.clone().run(shutdown.clone())),
            tokio::spawn(crate::maintenance::planner_stats::run(pool.clone(), shutdown.clone())),
        ];
        if let Some(keep) = config.retention {
            // Every process sweeps; an advisory lock lets one at a time delete.
            tasks.push(tokio::spawn(crate::maintenance::retention::run(
                pool.clone(),
                keep,
                shutdown.clone(),
            )));
        }
        let (mcp, catalog) = start_tools(&pool, &config, shutdown.clone()).await?;
        // Every process charges requests and answers `/v1/prices` from its own price book.
        let prices = db::prices::PriceBook::default();
        prices.reload(&pool).await.context("cannot read the prices")?;
        tasks.push(prices.spawn_refresh(pool.clone(), shutdown.clone()));
        // And checks requests against the projects' quotas from its own project book.
        let projects = db::projects::ProjectBook::default();
        projects.reload(&pool).await.context("cannot read the projects")?;
        tasks.push(projects.spawn_refresh(pool.clone(), shutdown.clone()));
        if !mode.runs_api() {
            // Nobody here watches deltas: send them to the API processes.
            tasks.push(hub.forward_deltas(shutdown.clone()));
        }
        // The links of calls that wait for approval are signed with the desk's own key.
        let link_key = db::links::signing_key(&pool)
            .await
            .context("cannot read the links key")?;

        let (addr, health_addr) = if mode.runs_api() {
            let state = AppState::new(ApiServices {
                pool: pool.clone(),
                access: crate::http::access::Access::start(pool.clone(), config.api_tokens.clone(), shutdown.clone()),
                hub: hub.clone(),
                config: config.clone(),
                providers: providers.clone(),
                catalog: catalog.clone(),
                mcp: mcp.clone(),
                intake: crate::transitions::intake::Intake::start(pool.clone(), hub.clone()),
                route_check: Default::default(),
                prices: prices.clone(),
                projects: projects.clone(),
                links: crate::domain::link::Links::new(link_key.clone(), &links_base(&config, config.addr)),
                shutdown: shutdown.clone(),
            });
            let (server, addr) = serve_api(state, config.addr, shutdown.clone())?;
            tasks.push(server);
            (Some(addr), None)
        } else {
            let served = serve_worker_health(&pool, &config, shutdown.clone());
            let health_addr = served.map(|(server, addr)| {
                tasks.push(server);
                addr
            });
            (None, health_addr)
        };

        if mode.runs_workers() {
            // Webhooks are delivered where tickets are worked: an API-only process stays thin.
            tasks.push(crate::webhooks::start(pool.clone(), &hub, &config, shutdown.clone()));
            // Schedules fire where tickets are worked; any number of schedulers share the work.
            tasks.push(crate::scheduler::start(pool.clone(), hub.clone(), shutdown.clone()));
        }
        if let Some(metrics_addr) = config.metrics_addr {
            tasks.push(serve_metrics(&pool, &config, metrics_addr, shutdown.clone())?);
        }

        let workers = if mode.runs_workers() {
            Some(crate::worker::WorkerPool::start(
                pool.clone(),
                hub.clone(),
                config.clone(),
                providers.clone(),
                catalog.clone(),
                crate::worker::Books {
                    prices: prices.clone(),
                    projects: projects.clone(),
                    // Absolute from AGENTDESK_PUBLIC_URL, else from where this process's API listens.
                    links: crate::domain::link::Links::new(link_key, &links_base(&config, addr.unwrap_or(config.addr))),
                },
            ))
        } else {
            None
        };

        Ok(App {
            addr,
            health_addr,
            pool,
            hub,
            shutdown,
            mcp,
            config,
            tasks,
            workers,
        })
    }

    /// Base URL of the API, e.g. `http://127.0.0.1:41234`.
    pub fn url(&self) -> String {
        let addr = self.addr.expect("this process runs no API");
        let host = if addr.ip().is_unspecified() {
            "127.0.0.1".to_string()
        } else {
            addr.ip().to_string()
        };
        format!("http://{host}:{}", addr.port())
    }

    /// Tickets this process's workers are running now (0 without workers). A ticket counts until
    /// its loop has ended, after its last write: tests wait on it to know a worker is done.
    pub fn running_tickets(&self) -> usize {
        self.workers.as_ref().map_or(0, |w| w.running())
    }

    /// Graceful shutdown: stop accepting, end SSE streams, let running steps finish within the
    /// grace period and release the rest, then close the pool.
    pub async fn shutdown(self) {
        if let Some(workers) = self.workers {
            workers.shutdown(self.config.shutdown_grace).await;
        }
        self.mcp.shutdown().await;
        self.shutdown.cancel();
        for task in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        }
        self.pool.close().await;
    }
}

/// Says at start which named providers would send an empty secret from this process: their key
/// or a header names a variable its environment does not set. Best effort: a database that
/// cannot list them now has said so elsewhere.
async fn warn_of_unset_secrets(pool: &PgPool) {
    for def in db::providers::every(pool).await.unwrap_or_default() {
        if let Some(warning) = crate::http::providers::unset_secrets(&def) {
            tracing::warn!(provider = %def.name, "{warning}");
        }
    }
}

/// Creates the `default` agent when no agent exists, so a fresh install works tickets at once.
async fn ensure_default_agent(pool: &PgPool, config: &Config, providers: &Providers) -> anyhow::Result<()> {
    let now = chrono::Utc::now();
    let agent = Agent {
        name: "default".into(),
        role: DEFAULT_AGENT_ROLE.into(),
        provider: None,
        model: default_model(config.model.as_deref(), providers.detected()),
        labels: vec![],
        tools: BUILTIN_TOOLS.iter().map(|t| t.to_string()).collect(),
        context_window: None,
        max_turns: None,
        max_input_tokens: None,
        max_output_tokens: None,
        max_schema_retries: 10,
        max_request_retries: 10,
        request_retry_delay_ms: 500,
        temperature: None,
        max_tokens: None,
        thinking_budget: None,
        tool_choice: crate::domain::agent::default_tool_choice(),
        max_concurrent: None,
        budget_usd_per_day: None,
        created_at: now,
        updated_at: now,
        approval_timeout_secs: None,
        on_timeout: None,
        question_timeout_secs: None,
        on_question_timeout: None,
        version: 1,
    };
    if db::agents::insert_if_none_exist(pool, &agent).await? {
        tracing::info!(model = %agent.model, "created the default agent");
    }
    Ok(())
}

/// Connections the kernel queues for the API before they are accepted (it caps this at
/// `net.core.somaxconn`). Thousands of SSE clients reconnect at once after a restart; tokio's
/// default queue of 1024 overflowed under such a burst and some were reset.
pub const ACCEPT_BACKLOG: u32 = 8192;

/// The process's MCP servers, and the tool catalog that resolves names through them: one HTTP
/// client for every HTTP tool call of this process, with the address guard on.
async fn start_tools(
    pool: &PgPool,
    config: &Config,
    stop: CancellationToken,
) -> anyhow::Result<(crate::mcp_client::McpHub, crate::tools::catalog::ToolCatalog)> {
    let options = crate::mcp_client::McpOptions {
        guard: crate::net::AddressGuard {
            allow_private: config.mcp_allow_private.unwrap_or(config.allow_private_urls),
        },
        config_file: config.mcp_config.clone(),
    };
    let mcp = crate::mcp_client::McpHub::start(pool.clone(), options, stop)
        .await
        .context("cannot start the MCP servers")?;
    let catalog = crate::tools::catalog::ToolCatalog::new(crate::net::AddressGuard {
        allow_private: config.allow_private_urls,
    })
    .with_lender(Arc::new(mcp.clone()));
    Ok((mcp, catalog))
}

/// Where links point: `AGENTDESK_PUBLIC_URL`, else the address the API listens on (loopback for
/// an address that listens on all).
fn links_base(config: &Config, addr: SocketAddr) -> String {
    if let Some(public) = &config.public_url {
        return public.trim_end_matches('/').to_owned();
    }
    let host = match addr.ip() {
        ip if ip.is_unspecified() && ip.is_ipv4() => "127.0.0.1".to_owned(),
        ip if ip.is_unspecified() => "[::1]".to_owned(),
        std::net::IpAddr::V6(ip) => format!("[{ip}]"),
        ip => ip.to_string(),
    };
    format!("http://{host}:{}", addr.port())
}

/// The HTTP API on `addr`, and where it listens.
fn serve_api(
    state: AppState,
    addr: SocketAddr,
    stop: CancellationToken,
) -> anyhow::Result<(JoinHandle<()>, SocketAddr)> {
    let listener = listen(addr).with_context(|| format!("cannot listen on {addr}"))?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, "agentdesk API listening");
    Ok((serve(listener, http::router(state), stop, "the HTTP server"), addr))
}

/// A worker's `/healthz`, `/readyz` and `/metrics` on the listen address, so that the image's
/// health check and Kubernetes probes work for it as for the API. Several workers on one host
/// share the default address: the ones that cannot listen still work, without it (None).
fn serve_worker_health(
    pool: &PgPool,
    config: &Config,
    stop: CancellationToken,
) -> Option<(JoinHandle<()>, SocketAddr)> {
    let listener = match listen(config.addr) {
        Ok(listener) => listener,
        Err(err) => {
            tracing::warn!(addr = %config.addr, error = %err, "worker health endpoints not served: cannot listen");
            return None;
        }
    };
    let addr = listener.local_addr().ok()?;
    tracing::info!(%addr, "worker listening (/healthz, /readyz, /metrics)");
    let router = http::health::worker_router(pool.clone())
        .merge(http::metrics::standalone(pool.clone(), config.api_tokens.clone()));
    Some((serve(listener, router, stop, "the health listener"), addr))
}

/// `GET /metrics` alone on `addr` (`AGENTDESK_METRICS_ADDR`).
fn serve_metrics(
    pool: &PgPool,
    config: &Config,
    addr: SocketAddr,
    stop: CancellationToken,
) -> anyhow::Result<JoinHandle<()>> {
    let listener = listen(addr).with_context(|| format!("cannot listen on {addr}"))?;
    tracing::info!(addr = %listener.local_addr()?, "serving /metrics");
    let router = http::metrics::standalone(pool.clone(), config.api_tokens.clone());
    Ok(serve(listener, router, stop, "the metrics listener"))
}

/// Serves `router` on `listener` until `stop`; a failure is logged as `what` failing.
fn serve(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    stop: CancellationToken,
    what: &'static str,
) -> JoinHandle<()> {
    use axum::serve::ListenerExt;
    // Event frames are small writes that must leave at once, not wait for an ACK (Nagle).
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    // As a make-service, a `Router` is deep-cloned for every connection (about 45 KB for the API,
    // most of it the docs page), which an open SSE connection keeps; `into_make_service` shares it.
    let service = router.into_make_service();
    tokio::spawn(async move {
        let served = axum::serve(listener, service)
            .with_graceful_shutdown(stop.cancelled_owned())
            .await;
        if let Err(err) = served {
            tracing::error!(error = %err, "{what} failed");
        }
    })
}

fn listen(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    // As `TcpListener::bind` does: a restarted server can listen while old connections linger.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(ACCEPT_BACKLOG)
}
