//! `agentdesk [serve|api|worker|migrate|healthcheck] [OPTIONS]`: parse the command line (clap; every
//! option also has an environment variable), init tracing, run until a signal.
//! `agentdesk ticket …` and `agentdesk agents apply` are the client (`agentdesk::cli`).

use std::ffi::OsString;
use std::net::SocketAddr;
use std::process::ExitCode;

use agentdesk::app::{App, Mode};
use agentdesk::cli::{self, AgentsArgs, TicketArgs};
use agentdesk::config::{Config, GlobalArgs, ListenArgs, LogFormat, ServerArgs};
use agentdesk::embedded_pg::EmbeddedPostgres;
use agentdesk::llm::Providers;
use clap::error::ErrorKind;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use tracing_subscriber::EnvFilter;

/// mimalloc rather than glibc's malloc: a ticket's life allocates and frees thousands of small
/// values, often on another thread than the one that made them, and glibc spent about a fifth of
/// the process's CPU on it (BENCHMARKS.md, round 18).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_arena_eager_commit`'s place in mimalloc's (v3) option list.
#[cfg(target_os = "linux")]
const MI_OPTION_ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;

/// Runs before `main` and before the runtime's first allocation (an ELF constructor), since an
/// arena keeps the setting it was made with. Left at its default, mimalloc commits its arenas
/// eagerly and then hands freed memory back lazily, so it stays in the process's RSS: an idle SSE
/// subscriber counted 26 KB instead of 16 KB, over the 20 KB bar. (Linux only: other systems
/// name their constructor sections differently, and the service ships for Linux.)
#[cfg(target_os = "linux")]
extern "C" fn configure_allocator() {
    // SAFETY: sets one documented option, before any thread exists.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_ARENA_EAGER_COMMIT, 0) }
}

#[cfg(target_os = "linux")]
#[used]
#[link_section = ".init_array"]
static CONFIGURE_ALLOCATOR: extern "C" fn() = configure_allocator;

#[derive(Parser)]
#[command(
    name = "agentdesk",
    version,
    about,
    after_help = "With no command, agentdesk serves (and takes serve's options). `agentdesk <COMMAND> --help` shows \
a command's options; each can also be set by the environment variable shown with it, or in a .env file."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    global: GlobalArgs,
}

#[derive(Subcommand)]
enum Command {
    #[command(flatten)]
    Server(ServerCommand),
    #[command(flatten)]
    Client(ClientCommand),
}

#[derive(Subcommand)]
enum ServerCommand {
    /// Apply migrations, then run the API and the workers in one process (the default)
    Serve(ServerArgs),
    /// Only the HTTP API (any number of API and worker processes may share one database)
    Api(ServerArgs),
    /// Only the workers
    Worker(ServerArgs),
    /// Apply database migrations and exit
    Migrate,
    /// GET /healthz of a local instance (for container health checks)
    Healthcheck(ListenArgs),
}

/// The client commands, which talk to a running service over its API.
#[derive(Subcommand)]
enum ClientCommand {
    /// Client: create, follow and manage tickets on a running service (AGENTDESK_URL)
    Ticket(TicketArgs),
    /// Client: apply a file of agents, providers, tools, MCP servers and schedules to a running service
    Agents(AgentsArgs),
    /// Client: create, list, pause, resume, run and delete schedules (recurring tickets)
    Schedule(cli::ScheduleArgs),
    /// Client: create, list, show and delete projects (one team's desk inside the desk)
    Project(cli::ProjectArgs),
    /// Client: create, list and revoke a project's tokens
    Token(cli::TokenArgs),
    /// Client: replay tickets on several agents, versions or models and compare them
    Experiment(cli::ExperimentArgs),
}

fn main() -> ExitCode {
    // Before parsing: options read their variables from the environment `.env` adds to.
    let _ = dotenvy::dotenv();
    let (command, global) = parse_command_line();
    let command = match command {
        Command::Server(command) => command,
        Command::Client(ClientCommand::Ticket(args)) => return cli::run_ticket(args),
        Command::Client(ClientCommand::Agents(args)) => return cli::run_agents(args),
        Command::Client(ClientCommand::Schedule(args)) => return cli::run_schedule(args),
        Command::Client(ClientCommand::Project(args)) => return cli::run_project(args),
        Command::Client(ClientCommand::Token(args)) => return cli::run_token(args),
        Command::Client(ClientCommand::Experiment(args)) => return cli::run_experiment(args),
    };
    let server = match &command {
        ServerCommand::Serve(args) | ServerCommand::Api(args) | ServerCommand::Worker(args) => Some(args),
        ServerCommand::Migrate | ServerCommand::Healthcheck(_) => None,
    };
    let config = Config::from_args(&global, server);
    init_tracing(config.log_format);
    // Before the runtime: the OTLP exporter's blocking client starts its own.
    match agentdesk::telemetry::trace::init_from_env() {
        Ok(true) => tracing::info!("exporting traces over OTLP"),
        Ok(false) => {}
        Err(err) => {
            eprintln!("agentdesk: cannot export traces: {err:#}");
            return ExitCode::FAILURE;
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.runtime_threads)
        .enable_all()
        .build();
    let runtime = match runtime {
        Ok(r) => r,
        Err(err) => {
            eprintln!("agentdesk: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match command {
            ServerCommand::Serve(_) => serve(config, Mode::Serve).await,
            ServerCommand::Api(_) => serve(config, Mode::Api).await,
            ServerCommand::Worker(_) => serve(config, Mode::Worker).await,
            ServerCommand::Migrate => migrate(config).await,
            ServerCommand::Healthcheck(listen) => healthcheck(listen.addr_or_default()).await,
        }
    });
    drop(runtime);
    agentdesk::telemetry::trace::shutdown();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // Said once: in the log when it shows errors (it goes to stderr), else on stderr alone.
        Err(err) => {
            if tracing::enabled!(tracing::Level::ERROR) {
                tracing::error!("{err:#}");
            } else {
                eprintln!("agentdesk: {err:#}");
            }
            ExitCode::FAILURE
        }
    }
}

/// The command and the global options. `agentdesk [OPTIONS]` with no command, or with an option
/// that is not a global one, is `agentdesk serve [OPTIONS]`. Exits with 2 and a message on a bad
/// option or value, with 0 after --help.
fn parse_command_line() -> (Command, GlobalArgs) {
    let args: Vec<OsString> = std::env::args_os().collect();
    let client = args
        .iter()
        .skip(1)
        .any(|a| a == "ticket" || a == "agents" || a == "schedule");
    // The global options configure a server (its database and logs): a client command neither
    // takes nor lists them.
    let try_parse = |args: &[OsString]| {
        let mut command = Cli::command();
        if client {
            for id in ["database_url", "data_dir", "log_format"] {
                command = command.mut_arg(id, |arg| arg.global(false));
            }
        }
        command
            .try_get_matches_from(args)
            .and_then(|matches| Cli::from_arg_matches(&matches))
    };
    let parsed = match try_parse(&args) {
        Ok(Cli { command: None, .. }) => None,
        // An option of `serve` without a command; after a command, the error stands.
        Err(err)
            if err.kind() == ErrorKind::UnknownArgument
                && args.get(1).is_some_and(|a| a.to_string_lossy().starts_with('-')) =>
        {
            None
        }
        parsed => Some(parsed),
    };
    let parsed = parsed.unwrap_or_else(|| {
        let mut serve = args;
        serve.insert(1.min(serve.len()), "serve".into());
        try_parse(&serve)
    });
    match parsed {
        Ok(Cli {
            command: Some(command),
            global,
        }) => (command, global),
        Ok(Cli { command: None, .. }) => unreachable!("serve was given"),
        // The client commands keep 1 to 5 for outcomes and errors of their own (see their --help).
        Err(err) if client && err.use_stderr() => {
            let _ = err.print();
            std::process::exit(cli::exit::USAGE.into())
        }
        Err(err) => err.exit(),
    }
}

fn init_tracing(format: LogFormat) {
    // An empty RUST_LOG (as docker compose passes an unset one) means the default.
    let directives = std::env::var("RUST_LOG").ok().filter(|v| !v.trim().is_empty());
    let filter = directives
        .and_then(|d| EnvFilter::try_new(d).ok())
        // Postgres's NOTICEs ("relation … already exists, skipping" from the migrations' setup,
        // on every start) are not news for an operator; its warnings still show.
        .unwrap_or_else(|| EnvFilter::new("info,sqlx::postgres::notice=warn"));
    // Colours only for a person at a terminal, not in a container's or a service's log.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
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
    // The image sets this: a container has no PostgreSQL of its own to start.
    if config.host.in_container {
        anyhow::bail!(
            "DATABASE_URL is not set: point it at a PostgreSQL server \
             (docker-compose.yml runs one beside agentdesk)"
        );
    }
    let data_dir = config.data_dir.join("pgdata");
    tracing::info!(dir = %data_dir.display(), "DATABASE_URL is not set: starting an embedded PostgreSQL");
    let pg = EmbeddedPostgres::start_with_binaries(&data_dir, config.host.pg_bindir.as_deref()).await?;
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
    // Before anything starts (the embedded database included).
    if mode.runs_api() {
        config.check_exposure().map_err(anyhow::Error::msg)?;
    }
    // A bad file stops start-up before anything runs.
    let agents_file = match &config.agents_file {
        Some(path) => Some((path.clone(), read_agents_file(path)?)),
        None => None,
    };
    let embedded = resolve_database(&mut config).await?;
    let providers = Providers::from_config(&config);
    // Only processes that work tickets call models: an `api` process has nothing to warn about.
    match providers.detected() {
        Some(provider) => tracing::info!(provider, "model provider configured"),
        None if mode.runs_workers() => tracing::warn!(
            "no model provider configured: set OPENAI_API_KEY (OpenAI), OPENAI_BASE_URL (any \
             OpenAI-compatible server, a local one needs no key) or ANTHROPIC_API_KEY; tickets will \
             fail with provider_unconfigured until then"
        ),
        None => {}
    }
    let token = config.api_tokens.iter().find(|t| !t.starts_with("read:")).cloned();
    let app = App::start(config, mode, providers).await?;
    if let Some((path, file)) = agents_file {
        if let Err(err) = apply_agents_file(&app, token.as_deref(), &file).await {
            app.shutdown().await;
            if let Some(pg) = embedded {
                let _ = pg.stop().await;
            }
            return Err(err.context(format!("AGENTDESK_AGENTS_FILE {}", path.display())));
        }
    }
    shutdown_signal().await;
    tracing::info!("shutting down");
    app.shutdown().await;
    if let Some(pg) = embedded {
        pg.stop().await?;
    }
    tracing::info!("stopped");
    Ok(())
}

/// `AGENTDESK_AGENTS_FILE`: the file `agentdesk agents apply` reads, all of it (providers, tools,
/// MCP servers, agents and schedules), so that a container needs no second step.
fn read_agents_file(path: &std::path::Path) -> anyhow::Result<cli::apply::AgentsFile> {
    cli::apply::AgentsFile::read(path).map_err(|e| anyhow::anyhow!("AGENTDESK_AGENTS_FILE {e}"))
}

/// Applies the file through this process's own API, once it listens: the same validation, the
/// same comparison and the same idempotence as `agentdesk agents apply`, with no second code path
/// into the database. Worker-only processes leave it to the API processes.
async fn apply_agents_file(app: &App, token: Option<&str>, file: &cli::apply::AgentsFile) -> anyhow::Result<()> {
    if app.addr.is_none() {
        tracing::info!("AGENTDESK_AGENTS_FILE is applied by the API processes");
        return Ok(());
    }
    let client = cli::Client::new(&app.url(), token)?;
    let outcomes = cli::apply::apply(&client, file).await?;
    let mut refused = vec![];
    for outcome in outcomes {
        match &outcome.change {
            cli::apply::Change::Failed(_) => refused.push(outcome.to_string()),
            _ => tracing::info!("agents file: {outcome}"),
        }
    }
    anyhow::ensure!(refused.is_empty(), "{}", refused.join("; "));
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

/// Exit 0 when the local instance listening on `addr`'s port answers /healthz.
async fn healthcheck(addr: SocketAddr) -> anyhow::Result<()> {
    let url = format!("http://127.0.0.1:{}/healthz", addr.port());
    let response = reqwest::Client::new()
        .get(&url)
        .timeout(std::time::Duration::from_secs(3))
        .send()
        .await?;
    anyhow::ensure!(response.status().is_success(), "{url} answered {}", response.status());
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        super::Cli::command().debug_assert();
    }

    /// The constructor ran (this test binary is `main.rs` too), and the option's place in the
    /// list is the one meant: mimalloc reads 0 there, where its default is 2.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_allocator_commits_arenas_lazily() {
        // SAFETY: reads an option.
        let value = unsafe { libmimalloc_sys::mi_option_get(super::MI_OPTION_ARENA_EAGER_COMMIT) };
        assert_eq!(value, 0);
        // SAFETY: reads an option; the one after it in the list (purge_decommits), never set here.
        let next = unsafe { libmimalloc_sys::mi_option_get(super::MI_OPTION_ARENA_EAGER_COMMIT + 1) };
        assert_eq!(next, 1, "mi_option_purge_decommits keeps its default");
    }
}
