//! This process and the others on the database: NOTIFYs sent to them (debounced, and only when
//! some listen) and received from them (wake-ups, forwarded deltas).

use std::time::Duration;

use sqlx::postgres::PgListener;
use tokio_util::sync::CancellationToken;

use super::hub::{EventHub, EVENTS_DIRTY, WORK_DIRTY};
use crate::db;

/// At most one NOTIFY per channel per this interval from one process.
const PEER_NOTIFY_INTERVAL: Duration = Duration::from_millis(10);

/// How long a look for other processes' listeners is trusted.
const PEER_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Sends the debounced NOTIFYs of `wake` and `work_available` to other processes, when some
/// listen: a process alone on its database (one `serve`) would only wake itself, paying a commit
/// and its listeners' wake-ups for hints it already has.
pub(super) async fn notify_peers(hub: EventHub, shutdown: CancellationToken) {
    use std::sync::atomic::Ordering;
    let mut peers: Option<(tokio::time::Instant, bool)> = None;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = hub.inner.peers_wake.notified() => {}
        }
        let dirty = hub.inner.peers_dirty.swap(0, Ordering::AcqRel);
        let listening = match peers {
            Some((at, listening)) if at.elapsed() < PEER_CHECK_INTERVAL => listening,
            _ => {
                let listening = hub.peers_listening().await;
                peers = Some((tokio::time::Instant::now(), listening));
                listening
            }
        };
        if !listening {
            // Safe to drop: a process that starts listening meanwhile is seen within a second, and
            // until then its readers and workers poll, as after any lost hint (and a listener
            // looks once when it connects).
            continue;
        }
        for (bit, channel) in [(EVENTS_DIRTY, db::EVENTS_CHANNEL), (WORK_DIRTY, db::WORK_CHANNEL)] {
            if dirty & bit != 0 {
                // A lost hint is covered by the readers' and workers' polling.
                let _ = sqlx::query("SELECT pg_notify($1, '')")
                    .bind(channel)
                    .execute(&hub.inner.pool)
                    .await;
            }
        }
        tokio::time::sleep(PEER_NOTIFY_INTERVAL).await;
    }
}

impl EventHub {
    /// Opens a LISTEN connection on `channels` for this process (`role` names it: one per role),
    /// known to the hub as its own, so that `notify_peers` does not take it for another process.
    pub async fn listener(&self, role: &'static str, channels: &[&str]) -> Result<PgListener, sqlx::Error> {
        let mut listener = PgListener::connect_with(&self.inner.pool).await?;
        // Asked before LISTEN, which must stay the session's last statement (see `peers_listening`).
        let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut listener)
            .await?;
        self.inner
            .own_listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(role, pid);
        listener.listen_all(channels.iter().copied()).await?;
        Ok(listener)
    }

    /// Whether a session of this database other than this process's listeners has LISTENed:
    /// a listener's last statement, in `pg_stat_activity`, is its LISTEN (a process of an earlier
    /// version counts too). Errs on the side of telling: a session whose statement cannot be seen,
    /// a server that does not track them, or a failed look count as listening.
    async fn peers_listening(&self) -> bool {
        let own: Vec<i32> = self
            .inner
            .own_listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .copied()
            .collect();
        sqlx::query_scalar(
            "SELECT NOT current_setting('track_activities')::bool OR EXISTS (
                SELECT 1 FROM pg_stat_activity
                WHERE datname = current_database() AND pid <> pg_backend_pid() AND pid <> ALL($1)
                  AND (query ILIKE 'listen %' OR query = '<insufficient privilege>'))",
        )
        .bind(&own)
        .fetch_one(&self.inner.pool)
        .await
        .unwrap_or(true)
    }
}

/// Turns NOTIFYs on the events channel into wake-ups. Reconnects on its own; notifications missed
/// meanwhile are covered by the hub's polling.
pub(super) async fn listen_for_events(hub: EventHub, shutdown: CancellationToken) {
    loop {
        let mut listener = match hub.listener("events", &[db::EVENTS_CHANNEL, db::DELTAS_CHANNEL]).await {
            Ok(l) => l,
            Err(_) => {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                }
            }
        };
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                msg = listener.try_recv() => match msg {
                    Ok(Some(n)) if n.channel() == db::DELTAS_CHANNEL => {
                        // A worker-only process forwards; this process's own deltas never come back
                        // this way (a process with an API does not forward).
                        if hub.inner.delta_forwarder.get().is_none() {
                            hub.publish_forwarded(n.payload());
                        }
                    }
                    Ok(Some(_)) => hub.wake_local(),
                    // The connection dropped: wake anyway (we may have missed some) and reconnect.
                    Ok(None) | Err(_) => {
                        db::note_connection_loss();
                        hub.wake_local();
                        break;
                    }
                }
            }
        }
    }
}
