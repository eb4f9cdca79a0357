//! The client half of the binary: `agentdesk ticket …` and `agentdesk agents apply`. It talks to a
//! running service over its HTTP API only (no database, no worker code), as any other client would.

pub mod apply;
pub mod client;
mod experiments;
pub mod projects;
pub mod schedules;
pub mod tickets;
pub mod watch;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

pub use client::{CliError, Client};

/// Exit codes of the client commands (`ticket watch` also uses 1 to 3 for the ticket's outcome).
pub mod exit {
    pub const OK: u8 = 0;
    pub const FAILED: u8 = 1;
    pub const CANCELLED: u8 = 2;
    pub const WAITING: u8 = 3;
    /// The API refused a request (its message is printed).
    pub const API: u8 = 4;
    /// The service could not be reached, or an event stream could not be resumed.
    pub const CONNECTION: u8 = 5;
    /// A bad option, argument or file.
    pub const USAGE: u8 = 64;
}

/// Shown under every client command's help.
pub const EXIT_CODES_HELP: &str = "Exit codes: 0 success (watch: the ticket is done), 1 the ticket failed, \
2 it was cancelled, 3 it is waiting for a human, 4 the API refused the request (its message is printed), \
5 the service cannot be reached or the event stream could not be resumed, 64 a bad option, argument or file.";

/// Where the service is and how to authenticate (options of every client command).
#[derive(Args, Clone, Debug)]
#[command(next_help_heading = "Client options")]
pub struct ClientArgs {
    /// Base URL of the agentdesk service
    #[arg(
        long,
        global = true,
        env = "AGENTDESK_URL",
        value_name = "URL",
        default_value = "http://127.0.0.1:8080"
    )]
    pub url: String,
    /// Bearer token sent with every request
    #[arg(
        long,
        global = true,
        env = "AGENTDESK_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub token: Option<String>,
    /// The project to act in (sent as `AgentDesk-Project`; a project token needs none)
    #[arg(long, global = true, env = "AGENTDESK_PROJECT", value_name = "NAME")]
    pub project: Option<String>,
}

#[derive(Args, Debug)]
#[command(after_help = EXIT_CODES_HELP)]
pub struct TicketArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(subcommand)]
    pub command: TicketCommand,
}

#[derive(Subcommand, Debug)]
pub enum TicketCommand {
    /// Create a ticket and print its key (with --watch, follow it as `ticket watch` does)
    #[command(after_help = EXIT_CODES_HELP)]
    Create {
        /// The task, as text
        task: String,
        /// A label (repeat for several)
        #[arg(long = "label", value_name = "LABEL")]
        labels: Vec<String>,
        /// Higher is claimed first
        #[arg(long, allow_negative_numbers = true)]
        priority: Option<i32>,
        /// A JSON (or YAML) file holding the JSON Schema the result must satisfy
        #[arg(long, value_name = "FILE")]
        schema: Option<PathBuf>,
        /// Follow the ticket until it is done, failed, cancelled or waiting
        #[arg(long)]
        watch: bool,
    },
    /// Print the ticket's events as they come and the model's text as it streams
    #[command(after_help = EXIT_CODES_HELP)]
    Watch {
        /// Ticket key (TICKET-7) or id
        key: String,
    },
    /// List tickets, newest first
    #[command(after_help = EXIT_CODES_HELP)]
    List {
        /// Only these statuses (comma list: todo, in_progress, waiting, done, failed, cancelled)
        #[arg(long)]
        status: Option<String>,
        /// Only tickets with this label
        #[arg(long)]
        label: Option<String>,
        /// At most this many (1 to 200)
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// Show a ticket and its last comments
    #[command(after_help = EXIT_CODES_HELP)]
    Show {
        key: String,
        /// Print the API's JSON
        #[arg(long)]
        json: bool,
        /// How many of the last comments to show
        #[arg(long, default_value_t = 5)]
        comments: usize,
    },
    /// Add a comment (a waiting or finished ticket goes back to todo)
    #[command(after_help = EXIT_CODES_HELP)]
    Comment { key: String, text: String },
    /// Cancel a ticket
    #[command(after_help = EXIT_CODES_HELP)]
    Cancel { key: String },
    /// Put a failed or cancelled ticket back to todo
    #[command(after_help = EXIT_CODES_HELP)]
    Retry { key: String },
    /// Approve a tool call that waits for approval (without CALL_ID: every pending one)
    #[command(after_help = EXIT_CODES_HELP)]
    Approve {
        key: String,
        /// The call's id, as `ticket show` lists it
        call_id: Option<String>,
        /// Shown in the `tool.approved` event
        #[arg(long)]
        reason: Option<String>,
    },
    /// Deny a tool call that waits for approval (without CALL_ID: every pending one)
    #[command(after_help = EXIT_CODES_HELP)]
    Deny {
        key: String,
        call_id: Option<String>,
        /// Given to the model with the denial
        #[arg(long)]
        reason: Option<String>,
    },
    /// Run a ticket again as a new one (tool calls answered from its recording unless --live)
    #[command(after_help = EXIT_CODES_HELP)]
    Replay {
        key: String,
        /// The agent that runs it (default: the original's)
        #[arg(long)]
        agent: Option<String>,
        /// The agent's version to pin (default: its latest)
        #[arg(long = "agent-version")]
        agent_version: Option<i32>,
        /// A provider instead of the agent's
        #[arg(long)]
        provider: Option<String>,
        /// A model instead of the agent's
        #[arg(long)]
        model: Option<String>,
        /// Run the tools again instead of answering from the recording
        #[arg(long)]
        live: bool,
    },
    /// Answer the question the ticket's agent asked (its `pending_question`)
    #[command(after_help = EXIT_CODES_HELP)]
    Answer {
        key: String,
        /// The answer: a choice or text, or JSON with --json
        answer: String,
        /// Read ANSWER as JSON (for a question whose schema wants an object, a number, …)
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args, Debug)]
#[command(after_help = EXIT_CODES_HELP)]
pub struct AgentsArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(subcommand)]
    pub command: AgentsCommand,
}

#[derive(Subcommand, Debug)]
pub enum AgentsCommand {
    /// Create or update the providers, tools, MCP servers and agents of a YAML or JSON file
    #[command(after_help = apply::APPLY_HELP)]
    Apply {
        /// `.yaml`/`.yml` or `.json`; otherwise JSON is tried, then YAML
        file: PathBuf,
    },
    /// List an agent's versions, newest first
    Versions { name: String },
    /// Make a new version of an agent holding an earlier version's settings
    Rollback { name: String, version: i32 },
}

#[derive(Args, Debug)]
#[command(after_help = EXIT_CODES_HELP)]
pub struct ExperimentArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(subcommand)]
    pub command: ExperimentCommand,
}

#[derive(Subcommand, Debug)]
pub enum ExperimentCommand {
    /// Replay tickets on each arm and compare them; prints the experiment's id
    #[command(after_help = EXIT_CODES_HELP)]
    Create {
        /// What it compares
        #[arg(long)]
        name: String,
        /// A ticket to replay (repeat for several); without any, the filter below picks them
        #[arg(long = "ticket", value_name = "KEY")]
        tickets: Vec<String>,
        /// Filter: only tickets with this label
        #[arg(long)]
        label: Option<String>,
        /// Filter: only tickets with this status
        #[arg(long)]
        status: Option<String>,
        /// Filter: only tickets created at or after this time (RFC 3339)
        #[arg(long)]
        since: Option<String>,
        /// Filter: at most this many, newest first (1 to 100)
        #[arg(long, default_value_t = 20)]
        limit: u32,
        /// An arm: `name=NAME[,agent=A][,version=N][,model=M][,provider=P]` (repeat for each)
        #[arg(long = "arm", value_name = "SPEC", required = true)]
        arms: Vec<String>,
        /// The agent that judges the results, blind
        #[arg(long)]
        judge: Option<String>,
        /// What the judge should prefer
        #[arg(long)]
        criteria: Option<String>,
        /// Run the tools again instead of answering from the recordings
        #[arg(long)]
        live: bool,
    },
    /// Each arm's figures, then each ticket's results by arm
    #[command(after_help = EXIT_CODES_HELP)]
    Show {
        id: String,
        /// Print the API's JSON
        #[arg(long)]
        json: bool,
    },
    /// The experiments, newest first
    #[command(after_help = EXIT_CODES_HELP)]
    List,
    /// Cancel an experiment and what of it still runs
    #[command(after_help = EXIT_CODES_HELP)]
    Cancel { id: String },
}

#[derive(Args, Debug)]
#[command(after_help = EXIT_CODES_HELP)]
pub struct ScheduleArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(subcommand)]
    pub command: ScheduleCommand,
}

// Parsed once per run of the binary: the size of the `create` variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
pub enum ScheduleCommand {
    /// Create a schedule: a ticket with TASK at each fire time of CRON; prints its name (or id) and next run
    #[command(after_help = EXIT_CODES_HELP)]
    Create {
        /// 5 fields (min hour day month weekday), or 6 with seconds first
        cron: String,
        /// The ticket's task; `{scheduled_for}` and `{previous_result}` are replaced
        task: String,
        /// Unique, 1 to 64 of [a-zA-Z0-9_-]
        #[arg(long)]
        name: Option<String>,
        /// IANA time zone (default UTC)
        #[arg(long)]
        timezone: Option<String>,
        /// A label of the tickets (repeat for several)
        #[arg(long = "label", value_name = "LABEL")]
        labels: Vec<String>,
        #[arg(long, allow_negative_numbers = true)]
        priority: Option<i32>,
        /// skip (default), allow or cancel_previous
        #[arg(long)]
        overlap: Option<String>,
        /// skip (default) or latest
        #[arg(long)]
        catch_up: Option<String>,
        /// Seconds (default 3600)
        #[arg(long = "catch-up-window")]
        catch_up_window_secs: Option<i64>,
        /// RFC 3339: fire times start here
        #[arg(long)]
        start_at: Option<String>,
        /// RFC 3339: fire times stop here
        #[arg(long)]
        end_at: Option<String>,
        /// Create it paused
        #[arg(long)]
        paused: bool,
    },
    /// List schedules with their next run
    #[command(after_help = EXIT_CODES_HELP)]
    List {
        /// At most this many (1 to 200)
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// Show a schedule (by name or id) and its next five fire times
    #[command(after_help = EXIT_CODES_HELP)]
    Show {
        schedule: String,
        /// Print the API's JSON
        #[arg(long)]
        json: bool,
    },
    /// Pause a schedule
    #[command(after_help = EXIT_CODES_HELP)]
    Pause { schedule: String },
    /// Resume a paused schedule (from now: times missed while paused do not fire)
    #[command(after_help = EXIT_CODES_HELP)]
    Resume { schedule: String },
    /// Create its ticket now, whatever overlap says; prints the ticket's key
    #[command(after_help = EXIT_CODES_HELP)]
    Run { schedule: String },
    /// Delete a schedule (its tickets stay)
    #[command(after_help = EXIT_CODES_HELP)]
    Delete { schedule: String },
}

#[derive(Args, Debug)]
#[command(after_help = EXIT_CODES_HELP)]
pub struct ProjectArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(subcommand)]
    pub command: ProjectCommand,
}

#[derive(Subcommand, Debug)]
pub enum ProjectCommand {
    /// Create a project (a desk token's work); its tickets are KEY_PREFIX-1, KEY_PREFIX-2, …
    #[command(after_help = EXIT_CODES_HELP)]
    Create {
        /// 1 to 32 of [a-z0-9-]
        name: String,
        /// 1 to 10 of [A-Z]
        key_prefix: String,
        #[arg(long)]
        description: Option<String>,
        /// Its share of the workers when several projects have tickets waiting (1 to 100)
        #[arg(long)]
        weight: Option<i32>,
    },
    /// List the projects (a project token sees its own)
    #[command(after_help = EXIT_CODES_HELP)]
    List,
    /// Show a project with its usage today and this month, as JSON
    #[command(after_help = EXIT_CODES_HELP)]
    Show { project: String },
    /// Delete a project that has no tickets
    #[command(after_help = EXIT_CODES_HELP)]
    Delete { project: String },
}

#[derive(Args, Debug)]
#[command(after_help = EXIT_CODES_HELP)]
pub struct TokenArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(subcommand)]
    pub command: TokenCommand,
}

#[derive(Subcommand, Debug)]
pub enum TokenCommand {
    /// Create a token of the project (--project, else default); prints its secret, shown only once
    #[command(after_help = EXIT_CODES_HELP)]
    Create {
        name: String,
        /// read, write, approve or admin (repeat for several)
        #[arg(long = "scope", value_name = "SCOPE", required = true)]
        scopes: Vec<String>,
    },
    /// List the project's tokens (never their secrets)
    #[command(after_help = EXIT_CODES_HELP)]
    List,
    /// Revoke a token by id: refused everywhere within a second
    #[command(after_help = EXIT_CODES_HELP)]
    Revoke { id: String },
}

pub fn run_project(args: ProjectArgs) -> ExitCode {
    run(args.client, |client| async move {
        projects::run_project(&client, args.command).await
    })
}

pub fn run_token(args: TokenArgs) -> ExitCode {
    // The project every desk has (the client knows the service only through its API).
    let project = args.client.project.clone().unwrap_or_else(|| "default".to_owned());
    run(args.client, |client| async move {
        projects::run_token(&client, &project, args.command).await
    })
}

pub fn run_experiment(args: ExperimentArgs) -> ExitCode {
    run(args.client, |client| async move {
        experiments::run(&client, args.command).await
    })
}

pub fn run_schedule(args: ScheduleArgs) -> ExitCode {
    run(args.client, |client| async move {
        schedules::run(&client, args.command).await
    })
}

/// Runs a client command on a runtime of its own and returns the process's exit code.
pub fn run_ticket(args: TicketArgs) -> ExitCode {
    run(args.client, |client| async move {
        tickets::run(&client, args.command).await
    })
}

pub fn run_agents(args: AgentsArgs) -> ExitCode {
    run(args.client, |client| async move {
        match args.command {
            AgentsCommand::Apply { file } => apply::run(&client, &file).await,
            AgentsCommand::Versions { name } => tickets::agent_versions(&client, &name).await,
            AgentsCommand::Rollback { name, version } => tickets::rollback(&client, &name, version).await,
        }
    })
}

fn run<F, Fut>(args: ClientArgs, command: F) -> ExitCode
where
    F: FnOnce(Client) -> Fut,
    Fut: std::future::Future<Output = Result<u8, CliError>>,
{
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(err) => {
            eprintln!("agentdesk: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let client = Client::new(&args.url, args.token.as_deref())?.in_project(args.project.as_deref());
        command(client).await
    });
    match result {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            eprintln!("agentdesk: {err}");
            ExitCode::from(err.exit_code())
        }
    }
}
