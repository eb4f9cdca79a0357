//! Benchmarks of agentdesk against the bars of its performance issue.
//!
//! `cargo run --release --bin agentdesk-bench -- <scenario|all> [--quick] [--child] [OPTIONS]`
//!
//! Every scenario starts its own agentdesk on a fresh database with a fake model server in this
//! process, prints a table, and writes `bench-results/<scenario>.json`; `all` also rewrites
//! BENCHMARKS.md. See BENCHMARKS.md for what each scenario measures.

mod api_latency;
mod backlog;
mod concurrency;
mod fair_share;
mod floor;
mod harness;
mod opts;
mod pg_spend;
mod pgbench;
mod report;
mod retention;
mod scaling;
mod scenarios;
mod server;
mod soak;
mod sse;
mod sse_fanout;
mod stages;
mod step_overhead;
mod throughput;

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::opts::Opts;
use crate::report::{fmt_num, Report};
use crate::scenarios::{Scenario, SCENARIOS};

use clap::Parser;

/// What `--help` says after the options.
const AFTER_HELP: &str =
    "soak (not part of `all`): an hour of mixed load on one desk, sampled every minute, to see that
nothing grows: tools, approvals, a webhook, SSE readers coming and going, retention on.

Uses DATABASE_URL's server when set, else a private PostgreSQL (as the tests do). A child process
gets AGENTDESK_RUNTIME_THREADS from the bench's environment when it is set.";

/// Benchmarks of agentdesk against the bars of its performance issue.
#[derive(Parser)]
#[command(name = "agentdesk-bench", after_help = AFTER_HELP)]
struct Cli {
    /// The scenario to run, or `all` (every one but soak, and BENCHMARKS.md rewritten).
    #[arg(value_parser = clap::builder::PossibleValuesParser::new(scenarios::names()))]
    scenario: String,
    #[command(flatten)]
    opts: Opts,
    /// The agentdesk binary to run as the child (default: the one built beside this bench, when
    /// it is not older than the library).
    #[arg(long, value_name = "PATH")]
    agentdesk: Option<std::path::PathBuf>,
}

/// A scenario that runs longer than this is stopped and reported as an error.
const SCENARIO_TIMEOUT: Duration = Duration::from_secs(900);

fn main() -> ExitCode {
    agentdesk::tune_allocator();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(server::SERVE_ROLE) {
        init_tracing("info");
        return match server::serve_role(args.get(1).map(String::as_str).unwrap_or("serve")) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("agentdesk: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    if args.first().map(String::as_str) == Some(floor::FLOOR_ROLE) {
        return match floor::floor_role(&args[1..]) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("fan-out floor: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    let cli = Cli::parse();
    if let Some(path) = cli.agentdesk {
        // Absolute, as the child may start in another directory.
        match std::fs::canonicalize(&path) {
            Ok(path) if path.is_file() => server::set_program(path),
            _ => {
                eprintln!("--agentdesk: no such file {}", path.display());
                return ExitCode::from(2);
            }
        }
    }
    let all = cli.scenario == "all";
    let selected: Vec<&'static Scenario> = match all {
        true => SCENARIOS.iter().filter(|s| s.in_all).collect(),
        // clap accepts only the names `scenarios::names` gives.
        false => scenarios::find(&cli.scenario).into_iter().collect(),
    };
    init_tracing("warn");
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let passed = runtime.block_on(run(selected, cli.opts, all, &args));
    // Subscribers and servers may still hold tasks; do not wait for them.
    runtime.shutdown_timeout(Duration::from_secs(2));
    if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn init_tracing(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

async fn run(selected: Vec<&'static Scenario>, opts: Opts, all: bool, args: &[String]) -> bool {
    let dir = harness::results_dir();
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("cannot create {}: {e}", dir.display());
        return false;
    }
    let mut reports = Vec::new();
    for scenario in selected {
        let name = scenario.name;
        println!("running {name}{}…", if opts.quick { " (quick)" } else { "" });
        let mut report = Report::new(name, opts.quick);
        let started = Instant::now();
        // The soak runs as long as it is told to, and a few minutes more; concurrency waits on
        // its model twice over (`--kill`: once in each process), and takes a while to start and
        // finish 100 000 tickets.
        let limit = match name {
            "soak" => Duration::from_secs_f64(opts.minutes.unwrap_or(60.0) * 60.0) + SCENARIO_TIMEOUT,
            "concurrency" => {
                let thinking = Duration::from_secs_f64(opts.first_token_secs.unwrap_or(30.0));
                SCENARIO_TIMEOUT + thinking * 2 + Duration::from_secs_f64(opts.tickets.unwrap_or(0) as f64 / 200.0)
            }
            _ => SCENARIO_TIMEOUT,
        };
        match tokio::time::timeout(limit, (scenario.run)(opts, &mut report)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => report.error = Some(format!("{e:#}")),
            Err(_) => report.error = Some(format!("did not finish within {} s", limit.as_secs())),
        }
        report.elapsed_s = started.elapsed().as_secs_f64();
        println!("{}", report.table());
        let path = dir.join(format!("{name}.json"));
        let json = serde_json::to_string_pretty(&report).unwrap_or_default();
        if let Err(e) = std::fs::write(&path, json + "\n") {
            eprintln!("cannot write {}: {e}", path.display());
        }
        reports.push(report);
    }
    if all {
        let db = testkit::testing::fresh_database().await.ok();
        let machine = harness::machine(db.as_deref()).await;
        let command = format!("cargo run --release --bin agentdesk-bench -- {}", args.join(" "));
        let path = harness::output_root().join("BENCHMARKS.md");
        let analysis = std::fs::read_to_string(&path)
            .ok()
            .and_then(|text| kept_analysis(&text).map(str::to_owned))
            .unwrap_or_default();
        match std::fs::write(&path, benchmarks_md(&reports, &machine, &command, &analysis)) {
            Ok(()) => println!("wrote {}", path.display()),
            Err(e) => eprintln!("cannot write {}: {e}", path.display()),
        }
    }
    reports.iter().all(Report::passed)
}

const ANALYSIS_START: &str = "<!-- analysis: written by hand, kept when the bench rewrites this file -->";
const ANALYSIS_END: &str = "<!-- end of analysis -->";

/// The hand-written analysis of an earlier BENCHMARKS.md, markers included.
fn kept_analysis(text: &str) -> Option<&str> {
    let start = text.find(ANALYSIS_START)?;
    let end = text[start..].find(ANALYSIS_END)? + start + ANALYSIS_END.len();
    Some(&text[start..end])
}

fn benchmarks_md(reports: &[Report], machine: &serde_json::Value, command: &str, analysis: &str) -> String {
    let m = |k: &str| {
        machine[k]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| machine[k].to_string())
    };
    let mut out = String::from("# Benchmarks\n\n");
    out.push_str(
        "Figures of `agentdesk-bench` against the performance bars. The machine is shared and noisy: \
         throughput and step CPU are medians of rounds, latencies are percentiles of every request, \
         and the throughput bar is a ratio to a baseline measured in the same run.\n\n",
    );
    let _ = writeln!(out, "## Machine\n");
    let _ = writeln!(out, "- CPUs (nproc): {} — {}", m("nproc"), m("cpu"));
    let _ = writeln!(out, "- Memory: {} GiB", m("memory_gib"));
    let _ = writeln!(out, "- Kernel: {}", m("kernel"));
    let _ = writeln!(out, "- Rust: {}", m("rustc"));
    let _ = writeln!(out, "- PostgreSQL: {}", m("postgres"));
    let _ = writeln!(out, "- Date: {}", chrono::Utc::now().format("%Y-%m-%d %H:%M UTC"));
    let _ = writeln!(out, "- Command: `{command}`\n");
    let _ = writeln!(out, "## Results\n");
    let _ = writeln!(out, "| scenario | check | figure | bar | baseline | ratio | result |");
    let _ = writeln!(out, "|---|---|---|---|---|---|---|");
    for r in reports {
        if let Some(e) = &r.error {
            let _ = writeln!(
                out,
                "| {} | — | not measured: {} | — | — | — | ERROR |",
                r.scenario,
                e.replace('|', "/").replace('\n', " ")
            );
        }
        for c in &r.checks {
            let _ = writeln!(
                out,
                "| {} | {} | {} {} | {} | {} | {} | {} |",
                r.scenario,
                c.name,
                fmt_num(c.value),
                c.unit,
                c.bar_text(),
                c.baseline
                    .as_ref()
                    .map(|b| format!("{} ({})", fmt_num(b.value), b.name))
                    .unwrap_or_else(|| "—".into()),
                c.ratio.map(|x| format!("{x:.2}")).unwrap_or_else(|| "—".into()),
                c.result_text(),
            );
        }
    }
    out.push('\n');
    for r in reports {
        let _ = writeln!(out, "### {} — {} ({:.0} s)\n", r.scenario, r.verdict(), r.elapsed_s);
        for (k, v) in &r.figures {
            let _ = writeln!(out, "- {k}: {v}");
        }
        for n in &r.notes {
            let _ = writeln!(out, "- {n}");
        }
        out.push('\n');
    }
    if !analysis.is_empty() {
        out.push_str(analysis);
        out.push_str("\n\n");
    }
    out.push_str(SCENARIOS_MD);
    out.push_str(REPRODUCE_MD);
    out
}

const SCENARIOS_MD: &str = "## Scenarios\n
- **throughput**: one-step tickets (the fake model answers at once with `close_ticket`) created over \
HTTP by 16 concurrent clients until all are done (counted from `/v1/events`), with 256 tickets in \
flight (`AGENTDESK_WORKERS=256`; one more round with the default 64 is shown for information). \
Baseline: `pgbench` with 16 clients running the bare SQL of a ticket's life (insert it with its event; \
claim one with `FOR UPDATE SKIP LOCKED` and log it; finish it and log it) on agentdesk's schema in a \
scratch database of the same server, with prepared statements as agentdesk uses (`-M prepared`); each \
round also runs it with pgbench's default simple protocol, for information. Both warm up unmeasured \
first (1000 tickets; pgbench for 3 s), then rounds of the two alternate and their medians are \
compared. Postgres CPU and WAL per ticket are shown for both sides. Bar: agentdesk / pgbench ≥ 0.6. \
Each round also shows where the tickets queued inside agentdesk (the batched stages' statements from \
`/metrics`) and what Postgres's sessions waited on (`pg_stat_activity`, sampled).
- **claim_backlog**: how fast a backlog of 3000 tickets is claimed, with one claim statement at a time \
(`AGENTDESK_CLAIMERS=1`) against four side by side, alternating (3 rounds each); the model never \
answers within a round, so only the claims count. No bar.
- **concurrency**: 2000 tickets in flight at once (`AGENTDESK_WORKERS=2000`, `--tickets N`) on a \
model that thinks 30 s before its first token (`--first-token-secs`), then streams 20 tokens at 100/s \
and calls `close_ticket`; its requests share one HTTP/2 connection (`AGENTDESK_OPENAI_HTTP2=true`; \
`--http1`: a connection each). Bars: all finish; memory per ticket in flight ≤ 20 KB (RSS with every \
ticket waiting on the model, less the RSS before, over the tickets in flight); at most the pool's \
connections and 4 more. Shown: CPU per ticket-second while every ticket waits, lease renewal statements \
per second, first token to `ticket.done` (p50, p95). `--kill`: SIGKILL while every ticket waits, then \
another process must finish them all; `--subscribers K`: K readers of the whole event stream beside.
- **sse_fanout**: 10 000 subscribers on `/v1/events` while one-step tickets run, one a second. Bars: \
p99 from the event's `at` to its receipt < 100 ms; < 20 KB of agentdesk RSS per idle subscriber. \
Baseline: the fan-out floor, a bare TCP server writing one chunk of ten events a second to the same \
number of subscribers, read by the same client code.
- **api_latency**: `POST /v1/tickets` at a fixed 500 requests/s for 10 s, open loop, latency from each \
planned send time (no coordinated omission), workers idle. Bar: p99 < 10 ms. Baseline: `GET /healthz` \
on the same schedule.
- **step_overhead**: CPU time of the agentdesk process per agent step outside the model call (5 steps \
per ticket: four `read_tickets` calls, then `close_ticket`, answered at once). No bar; the fake model's \
CPU per request (the bench process) is shown as the baseline.

agentdesk runs as a child process (the release `agentdesk` binary) where its memory or CPU is \
measured, and in the bench process otherwise (`--child` forces the child everywhere).\n\n";

const REPRODUCE_MD: &str = "## How to reproduce\n
```sh
cargo run --release --bin agentdesk-bench -- all            # every scenario, rewrites this file
cargo run --release --bin agentdesk-bench -- throughput     # one scenario
cargo run --release --bin agentdesk-bench -- all --quick    # a smoke run in seconds
```

With no `DATABASE_URL` the bench starts a private PostgreSQL from the installed server binaries, as \
the tests do; with it, it creates scratch databases on that server. `pgbench` must be installed (it \
comes with the PostgreSQL client). Raw figures are in `bench-results/<scenario>.json`, the service's \
log of each scenario in `bench-results/<scenario>.agentdesk.log`.\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rewrite_keeps_the_hand_written_analysis() {
        let old =
            format!("# Benchmarks\n\nold table\n\n{ANALYSIS_START}\nwhy it is so\n{ANALYSIS_END}\n\n## Scenarios\n");
        let kept = kept_analysis(&old).unwrap();
        assert_eq!(kept, format!("{ANALYSIS_START}\nwhy it is so\n{ANALYSIS_END}"));
        let new = benchmarks_md(&[], &serde_json::json!({}), "cmd", kept);
        assert!(new.contains("why it is so"));
        assert_eq!(kept_analysis(&new), Some(kept));
        assert_eq!(kept_analysis("no markers"), None);
    }
}
