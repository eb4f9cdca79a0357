//! Where a round's tickets queued inside agentdesk: the service's `/metrics` read before and after
//! a round, for the mean latency of `POST /v1/tickets` and, for each stage that passes every
//! ticket through batched statements (`agentdesk_db_batch_*{stage}`), its statements per second,
//! their mean size and time, how busy it was (statement-seconds per second: a stage of N tasks
//! is saturated at N) and how long a write queued for its batch. And what the database's
//! sessions of one database waited on meanwhile (`WaitSampler`: pg_stat_activity, sampled).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use anyhow::{Context, Result};
use sqlx::{Connection, PgConnection};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::harness::Fixture;

const POST_TICKETS: &str = "{method=\"POST\",route=\"/v1/tickets\"}";

/// The sums and counts of the histograms this module reads, by series (name and labels).
#[derive(Clone, Default)]
pub struct Snapshot(HashMap<String, f64>);

impl Snapshot {
    pub async fn take(fx: &Fixture) -> Result<Snapshot> {
        let text = fx
            .http
            .get(format!("{}/metrics", fx.url))
            .send()
            .await?
            .error_for_status()?
            .text()
            .await?;
        Ok(Snapshot::parse(&text))
    }

    fn parse(text: &str) -> Snapshot {
        let series = text
            .lines()
            .filter(|line| !line.starts_with('#'))
            .filter_map(|line| line.rsplit_once(' '))
            .filter(|(name, _)| name.contains("_sum") || name.contains("_count"))
            .filter_map(|(name, value)| Some((name.to_owned(), value.parse().ok()?)))
            .collect();
        Snapshot(series)
    }

    fn get(&self, name: &str) -> f64 {
        self.0.get(name).copied().unwrap_or(0.0)
    }

    /// The histogram `name{labels}`'s (sum, count) since `before`.
    fn since(&self, before: &Snapshot, name: &str, labels: &str) -> (f64, f64) {
        let delta = |part: &str| {
            let series = format!("{name}_{part}{labels}");
            self.get(&series) - before.get(&series)
        };
        (delta("sum"), delta("count"))
    }
}

/// What a batched stage (`agentdesk_db_batch_*{stage}`) did between two snapshots.
pub struct StageDelta {
    pub statements: f64,
    pub items: f64,
    /// Statement-seconds.
    pub busy_s: f64,
    /// Writes that queued for a batch, and their seconds in the queue.
    pub waits: f64,
    pub wait_s: f64,
}

impl Snapshot {
    /// What `stage` did since `before`.
    pub fn stage(&self, before: &Snapshot, stage: &str) -> StageDelta {
        let labels = format!("{{stage=\"{stage}\"}}");
        let (busy_s, statements) = self.since(before, "agentdesk_db_batch_duration_seconds", &labels);
        let (items, _) = self.since(before, "agentdesk_db_batch_size", &labels);
        let (wait_s, waits) = self.since(before, "agentdesk_db_batch_wait_seconds", &labels);
        StageDelta {
            statements,
            items,
            busy_s,
            waits,
            wait_s,
        }
    }
}

/// One line per round: what `after` adds to `before` over `elapsed`.
pub fn describe(before: &Snapshot, after: &Snapshot, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64().max(1e-9);
    let mut line = String::new();
    let (post_s, posts) = after.since(before, "agentdesk_http_request_duration_seconds", POST_TICKETS);
    let _ = write!(line, "POST {:.2} ms", 1e3 * post_s / posts.max(1.0));
    for stage in agentdesk::telemetry::metric::DB_STAGES {
        let StageDelta {
            statements: batches,
            items,
            busy_s,
            waits,
            wait_s,
        } = after.stage(before, stage);
        let _ = write!(
            line,
            "; {stage} {:.0}/s × {:.1}, {:.2} ms, busy {:.2}",
            batches / secs,
            items / batches.max(1.0),
            1e3 * busy_s / batches.max(1.0),
            busy_s / secs,
        );
        if waits > 0.0 {
            let _ = write!(line, ", queued {:.2} ms", 1e3 * wait_s / waits);
        }
    }
    line
}

/// Samples what the active sessions of one database wait on (`wait_event_type:wait_event`, or
/// `CPU` for none), every few milliseconds until stopped.
pub struct WaitSampler {
    stop: watch::Sender<bool>,
    task: JoinHandle<Result<HashMap<String, u64>>>,
}

impl WaitSampler {
    const EVERY: Duration = Duration::from_millis(5);

    /// Samples the sessions of `database` (a name) through a connection of `db_url`.
    pub async fn start(db_url: &str, database: String) -> Result<WaitSampler> {
        let mut conn = PgConnection::connect(db_url)
            .await
            .context("wait sampler: cannot connect")?;
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            let mut counts: HashMap<String, u64> = HashMap::new();
            let mut tick = tokio::time::interval(Self::EVERY);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stopped.changed() => break,
                }
                let rows: Vec<(String, i64)> = sqlx::query_as(
                    "SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU'), count(*)
                     FROM pg_stat_activity
                     WHERE datname = $1 AND state = 'active' AND pid <> pg_backend_pid()
                     GROUP BY 1",
                )
                .bind(&database)
                .fetch_all(&mut conn)
                .await?;
                for (wait, n) in rows {
                    *counts.entry(wait).or_default() += n as u64;
                }
                *counts.entry("(samples)".into()).or_default() += 1;
            }
            Ok(counts)
        });
        Ok(WaitSampler { stop, task })
    }

    /// Stops; the waits most often seen, as the mean number of sessions in each per sample.
    pub async fn finish(self) -> Result<String> {
        let _ = self.stop.send(true);
        let mut counts = self.task.await.context("wait sampler panicked")??;
        let samples = counts.remove("(samples)").unwrap_or(0).max(1) as f64;
        let mut waits: Vec<(String, u64)> = counts.into_iter().collect();
        waits.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
        let shown: Vec<String> = waits
            .iter()
            .take(6)
            .map(|(wait, n)| format!("{wait} {:.2}", *n as f64 / samples))
            .collect();
        Ok(format!("active sessions: {}", shown.join(", ")))
    }
}

/// The database name of a connection URL (its path).
pub fn database_name(url: &str) -> String {
    let path = url.rsplit('/').next().unwrap_or_default();
    path.split('?').next().unwrap_or_default().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_is_the_difference_of_two_scrapes() {
        let before = Snapshot::parse(
            "# TYPE x histogram\n\
             agentdesk_db_batch_duration_seconds_sum{stage=\"claims\"} 1\n\
             agentdesk_db_batch_duration_seconds_count{stage=\"claims\"} 10\n\
             agentdesk_db_batch_size_sum{stage=\"claims\"} 100\n",
        );
        let after = Snapshot::parse(
            "agentdesk_db_batch_duration_seconds_sum{stage=\"claims\"} 1.5\n\
             agentdesk_db_batch_duration_seconds_count{stage=\"claims\"} 20\n\
             agentdesk_db_batch_size_sum{stage=\"claims\"} 740\n\
             agentdesk_http_request_duration_seconds_sum{method=\"POST\",route=\"/v1/tickets\"} 2\n\
             agentdesk_http_request_duration_seconds_count{method=\"POST\",route=\"/v1/tickets\"} 1000\n",
        );
        let line = describe(&before, &after, Duration::from_secs(1));
        assert!(line.starts_with("POST 2.00 ms"), "{line}");
        assert!(line.contains("claims 10/s × 64.0, 50.00 ms, busy 0.50"), "{line}");
    }
}
