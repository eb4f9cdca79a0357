//! One SSE subscriber: replay from the log after its cursor, then follow the hub live, with
//! nothing missing or repeated.
//!
//! The subscriber attaches to the hub *before* replaying, so anything broadcast while it replays
//! is buffered; live events at or below the replayed cursor are then dropped. A subscriber that
//! falls behind the broadcast re-reads from the log.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures::Stream;
use sqlx::PgPool;
use tokio::sync::broadcast::{
    self,
    error::{RecvError, TryRecvError},
};
use tokio::time::Interval;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::deltas::DeltaInterest;
use super::{EventHub, HubMessage, StreamItem};
use crate::db;
use crate::db::events::GlobalCursor;
use crate::domain::event::kind;
use crate::domain::ProjectId;

const REPLAY_BATCH: i64 = 500;
/// A live stream gathers messages that are already waiting into one chunk up to this size.
const MAX_CHUNK: usize = 64 * 1024;
/// Client reconnection delay suggested to EventSource clients.
const RETRY_MS: u64 = 2000;

/// Filters of `GET /v1/events`; each list matches any of its entries, an empty list matches all.
#[derive(Clone, Debug)]
pub struct GlobalFilter {
    /// Only this project's events: a stream never shows another project's.
    pub project: ProjectId,
    pub labels: Vec<String>,
    pub agents: Vec<String>,
    /// Exact kinds, or prefixes when they end in `*`.
    pub kinds: Vec<String>,
}

impl GlobalFilter {
    /// Every event of a project.
    pub fn all(project: ProjectId) -> GlobalFilter {
        GlobalFilter {
            project,
            labels: vec![],
            agents: vec![],
            kinds: vec![],
        }
    }

    /// True when the filter lets everything through.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.agents.is_empty() && self.kinds.is_empty()
    }

    /// Whether a delta can pass: the stream then asks the hub for them.
    fn may_match_deltas(&self) -> bool {
        [kind::TEXT_DELTA, kind::THINKING_DELTA, kind::TOOL_CALL_DELTA]
            .iter()
            .any(|k| kind_matches(&self.kinds, k))
    }

    pub fn matches(&self, item: &StreamItem) -> bool {
        item.project == self.project
            && (self.labels.is_empty() || item.ticket_labels.iter().any(|l| self.labels.contains(l)))
            && (self.agents.is_empty() || item.ticket_agent.as_ref().is_some_and(|a| self.agents.contains(a)))
            && kind_matches(&self.kinds, &item.event.kind)
    }
}

/// Whether `kind` matches one of `patterns` (exact kinds, or prefixes when they end in `*`); an
/// empty list matches every kind. The rule of `/v1/events?kind=` and of webhooks' `events`.
pub fn kind_matches(patterns: &[String], kind: &str) -> bool {
    patterns.is_empty()
        || patterns.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => kind.starts_with(prefix),
            None => kind == p,
        })
}

const PING: &[u8] = b": ping\n\n";

/// A ticket stream's frame: its `id:` is the ticket's `seq`, not the global cursor.
fn seq_frame(seq: i64, json: &Bytes) -> Bytes {
    let mut frame = BytesMut::with_capacity(json.len() + 32);
    frame.put_slice(b"id: ");
    frame.put_slice(seq.to_string().as_bytes());
    frame.put_slice(b"\ndata: ");
    frame.put_slice(json);
    frame.put_slice(b"\n\n");
    frame.freeze()
}

/// What a subscriber is doing next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Read the log after the cursor, a batch at a time.
    Replay,
    /// Follow the hub.
    Live,
    /// Send what is pending, then end.
    Ending,
}

/// What woke a live subscriber.
enum Wake {
    Shutdown,
    Message(Result<HubMessage, RecvError>),
    Ping,
}

/// The state a subscriber keeps between frames. The SSE body polls it directly: there is no task
/// and no channel per subscriber, an idle one is this struct plus the futures it waits on, and a
/// client that goes away drops it at once. Database reads are boxed so their (large) futures exist
/// only while they run.
struct Subscriber<F> {
    hub: EventHub,
    live: broadcast::Receiver<HubMessage>,
    /// Held while the stream can show deltas (see `EventHub::delta_interest`).
    _deltas: Option<DeltaInterest>,
    pings: Interval,
    shutdown: CancellationToken,
    /// Frames read from the log, not sent yet.
    pending: VecDeque<Bytes>,
    phase: Phase,
    /// Global cursor or ticket, and the filter: what differs between the two streams.
    kind: F,
}

impl<F> Subscriber<F> {
    /// `live` must be attached before the replay position is taken: whatever is broadcast
    /// meanwhile is buffered, and live events at or below the replayed position are dropped.
    fn new(
        hub: EventHub,
        live: broadcast::Receiver<HubMessage>,
        phase: Phase,
        ping: Duration,
        shutdown: CancellationToken,
        deltas: Option<DeltaInterest>,
        kind: F,
    ) -> Self {
        let mut pings = tokio::time::interval_at(tokio::time::Instant::now() + ping, ping);
        pings.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut pending = VecDeque::new();
        pending.push_back(Bytes::from(format!("retry: {RETRY_MS}\n\n")));
        Subscriber {
            hub,
            live,
            _deltas: deltas,
            pings,
            shutdown,
            pending,
            phase,
            kind,
        }
    }

    /// Everything pending as one chunk: a burst of events goes out in one write.
    fn next_pending(&mut self) -> Option<Bytes> {
        let first = self.pending.pop_front()?;
        let chunk = if self.pending.is_empty() {
            first
        } else {
            let size = first.len() + self.pending.iter().map(Bytes::len).sum::<usize>();
            let mut joined = BytesMut::with_capacity(size);
            joined.put_slice(&first);
            for frame in self.pending.drain(..) {
                joined.put_slice(&frame);
            }
            joined.freeze()
        };
        if self.pending.capacity() > 8 {
            // A replay's queue should not stay allocated for the life of an idle stream.
            self.pending = VecDeque::new();
        }
        Some(chunk)
    }

    /// A live message already waiting, without waiting for one.
    fn ready_message(&mut self) -> Option<Result<HubMessage, RecvError>> {
        match self.live.try_recv() {
            Ok(msg) => Some(Ok(msg)),
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Lagged(n)) => Some(Err(RecvError::Lagged(n))),
            Err(TryRecvError::Closed) => Some(Err(RecvError::Closed)),
        }
    }

    /// Waits for the next live message or ping; shutdown wins.
    async fn wake(&mut self) -> Wake {
        tokio::select! {
            biased;
            _ = self.shutdown.cancelled() => Wake::Shutdown,
            msg = self.live.recv() => Wake::Message(msg),
            _ = self.pings.tick() => Wake::Ping,
        }
    }

    /// Runs a (boxed) database read unless shutdown comes first; None means stop.
    async fn read<T>(&self, read: Pin<Box<dyn Future<Output = Result<T, ()>> + Send + '_>>) -> Option<T> {
        tokio::select! {
            biased;
            _ = self.shutdown.cancelled() => None,
            r = read => r.ok(),
        }
    }
}

struct Global {
    cursor: GlobalCursor,
    filter: GlobalFilter,
}

/// `GET /v1/events`: every persisted event after `after` (or from now) exactly once, then live.
pub fn global(
    hub: EventHub,
    after: Option<GlobalCursor>,
    filter: GlobalFilter,
    ping: Duration,
    shutdown: CancellationToken,
) -> impl Stream<Item = Result<Bytes, Infallible>> {
    let live = hub.subscribe();
    // Without a cursor the stream starts with what the hub broadcasts from now on: there is
    // nothing to read from the log, which spares a query per connecting subscriber.
    let (cursor, phase) = match after {
        Some(cursor) => (cursor, Phase::Replay),
        None => (hub.position(), Phase::Live),
    };
    let deltas = filter.may_match_deltas().then(|| hub.delta_interest());
    let mut sub = Subscriber::new(hub, live, phase, ping, shutdown, deltas, Global { cursor, filter });
    if after.is_none() {
        // The starting position, as an `id:` with no event: a client cut off before the first
        // event resumes from here (an SSE client keeps the id; no event is dispatched).
        sub.pending.push_back(Bytes::from(format!("id: {cursor}\n\n")));
    }
    futures::stream::unfold(sub, |mut sub| async move {
        let frame = next_global(&mut sub).await?;
        Some((Ok(frame), sub))
    })
}

async fn next_global(sub: &mut Subscriber<Global>) -> Option<Bytes> {
    loop {
        if let Some(frame) = sub.next_pending() {
            return Some(frame);
        }
        match sub.phase {
            Phase::Ending => return None,
            Phase::Replay => {
                let cursor = sub.kind.cursor;
                let pool = sub.hub.pool().clone();
                let batch = sub
                    .read(Box::pin(async move {
                        read_with_retry(|| async {
                            db::events::read_global(&mut *pool.acquire().await?, cursor, REPLAY_BATCH).await
                        })
                        .await
                    }))
                    .await?;
                if (batch.len() as i64) < REPLAY_BATCH {
                    sub.phase = Phase::Live;
                }
                for logged in batch {
                    sub.kind.cursor = logged.cursor;
                    let item = StreamItem::from_logged(logged);
                    if sub.kind.filter.matches(&item) {
                        sub.pending.push_back(item.frame());
                    }
                }
            }
            Phase::Live => {
                match sub.wake().await {
                    Wake::Shutdown => return None,
                    Wake::Ping => return Some(Bytes::from_static(PING)),
                    Wake::Message(msg) => take_global(sub, msg),
                }
                while sub.phase == Phase::Live && pending_size(&sub.pending) < MAX_CHUNK {
                    match sub.ready_message() {
                        Some(msg) => take_global(sub, msg),
                        None => break,
                    }
                }
            }
        }
    }
}

fn pending_size(pending: &VecDeque<Bytes>) -> usize {
    pending.iter().map(Bytes::len).sum()
}

/// Queues what a hub message holds for this global stream.
fn take_global(sub: &mut Subscriber<Global>, msg: Result<HubMessage, RecvError>) {
    match msg {
        Err(RecvError::Closed) => sub.phase = Phase::Ending,
        Err(RecvError::Lagged(_)) => sub.phase = Phase::Replay,
        Ok(HubMessage::Events(batch)) => {
            let (Some(first), Some(last)) = (batch.first_cursor(), batch.items.last().and_then(|i| i.cursor)) else {
                return;
            };
            let project = sub.kind.filter.project;
            if first > sub.kind.cursor && sub.kind.filter.is_empty() && batch.items.iter().all(|i| i.project == project)
            {
                // The common case: the whole batch is new and wanted, and its frames are shared.
                sub.kind.cursor = last;
                sub.pending.push_back(batch.frames());
                return;
            }
            for item in &batch.items {
                let Some(c) = item.cursor else { continue };
                if c <= sub.kind.cursor {
                    continue;
                }
                sub.kind.cursor = c;
                if sub.kind.filter.matches(item) {
                    sub.pending.push_back(item.frame());
                }
            }
        }
        Ok(HubMessage::Delta(item)) => {
            if sub.kind.filter.matches(&item) {
                sub.pending.push_back(item.frame());
            }
        }
    }
}

struct Ticket {
    ticket_id: Uuid,
    /// The last `seq` sent.
    last: i64,
    /// The ticket was finished when last looked at: every event it logs from here may be its
    /// last (the assistant text a cancel kept comes after `ticket.cancelled`).
    finished: bool,
}

/// `GET /v1/tickets/{ticket}/events`: the ticket's events after `after_seq`, then live; ends once
/// it has sent the ticket's latest event and the ticket is finished (done, failed or cancelled):
/// after its final event, or after what the worker logged behind it (the text a cancel kept).
pub fn ticket(
    hub: EventHub,
    ticket_id: Uuid,
    after_seq: i64,
    ping: Duration,
    shutdown: CancellationToken,
) -> impl Stream<Item = Result<Bytes, Infallible>> {
    let live = hub.subscribe();
    let deltas = Some(hub.delta_interest());
    let sub = Subscriber::new(
        hub,
        live,
        Phase::Replay,
        ping,
        shutdown,
        deltas,
        Ticket {
            ticket_id,
            last: after_seq,
            finished: false,
        },
    );
    futures::stream::unfold(sub, |mut sub| async move {
        let frame = next_ticket(&mut sub).await?;
        Some((Ok(frame), sub))
    })
}

async fn next_ticket(sub: &mut Subscriber<Ticket>) -> Option<Bytes> {
    let ticket_id = sub.kind.ticket_id;
    loop {
        if let Some(frame) = sub.next_pending() {
            return Some(frame);
        }
        match sub.phase {
            Phase::Ending => return None,
            Phase::Replay => {
                let (last, pool) = (sub.kind.last, sub.hub.pool().clone());
                let (frames, last, next, finished) = sub.read(Box::pin(replay_ticket(pool, ticket_id, last))).await?;
                sub.kind.last = last;
                sub.kind.finished = finished;
                sub.pending.extend(frames);
                sub.phase = next;
            }
            Phase::Live => {
                match sub.wake().await {
                    Wake::Shutdown => return None,
                    Wake::Ping => return Some(Bytes::from_static(PING)),
                    Wake::Message(msg) => take_ticket(sub, msg).await?,
                }
                while sub.phase == Phase::Live && pending_size(&sub.pending) < MAX_CHUNK {
                    match sub.ready_message() {
                        Some(msg) => take_ticket(sub, msg).await?,
                        None => break,
                    }
                }
            }
        }
    }
}

/// Queues what a hub message holds for this ticket's stream; None when the stream must stop
/// (its database read gave up).
async fn take_ticket(sub: &mut Subscriber<Ticket>, msg: Result<HubMessage, RecvError>) -> Option<()> {
    let ticket_id = sub.kind.ticket_id;
    match msg {
        Err(RecvError::Closed) => sub.phase = Phase::Ending,
        Err(RecvError::Lagged(_)) => sub.phase = Phase::Replay,
        Ok(HubMessage::Events(batch)) => {
            for item in batch.items.iter().filter(|i| i.event.ticket_id == Some(ticket_id)) {
                let seq = item.event.seq.unwrap_or(0);
                if seq <= sub.kind.last {
                    continue;
                }
                if seq > sub.kind.last + 1 {
                    // Never skip: fetch what lies between (and the rest) from the log.
                    sub.phase = Phase::Replay;
                    break;
                }
                sub.kind.last = seq;
                sub.pending.push_back(seq_frame(seq, item.json()));
                if kind::is_final(&item.event.kind) || sub.kind.finished {
                    let pool = sub.hub.pool().clone();
                    let (sent_all, finished) = sub.read(Box::pin(sent_all(pool, ticket_id, seq))).await?;
                    sub.kind.finished = finished;
                    if sent_all {
                        sub.phase = Phase::Ending;
                        break;
                    }
                }
            }
        }
        Ok(HubMessage::Delta(item)) if item.event.ticket_id == Some(ticket_id) => sub.pending.push_back(item.frame()),
        Ok(HubMessage::Delta(_)) => {}
    }
    Some(())
}

/// One batch of the logged events after `last`: their frames, the new `last`, what comes next
/// (more replay, live, or the end when the ticket is finished and that was its latest event), and
/// whether the ticket was finished.
async fn replay_ticket(pool: PgPool, ticket_id: Uuid, last: i64) -> Result<(Vec<Bytes>, i64, Phase, bool), ()> {
    let batch = read_with_retry(|| db::events::read_ticket(&pool, ticket_id, last, REPLAY_BATCH)).await?;
    let n = batch.len() as i64;
    let mut last = last;
    let mut frames = Vec::with_capacity(batch.len());
    for logged in batch {
        let seq = logged.event.seq.unwrap_or(0);
        last = seq;
        let item = StreamItem::from_logged(logged);
        frames.push(seq_frame(seq, item.json()));
    }
    if n == REPLAY_BATCH {
        return Ok((frames, last, Phase::Replay, false));
    }
    // Caught up: one look at the ticket says whether anything can follow.
    let (end, finished) = if last > 0 {
        sent_all(pool, ticket_id, last).await?
    } else {
        (false, false)
    };
    Ok((frames, last, if end { Phase::Ending } else { Phase::Live }, finished))
}

/// Whether a stream that has sent up to `seq` has sent all it ever will (the ticket is finished
/// and `seq` is its latest event, or the ticket is gone), and whether the ticket is finished.
async fn sent_all(pool: PgPool, ticket_id: Uuid, seq: i64) -> Result<(bool, bool), ()> {
    match read_with_retry(|| db::events::ticket_standing(&pool, ticket_id)).await? {
        None => Ok((true, true)),
        Some((finished, latest)) => Ok((finished && latest <= seq, finished)),
    }
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

#[cfg(test)]
mod tests {
    use super::GlobalFilter;

    fn kinds(kinds: &[&str]) -> GlobalFilter {
        GlobalFilter {
            kinds: kinds.iter().map(|k| k.to_string()).collect(),
            ..GlobalFilter::all(crate::domain::ProjectId::DEFAULT)
        }
    }

    #[test]
    fn only_a_filter_that_lets_a_delta_through_asks_for_deltas() {
        assert!(kinds(&[]).may_match_deltas());
        assert!(kinds(&["text.delta"]).may_match_deltas());
        assert!(kinds(&["ticket.done", "tool_call.*"]).may_match_deltas());
        assert!(kinds(&["thinking.*"]).may_match_deltas());
        assert!(!kinds(&["ticket.done", "ticket.failed"]).may_match_deltas());
        assert!(!kinds(&["ticket.*", "request.started"]).may_match_deltas());
        let labelled = GlobalFilter {
            labels: vec!["billing".into()],
            ..GlobalFilter::all(crate::domain::ProjectId::DEFAULT)
        };
        assert!(
            labelled.may_match_deltas(),
            "labels and agents filter deltas as they come"
        );
    }
}
