//! Live deltas (`text.delta`, `thinking.delta`, `tool_call.delta`): published in memory to the
//! subscribers that show them, and forwarded by worker-only processes to the API processes
//! through NOTIFY payloads. Never stored: the step's persisted events carry the whole text.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::frames::{HubMessage, StreamItem};
use super::hub::{DeltaData, EventHub, Forward, Inner};
use crate::db;
use crate::domain::event::kind;
use crate::domain::{ProjectId, TicketEvent};

const DELTA_BATCH: Duration = Duration::from_millis(50);
/// Deltas a worker-only process holds for forwarding; more are dropped (see `publish_delta`).
const MAX_QUEUED_DELTAS: usize = 16 * 1024;
/// NOTIFY payloads must stay under 8000 bytes.
const MAX_PAYLOAD: usize = 7_000;
/// How long `flush_deltas` waits for the forwarder at most: a slow Postgres must not hold a step.
const FLUSH_WAIT: Duration = Duration::from_secs(1);

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

/// A subscription's interest in deltas (see [`EventHub::delta_interest`]); dropped with it.
pub struct DeltaInterest(Arc<Inner>);

impl Drop for DeltaInterest {
    fn drop(&mut self) {
        self.0.delta_watchers.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

impl EventHub {
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
    pub(super) fn publish_forwarded(&self, payload: &str) {
        let Ok(items) = serde_json::from_str::<Vec<ForwardedDelta>>(payload) else {
            return;
        };
        for d in items {
            self.publish_delta(d.project, d.event, d.labels, d.agent);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::hub::{delta_data, tool_call_delta_data};
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
