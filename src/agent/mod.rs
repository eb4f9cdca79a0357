//! The agent loop: one claimed ticket, step by step, until it is done, failed, waiting for a
//! human, or let go.
//!
//! A step (`step`): rebuild the request from the transcript (`request`, compacting it first when
//! it nears the context window: `compaction`), stream one model response with its retry policy
//! (`model_call`, after taking a slot of a provider with a limit: `capacity`; text deltas go
//! out live), prepare and run its tool calls concurrently
//! (`tool_calls`), and store the response, the results and any outcome (`persist`). Every write
//! is fenced by the claim (`db::claims::fence`), so a worker that lost its claim writes nothing;
//! no connection is held while the model or a tool runs.

mod approvals;
pub mod capacity;
mod charge;
pub mod compaction;
mod model_call;
pub mod outputs;
mod persist;
mod replay;
mod request;
mod results;
mod step;
mod step_state;
mod tool_calls;
pub mod transcript;
mod trim;
mod window;

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::db;
use crate::db::claims::{Fence, FirstRead, Holder, Release};
use crate::events::EventHub;
use crate::llm::Providers;
use crate::telemetry::trace::AgentSpan;

/// What the loop needs from the process.
pub struct Runtime {
    pub pool: PgPool,
    /// Group-commits the loops' event-only writes.
    pub appender: db::events::EventAppender,
    /// Group-commits the loops' step results.
    pub steps: db::steps::StepWriter,
    pub hub: EventHub,
    pub providers: Arc<Providers>,
    /// Resolves the agent's tool names into the tools of a step.
    pub catalog: crate::tools::catalog::ToolCatalog,
    /// A model stream silent this long is a stall.
    pub stream_idle: Duration,
    /// Slots of the providers with a `max_concurrent`.
    pub slots: capacity::ProviderSlots,
    /// The prices requests are charged at.
    pub prices: db::prices::PriceBook,
    /// The projects' quotas requests are checked against.
    pub projects: db::projects::ProjectBook,
    /// Signs the links of calls that wait for approval.
    pub links: crate::domain::link::Links,
}

/// How the outside world stops a running ticket.
#[derive(Clone, Default)]
pub struct Signals {
    /// Stop now and write nothing more: the ticket was cancelled or the claim was lost.
    pub abort: CancellationToken,
    /// Finish the current step, then let the ticket go (shutdown).
    pub stop: CancellationToken,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunEnd {
    Done,
    Failed,
    Waiting,
    /// Let go on shutdown, back to `todo`.
    Released,
    /// Cancelled, or the claim was lost: nothing more was written.
    Aborted,
}

/// Why a step stops before its end: the run is over, or the database failed.
enum Stop {
    End(RunEnd),
    Db(sqlx::Error),
}

impl From<sqlx::Error> for Stop {
    fn from(err: sqlx::Error) -> Self {
        Stop::Db(err)
    }
}

/// The result of a part of a step: its value, or why the step stops there.
type Flow<T> = Result<T, Stop>;

/// Stops the step: the claim is gone (cancelled or lost), and nothing more is written.
fn aborted<T>() -> Flow<T> {
    Err(Stop::End(RunEnd::Aborted))
}

/// Consecutive rejected steps of one claim, each counted against the agent's
/// `max_schema_retries`: replies cut at the output limit (`truncated`), and steps whose calls
/// had invalid input and none succeeded (`invalid_input`). Kept in memory for the claim: neither
/// kind of step lets the ticket go, so a streak lives in one claim (a new claim after a lost one
/// starts again, bounded by `max_turns`).
#[derive(Default)]
struct Streaks {
    truncated: Count,
    invalid_input: Count,
}

/// A count that a step updates through `&Step` (atomic only to be `Sync`: one loop uses it).
#[derive(Default)]
struct Count(std::sync::atomic::AtomicI64);

impl Count {
    /// Adds one; returns the new count.
    fn bump(&self) -> i64 {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1
    }

    /// Returns the count and sets it back to zero.
    fn take(&self) -> i64 {
        self.0.swap(0, std::sync::atomic::Ordering::Relaxed)
    }
}

/// Runs a claimed ticket until it settles. `first` is what the claim read (the ticket, the agent,
/// a transcript it wrote), which the first step works from, sparing the reads. A database error
/// ends the run with Err; the caller may run it again with the same claim and no `first`, and
/// then everything is read again from the database (what the claim read may be out of date by
/// then). `span` is the claim's `invoke_agent` span, parent of the step's model and tool spans.
pub async fn run_ticket(
    rt: &Runtime,
    claim: &Holder,
    mut first: Option<Box<FirstRead>>,
    signals: &Signals,
    span: &AgentSpan,
) -> Result<RunEnd, sqlx::Error> {
    let streaks = Streaks::default();
    loop {
        if signals.abort.is_cancelled() {
            return Ok(RunEnd::Aborted);
        }
        if signals.stop.is_cancelled() {
            return Box::pin(release(rt, claim.fence, Release::Shutdown, &claim.agent)).await;
        }
        match step::run(rt, claim, first.take(), signals, &streaks, span).await {
            Ok(()) => {}
            Err(Stop::End(end)) => return Ok(end),
            Err(Stop::Db(err)) => return Err(err),
        }
    }
}

/// Lets go of the ticket (waiting for a human, or shutdown).
pub async fn release(rt: &Runtime, fence: Fence, how: Release, agent: &str) -> Result<RunEnd, sqlx::Error> {
    let Some(mut tx) = db::claims::fence(&rt.pool, fence).await? else {
        return Ok(RunEnd::Aborted);
    };
    db::claims::release(&mut tx, fence, how, agent).await?;
    tx.commit().await?;
    rt.hub.wake();
    if how == Release::Shutdown {
        crate::telemetry::metric::requeued("shutdown");
    }
    Ok(match how {
        Release::Waiting => RunEnd::Waiting,
        Release::Shutdown => RunEnd::Released,
    })
}
