//! What the hub sends: events serialised once, as SSE frames every subscriber shares.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;

use crate::db::events::{GlobalCursor, LoggedEvent};
use crate::domain::{ProjectId, TicketEvent};

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

    pub(super) fn new(
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

    pub(super) fn frame_and_json(&self) -> &(Bytes, Bytes) {
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
    pub(super) fn new(items: Vec<StreamItem>) -> EventBatch {
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

/// One message of the hub's broadcast: a batch read from the log, or a live delta.
#[derive(Clone, Debug)]
pub enum HubMessage {
    Events(Arc<EventBatch>),
    Delta(Arc<StreamItem>),
}
