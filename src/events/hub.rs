//! The in-process broadcast hub fed from the event log: its shared state, what callers use
//! (subscribe, position, wake-ups) and the shape of a live delta's data. Its reader is `reader`, live deltas are `deltas`, the
//! NOTIFYs to and from other processes `peers`.

use std::sync::Arc;

use sqlx::PgPool;
use tokio::sync::{broadcast, Notify};

use super::frames::{HubMessage, StreamItem};
use crate::db;
use crate::db::events::GlobalCursor;

/// How many messages a subscriber may fall behind before it re-reads from the database.
const CHANNEL_CAPACITY: usize = 8192;
/// What `tell_peers` marks for the next NOTIFY: new events, claimable work.
pub(super) const EVENTS_DIRTY: u8 = 1;
pub(super) const WORK_DIRTY: u8 = 2;

/// What a worker-only process's forwarder is handed: a delta, or a request to send what it holds
/// now (answered once sent).
pub(super) enum Forward {
    Delta(Arc<StreamItem>),
    Flush(tokio::sync::oneshot::Sender<()>),
}

/// A delta's data: `{delta}`, or `{call_id, tool_name, delta}` for `tool_call.delta`.
#[derive(serde::Serialize, serde::Deserialize)]
pub(super) struct DeltaData<'a> {
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    pub(super) call_id: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    pub(super) tool_name: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow)]
    pub(super) delta: std::borrow::Cow<'a, str>,
}

impl DeltaData<'_> {
    pub(super) fn to_raw(&self) -> Box<serde_json::value::RawValue> {
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

#[derive(Clone)]
pub struct EventHub {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) pool: PgPool,
    /// What other processes must be told (EVENTS_DIRTY | WORK_DIRTY), sent by one debounced task.
    pub(super) peers_dirty: std::sync::atomic::AtomicU8,
    pub(super) peers_wake: Notify,
    /// Claimable work appeared in this process: wakes the local worker pool.
    pub(super) work: Notify,
    /// Set in worker-only processes: deltas go to the API processes through `DELTAS_CHANNEL`.
    pub(super) delta_forwarder: std::sync::OnceLock<tokio::sync::mpsc::Sender<Forward>>,
    pub(super) sender: broadcast::Sender<HubMessage>,
    /// Subscribers that show deltas (held `DeltaInterest`s). With none, deltas are not sent: every
    /// message wakes every subscriber, and a stream filtered to `ticket.done` would wake a few
    /// times per ticket for nothing.
    pub(super) delta_watchers: std::sync::atomic::AtomicUsize,
    pub(super) wake: Notify,
    /// The last cursor broadcast; new "from now" subscribers start here.
    pub(super) position: std::sync::Mutex<GlobalCursor>,
    /// The same position for those who wait for it to move (webhook deliveries): set once per
    /// read of the log that found events, never per event.
    pub(super) advanced: tokio::sync::watch::Sender<GlobalCursor>,
    /// The backends of this process's own LISTEN connections, by role: they are not peers.
    pub(super) own_listeners: std::sync::Mutex<std::collections::HashMap<&'static str, i32>>,
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

    pub(super) fn tell_peers(&self, what: u8) {
        use std::sync::atomic::Ordering;
        if self.inner.peers_dirty.fetch_or(what, Ordering::AcqRel) & what == 0 {
            self.inner.peers_wake.notify_one();
        }
    }

    pub(super) fn wake_local(&self) {
        self.inner.wake.notify_one();
    }
}
