//! Tickets as A2A tasks: states, the status message, the artifact and the history.

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{json, Value};

use super::wire::{self, Artifact, Message, Part, Task, TaskState, TaskStatus};
use super::{A2aError, CONTEXT_KEY};
use crate::db;
use crate::domain::{Author, Comment, ContentBlock, ProjectId, Status, Ticket, TicketRef};
use crate::http::AppState;

pub fn state_of(ticket: &Ticket) -> TaskState {
    task_state(ticket.status)
}

fn task_state(status: Status) -> TaskState {
    match status {
        Status::Todo => TaskState::Submitted,
        Status::InProgress => TaskState::Working,
        Status::Waiting => TaskState::InputRequired,
        Status::Done => TaskState::Completed,
        Status::Failed => TaskState::Failed,
        Status::Cancelled => TaskState::Canceled,
    }
}

/// The ticket statuses a task state names (none for states a ticket never has).
pub(super) fn statuses_of(state: TaskState) -> Vec<Status> {
    Status::ALL
        .into_iter()
        .filter(|status| task_state(*status) == state)
        .collect()
}

fn timestamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

pub(super) fn context_of(ticket: &Ticket) -> String {
    ticket
        .metadata
        .get(CONTEXT_KEY)
        .and_then(Value::as_str)
        .map_or_else(|| ticket.id.to_string(), str::to_owned)
}

fn agent_message(ticket: &Ticket, text: String) -> Message {
    Message {
        message_id: format!("{}-status-{}", ticket.id, ticket.updated_at.timestamp_micros()),
        context_id: Some(context_of(ticket)),
        task_id: Some(ticket.id.to_string()),
        role: wire::ROLE_AGENT.into(),
        parts: vec![Part::text(text)],
        metadata: None,
    }
}

/// What the task's status says to its client: the question or approvals a waiting ticket waits
/// on, or why a ticket failed.
fn status_message(ticket: &Ticket, last_words: Option<&str>) -> Option<Message> {
    let text = match ticket.status {
        Status::Waiting if !ticket.pending_approvals.is_empty() => {
            let calls: Vec<String> = ticket
                .pending_approvals
                .iter()
                .map(|p| format!("{} ({})", p.tool_name, p.call_id))
                .collect();
            format!("Waiting for approval of: {}", calls.join(", "))
        }
        // The agent's question (`ask_human`), else its last words.
        Status::Waiting => match &ticket.pending_question {
            Some(q) => q.question.clone(),
            None => last_words.unwrap_or("The agent is waiting for an answer.").to_owned(),
        },
        Status::Failed => ticket
            .error
            .as_ref()
            .map(|e| format!("{}: {}", e.kind, e.message))
            .unwrap_or_else(|| "failed".into()),
        _ => return None,
    };
    Some(agent_message(ticket, text))
}

fn status_of(ticket: &Ticket, last_words: Option<&str>) -> TaskStatus {
    TaskStatus {
        state: state_of(ticket),
        message: status_message(ticket, last_words),
        timestamp: timestamp(ticket.updated_at),
    }
}

/// The result as the task's one artifact: a text part for a string, a data part otherwise.
fn artifact_of(ticket: &Ticket) -> Option<Artifact> {
    let result = ticket.result.as_ref()?;
    let part = match result {
        Value::String(text) => Part::text(text.clone()),
        other => Part::data(other.clone()),
    };
    Some(Artifact {
        artifact_id: format!("{}-result", ticket.id),
        name: "result".into(),
        parts: vec![part],
    })
}

/// The text a comment shows a client: its text blocks (tool calls and results are the agent's
/// own business).
fn comment_text(comment: &Comment) -> Option<String> {
    let texts: Vec<&str> = comment
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text { text } if !text.trim().is_empty() => Some(text.as_str()),
            _ => None,
        })
        .collect();
    (!texts.is_empty()).then(|| texts.join("\n"))
}

fn history_of(ticket: &Ticket, comments: &[Comment]) -> Vec<Message> {
    let context = context_of(ticket);
    // The task becomes the transcript's first comment when an agent first claims the ticket;
    // until then the history starts with it all the same.
    let unclaimed = ticket.started_at.is_none().then(|| Message {
        message_id: ticket.id.to_string(),
        context_id: Some(context.clone()),
        task_id: Some(ticket.id.to_string()),
        role: wire::ROLE_USER.into(),
        parts: vec![Part::text(ticket.task_text())],
        metadata: None,
    });
    let messages = comments.iter().filter_map(|comment| {
        let text = comment_text(comment)?;
        let role = match comment.author {
            Author::User => wire::ROLE_USER,
            Author::Assistant | Author::System => wire::ROLE_AGENT,
        };
        Some(Message {
            message_id: comment.id.to_string(),
            context_id: Some(context.clone()),
            task_id: Some(ticket.id.to_string()),
            role: role.into(),
            parts: vec![Part::text(text)],
            metadata: None,
        })
    });
    unclaimed.into_iter().chain(messages).collect()
}

/// How much of the history to show: None all of it, Some(0) none.
#[derive(Clone, Copy)]
pub(super) struct HistoryLength(pub(super) Option<i64>);

impl HistoryLength {
    pub(super) fn parse(n: Option<i64>) -> Result<HistoryLength, A2aError> {
        match n {
            Some(n) if n < 0 => Err(A2aError::InvalidParams("historyLength must not be negative".into())),
            other => Ok(HistoryLength(other)),
        }
    }
}

/// The ticket as a task; reads its transcript when the history or a waiting question needs it.
pub(super) async fn task_of(state: &AppState, ticket: &Ticket, history: HistoryLength) -> Result<Task, A2aError> {
    let wants_history = history.0 != Some(0);
    let asks = ticket.status == Status::Waiting && ticket.pending_approvals.is_empty();
    let comments = if wants_history || asks {
        db::comments::all(&state.pool, ticket.id).await?
    } else {
        Vec::new()
    };
    let last_words = comments
        .iter()
        .rev()
        .find(|c| c.author == Author::Assistant)
        .and_then(comment_text);
    let mut messages = if wants_history {
        history_of(ticket, &comments)
    } else {
        Vec::new()
    };
    if let Some(n) = history.0 {
        let keep = (n as usize).min(messages.len());
        messages.drain(..messages.len() - keep);
    }
    Ok(Task {
        id: ticket.id.to_string(),
        context_id: context_of(ticket),
        status: status_of(ticket, last_words.as_deref()),
        artifacts: artifact_of(ticket).into_iter().collect(),
        history: messages,
        metadata: Some(json!({"key": ticket.key, "labels": ticket.labels})),
    })
}

pub(super) async fn find_task(state: &AppState, project: ProjectId, id: &str) -> Result<Ticket, A2aError> {
    let not_found = || A2aError::TaskNotFound(format!("task {id:?} not found"));
    // Task ids are ticket ids; a key works too, for people typing them.
    let reference = TicketRef::parse(id).ok_or_else(not_found)?;
    db::tickets::find(&state.pool, project, &reference)
        .await?
        .ok_or_else(not_found)
}
