//! The Prometheus metrics of one process, through the `metrics` facade: the hot path only bumps
//! counters and records histogram samples (atomics behind a sharded registry, no query, no lock
//! of ours); the gauges read from the database (`tickets`, `db_pool_connections`) are set when
//! `/metrics` is scraped. The recorder is global to the process and installed once, however many
//! services a process starts (the tests start many).

use std::sync::OnceLock;
use std::time::Duration;

use ::metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Unit};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

pub const TICKETS: &str = "agentdesk_tickets";
pub const TICKETS_FINISHED: &str = "agentdesk_tickets_finished_total";
pub const CLAIMS: &str = "agentdesk_claims_total";
pub const LEASES_LOST: &str = "agentdesk_leases_lost_total";
pub const REQUEUES: &str = "agentdesk_requeues_total";
pub const MODEL_REQUESTS: &str = "agentdesk_model_requests_total";
pub const MODEL_REQUEST_DURATION: &str = "agentdesk_model_request_duration_seconds";
pub const MODEL_TTFT: &str = "agentdesk_model_time_to_first_token_seconds";
pub const TOKENS: &str = "agentdesk_tokens_total";
pub const COST: &str = "agentdesk_cost_usd_total";
pub const TOOL_CALLS: &str = "agentdesk_tool_calls_total";
pub const TOOL_DURATION: &str = "agentdesk_tool_duration_seconds";
pub const EVENTS: &str = "agentdesk_events_total";
pub const SSE_SUBSCRIBERS: &str = "agentdesk_sse_subscribers";
pub const HTTP_REQUESTS: &str = "agentdesk_http_requests_total";
pub const HTTP_DURATION: &str = "agentdesk_http_request_duration_seconds";
pub const DB_POOL: &str = "agentdesk_db_pool_connections";
pub const WEBHOOK_DELIVERIES: &str = "agentdesk_webhook_deliveries_total";
pub const BUILD_INFO: &str = "agentdesk_build_info";
pub const RUNTIME_THREADS: &str = "agentdesk_runtime_threads";
pub const SCHEDULES: &str = "agentdesk_schedules";
pub const SCHEDULE_FIRINGS: &str = "agentdesk_schedule_firings_total";
pub const SCHEDULER_POLLS: &str = "agentdesk_scheduler_polls_total";
pub const DB_BATCH_DURATION: &str = "agentdesk_db_batch_duration_seconds";
pub const DB_BATCH_SIZE: &str = "agentdesk_db_batch_size";
pub const DB_BATCH_WAIT: &str = "agentdesk_db_batch_wait_seconds";

/// The stages that pass every ticket through batched statements, one batch at a time per task
/// (the `stage` label of the `db_batch_*` histograms): where a desk at saturation queues.
pub const DB_STAGES: [&str; 6] = ["intake", "claims", "steps", "events", "event_reader", "renewals"];

/// The `route` label of a request that matched no route (never the raw path: unbounded).
pub const UNMATCHED_ROUTE: &str = "unmatched";

/// Model calls and tool runs: from a fast local server to a long reasoning answer.
const SLOW_BUCKETS: &[f64] = &[
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];
/// HTTP requests (an SSE stream counts until its headers are sent).
const FAST_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Writes in one batched statement.
const SIZE_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 1000.0];

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the process's recorder (once; later calls return the same handle). None when another
/// recorder was installed first: the metrics then go to that one and `/metrics` has nothing.
pub fn install() -> Option<&'static PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let handle = build().inspect_err(|err| tracing::warn!(error = %err, "metrics are off: {err}"));
            let handle = handle.ok()?;
            describe();
            gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
            register_known_series();
            // Histogram samples wait in lock-free buckets until folded in; fold them even when
            // nobody scrapes, so they cannot pile up.
            let upkeep = handle.clone();
            let _ = std::thread::Builder::new()
                .name("metrics-upkeep".into())
                .spawn(move || loop {
                    std::thread::sleep(Duration::from_secs(5));
                    upkeep.run_upkeep();
                });
            Some(handle)
        })
        .as_ref()
}

fn build() -> Result<PrometheusHandle, metrics_exporter_prometheus::BuildError> {
    let mut builder = PrometheusBuilder::new();
    for name in [MODEL_REQUEST_DURATION, MODEL_TTFT, TOOL_DURATION] {
        builder = builder.set_buckets_for_metric(Matcher::Full(name.into()), SLOW_BUCKETS)?;
    }
    for name in [HTTP_DURATION, DB_BATCH_DURATION, DB_BATCH_WAIT] {
        builder = builder.set_buckets_for_metric(Matcher::Full(name.into()), FAST_BUCKETS)?;
    }
    builder = builder.set_buckets_for_metric(Matcher::Full(DB_BATCH_SIZE.into()), SIZE_BUCKETS)?;
    builder.install_recorder()
}

fn describe() {
    describe_counter!(
        TICKETS_FINISHED,
        "Tickets this process finished (done, failed), by agent"
    );
    describe_counter!(CLAIMS, "Tickets claimed by this process's workers");
    describe_counter!(
        LEASES_LOST,
        "Claims this process held and lost (lease expired, taken or cancelled)"
    );
    describe_counter!(REQUEUES, "Tickets put back to todo, by reason");
    describe_counter!(MODEL_REQUESTS, "Model requests sent, by outcome (ok or the error kind)");
    describe_histogram!(
        MODEL_REQUEST_DURATION,
        Unit::Seconds,
        "Model request duration, to the end of the stream"
    );
    describe_histogram!(
        MODEL_TTFT,
        Unit::Seconds,
        "Time from a model request to its first streamed output"
    );
    describe_counter!(
        TOKENS,
        "Tokens of model responses, by type (input, output, cache_read, cache_creation)"
    );
    describe_gauge!(
        COST,
        "US dollars that priced model requests cost, at the prices in force when sent (only grows)"
    );
    describe_counter!(TOOL_CALLS, "Tool calls run, by outcome (ok or the error kind)");
    describe_histogram!(TOOL_DURATION, Unit::Seconds, "Tool call duration");
    describe_counter!(EVENTS, "Events written to the log by this process, by kind");
    describe_gauge!(SSE_SUBSCRIBERS, "Open SSE streams");
    describe_counter!(HTTP_REQUESTS, "HTTP requests answered, by route template and status");
    describe_histogram!(
        HTTP_DURATION,
        Unit::Seconds,
        "HTTP request duration, to the response head"
    );
    describe_counter!(WEBHOOK_DELIVERIES, "Webhook delivery attempts, by outcome");
    describe_gauge!(BUILD_INFO, "Always 1, labelled with the version");
    describe_counter!(
        SCHEDULE_FIRINGS,
        "Schedule fire times this process handled, by outcome (fired, caught_up, skipped, missed, manual)"
    );
    describe_counter!(
        SCHEDULER_POLLS,
        "Times this process's scheduler read the earliest next_run_at (it sleeps in between)"
    );
    describe_histogram!(
        DB_BATCH_DURATION,
        Unit::Seconds,
        "Batched statements of the stages every ticket passes (intake, claims, steps, events, event_reader), \
         by stage: their time to commit; the sum over the elapsed time is how busy a stage is"
    );
    describe_histogram!(
        DB_BATCH_SIZE,
        "Writes (or claims, or events read) per batched statement, by stage"
    );
    describe_histogram!(
        DB_BATCH_WAIT,
        Unit::Seconds,
        "Time a write queued before its batch started, by stage (the group-committed ones)"
    );
    describe_gauge!(
        RUNTIME_THREADS,
        "Threads of the async runtime that runs this process's tasks (AGENTDESK_RUNTIME_THREADS)"
    );
}

/// Series whose labels are known up front start at zero, so a rate or an alert over them works
/// before the first event (Prometheus sees no series until a value exists).
fn register_known_series() {
    counter!(CLAIMS).absolute(0);
    counter!(LEASES_LOST).absolute(0);
    for reason in REQUEUE_REASONS {
        counter!(REQUEUES, "reason" => reason).absolute(0);
    }
    gauge!(SSE_SUBSCRIBERS).increment(0.0);
    // The outcomes `webhooks` counts its delivery attempts under.
    for outcome in ["success", "retry", "gave_up", "gone"] {
        counter!(WEBHOOK_DELIVERIES, "outcome" => outcome).absolute(0);
    }
    for outcome in SCHEDULE_OUTCOMES {
        counter!(SCHEDULE_FIRINGS, "outcome" => outcome).absolute(0);
    }
    counter!(SCHEDULER_POLLS).absolute(0);
}

/// The outcomes `schedule_firings_total` counts under.
pub const SCHEDULE_OUTCOMES: [&str; 6] = ["fired", "caught_up", "skipped", "missed", "already_fired", "manual"];

/// The scheduler read the earliest `next_run_at`.
pub fn scheduler_polled() {
    counter!(SCHEDULER_POLLS).increment(1);
}

/// A schedule's fire time handled (or a "run now"), by outcome.
pub fn schedule_firing(outcome: &'static str) {
    counter!(SCHEDULE_FIRINGS, "outcome" => outcome).increment(1);
}

/// One batched statement of a stage (`DB_STAGES`): how many items it took, how long it took, and
/// how long each of its writes had queued for it (empty for the stages that do not queue).
pub fn db_batch(stage: &'static str, items: usize, took: Duration, waits: impl IntoIterator<Item = Duration>) {
    histogram!(DB_BATCH_DURATION, "stage" => stage).record(took.as_secs_f64());
    histogram!(DB_BATCH_SIZE, "stage" => stage).record(items as f64);
    let wait = histogram!(DB_BATCH_WAIT, "stage" => stage);
    for waited in waits {
        wait.record(waited.as_secs_f64());
    }
}

/// The `reason` of `ticket.requeued` events.
pub const REQUEUE_REASONS: [&str; 4] = ["lease_lost", "shutdown", "comment", "retry"];

/// The metrics in the Prometheus text format (empty when metrics are off).
pub fn render() -> String {
    let Some(handle) = install() else {
        return String::new();
    };
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        gauge!(RUNTIME_THREADS).set(runtime.metrics().num_workers() as f64);
    }
    handle.render()
}

/// Appends a gauge with one label, in the text format, to `out` (for the gauges read when
/// scraped, which belong to one service rather than to the process).
pub fn write_gauge(
    out: &mut String,
    (name, help): (&str, &str),
    label: &str,
    values: impl IntoIterator<Item = (&'static str, i64)>,
) {
    use std::fmt::Write;
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
    for (value_label, value) in values {
        let _ = writeln!(out, "{name}{{{label}=\"{value_label}\"}} {value}");
    }
    out.push('\n');
}

/// Project names by id, for the `project` label (kept current by the process's project book).
fn project_names() -> &'static std::sync::RwLock<std::collections::HashMap<i64, String>> {
    static NAMES: OnceLock<std::sync::RwLock<std::collections::HashMap<i64, String>>> = OnceLock::new();
    NAMES.get_or_init(Default::default)
}

/// The projects given a `project` label of their own so far, in this process.
fn labelled_projects() -> &'static std::sync::Mutex<std::collections::HashSet<i64>> {
    static LABELLED: OnceLock<std::sync::Mutex<std::collections::HashSet<i64>>> = OnceLock::new();
    LABELLED.get_or_init(Default::default)
}

/// How many projects get a `project` label of their own (`AGENTDESK_METRICS_PROJECTS`).
static PROJECT_LABELS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(DEFAULT_PROJECT_LABELS);

pub const DEFAULT_PROJECT_LABELS: usize = 100;

/// The `project` label every project past the limit shares.
pub const OTHER_PROJECTS: &str = "_other";

/// Bounds the `project` label: the first `limit` projects a process reports on get their own
/// value, the rest share `_other`, so a desk with thousands of projects keeps its series bounded.
pub fn limit_project_labels(limit: usize) {
    PROJECT_LABELS.store(limit, std::sync::atomic::Ordering::Relaxed);
}

/// Tells the metrics the projects' names.
pub fn name_projects(names: impl IntoIterator<Item = (i64, String)>) {
    let names = names.into_iter().collect();
    *project_names().write().unwrap_or_else(|e| e.into_inner()) = names;
}

/// The `project` label of a project's id: its name (the id until the name is known), or
/// `_other` past the limit. `default` always has its own.
pub fn project_label(project: i64) -> String {
    if project != 1 {
        let mut labelled = labelled_projects().lock().unwrap_or_else(|e| e.into_inner());
        if !labelled.contains(&project) {
            if labelled.len() >= PROJECT_LABELS.load(std::sync::atomic::Ordering::Relaxed) {
                return OTHER_PROJECTS.to_owned();
            }
            labelled.insert(project);
        }
    }
    let names = project_names().read().unwrap_or_else(|e| e.into_inner());
    match names.get(&project) {
        Some(name) => name.clone(),
        None if project == 1 => "default".to_owned(),
        None => project.to_string(),
    }
}

/// Appends a gauge by one label and `project` (`agentdesk_tickets`: by status), in the text
/// format, to `out`.
pub fn write_project_gauge<'a>(
    out: &mut String,
    (name, help): (&str, &str),
    label: &str,
    values: impl IntoIterator<Item = (&'a str, &'a str, i64)>,
) {
    use std::fmt::Write;
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
    for (project, value_label, value) in values {
        let project = project.replace('\\', "\\\\").replace('"', "\\\"");
        let _ = writeln!(out, "{name}{{{label}=\"{value_label}\",project=\"{project}\"}} {value}");
    }
    out.push('\n');
}

pub fn ticket_finished(project: i64, agent: &str, status: &'static str) {
    let project = project_label(project);
    counter!(TICKETS_FINISHED, "agent" => agent.to_owned(), "status" => status, "project" => project).increment(1);
}

pub fn claimed(tickets: usize) {
    counter!(CLAIMS).increment(tickets as u64);
}

pub fn leases_lost(claims: usize) {
    counter!(LEASES_LOST).increment(claims as u64);
}

pub fn requeued(reason: &'static str) {
    counter!(REQUEUES, "reason" => reason).increment(1);
}

/// One model request as sent: `outcome` is `ok` or the error kind.
pub fn model_request(
    project: i64,
    (provider, model): (&str, &str),
    outcome: &'static str,
    took: Duration,
    first_output: Option<Duration>,
) {
    let (project, provider, model) = (project_label(project), provider.to_owned(), model.to_owned());
    // `project` last: the labels of the earlier rounds keep their places.
    counter!(MODEL_REQUESTS, "provider" => provider.clone(), "model" => model.clone(), "outcome" => outcome,
        "project" => project.clone())
    .increment(1);
    histogram!(MODEL_REQUEST_DURATION, "provider" => provider.clone(), "model" => model.clone(),
        "project" => project.clone())
    .record(took.as_secs_f64());
    if let Some(first) = first_output {
        histogram!(MODEL_TTFT, "provider" => provider, "model" => model, "project" => project)
            .record(first.as_secs_f64());
    }
}

/// The tokens of one response, by type.
pub fn tokens(project: i64, provider: &str, model: &str, counts: [(&'static str, u64); 4]) {
    let project = project_label(project);
    for (kind, count) in counts {
        if count > 0 {
            counter!(TOKENS, "provider" => provider.to_owned(), "model" => model.to_owned(), "type" => kind,
                "project" => project.clone())
            .increment(count);
        }
    }
}

/// What a priced request cost, in US dollars. A gauge that only grows (the facade's counters count
/// whole numbers); the figures of record are the tickets' exact costs.
pub fn cost(project: i64, agent: &str, provider: &str, model: &str, usd: f64) {
    if usd > 0.0 {
        gauge!(COST, "agent" => agent.to_owned(), "provider" => provider.to_owned(), "model" => model.to_owned(),
            "project" => project_label(project))
        .increment(usd);
    }
}

pub fn tool_call(tool: &str, outcome: &'static str, took: Duration) {
    counter!(TOOL_CALLS, "tool" => tool.to_owned(), "outcome" => outcome).increment(1);
    histogram!(TOOL_DURATION, "tool" => tool.to_owned()).record(took.as_secs_f64());
}

pub fn events_written<'a>(kinds: impl IntoIterator<Item = &'a &'static str>) {
    for kind in kinds {
        counter!(EVENTS, "kind" => *kind).increment(1);
    }
}

pub fn http_request(method: &str, route: String, status: u16, took: Duration) {
    let method = static_method(method);
    counter!(HTTP_REQUESTS, "method" => method, "route" => route.clone(), "status" => status.to_string()).increment(1);
    histogram!(HTTP_DURATION, "method" => method, "route" => route).record(took.as_secs_f64());
}

/// The label of a method, from a fixed set (a made-up method is `other`, not a new series).
fn static_method(method: &str) -> &'static str {
    const KNOWN: [&str; 9] = [
        "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT",
    ];
    KNOWN.into_iter().find(|m| *m == method).unwrap_or("other")
}

/// Counts an open SSE stream until dropped.
pub struct SseSubscriber(());

impl SseSubscriber {
    pub fn open() -> SseSubscriber {
        gauge!(SSE_SUBSCRIBERS).increment(1.0);
        SseSubscriber(())
    }
}

impl Drop for SseSubscriber {
    fn drop(&mut self) {
        gauge!(SSE_SUBSCRIBERS).decrement(1.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_limit_projects_share_one_label() {
        let before = labelled_projects().lock().unwrap().len();
        limit_project_labels(before + 2);
        assert_eq!(project_label(9001), "9001");
        assert_eq!(project_label(9002), "9002");
        assert_eq!(project_label(9003), OTHER_PROJECTS);
        assert_eq!(project_label(9001), "9001", "a labelled project keeps its label");
        assert_eq!(project_label(1), "default", "default always has its own");
        limit_project_labels(DEFAULT_PROJECT_LABELS);
    }
}
