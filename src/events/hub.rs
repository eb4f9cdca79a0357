//! The in-process broadcast hub fed from the event log.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use sqlx::pool::PoolConnection;
use sqlx::postgres::PgListener;
use sqlx::{PgConnection, PgPool, Postgres};
use tokio::sync::{broadcast, Notify};
use tokio_util::sync::CancellationToken;

use crate::db;
use crate::db::events::{GlobalCursor, LoggedEvent};
use crate::domain::event::kind;
use crate::domain::{ProjectId, TicketEvent};

/// How many messages a subscriber may fall behind before it re-reads from the database.
const CHANNEL_CAPACITY: usize = 8192;
/// Events read per query while catching up.
const BATCH: i64 = 1000;
/// Polling fallback for missed notifications (e.g. while the listener reconnects).
const POLL_INTERVAL: Duration = Duration::from_millis(500);
/// The shortest time between two reads of the log.
const MIN_ROUND_INTERVAL: Duration = Duration::from_millis(5);
/// Re-read soon when committed events wait behind an older open transaction.
const HELD_BACK_RETRY: Duration = Duration::from_millis(10);

/// An event ready to send: serialised at most once, when the first subscriber that wants it
/// asks, and then shared by every subscriber.
#[derive(Debug)]
pub struct StreamItem {
    /// The project of the event's ticket: a stream shows its own project's only.
    pub project: ProjectId,
    /// None for live-only deltas.
    pub cursor: Option<GlobalCursor>,
    pub event: TicketEvent,
    pub ticket_labels: Vec<String>,
    pub ticket_agent: Option<String>,
    /// `(frame, json)` of `sse_frame`, made on first use: most events of a busy desk go to no
    /// stream at all (a filtered stream, or none), and serialising each one anyway was several
    /// per cent of the process's CPU.
    frame: OnceLock<(Bytes, Bytes)>,
}

impl StreamItem {
    pub fn from_logged(e: LoggedEvent) -> StreamItem {
        StreamItem::new(e.project, Some(e.cursor), e.event, e.ticket_labels, e.ticket_agent)
    }

    fn new(
        project: ProjectId,
        cursor: Option<GlobalCursor>,
        event: TicketEvent,
        ticket_labels: Vec<String>,
        ticket_agent: Option<String>,
    ) -> StreamItem {
        StreamItem {
            project,
            cursor,
            event,
            ticket_labels,
            ticket_agent,
            frame: OnceLock::new(),
        }
    }

    fn frame_and_json(&self) -> &(Bytes, Bytes) {
        self.frame.get_or_init(|| sse_frame(self.cursor, &self.event))
    }

    /// The whole SSE frame of the global stream (`id: <cursor>` when persisted, then `data:`):
    /// every subscriber sends the same bytes without copying them.
    pub fn frame(&self) -> Bytes {
        self.frame_and_json().0.clone()
    }

    /// The event as JSON text, for an SSE `data:` line (a slice of the frame).
    pub fn json(&self) -> &Bytes {
        &self.frame_and_json().1
    }
}

/// `(frame, json)`: the frame `[id: <cursor>\n]data: <json>\n\n` and its JSON part.
fn sse_frame(cursor: Option<GlobalCursor>, event: &TicketEvent) -> (Bytes, Bytes) {
    use std::io::Write;
    let mut buf = Vec::with_capacity(256);
    if let Some(c) = cursor {
        let _ = writeln!(buf, "id: {c}");
    }
    buf.extend_from_slice(b"data: ");
    let start = buf.len();
    let _ = serde_json::to_writer(&mut buf, event);
    let end = buf.len();
    buf.extend_from_slice(b"\n\n");
    let frame = Bytes::from(buf);
    let json = frame.slice(start..end);
    (frame, json)
}

const DELTA_BATCH: Duration = Duration::from_millis(50);
/// Deltas a worker-only process holds for forwarding; more are dropped (see `publish_delta`).
const MAX_QUEUED_DELTAS: usize = 16 * 1024;
/// NOTIFY payloads must stay under 8000 bytes.
const MAX_PAYLOAD: usize = 7_000;
/// How long `flush_deltas` waits for the forwarder at most: a slow Postgres must not hold a step.
const FLUSH_WAIT: Duration = Duration::from_secs(1);

/// What a worker-only process's forwarder is handed: a delta, or a request to send what it holds
/// now (answered once sent).
enum Forward {
    Delta(Arc<StreamItem>),
    Flush(tokio::sync::oneshot::Sender<()>),
}

impl Forward {
    fn sort_into(self, deltas: &mut Vec<Arc<StreamItem>>, flushes: &mut Vec<tokio::sync::oneshot::Sender<()>>) {
        match self {
            Forward::Delta(delta) => deltas.push(delta),
            Forward::Flush(done) => flushes.push(done),
        }
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct ForwardedDelta {
    #[serde(default = "default_project")]
    project: ProjectId,
    event: TicketEvent,
    labels: Vec<String>,
    agent: Option<String>,
}

fn default_project() -> ProjectId {
    ProjectId::DEFAULT
}

/// A delta's data: `{delta}`, or `{call_id, tool_name, delta}` for `tool_call.delta`.
#[derive(serde::Serialize, serde::Deserialize)]
struct DeltaData<'a> {
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    call_id: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    tool_name: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow)]
    delta: std::borrow::Cow<'a, str>,
}

impl DeltaData<'_> {
    fn to_raw(&self) -> Box<serde_json::value::RawValue> {
        // Serialising a struct of string fields cannot fail.
        serde_json::value::to_raw_value(self).expect("strings serialise")
    }
}

/// The data of a `text.delta` or `thinking.delta` event.
pub fn delta_data(text: &str) -> Box<serde_json::value::RawValue> {
    DeltaData {
        call_id: None,
        tool_name: None,
        delta: text.into(),
    }
    .to_raw()
}

/// The data of a `tool_call.delta` event.
pub fn tool_call_delta_data(call_id: &str, tool_name: &str, delta: &str) -> Box<serde_json::value::RawValue> {
    DeltaData {
        call_id: Some(call_id.into()),
        tool_name: Some(tool_name.into()),
        delta: delta.into(),
    }
    .to_raw()
}

/// JSON arrays of deltas, each under MAX_PAYLOAD; a single oversized delta is split into parts.
fn delta_payloads(items: &[Arc<StreamItem>]) -> Vec<String> {
    let mut payloads = vec![];
    let mut batch: Vec<String> = vec![];
    let mut size = 2;
    for item in items {
        let mut event = item.event.clone();
        let data = item.event.data.get();
        let mut fields = serde_json::from_str::<DeltaData>(data).unwrap_or(DeltaData {
            call_id: None,
            tool_name: None,
            delta: "".into(),
        });
        let text = std::mem::take(&mut fields.delta);
        let mut parts = vec![];
        let mut rest = text.as_ref();
        while rest.len() > MAX_PAYLOAD / 2 {
            let mut cut = MAX_PAYLOAD / 2;
            while !rest.is_char_boundary(cut) {
                cut -= 1;
            }
            parts.push(&rest[..cut]);
            rest = &rest[cut..];
        }
        parts.push(rest);
        for part in parts {
            fields.delta = part.into();
            event.data = fields.to_raw();
            let forwarded = ForwardedDelta {
                project: item.project,
                event: event.clone(),
                labels: item.ticket_labels.clone(),
                agent: item.ticket_agent.clone(),
            };
            let Ok(json) = serde_json::to_string(&forwarded) else {
                continue;
            };
            if size + json.len() + 1 > MAX_PAYLOAD && !batch.is_empty() {
                payloads.push(format!("[{}]", batch.join(",")));
                batch.clear();
                size = 2;
            }
            size += json.len() + 1;
            batch.push(json);
        }
    }
    if !batch.is_empty() {
        payloads.push(format!("[{}]", batch.join(",")));
    }
    payloads
}

/// The persisted events of one read of the log, in cursor order, sent to subscribers as one
/// message: a subscriber wakes once per batch, not once per event.
#[derive(Debug)]
pub struct EventBatch {
    pub items: Vec<StreamItem>,
    /// Every item's frame, joined on first use: what an unfiltered global stream sends for the
    /// whole batch, in one write and without copying per subscriber.
    frames: OnceLock<Bytes>,
}

impl EventBatch {
    fn new(items: Vec<StreamItem>) -> EventBatch {
        EventBatch {
            items,
            frames: OnceLock::new(),
        }
    }

    pub fn frames(&self) -> Bytes {
        self.frames
            .get_or_init(|| {
                let size = self.items.iter().map(|i| i.frame_and_json().0.len()).sum();
                let mut joined = bytes::BytesMut::with_capacity(size);
                for item in &self.items {
                    joined.extend_from_slice(&item.frame_and_json().0);
                }
                joined.freeze()
            })
            .clone()
    }

    /// The cursor of the first item (None for an empty batch, which is never sent).
    pub fn first_cursor(&self) -> Option<GlobalCursor> {
        self.items.first().and_then(|i| i.cursor)
    }
}

#[derive(Clone, Debug)]
pub enum HubMessage {
    Events(Arc<EventBatch>),
    Delta(Arc<StreamItem>),
}

/// A subscription's interest in deltas (see [`EventHub::delta_interest`]); dropped with it.
pub struct DeltaInterest(Arc<Inner>);

impl Drop for DeltaInterest {
    fn drop(&mut self) {
        self.0.delta_watchers.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

#[derive(Clone)]
pub struct EventHub {
    inner: Arc<Inner>,
}

struct Inner {
    pool: PgPool,
    /// What other processes must be told (EVENTS_DIRTY | WORK_DIRTY), sent by one debounced task.
    peers_dirty: std::sync::atomic::AtomicU8,
    peers_wake: Notify,
    /// Claimable work appeared in this process: wakes the local worker pool.
    work: Notify,
    /// Set in worker-only processes: deltas go to the API processes through `DELTAS_CHANNEL`.
    delta_forwarder: std::sync::OnceLock<tokio::sync::mpsc::Sender<Forward>>,
    sender: broadcast::Sender<HubMessage>,
    /// Subscribers that show deltas (held `DeltaInterest`s). With none, deltas are not sent: every
    /// message wakes every subscriber, and a stream filtered to `ticket.done` would wake a few
    /// times per ticket for nothing.
    delta_watchers: std::sync::atomic::AtomicUsize,
    wake: Notify,
    /// The last cursor broadcast; new "from now" subscribers start here.
    position: std::sync::Mutex<GlobalCursor>,
    /// The same position for those who wait for it to move (webhook deliveries): set once per
    /// read of the log that found events, never per event.
    advanced: tokio::sync::watch::Sender<GlobalCursor>,
    /// The backends of this process's own LISTEN connections, by role: they are not peers.
    own_listeners: std::sync::Mutex<std::collections::HashMap<&'static str, i32>>,
}

impl EventHub {
    /// Creates the hub positioned at the log's current head. Call `run` to start following.
    pub async fn new(pool: PgPool) -> Result<EventHub, sqlx::Error> {
        let head = db::events::head(&mut *pool.acquire().await?).await?;
        let (sender, _) = broadcast::channel(CHANNEL_CAPACITY);
        Ok(EventHub {
            inner: Arc::new(Inner {
                pool,
                peers_dirty: std::sync::atomic::AtomicU8::new(0),
                peers_wake: Notify::new(),
                work: Notify::new(),
                delta_forwarder: std::sync::OnceLock::new(),
                sender,
                delta_watchers: std::sync::atomic::AtomicUsize::new(0),
                wake: Notify::new(),
                position: std::sync::Mutex::new(head),
                advanced: tokio::sync::watch::Sender::new(head),
                own_listeners: Default::default(),
            }),
        })
    }

    pub fn pool(&self) -> &PgPool {
        &self.inner.pool
    }

    pub fn subscribe(&self) -> broadcast::Receiver<HubMessage> {
        self.inner.sender.subscribe()
    }

    pub fn position(&self) -> GlobalCursor {
        *self.inner.position.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The position, changing whenever the hub has read new events from the log.
    pub fn watch_position(&self) -> tokio::sync::watch::Receiver<GlobalCursor> {
        self.inner.advanced.subscribe()
    }

    /// Called after this process commits events: the local reader looks at the log now, and other
    /// processes are told through a debounced NOTIFY. NOTIFY takes a cluster-wide lock at commit,
    /// so it is never sent per event; it is only a hint (readers also poll), so a crash between a
    /// commit and the NOTIFY delays other processes' streams by at most a poll interval.
    pub fn wake(&self) {
        self.inner.wake.notify_one();
        self.tell_peers(EVENTS_DIRTY);
    }

    /// Called after this process commits a claimable ticket: wakes the local workers now and the
    /// other processes' workers through a debounced NOTIFY (they also poll).
    pub fn work_available(&self) {
        self.inner.work.notify_one();
        self.tell_peers(WORK_DIRTY);
    }

    /// Completes when `work_available` was called (a stored permit counts).
    pub async fn work_notified(&self) {
        self.inner.work.notified().await
    }

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

    fn tell_peers(&self, what: u8) {
        use std::sync::atomic::Ordering;
        if self.inner.peers_dirty.fetch_or(what, Ordering::AcqRel) & what == 0 {
            self.inner.peers_wake.notify_one();
        }
    }

    fn wake_local(&self) {
        self.inner.wake.notify_one();
    }

    /// Whether a published delta would be shown to anyone: a subscriber here that holds a
    /// [`DeltaInterest`], or the API processes through the forwarder. A subscriber that comes
    /// later never sees earlier deltas, so a delta nobody would show need not be made.
    pub fn wants_deltas(&self) -> bool {
        use std::sync::atomic::Ordering;
        self.inner.delta_watchers.load(Ordering::Acquire) > 0 || self.inner.delta_forwarder.get().is_some()
    }

    /// Declares that the caller's subscription shows deltas, for as long as it is held. Taken
    /// before the subscriber waits for messages; a subscriber without one still receives the
    /// deltas published for others, and must ignore them.
    pub fn delta_interest(&self) -> DeltaInterest {
        use std::sync::atomic::Ordering;
        self.inner.delta_watchers.fetch_add(1, Ordering::AcqRel);
        DeltaInterest(self.inner.clone())
    }

    /// Publishes a live-only delta (`text.delta`, `thinking.delta`, `tool_call.delta`) to local
    /// subscribers, when one shows deltas (see `wants_deltas`).
    pub fn publish_delta(
        &self,
        project: ProjectId,
        event: TicketEvent,
        ticket_labels: Vec<String>,
        ticket_agent: Option<String>,
    ) {
        debug_assert!(kind::is_delta(&event.kind));
        if !self.wants_deltas() {
            return;
        }
        let item = Arc::new(StreamItem::new(project, None, event, ticket_labels, ticket_agent));
        if let Some(forwarder) = self.inner.delta_forwarder.get() {
            // Full while Postgres is slow or away: this delta is dropped (they are best effort;
            // the step's persisted events carry the whole text) rather than queued without end.
            let _ = forwarder.try_send(Forward::Delta(item.clone()));
        }
        // No subscribers is fine: deltas are not kept.
        let _ = self.inner.sender.send(HubMessage::Delta(item));
    }

    /// For processes without an API: sends this process's deltas to the API processes, batched
    /// every 50 ms (or at once when `flush_deltas` asks) into NOTIFY payloads under Postgres's
    /// 8000-byte limit.
    pub fn forward_deltas(&self, shutdown: CancellationToken) -> tokio::task::JoinHandle<()> {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Forward>(MAX_QUEUED_DELTAS);
        let _ = self.inner.delta_forwarder.set(tx);
        let pool = self.inner.pool.clone();
        tokio::spawn(async move {
            loop {
                let first = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    item = rx.recv() => match item { Some(i) => i, None => return },
                };
                let (mut items, mut flushes) = (vec![], vec![]);
                first.sort_into(&mut items, &mut flushes);
                // Gather a batch, unless a flush asks for what is held now.
                let batch = tokio::time::sleep(DELTA_BATCH);
                tokio::pin!(batch);
                while flushes.is_empty() {
                    tokio::select! {
                        _ = &mut batch => break,
                        item = rx.recv() => match item {
                            Some(item) => item.sort_into(&mut items, &mut flushes),
                            None => break,
                        },
                    }
                }
                while let Ok(item) = rx.try_recv() {
                    item.sort_into(&mut items, &mut flushes);
                }
                for payload in delta_payloads(&items) {
                    // Best effort, like the deltas themselves: they are never stored.
                    let _ = sqlx::query("SELECT pg_notify($1, $2)")
                        .bind(db::DELTAS_CHANNEL)
                        .bind(payload)
                        .execute(&pool)
                        .await;
                }
                for done in flushes {
                    let _ = done.send(());
                }
            }
        })
    }

    /// In a worker-only process, sends the deltas it holds to the API processes now, and returns
    /// once they are sent (at most `FLUSH_WAIT`). Called before a response's persisted events:
    /// their NOTIFY comes after the deltas', so an API process shows a ticket's live text before
    /// the final event that ends its stream. Elsewhere it returns at once.
    pub async fn flush_deltas(&self) {
        let Some(forwarder) = self.inner.delta_forwarder.get() else {
            return;
        };
        let (done, sent) = tokio::sync::oneshot::channel();
        let _ = tokio::time::timeout(FLUSH_WAIT, async {
            if forwarder.send(Forward::Flush(done)).await.is_ok() {
                let _ = sent.await;
            }
        })
        .await;
    }

    /// Publishes deltas forwarded by a worker-only process.
    fn publish_forwarded(&self, payload: &str) {
        let Ok(items) = serde_json::from_str::<Vec<ForwardedDelta>>(payload) else {
            return;
        };
        for d in items {
            self.publish_delta(d.project, d.event, d.labels, d.agent);
        }
    }

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
                    Duration::from_millis(200 * u64::from(failures.min(10)))
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

const EVENTS_DIRTY: u8 = 1;
const WORK_DIRTY: u8 = 2;
/// At most one NOTIFY per channel per this interval from one process.
const PEER_NOTIFY_INTERVAL: Duration = Duration::from_millis(10);

/// How long a look for other processes' listeners is trusted.
const PEER_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Sends the debounced NOTIFYs of `wake` and `work_available` to other processes, when some
/// listen: a process alone on its database (one `serve`) would only wake itself, paying a commit
/// and its listeners' wake-ups for hints it already has.
async fn notify_peers(hub: EventHub, shutdown: CancellationToken) {
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
async fn listen_for_events(hub: EventHub, shutdown: CancellationToken) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn item(kind: &str, data: Box<serde_json::value::RawValue>) -> Arc<StreamItem> {
        let event = TicketEvent {
            ticket_id: Some(uuid::Uuid::nil()),
            ticket_key: Some("TICKET-1".into()),
            seq: None,
            kind: kind.into(),
            agent: Some("a".into()),
            at: chrono::Utc::now(),
            data,
        };
        Arc::new(StreamItem::new(ProjectId::DEFAULT, None, event, vec![], None))
    }

    #[test]
    fn forwarded_deltas_keep_their_fields_when_split() {
        let long = "x".repeat(MAX_PAYLOAD * 2);
        let items = [
            item(kind::TEXT_DELTA, delta_data("hi")),
            item(kind::TOOL_CALL_DELTA, tool_call_delta_data("c1", "close_ticket", &long)),
        ];
        let payloads = delta_payloads(&items);
        let forwarded: Vec<ForwardedDelta> = payloads
            .iter()
            .flat_map(|p| serde_json::from_str::<Vec<ForwardedDelta>>(p).unwrap())
            .collect();
        assert!(payloads.iter().all(|p| p.len() <= MAX_PAYLOAD + 200));
        let data: Vec<serde_json::Value> = forwarded
            .iter()
            .map(|f| serde_json::from_str(f.event.data.get()).unwrap())
            .collect();
        assert_eq!(data[0], serde_json::json!({ "delta": "hi" }));
        assert!(data.len() > 2);
        let mut joined = String::new();
        for d in &data[1..] {
            assert_eq!((&d["call_id"], &d["tool_name"]), (&"c1".into(), &"close_ticket".into()));
            joined.push_str(d["delta"].as_str().unwrap());
        }
        assert_eq!(joined, long);
    }
}
