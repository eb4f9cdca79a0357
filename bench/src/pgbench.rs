//! The throughput baseline: `pgbench` running the minimal SQL of a ticket's life on agentdesk's
//! own schema, in a scratch database of the same server.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};

/// One script run = one ticket's life, in three transactions as the service does it: create the
/// ticket with its `ticket.created` event; claim the oldest todo ticket with
/// `FOR UPDATE SKIP LOCKED` and log `ticket.started`; finish it and log `ticket.done`. Tickets
/// belong to a project (`default`, id 1): its claim index and its numbers are the project's, so the
/// statements name it, as the service's do (without it every claim and finish scanned the table).
pub const SCRIPT: &str = r#"BEGIN;
WITH t AS (
    INSERT INTO tickets (id, task, last_event_seq) VALUES (gen_random_uuid(), '"pgbench"', 1)
    RETURNING id, key)
INSERT INTO events (ticket_id, ticket_key, seq, kind, data)
SELECT id, key, 1, 'ticket.created', '{}' FROM t;
COMMIT;
BEGIN;
WITH c AS (
    SELECT id FROM tickets WHERE project_id = 1 AND status = 'todo'
    ORDER BY priority DESC, created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED),
u AS (
    UPDATE tickets t SET status = 'in_progress', generation = t.generation + 1, attempts = t.attempts + 1,
        last_event_seq = t.last_event_seq + 1, claimed_at = now(), started_at = now(), updated_at = now()
    FROM c WHERE t.id = c.id
    RETURNING t.id, t.number, t.key, t.last_event_seq),
e AS (
    INSERT INTO events (ticket_id, ticket_key, seq, kind, data)
    SELECT id, key, last_event_seq, 'ticket.started', '{}' FROM u)
SELECT coalesce((SELECT number FROM u), 0) AS claimed \gset
COMMIT;
BEGIN;
WITH u AS (
    UPDATE tickets SET status = 'done', result = '"ok"', last_event_seq = last_event_seq + 1,
        finished_at = now(), updated_at = now()
    WHERE project_id = 1 AND number = :claimed AND status = 'in_progress'
    RETURNING id, key, last_event_seq)
INSERT INTO events (ticket_id, ticket_key, seq, kind, data)
SELECT id, key, last_event_seq, 'ticket.done', '{}' FROM u;
COMMIT;
"#;

/// Where the scenarios that run pgbench write `SCRIPT` for it (one file: the script is the same).
pub fn script_path() -> PathBuf {
    crate::harness::results_dir().join("throughput.pgbench.sql")
}

/// `pgbench` on PATH, or the newest under /usr/lib/postgresql/*/bin.
pub fn find_pgbench() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("pgbench"))
            .find(|p| p.is_file())
    });
    on_path.or_else(|| {
        let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|e| e.ok())
            .map(|e| e.path().join("bin/pgbench"))
            .filter(|p| p.is_file())
            .collect();
        found.sort();
        found.pop()
    })
}

/// How pgbench sends its statements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// Parsed and planned once per connection, as agentdesk's statements are: the floor.
    Prepared,
    /// pgbench's default: every statement parsed and planned anew.
    Simple,
}

/// Runs the script with `clients` connections for `duration` against `db_url` (which must hold
/// agentdesk's schema), as fast as they can or, with `rate`, started at that many scripts a second
/// (pgbench's `--rate`: a schedule of random arrivals); returns pgbench's tps (script runs per
/// second). A claim that finds no ticket leaves the run without a finished ticket, so callers
/// count the done tickets too.
pub fn run(
    pgbench: &Path,
    db_url: &str,
    clients: usize,
    duration: Duration,
    script_path: &Path,
    protocol: Protocol,
    rate: Option<f64>,
) -> Result<f64> {
    std::fs::write(script_path, SCRIPT).with_context(|| format!("cannot write {}", script_path.display()))?;
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(clients.max(1));
    let output = Command::new(pgbench)
        .args([
            "--no-vacuum",
            "--protocol",
            match protocol {
                Protocol::Prepared => "prepared",
                Protocol::Simple => "simple",
            },
            "--client",
            &clients.to_string(),
            "--jobs",
            &threads.to_string(),
        ])
        .args(rate.map(|r| format!("--rate={r}")))
        .args(["--time", &duration.as_secs().max(1).to_string(), "--file"])
        .arg(script_path)
        .arg(db_url)
        .output()
        .with_context(|| format!("cannot run {}", pgbench.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // pgbench exits non-zero when a client aborted, so a success is a complete run.
    if !output.status.success() {
        bail!("pgbench failed ({}): {}", output.status, stderr.trim());
    }
    parse_tps(&stdout).with_context(|| format!("no tps in pgbench's output:\n{stdout}\n{stderr}"))
}

/// `tps = 1234.56 (without initial connection time)`; older versions print two tps lines.
fn parse_tps(out: &str) -> Option<f64> {
    let line = out
        .lines()
        .find(|l| l.starts_with("tps =") && l.contains("without initial connection"))
        .or_else(|| out.lines().find(|l| l.starts_with("tps =")))?;
    line.trim_start_matches("tps =").split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_tps() {
        let out = "latency average = 3.1 ms\ninitial connection time = 5.2 ms\ntps = 5123.456789 (without initial connection time)\n";
        assert_eq!(parse_tps(out), Some(5123.456789));
    }
}
