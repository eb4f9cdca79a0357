//! Webhook deliveries (Standard Webhooks), derived from the event log.
//!
//! Each endpoint keeps a cursor in the global event stream (which never skips an event that
//! commits late) and a lease. The processes that run workers each run a dispatcher that takes the
//! leases of endpoints nobody holds and runs one task per endpoint held: a slow or dead endpoint
//! occupies only its own task, and a bounded number of sends are in flight per process. A task
//! moves its endpoint's cursor only after the event was answered with 2xx or given up, so an
//! event survives a crash or a Postgres restart and is sent again, with the same `webhook-id`.

mod endpoint;
pub mod send;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use sqlx::PgPool;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::config::Config;
use crate::db;
use crate::domain::webhook::{secret_key, Delivery, TEST_KIND};
use crate::events::EventHub;
use endpoint::Shared;
use send::Sender;

/// How often a dispatcher looks for endpoints nobody delivers (new ones, or those of a process
/// that died once their lease expired).
const CLAIM_INTERVAL: Duration = Duration::from_secs(1);
/// The most endpoints one process delivers at once.
const MAX_ENDPOINTS: usize = 10_000;
/// How long shutdown waits for endpoint tasks to give their leases up.
const STOP_WAIT: Duration = Duration::from_secs(3);

/// The lease a process takes on an endpoint: as configured (the claims' lease, by default), at
/// least a second, so that the renewals (every third of it) do not spin. A send renews it while
/// it waits for its answer, so it may be shorter than the timeout.
fn lease(config: &Config) -> Duration {
    config.webhook_lease.max(Duration::from_secs(1))
}

/// Starts delivering: returns the dispatcher's task, which ends after `shutdown` once its
/// endpoints' leases are given up.
pub fn start(pool: PgPool, hub: &EventHub, config: &Config, shutdown: CancellationToken) -> JoinHandle<()> {
    let shared = Arc::new(Shared {
        pool,
        sender: Sender::new(config.allow_private_urls, config.webhook_timeout),
        permits: Semaphore::new(config.webhook_concurrency.max(1)),
        retry: config.webhook_retry.clone(),
        lease: lease(config),
        owner: Uuid::now_v7(),
        position: hub.watch_position(),
        shutdown,
    });
    tokio::spawn(dispatch(shared))
}

async fn dispatch(shared: Arc<Shared>) {
    let mut running: HashMap<Uuid, JoinHandle<()>> = HashMap::new();
    let mut failures = 0u32;
    loop {
        running.retain(|_, task| !task.is_finished());
        let free = MAX_ENDPOINTS.saturating_sub(running.len()) as i64;
        match db::webhooks::claim(&shared.pool, shared.owner, shared.lease, free).await {
            Ok(ids) => {
                failures = 0;
                for id in ids {
                    // An endpoint whose task still runs (its lease lapsed and was taken back here)
                    // keeps that one task.
                    running
                        .entry(id)
                        .or_insert_with(|| tokio::spawn(endpoint::run(shared.clone(), id)));
                }
            }
            Err(err) => {
                failures += 1;
                if failures == 1 || failures.is_multiple_of(60) {
                    tracing::warn!(error = %err, "webhook dispatcher cannot reach the database; retrying");
                }
            }
        }
        tokio::select! {
            _ = shared.shutdown.cancelled() => break,
            _ = tokio::time::sleep(CLAIM_INTERVAL) => {}
        }
    }
    // The tasks see the same shutdown and give their leases up; whatever is left is released here.
    let stopping = futures::future::join_all(running.into_values());
    let _ = tokio::time::timeout(STOP_WAIT, stopping).await;
    let _ = db::webhooks::release_all(&shared.pool, shared.owner).await;
}

/// Sends a `webhook.test` event to an endpoint now (one attempt, logged with the others); None
/// when there is no such endpoint.
pub async fn send_test(
    pool: &PgPool,
    config: &Config,
    project: crate::domain::ProjectId,
    id: Uuid,
) -> Result<Option<Delivery>, sqlx::Error> {
    let Some(secret) = db::webhooks::secret(pool, id).await? else {
        return Ok(None);
    };
    let Some(webhook) = db::webhooks::get(pool, project, id).await? else {
        return Ok(None);
    };
    let key = secret_key(&secret).unwrap_or_default();
    let msg_id = format!("msg_test_{}", Uuid::now_v7().simple());
    let now = Utc::now();
    let data = serde_json::json!({
        "webhook_id": id,
        "url": webhook.url,
        "message": "a test event sent by POST /v1/webhooks/{id}/test",
    });
    let data = serde_json::value::to_raw_value(&data).expect("JSON serialises");
    let body = send::body(TEST_KIND, now, &data);
    let attempt = Sender::new(config.allow_private_urls, config.webhook_timeout)
        .send(&webhook.url, &key, &msg_id, body)
        .await;
    let delivery = Delivery {
        event_id: msg_id,
        kind: TEST_KIND.into(),
        attempt: 1,
        status_code: attempt.status.map(|s| i32::from(s.as_u16())),
        error: attempt.error,
        duration_ms: attempt.duration.as_millis() as i64,
        at: Utc::now(),
    };
    db::webhooks::log_unfenced(pool, id, &delivery).await?;
    Ok(Some(delivery))
}
