//! The options every scenario reads, from the command line (clap).

use std::str::FromStr;

use clap::Args;

/// Options shared by all scenarios; a scenario uses its own default for each one not given.
#[derive(Args, Clone, Copy, Debug, Default)]
pub struct Opts {
    /// Shrink every scenario to a smoke run of seconds.
    #[arg(long)]
    pub quick: bool,
    /// Run agentdesk as a child process in every scenario (concurrency, sse_fanout, step_overhead,
    /// quiet_desk and scale_out always do, to measure its memory and CPU apart from the bench).
    #[arg(long)]
    pub child: bool,
    /// Tickets in flight per process (AGENTDESK_WORKERS), instead of the scenario's.
    #[arg(long, value_name = "N", value_parser = above_zero::<usize>)]
    pub workers: Option<usize>,
    /// Pooled database connections per process (AGENTDESK_DB_MAX_CONNECTIONS).
    #[arg(long, value_name = "N", value_parser = above_zero::<u32>)]
    pub db_connections: Option<u32>,
    /// Concurrent HTTP clients creating tickets.
    #[arg(long, value_name = "N", value_parser = above_zero::<usize>)]
    pub clients: Option<usize>,
    /// Tickets per second in quiet_desk (default 200).
    #[arg(long, value_name = "R", value_parser = above_zero::<f64>)]
    pub rate: Option<f64>,
    /// Throughput with one webhook subscribed to every event (a receiver in the bench answers 200
    /// at once).
    #[arg(long)]
    pub webhook: bool,
    /// How long soak runs (default 60; --quick: 4).
    #[arg(long, value_name = "M", value_parser = above_zero::<f64>)]
    pub minutes: Option<f64>,
    /// How long each of throughput's pgbench runs lasts (default 10; --quick: 3): shorter runs fit
    /// a sweep of several machine sizes into one device session.
    #[arg(long, value_name = "S", value_parser = at_least(1.0))]
    pub pg_seconds: Option<f64>,
    /// Tickets in flight in concurrency (default 2000; --quick: 200).
    #[arg(long, value_name = "N", value_parser = above_zero::<usize>)]
    pub tickets: Option<usize>,
    /// How long concurrency's model thinks before its first token (default 30).
    #[arg(long, value_name = "S", value_parser = at_least(0.0))]
    pub first_token_secs: Option<f64>,
    /// Concurrency's model requests over HTTP/1.1, a connection each (default: HTTP/2,
    /// AGENTDESK_OPENAI_HTTP2=true).
    #[arg(long)]
    pub http1: bool,
    /// Concurrency kills agentdesk (SIGKILL) while every ticket waits, starts another, and counts
    /// the tickets it finishes.
    #[arg(long)]
    pub kill: bool,
    /// Concurrency with K readers of the whole event stream.
    #[arg(long, value_name = "K")]
    pub subscribers: Option<usize>,
}

impl Opts {
    pub fn pick<T>(&self, quick: T, full: T) -> T {
        if self.quick {
            quick
        } else {
            full
        }
    }
}

fn number<T: FromStr>(s: &str) -> Result<T, String> {
    s.parse().map_err(|_| format!("not a number: {s:?}"))
}

fn above_zero<T: FromStr + PartialOrd + Default>(s: &str) -> Result<T, String> {
    let n: T = number(s)?;
    if n > T::default() {
        Ok(n)
    } else {
        Err("must be above 0".into())
    }
}

/// A number no lower than `min`.
fn at_least(min: f64) -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync + 'static {
    move |s| {
        let n: f64 = number(s)?;
        if n >= min {
            Ok(n)
        } else {
            Err(format!("must be at least {min}"))
        }
    }
}
