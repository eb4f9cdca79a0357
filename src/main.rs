//! `agentdesk [serve|api|worker|migrate|healthcheck]`: parse config, init tracing, run until a signal.

use std::process::ExitCode;

use agentdesk::app::{App, Mode};
use agentdesk::config::{Config, LogFormat};
use agentdesk::embedded_pg::EmbeddedPostgres;
use agentdesk::llm::Providers;
use tracing_subscriber::EnvFilter;

const USAGE: &str = "usage: agentdesk [serve|api|worker|migrate|healthcheck]

  serve        API and workers in one process (default)
  api          only the HTTP API
  worker       only the workers
  migrate      apply database migrations and exit
  healthcheck  GET /healthz of a local instance (for container health checks)

Configuration comes from the environment (and .env); see the README.";

fn main() -> ExitCode {
    agentdesk::tune_allocator();
    let _ = dotenvy::dotenv();
    let command = std::env::args().nth(1).unwrap_or_else(|| "serve".into());
    let mode = match command.as_str() {
        "serve" => Some(Mode::Serve),
        "api" => Some(Mode::Api),
        "worker" => Some(Mode::Worker),
        "migrate" | "healthcheck" => None,
        "-h" | "--help" | "help" => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        other => {
            eprintln!("unknown command {other:?}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let config = match Config::from_env() {
        Ok(c) => c,
        Err(err) => {
            eprintln!("agentdesk: invalid configuration: {err}");
            return ExitCode::from(2);
        }
    };
    init_tracing(config.log_format);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(err) => {
            eprintln!("agentdesk: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match (command.as_str(), mode) {
            ("healthcheck", _) => healthcheck(&config).await,
            (_, None) => migrate(config).await,
            (_, Some(mode)) => serve(config, mode).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!("{err:#}");
            eprintln!("agentdesk: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_tracing(format: LogFormat) {
    // An empty RUST_LOG (as docker compose passes an unset one) means the default.
    let directives = std::env::var("RUST_LOG").ok().filter(|v| !v.trim().is_empty());
    let filter = directives
        .and_then(|d| EnvFilter::try_new(d).ok())
        .unwrap_or_else(|| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

/// With no DATABASE_URL, a private PostgreSQL under `<data dir>/pgdata` (stopped on exit).
async fn resolve_database(config: &mut Config) -> anyhow::Result<Option<EmbeddedPostgres>> {
    if config.database_url.is_some() {
        return Ok(None);
    }
    let data_dir = config.data_dir.join("pgdata");
    tracing::info!(dir = %data_dir.display(), "DATABASE_URL is not set: starting an embedded PostgreSQL");
    let pg = EmbeddedPostgres::start(&data_dir).await?;
    config.database_url = Some(pg.url());
    Ok(Some(pg))
}

async fn migrate(mut config: Config) -> anyhow::Result<()> {
    let embedded = resolve_database(&mut config).await?;
    let url = config.database_url.clone().unwrap_or_default();
    let pool = agentdesk::db::connect(&url, 2).await?;
    agentdesk::db::migrate(&pool).await?;
    pool.close().await;
    tracing::info!("migrations applied");
    if let Some(pg) = embedded {
        pg.stop().await?;
    }
    Ok(())
}

async fn serve(mut config: Config, mode: Mode) -> anyhow::Result<()> {
    let embedded = resolve_database(&mut config).await?;
    let providers = Providers::from_env();
    match providers.detected() {
        Some(provider) => tracing::info!(provider, "model provider configured"),
        None => tracing::warn!(
            "no model provider configured: set OPENAI_API_KEY / OPENAI_BASE_URL or ANTHROPIC_API_KEY; \
             tickets will fail with provider_unconfigured until then"
        ),
    }
    let app = App::start(config, mode, providers).await?;
    shutdown_signal().await;
    tracing::info!("shutting down");
    app.shutdown().await;
    if let Some(pg) = embedded {
        pg.stop().await?;
    }
    tracing::info!("stopped");
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = ctrl_c.await;
                return;
            }
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

/// Exit 0 when the local instance answers /healthz.
async fn healthcheck(config: &Config) -> anyhow::Result<()> {
    let url = format!("http://127.0.0.1:{}/healthz", config.addr.port());
    let response = reqwest::Client::new()
        .get(&url)
        .timeout(std::time::Duration::from_secs(3))
        .send()
        .await?;
    anyhow::ensure!(response.status().is_success(), "{url} answered {}", response.status());
    Ok(())
}
