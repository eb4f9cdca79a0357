//! One SSE subscriber: replay from the log after its cursor, then follow the hub live, with
//! nothing missing or repeated.
//!
//! The subscriber attaches to the hub *before* replaying, so anything broadcast while it replays
//! is buffered; live events at or below the replayed cursor are then dropped. A subscriber that
//! falls behind the broadcast re-reads from the log.

use std::convert::Infallible;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures::Stream;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::hub::{EventHub, HubMessage, StreamItem};
use crate::db;
use crate::db::events::GlobalCursor;
use crate::domain::event::kind;

const REPLAY_BATCH: i64 = 500;
/// Client reconnection delay suggested to EventSource clients.
const RETRY_MS: u64 = 2000;

/// Filters of `GET /v1/events`; each list matches any of its entries, an empty list matches all.
#[derive(Clone, Debug, Default)]
pub struct GlobalFilter {
    pub labels: Vec<String>,
    pub agents: Vec<String>,
    /// Exact kinds, or prefixes when they end in `*`.
    pub kinds: Vec<String>,
}

impl GlobalFilter {
    pub fn matches(&self, item: &StreamItem) -> bool {
        (self.labels.is_empty() || item.ticket_labels.iter().any(|l| self.labels.contains(l)))
            && (self.agents.is_empty() || item.ticket_agent.as_ref().is_some_and(|a| self.agents.contains(a)))
            && (self.kinds.is_empty()
                || self.kinds.iter().any(|k| match k.strip_suffix('*') {
                    Some(prefix) => item.event.kind.starts_with(prefix),
                    None => item.event.kind == *k,
                }))
    }
}

type Frames = ReceiverStream<Result<Bytes, Infallible>>;

/// A subscriber's outgoing frames; `send` fails once the client is gone.
struct Outbox {
    tx: mpsc::Sender<Result<Bytes, Infallible>>,
}

impl Outbox {
    async fn send(&self, frame: Bytes) -> Result<(), ()> {
        self.tx.send(Ok(frame)).await.map_err(|_| ())
    }

    async fn event(&self, id: Option<&str>, json: &Bytes) -> Result<(), ()> {
        let mut frame = BytesMut::with_capacity(json.len() + 48);
        if let Some(id) = id {
            frame.put_slice(b"id: ");
            frame.put_slice(id.as_bytes());
            frame.put_u8(b'\n');
        }
        frame.put_slice(b"data: ");
        frame.put_slice(json);
        frame.put_slice(b"\n\n");
        self.send(frame.freeze()).await
    }
}

fn start(ping: Duration) -> (Outbox, Frames, tokio::time::Interval) {
    let (tx, rx) = mpsc::channel(256);
    let mut interval = tokio::time::interval_at(tokio::time::Instant::now() + ping, ping);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    (Outbox { tx }, ReceiverStream::new(rx), interval)
}

const PING: &[u8] = b": ping\n\n";

/// `GET /v1/events`: every persisted event after `after` (or from now) exactly once, then live.
pub fn global(
    hub: EventHub,
    after: Option<GlobalCursor>,
    filter: GlobalFilter,
    ping: Duration,
    shutdown: CancellationToken,
) -> impl Stream<Item = Result<Bytes, Infallible>> {
    let (out, frames, mut pings) = start(ping);
    tokio::spawn(async move {
        let mut live = hub.subscribe();
        let mut cursor = after.unwrap_or_else(|| hub.position());
        let work = async {
            out.send(Bytes::from(format!("retry: {RETRY_MS}\n\n"))).await?;
            replay_global(&hub, &mut cursor, &filter, &out).await?;
            loop {
                tokio::select! {
                    msg = live.recv() => match msg {
                        Ok(HubMessage::Event(item)) => {
                            let Some(c) = item.cursor else { continue };
                            if c <= cursor { continue; }
                            cursor = c;
                            if filter.matches(&item) {
                                out.event(Some(&c.to_string()), &item.json).await?;
                            }
                        }
                        Ok(HubMessage::Delta(item)) => {
                            if filter.matches(&item) { out.event(None, &item.json).await?; }
                        }
                        Err(RecvError::Lagged(_)) => replay_global(&hub, &mut cursor, &filter, &out).await?,
                        Err(RecvError::Closed) => return Err::<(), ()>(()),
                    },
                    _ = pings.tick() => out.send(Bytes::from_static(PING)).await?,
                }
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = work => {}
        }
    });
    frames
}

async fn replay_global(
    hub: &EventHub,
    cursor: &mut GlobalCursor,
    filter: &GlobalFilter,
    out: &Outbox,
) -> Result<(), ()> {
    loop {
        let batch = read_with_retry(|| db::events::read_global(hub.pool(), *cursor, REPLAY_BATCH)).await?;
        let n = batch.len() as i64;
        for logged in batch {
            *cursor = logged.cursor;
            let item = StreamItem::from_logged(logged);
            if filter.matches(&item) {
                out.event(Some(&cursor.to_string()), &item.json).await?;
            }
        }
        if n < REPLAY_BATCH {
            return Ok(());
        }
    }
}

/// `GET /v1/tickets/{ticket}/events`: the ticket's events after `after_seq`, then live; ends after
/// the ticket's latest event when that one is final.
pub fn ticket(
    hub: EventHub,
    ticket_id: Uuid,
    after_seq: i64,
    ping: Duration,
    shutdown: CancellationToken,
) -> impl Stream<Item = Result<Bytes, Infallible>> {
    let (out, frames, mut pings) = start(ping);
    tokio::spawn(async move {
        let mut live = hub.subscribe();
        let mut last = after_seq;
        let work = async {
            out.send(Bytes::from(format!("retry: {RETRY_MS}\n\n"))).await?;
            if replay_ticket(&hub, ticket_id, &mut last, &out).await? {
                return Ok::<(), ()>(());
            }
            loop {
                tokio::select! {
                    msg = live.recv() => match msg {
                        Ok(HubMessage::Event(item)) if item.event.ticket_id == ticket_id => {
                            let seq = item.event.seq.unwrap_or(0);
                            if seq <= last { continue; }
                            if seq > last + 1 {
                                // Never skip: fetch what lies between from the log.
                                if replay_ticket(&hub, ticket_id, &mut last, &out).await? { return Ok(()); }
                                continue;
                            }
                            last = seq;
                            out.event(Some(&seq.to_string()), &item.json).await?;
                            if kind::is_final(&item.event.kind) && is_latest(&hub, ticket_id, seq).await? {
                                return Ok(());
                            }
                        }
                        Ok(HubMessage::Delta(item)) if item.event.ticket_id == ticket_id => {
                            out.event(None, &item.json).await?;
                        }
                        Ok(_) => {}
                        Err(RecvError::Lagged(_)) => {
                            if replay_ticket(&hub, ticket_id, &mut last, &out).await? { return Ok(()); }
                        }
                        Err(RecvError::Closed) => return Err(()),
                    },
                    _ = pings.tick() => out.send(Bytes::from_static(PING)).await?,
                }
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = work => {}
        }
    });
    frames
}

/// Sends the logged events after `last`; true when the stream should end (a final event is latest).
async fn replay_ticket(hub: &EventHub, ticket_id: Uuid, last: &mut i64, out: &Outbox) -> Result<bool, ()> {
    loop {
        let batch = read_with_retry(|| db::events::read_ticket(hub.pool(), ticket_id, *last, REPLAY_BATCH)).await?;
        let n = batch.len() as i64;
        let mut final_seq = None;
        for logged in batch {
            let seq = logged.event.seq.unwrap_or(0);
            *last = seq;
            final_seq = kind::is_final(&logged.event.kind).then_some(seq);
            let item = StreamItem::from_logged(logged);
            out.event(Some(&seq.to_string()), &item.json).await?;
        }
        if n < REPLAY_BATCH {
            return match final_seq {
                Some(seq) => is_latest(hub, ticket_id, seq).await,
                None if n == 0 && *last > 0 => resumed_at_final_event(hub, ticket_id, *last).await,
                None => Ok(false),
            };
        }
    }
}

/// Whether the client resumed right after the ticket's latest event and that one is final: such
/// a stream has nothing more to send, so it ends as it would have after sending that event.
async fn resumed_at_final_event(hub: &EventHub, ticket_id: Uuid, last: i64) -> Result<bool, ()> {
    let at_last = read_with_retry(|| db::events::read_ticket(hub.pool(), ticket_id, last - 1, 1)).await?;
    match at_last.first() {
        Some(e) if e.event.seq == Some(last) && kind::is_final(&e.event.kind) => is_latest(hub, ticket_id, last).await,
        _ => Ok(false),
    }
}

async fn is_latest(hub: &EventHub, ticket_id: Uuid, seq: i64) -> Result<bool, ()> {
    let latest = read_with_retry(|| db::events::last_ticket_seq(hub.pool(), ticket_id)).await?;
    Ok(latest == seq)
}

/// Reads from the log, riding out a short database outage (e.g. a restart) instead of ending
/// the stream; gives up after about a minute and lets the client reconnect with its cursor.
async fn read_with_retry<T, F, Fut>(mut read: F) -> Result<T, ()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, sqlx::Error>>,
{
    for attempt in 0..60u64 {
        match read().await {
            Ok(v) => return Ok(v),
            Err(err) => {
                tracing::debug!(error = %err, attempt, "event stream read failed; retrying");
                tokio::time::sleep(Duration::from_millis(250 * attempt.min(4) + 100)).await;
            }
        }
    }
    Err(())
}
