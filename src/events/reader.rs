//! The hub's reader: follows the log (woken by LISTEN/NOTIFY, polling as a fallback) and
//! broadcasts what each read finds as one batch.

use std::sync::Arc;
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, Postgres};
use tokio_util::sync::CancellationToken;

use super::frames::{EventBatch, HubMessage, StreamItem};
use super::hub::EventHub;
use super::peers::{listen_for_events, notify_peers};
use crate::db;
use crate::db::events::GlobalCursor;
use crate::net::backoff::Backoff;

/// Events read per query while catching up.
const BATCH: i64 = 1000;
/// Polling fallback for missed notifications (e.g. while the listener reconnects).
const POLL_INTERVAL: Duration = Duration::from_millis(500);
/// The shortest time between two reads of the log.
const MIN_ROUND_INTERVAL: Duration = Duration::from_millis(5);
/// Waits after reads of the log that failed in a row: 0.2 s more each time, up to 2 s.
const READ_RETRY: Backoff = Backoff::linear(Duration::from_millis(200), Duration::from_secs(2));
/// Re-read soon when committed events wait behind an older open transaction.
const HELD_BACK_RETRY: Duration = Duration::from_millis(10);

impl EventHub {
    /// Follows the log until shutdown: LISTEN for wake-ups, poll as a fallback.
    pub async fn run(self, shutdown: CancellationToken) {
        let listener = tokio::spawn(listen_for_events(self.clone(), shutdown.clone()));
        let notifier = tokio::spawn(notify_peers(self.clone(), shutdown.clone()));
        let mut cursor = self.position();
        let mut failures = 0u32;
        let mut round_started = tokio::time::Instant::now();
        // The reader keeps one pooled connection from round to round when the pool allows it
        // (see `db::may_keep_connection`): a quiet desk would pay a release per event.
        let keep = db::may_keep_connection(&self.inner.pool);
        let mut conn: Option<PoolConnection<Postgres>> = None;
        loop {
            round_started = round_started.max(tokio::time::Instant::now());
            let round = match conn.as_mut() {
                Some(c) => self.catch_up(c, &mut cursor).await,
                None => match self.inner.pool.acquire().await {
                    Ok(c) => self.catch_up(conn.insert(c), &mut cursor).await,
                    Err(err) => Err(err),
                },
            };
            if !keep {
                conn = None;
            }
            let next_wait = match round {
                Ok(true) => HELD_BACK_RETRY,
                Ok(false) => {
                    failures = 0;
                    POLL_INTERVAL
                }
                Err(err) => {
                    // A connection that failed goes back (the pool's check drops it if broken).
                    conn = None;
                    failures += 1;
                    if failures == 1 || failures.is_multiple_of(20) {
                        tracing::warn!(error = %err, "event hub cannot read the event log; retrying");
                    }
                    READ_RETRY.delay(failures)
                }
            };
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = self.inner.wake.notified() => {}
                _ = tokio::time::sleep(next_wait) => {}
            }
            // Under load, wake-ups arrive faster than reads are useful: rounds start at least a few
            // milliseconds apart, so the commits of those milliseconds share one read. The first
            // commit after a quiet spell is read at once.
            tokio::time::sleep_until(round_started + MIN_ROUND_INTERVAL).await;
        }
        listener.abort();
        notifier.abort();
    }

    /// Broadcasts every readable event after `cursor`; true when more are held back.
    async fn catch_up(&self, conn: &mut PgConnection, cursor: &mut GlobalCursor) -> Result<bool, sqlx::Error> {
        loop {
            // Each page is read below the horizon of its own snapshot (see `read_global_page`).
            let started = std::time::Instant::now();
            let page = db::events::read_global_page(&mut *conn, *cursor, BATCH).await?;
            crate::telemetry::metric::db_batch("event_reader", page.events.len(), started.elapsed(), []);
            let (batch, held_back) = (page.events, page.held_back);
            let full = batch.len() as i64 == BATCH;
            if let Some(last) = batch.last() {
                *cursor = last.cursor;
                let items = batch.into_iter().map(StreamItem::from_logged).collect();
                let _ = self
                    .inner
                    .sender
                    .send(HubMessage::Events(Arc::new(EventBatch::new(items))));
            }
            *self.inner.position.lock().unwrap_or_else(|e| e.into_inner()) = *cursor;
            self.inner.advanced.send_if_modified(|position| {
                let moved = *position != *cursor;
                *position = *cursor;
                moved
            });
            if !full {
                return Ok(held_back);
            }
        }
    }
}
