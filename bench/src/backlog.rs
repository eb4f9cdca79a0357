//! claim_backlog: how fast one process takes a waiting backlog into work, with one claim statement
//! at a time (`AGENTDESK_CLAIMERS=1`) and with several side by side, alternating on one database.
//!
//! Each round creates the backlog through an API-only process, then starts the service with room
//! for all of it (`AGENTDESK_WORKERS` = the backlog) against a model that never answers within the
//! round: the claimed tickets only wait, so the round measures the claims, not the work. The rate
//! runs from the first claimed ticket seen to the last.

use std::time::{Duration, Instant};

use agentdesk::app::Mode;
use anyhow::{bail, Result};
use serde_json::json;

use crate::harness::close_ticket;
use crate::harness::Fixture;
use crate::opts::Opts;
use crate::report::{median, Check, Report};
use crate::server::ServerSpec;
use crate::stages;

/// Claimers side by side in the compared rounds: the default on a 16-core machine.
const SIDE_BY_SIDE: usize = 4;
/// How often the bench counts the claimed tickets.
const POLL: Duration = Duration::from_millis(2);

pub async fn claim_backlog(opts: Opts, report: &mut Report) -> Result<()> {
    let (tickets, rounds) = (opts.pick(500, 3000), opts.pick(1, 3));
    let api = ServerSpec {
        mode: Mode::Api,
        workers: tickets,
        db_max_connections: opts.db_connections.unwrap_or(16),
        child: opts.child,
        retention: None,
        claimers: None,
        // The claimed tickets wait on the model: released at once when a round ends.
        shutdown_grace: Some(Duration::from_millis(100)),
        model_http2: false,
        stream_idle: None,
    };
    let mut fx = Fixture::start("claim_backlog", &api).await?;
    fx.fake
        .set_reply(close_ticket().first_byte_delay(Duration::from_secs(3600)));
    let pool = agentdesk::db::connect(&fx.db_url, 2).await?;
    let timeout = Duration::from_secs(opts.pick(30, 120));
    let (mut alone, mut beside) = (vec![], vec![]);
    for round in 0..rounds {
        for claimers in [1, SIDE_BY_SIDE] {
            // A fresh backlog, created while no worker runs; the last round's tickets are put aside.
            fx = fx.restart("claim_backlog", &api).await?;
            sqlx::query(
                "UPDATE tickets SET status = 'cancelled', finished_at = now(), lease_expires_at = NULL
                 WHERE status IN ('todo', 'in_progress')",
            )
            .execute(&pool)
            .await?;
            fx.create_tickets(tickets, 16, json!({"task": "wait in the backlog"}))
                .await?;
            let serve = ServerSpec {
                mode: Mode::Serve,
                claimers: Some(claimers),
                ..api.clone()
            };
            fx = fx.restart("claim_backlog", &serve).await?;
            let before = stages::Snapshot::take(&fx).await?;
            let (rate, elapsed) = time_claims(&pool, tickets as i64, timeout).await?;
            let line = stages::describe(&before, &stages::Snapshot::take(&fx).await?, elapsed);
            let claims = line.split("; ").find(|part| part.starts_with("claims")).unwrap_or("");
            println!(
                "  round {}: {claimers} claimer(s): {rate:.0} tickets claimed/s ({claims})",
                round + 1
            );
            if claimers == 1 {
                alone.push(rate);
            } else {
                beside.push(rate);
            }
        }
    }
    let server_kind = fx.server.describe();
    fx.shutdown().await;
    pool.close().await;

    report.check(
        Check::info(
            &format!("backlog claimed per second, {SIDE_BY_SIDE} claimers side by side"),
            median(&beside),
            "tickets/s",
        )
        .baseline("one claimer", median(&alone)),
    );
    report.figure("tickets", tickets);
    report.figure("rounds", rounds);
    report.figure("claimed_per_s_one_claimer", json!(alone));
    report.figure("claimed_per_s_side_by_side", json!(beside));
    report.note(format!(
        "agentdesk ran {server_kind}; each round: a backlog of {tickets} tickets created through an API-only process, \
         then the service started with AGENTDESK_WORKERS={tickets} and AGENTDESK_CLAIMERS at 1 or {SIDE_BY_SIDE} \
         (alternating), against a model that does not answer within the round; rate = tickets claimed from the \
         first seen in progress to the last, counted every {} ms",
        POLL.as_millis()
    ));
    Ok(())
}

/// Tickets claimed per second, from the first seen in progress until `tickets` are; and how long
/// that took.
async fn time_claims(pool: &sqlx::PgPool, tickets: i64, timeout: Duration) -> Result<(f64, Duration)> {
    let started = Instant::now();
    let mut first: Option<(Instant, i64)> = None;
    loop {
        let in_progress: i64 = sqlx::query_scalar("SELECT count(*) FROM tickets WHERE status = 'in_progress'")
            .fetch_one(pool)
            .await?;
        let now = Instant::now();
        if in_progress > 0 && first.is_none() {
            first = Some((now, in_progress));
        }
        if in_progress >= tickets {
            let (t0, n0) = first.unwrap_or((now, in_progress));
            let elapsed = now - t0;
            return Ok(((tickets - n0) as f64 / elapsed.as_secs_f64().max(1e-3), elapsed));
        }
        if started.elapsed() > timeout {
            bail!("{in_progress} of {tickets} tickets claimed after {timeout:?}");
        }
        tokio::time::sleep(POLL).await;
    }
}
