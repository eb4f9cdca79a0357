//! A task's stream: the task as it is, then its changes until it is terminal or needs input.

use std::collections::VecDeque;

use uuid::Uuid;

use super::task::{state_of, task_of, HistoryLength};
use super::wire::{StreamResponse, TaskArtifactUpdateEvent, TaskState, TaskStatusUpdateEvent};
use crate::db;
use crate::domain::Ticket;
use crate::events::settle::{next_change, Change};
use crate::events::HubMessage;
use crate::http::AppState;

/// An item of a task's stream: an event, or a keep-alive when nothing happened for a while.
pub enum StreamItem {
    Event(Box<StreamResponse>),
    KeepAlive,
}

/// The task's stream: the task as the caller last saw it, then its status changes (and its artifact, when it is
/// done) until it is terminal or needs input. Changes are read from the ticket itself whenever
/// the hub carries one of its events, so the last state is never missed even if several changes
/// arrive together.
pub fn task_stream(state: AppState, ticket: Ticket) -> impl futures::Stream<Item = StreamItem> + Send {
    struct Follow {
        state: AppState,
        live: tokio::sync::broadcast::Receiver<HubMessage>,
        ticket_id: Uuid,
        last: Option<TaskState>,
        pending: VecDeque<StreamItem>,
        ended: bool,
        start: Option<Ticket>,
        /// Read the ticket again before waiting: right after the first snapshot, which was
        /// taken before the subscription.
        recheck: bool,
    }
    let live = state.hub.subscribe();
    let follow = Follow {
        ticket_id: ticket.id,
        state,
        live,
        last: None,
        pending: VecDeque::new(),
        ended: false,
        start: Some(ticket),
        recheck: false,
    };
    futures::stream::unfold(follow, |mut f| async move {
        loop {
            if let Some(item) = f.pending.pop_front() {
                return Some((item, f));
            }
            if f.ended {
                return None;
            }
            // The task as the caller saw it (as its message left it: submitted) comes first, so
            // a client always sees its changes, however fast the agent is; the read right after
            // it is made after subscribing, so nothing falls between.
            let ticket = match f.start.take() {
                Some(ticket) => ticket,
                None if f.recheck => {
                    f.recheck = false;
                    match db::tickets::find_by_id(&f.state.pool, f.ticket_id).await {
                        Ok(Some(ticket)) => ticket,
                        Ok(None) | Err(_) => return None,
                    }
                }
                None => {
                    let ping = tokio::time::Instant::now() + f.state.config.sse_ping;
                    let change = tokio::select! {
                        change = next_change(&mut f.live, f.ticket_id, ping) => change,
                        // Shutting down: end the stream, as the desk's own streams do.
                        _ = f.state.shutdown.cancelled() => Change::Closed,
                    };
                    match change {
                        Change::Closed => return None,
                        Change::TimedOut => return Some((StreamItem::KeepAlive, f)),
                        Change::Changed => {}
                    }
                    match db::tickets::find_by_id(&f.state.pool, f.ticket_id).await {
                        Ok(Some(ticket)) => ticket,
                        // Deleted (retention), or the database is away: the client resubscribes.
                        Ok(None) | Err(_) => return None,
                    }
                }
            };
            let now = state_of(&ticket);
            if f.last == Some(now) {
                continue;
            }
            let first = f.last.is_none();
            f.last = Some(now);
            let task = match task_of(&f.state, &ticket, HistoryLength(if first { None } else { Some(0) })).await {
                Ok(task) => task,
                Err(_) => return None,
            };
            if first {
                f.pending
                    .push_back(StreamItem::Event(Box::new(StreamResponse::Task(task))));
                f.recheck = true;
            } else {
                if let Some(artifact) = task.artifacts.first() {
                    f.pending
                        .push_back(StreamItem::Event(Box::new(StreamResponse::ArtifactUpdate(
                            TaskArtifactUpdateEvent {
                                task_id: task.id.clone(),
                                context_id: task.context_id.clone(),
                                artifact: artifact.clone(),
                                last_chunk: true,
                            },
                        ))));
                }
                f.pending
                    .push_back(StreamItem::Event(Box::new(StreamResponse::StatusUpdate(
                        TaskStatusUpdateEvent {
                            task_id: task.id,
                            context_id: task.context_id,
                            status: task.status,
                        },
                    ))));
            }
            f.ended = now.ends_stream();
        }
    })
}
