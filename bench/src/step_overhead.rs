//! step_overhead: the agentdesk process's CPU per agent step outside the model call.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use serde_json::json;
use testkit::fake_llm::Reply;

use crate::harness::{close_ticket, Fixture};
use crate::opts::Opts;
use crate::report::{median, Check, Report};
use crate::server::{self, ServerSpec};
use agentdesk::app::Mode;

/// CPU time of the agentdesk process per agent step (one model request and its tool call),
/// with the model answering at once: S−1 read_tickets calls, then close_ticket.
pub async fn step_overhead(opts: Opts, report: &mut Report) -> Result<()> {
    let (tickets, steps, rounds) = (opts.pick(20, 200), 5usize, opts.pick(1, 3));
    let spec = ServerSpec {
        mode: Mode::Serve,
        workers: 64,
        db_max_connections: 16,
        child: true,
        retention: None,
        claimers: None,
        shutdown_grace: None,
        model_http2: false,
        stream_idle: None,
    };
    let fx = Fixture::start("step_overhead", &spec).await?;
    fx.fake.set_responder(move |req| {
        let tool_results = req["messages"]
            .as_array()
            .map(|m| m.iter().filter(|m| m["role"] == "tool").count())
            .unwrap_or(0);
        if tool_results + 1 < steps {
            Reply::tool_call("read_tickets", json!({"action": "list", "status": "done"}))
        } else {
            close_ticket()
        }
    });
    let pid = fx.server.pid();
    let me = std::process::id();

    // The idle cost of the service (pollers, lease renewals), to correct the figure with.
    let (c0, t0) = (server::cpu_secs(pid), Instant::now());
    tokio::time::sleep(Duration::from_secs(opts.pick(1, 3))).await;
    let idle_cpu_per_s = (server::cpu_secs(pid) - c0) / t0.elapsed().as_secs_f64();

    let mut watcher = fx.done_watcher().await?;
    let (mut gross_us, mut net_us, mut fake_us, mut walls) = (vec![], vec![], vec![], vec![]);
    for round in 0..rounds {
        let label = format!("steps{round}");
        fx.create_tickets(
            tickets,
            8,
            json!({"task": "look around, then close", "labels": [label]}),
        )
        .await?;
        let requests_before = fx.fake.request_count();
        let (cpu0, fake0, started) = (server::cpu_secs(pid), server::cpu_secs(me), Instant::now());
        fx.put_agent(&label).await?;
        let (_, failed) = watcher
            .wait_for((round + 1) * tickets, Duration::from_secs(opts.pick(60, 300)))
            .await?;
        let wall = started.elapsed().as_secs_f64();
        let (cpu, fake_cpu) = (server::cpu_secs(pid) - cpu0, server::cpu_secs(me) - fake0);
        let requests = (fx.fake.request_count() - requests_before) as f64;
        if failed > 0 {
            report.note(format!("round {}: {failed} tickets failed", round + 1));
        }
        if requests < 1.0 {
            bail!("the model received no requests");
        }
        gross_us.push(cpu / requests * 1e6);
        net_us.push((cpu - idle_cpu_per_s * wall).max(0.0) / requests * 1e6);
        fake_us.push(fake_cpu / requests * 1e6);
        walls.push(wall);
        println!(
            "  round {}: {requests:.0} steps in {wall:.2} s, agentdesk {:.0} µs/step, bench (fake model) {:.0} µs/step",
            round + 1,
            gross_us[round],
            fake_us[round]
        );
    }
    report.note(format!("agentdesk: {}", fx.server.describe()));
    fx.shutdown().await;

    report.check(
        Check::info("agentdesk CPU per step", median(&gross_us), "µs")
            .baseline("fake model CPU/request", median(&fake_us)),
    );
    report.figure("net_of_idle_us_per_step", json!(net_us));
    report.figure("gross_us_per_step", json!(gross_us));
    report.figure("bench_process_us_per_step", json!(fake_us));
    report.figure("idle_cpu_ms_per_s", idle_cpu_per_s * 1000.0);
    report.figure("tickets_per_round", tickets);
    report.figure("steps_per_ticket", steps);
    report.figure("wall_s", json!(walls));
    report.note(format!(
        "agentdesk ran as a child process; CPU = utime+stime from /proc/<pid>/stat over the round, divided by the model requests; a step = one model request plus its tool call ({} read_tickets steps, then close_ticket); ticket creation is outside the measured window",
        steps - 1
    ));
    report.note("the baseline is the bench process's CPU per request: the fake model server, the completion watcher and the agent PUT");
    Ok(())
}
