//! The list of scenarios, written once: each one's name, whether `all` runs it, and the function
//! that runs it (in a file of its own). Each fills a [`Report`]; an `Err` means the scenario
//! could not run to the end (the report says so instead of a figure).

use anyhow::Result;
use futures::future::LocalBoxFuture;

use crate::opts::Opts;
use crate::report::Report;
use crate::{
    api_latency, backlog, concurrency, fair_share, retention, scaling, soak, sse_fanout, step_overhead, throughput,
};

type Run = for<'a> fn(Opts, &'a mut Report) -> LocalBoxFuture<'a, Result<()>>;

pub struct Scenario {
    pub name: &'static str,
    /// Whether `all` runs it.
    pub in_all: bool,
    pub run: Run,
}

/// In the order `all` runs them: latency first, on a quiet machine; the 10 000-connection
/// fan-out last, as tearing down its connections disturbs whatever runs right after it. The
/// soak runs an hour, so only when named.
pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "api_latency",
        in_all: true,
        run: |opts, report| Box::pin(api_latency::api_latency(opts, report)),
    },
    Scenario {
        name: "throughput",
        in_all: true,
        run: |opts, report| Box::pin(throughput::throughput(opts, report)),
    },
    Scenario {
        name: "claim_backlog",
        in_all: true,
        run: |opts, report| Box::pin(backlog::claim_backlog(opts, report)),
    },
    Scenario {
        name: "fair_share",
        in_all: true,
        run: |opts, report| Box::pin(fair_share::fair_share(opts, report)),
    },
    Scenario {
        name: "retention_sweep",
        in_all: true,
        run: |opts, report| Box::pin(retention::retention_sweep(opts, report)),
    },
    Scenario {
        name: "quiet_desk",
        in_all: true,
        run: |opts, report| Box::pin(scaling::quiet_desk(opts, report)),
    },
    Scenario {
        name: "scale_out",
        in_all: true,
        run: |opts, report| Box::pin(scaling::scale_out(opts, report)),
    },
    Scenario {
        name: "concurrency",
        in_all: true,
        run: |opts, report| Box::pin(concurrency::run(opts, report)),
    },
    Scenario {
        name: "step_overhead",
        in_all: true,
        run: |opts, report| Box::pin(step_overhead::step_overhead(opts, report)),
    },
    Scenario {
        name: "sse_fanout",
        in_all: true,
        run: |opts, report| Box::pin(sse_fanout::sse_fanout(opts, report)),
    },
    Scenario {
        name: "soak",
        in_all: false,
        run: |opts, report| Box::pin(soak::soak(opts, report)),
    },
];

/// The scenario of this name.
pub fn find(name: &str) -> Option<&'static Scenario> {
    SCENARIOS.iter().find(|s| s.name == name)
}

/// What the command line accepts: every scenario's name, and `all`.
pub fn names() -> impl Iterator<Item = &'static str> {
    SCENARIOS.iter().map(|s| s.name).chain(["all"])
}
