//! api_latency: `POST /v1/tickets` at a fixed rate, open loop, against `GET /healthz`.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use serde_json::{json, Value};

use crate::harness::Fixture;
use crate::opts::Opts;
use crate::report::{percentile, Bar, Check, Report};
use crate::server::ServerSpec;
use agentdesk::app::Mode;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Open-loop `POST /v1/tickets` at a fixed rate, latency from each planned send time; baseline:
/// the same schedule on `GET /healthz`. Workers are idle (API mode).
pub async fn api_latency(opts: Opts, report: &mut Report) -> Result<()> {
    let rate = opts.pick(200.0, 500.0);
    let seconds = opts.pick(2.0, 10.0);
    let spec = ServerSpec {
        mode: Mode::Api,
        workers: 0,
        db_max_connections: 16,
        child: opts.child,
        retention: None,
        claimers: None,
        shutdown_grace: None,
        model_http2: false,
        stream_idle: None,
    };
    let fx = Fixture::start("api_latency", &spec).await?;
    let body = json!({"task": "triage this", "labels": ["nobody"], "metadata": {"source": "bench"}});

    // Warm-up at the same rate: connections, prepared statements, allocator.
    open_loop(&fx, rate, opts.pick(0.5, 2.0), Target::Create(&body)).await?;
    let baseline = open_loop(&fx, rate, opts.pick(1.0, 5.0), Target::Health).await?;
    let create = open_loop(&fx, rate, seconds, Target::Create(&body)).await?;
    report.note(format!("agentdesk (API mode): {}", fx.server.describe()));
    fx.shutdown().await;

    let (p50, p99, max) = (
        percentile(&create.ms, 50.0),
        percentile(&create.ms, 99.0),
        percentile(&create.ms, 100.0),
    );
    report.check(
        Check::new("POST /v1/tickets p99", p99, "ms", Bar::Below, 10.0)
            .baseline("GET /healthz p99", percentile(&baseline.ms, 99.0)),
    );
    report.figure("p50_ms", p50);
    report.figure("max_ms", max);
    report.figure("requests", create.ms.len());
    report.figure("errors", create.errors);
    report.figure("rate_per_s", rate);
    report.figure("seconds", seconds);
    report.figure("healthz_p50_ms", percentile(&baseline.ms, 50.0));
    report.figure("healthz_max_ms", percentile(&baseline.ms, 100.0));
    if create.errors > 0 {
        report.note(format!(
            "{} requests failed; counted at the timeout (10 s)",
            create.errors
        ));
    }
    report.note("open loop: each request is sent at its planned time whatever the earlier ones do; latency runs from the planned time to the end of the response body (reqwest client, pooled connections)");
    Ok(())
}

enum Target<'a> {
    Create(&'a Value),
    Health,
}

struct Latencies {
    ms: Vec<f64>,
    errors: usize,
}

async fn open_loop(fx: &Fixture, rate: f64, seconds: f64, target: Target<'_>) -> Result<Latencies> {
    let n = (rate * seconds) as usize;
    let start = tokio::time::Instant::now() + Duration::from_millis(20);
    let body = match target {
        Target::Create(b) => Some(Arc::new(b.clone())),
        Target::Health => None,
    };
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let planned = start + Duration::from_secs_f64(i as f64 / rate);
        tokio::time::sleep_until(planned).await;
        let (http, url, body) = (fx.http.clone(), fx.url.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            let request = match &body {
                Some(b) => http.post(format!("{url}/v1/tickets")).json(&**b),
                None => http.get(format!("{url}/healthz")),
            };
            let ok = match tokio::time::timeout(Duration::from_secs(10), async {
                let r = request.send().await?;
                let status = r.status();
                r.bytes().await?;
                anyhow::Ok(status.is_success())
            })
            .await
            {
                Ok(Ok(ok)) => ok,
                _ => false,
            };
            (planned.elapsed(), ok)
        }));
    }
    let mut out = Latencies {
        ms: Vec::with_capacity(n),
        errors: 0,
    };
    for t in tasks {
        let (elapsed, ok) = t.await?;
        out.ms.push(ms(elapsed));
        if !ok {
            out.errors += 1;
        }
    }
    Ok(out)
}
