//! Storing what a step produced: the model's response, a text reply's settlement, a failure.
//! Every write is fenced by the claim: a transaction opened by `db::claims::fence`, or a group
//! write that checks the claim in its statement; a lost claim stops the step (`aborted`) with
//! nothing written. The tools' results are stored by `results`.

use sqlx::{PgConnection, Postgres, Transaction};

use super::charge;
use super::step_state::Charged;
use super::step_state::Step;
use super::tool_calls::PreparedCall;
use super::{aborted, request, transcript, Flow, RunEnd, Runtime, Stop};
use crate::db;
use crate::db::claims::{Fence, Finish, Release};
use crate::db::steps::{StepResult, StepWrite};
use crate::domain::{Agent, Author, Comment, ContentBlock, EventData, FailureKind, NewEvent, TicketUsage};
use crate::llm::ModelResponse;

pub(super) const STILL_TOO_LARGE: &str = "context still exceeds window after compaction";

/// What the model is told after a reply cut at the output limit.
const CONTINUE_DIRECTIVE: &str = "Your previous reply was cut off at the output limit. Continue exactly \
where it stopped, without repeating what you already wrote. To finish the ticket, call a tool.";

/// A model response as it is stored: the usage it adds, the assistant comment's content, and
/// the events that go around that comment in the log.
pub(super) struct ResponseRecord {
    pub usage: TicketUsage,
    content: Vec<ContentBlock>,
    /// `request.finished`, logged before the comment.
    finished: NewEvent,
    /// `budget.threshold` events the request's cost crossed, logged after `request.finished`.
    thresholds: Vec<NewEvent>,
    /// `tool.started` of each call, logged after it.
    tool_started: Vec<NewEvent>,
    /// Events about the calls, logged after their `tool.started` (`tool.replay_mismatch`).
    pub notes: Vec<NewEvent>,
}

impl ResponseRecord {
    pub fn of(agent: &Agent, response: &ModelResponse, calls: &[PreparedCall], charged: Charged) -> ResponseRecord {
        let name = agent.name.as_str();
        let mut content: Vec<ContentBlock> = response.thinking.clone();
        if !response.text.is_empty() {
            content.push(ContentBlock::text(response.text.clone()));
        }
        for call in calls {
            content.push(ContentBlock::ToolUse {
                id: call.id.clone(),
                name: call.name.clone(),
                input: call.shown_input.clone(),
            });
        }
        let model = if response.model.is_empty() {
            agent.model.clone()
        } else {
            response.model.clone()
        };
        let usage = request::ticket_usage(&response.usage, 1, !response.usage_reported);
        let usage = charge::priced(charged.price.as_ref(), usage, true);
        let finished = EventData::RequestFinished {
            model,
            usage: request::token_usage(&response.usage, !response.usage_reported),
            stop_reason: response.stop_reason.as_str().into(),
            cost_usd: usage.cost_usd(),
            unpriced: usage.unpriced,
        };
        let tool_started = calls
            .iter()
            .map(|c| {
                let started = EventData::ToolStarted {
                    tool_name: c.name.clone(),
                    call_id: c.id.clone(),
                    input: c.shown_input.clone(),
                };
                NewEvent::new(Some(name), started)
            })
            .collect();
        ResponseRecord {
            usage,
            content,
            finished: NewEvent::new(Some(name), finished),
            thresholds: charged.events,
            tool_started,
            notes: vec![],
        }
    }

    /// Calls that wait for approval log `tool.approval_requested` (with their links, by call id)
    /// and the question logs `question.asked` where the others log `tool.started`.
    pub fn request_answers(
        &mut self,
        calls: &[PreparedCall],
        links: &[(String, String, String)],
        asked: Option<(&str, EventData)>,
    ) {
        for (event, call) in self.tool_started.iter_mut().zip(calls) {
            if let Some((_, data)) = asked.as_ref().filter(|(id, _)| *id == call.id) {
                *event = NewEvent::new(event.agent.as_deref(), data.clone());
            } else if call.requires_approval() {
                let urls = links.iter().find(|(id, _, _)| *id == call.id);
                let requested = EventData::ToolApprovalRequested {
                    tool_name: call.name.clone(),
                    call_id: call.id.clone(),
                    input: call.shown_input.clone(),
                    approve_url: urls.map(|(_, approve, _)| approve.clone()),
                    deny_url: urls.map(|(_, _, deny)| deny.clone()),
                };
                *event = NewEvent::new(event.agent.as_deref(), requested);
            }
        }
    }

    /// The response as a step stores it (`db::steps::store_step`): the assistant comment, the
    /// events around it in log order, and which of them carries the comment (its index, 0).
    pub fn into_step(mut self, ticket_id: uuid::Uuid, agent: &str) -> (Comment, Vec<NewEvent>, Vec<Option<usize>>) {
        let content = std::mem::take(&mut self.content);
        let comment = db::steps::new_comment(ticket_id, Author::Assistant, Some(agent), content);
        let events = self.events(&comment, agent);
        let carries = events
            .iter()
            .map(|e| (e.kind == crate::domain::event::kind::COMMENT_CREATED).then_some(0))
            .collect();
        (comment, events, carries)
    }

    /// The events in log order, once the comment is stored.
    fn events(self, comment: &Comment, agent: &str) -> Vec<NewEvent> {
        let created = NewEvent::new(
            Some(agent),
            EventData::CommentCreated {
                comment: comment.clone(),
            },
        );
        let mut events = vec![self.finished];
        events.extend(self.thresholds);
        events.push(created);
        events.extend(self.tool_started);
        events.extend(self.notes);
        events
    }
}

/// Ends the ticket `failed`, after `events`, in one fenced transaction that adds `usage`.
pub(super) async fn fail<T>(
    rt: &Runtime,
    fence: Fence,
    agent: &str,
    (error_kind, message): (FailureKind, &str),
    events: Vec<NewEvent>,
    usage: &TicketUsage,
) -> Flow<T> {
    let Some(mut tx) = db::claims::fence_adding(&rt.pool, fence, usage).await? else {
        return aborted();
    };
    let outcome = Finish::Failed {
        kind: error_kind,
        message: message.to_owned(),
    };
    db::claims::finish(&mut tx, fence, &outcome, agent, events).await?;
    tx.commit().await?;
    rt.hub.wake();
    Err(Stop::End(RunEnd::Failed))
}

impl Step<'_> {
    /// Opens the claim's fenced transaction, adding `usage` to the ticket's counters; stops the
    /// step when the claim is gone.
    pub(super) async fn fenced(&self, usage: &TicketUsage) -> Flow<Transaction<'static, Postgres>> {
        let usage = self.with_failed_requests(*usage);
        match db::claims::fence_adding(&self.rt.pool, self.fence, &usage).await? {
            Some(tx) => Ok(tx),
            None => aborted(),
        }
    }

    /// The model's response as a step of its own: its comment and events, with no outcome yet
    /// (the calls it asks for run, or wait for approval, after it is stored).
    pub(super) fn response_write(&self, record: ResponseRecord, usage: TicketUsage) -> StepWrite {
        let (assistant, events, carries) = record.into_step(self.ticket.id, self.name());
        StepWrite {
            fence: self.fence,
            agent: self.agent.name.clone(),
            step: StepResult {
                usage,
                comments: vec![assistant],
                events,
                carries,
                outcome: None,
            },
        }
    }

    /// Appends events through the group writer (no transaction of this step's own).
    pub(super) async fn append_events(&self, events: Vec<NewEvent>) -> Flow<()> {
        if !self.rt.appender.append(self.fence, events).await? {
            return aborted();
        }
        self.rt.hub.wake();
        Ok(())
    }

    /// Ends the ticket `failed`, after `events`.
    pub(super) async fn fail<T>(&self, error_kind: FailureKind, message: &str, events: Vec<NewEvent>) -> Flow<T> {
        let usage = self.with_failed_requests(TicketUsage::default());
        fail(self.rt, self.fence, self.name(), (error_kind, message), events, &usage).await
    }

    /// Counts a request that failed, with what its provider reported it used (an empty reply's
    /// tokens; nothing for an error); it is added to the ticket with the step's next write.
    pub(super) fn count_failed_request(&self, used: TicketUsage) {
        let mut failed = self.failed_usage.lock().unwrap_or_else(|e| e.into_inner());
        *failed = failed.plus(&TicketUsage { requests: 1, ..used });
    }

    fn take_failed_usage(&self) -> TicketUsage {
        std::mem::take(&mut *self.failed_usage.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// After a cancel or a lost claim: the requests sent and not yet added to the ticket are
    /// added now. Not fenced, as nothing else of the step may be written then: a count of
    /// requests that were sent stays true whoever holds the ticket, and it is added once (the
    /// counter is emptied).
    pub(super) async fn keep_failed_requests(&self) -> Result<(), sqlx::Error> {
        let failed = self.take_failed_usage();
        if failed.requests > 0 {
            db::tickets::add_usage(&self.rt.pool, self.ticket.id, &failed).await?;
        }
        Ok(())
    }

    /// `usage` plus the failed requests not yet added to the ticket (which then are).
    pub(super) fn with_failed_requests(&self, usage: TicketUsage) -> TicketUsage {
        usage.plus(&self.take_failed_usage())
    }

    /// A model request that cannot succeed: `request.failed`, then the ticket fails with its kind.
    pub(super) async fn fail_request<T>(&self, error_kind: FailureKind, message: &str) -> Flow<T> {
        let failed = EventData::RequestFailed {
            kind: error_kind.as_str().into(),
            message: message.into(),
        };
        let event = NewEvent::new(Some(self.name()), failed);
        self.fail(error_kind, message, vec![event]).await
    }

    /// A reply without tool calls: on a schema-bound ticket a directive and a counted retry;
    /// otherwise the agent is asking the humans something and the ticket waits for a comment.
    pub(super) async fn settle_text_reply(&self, record: ResponseRecord) -> Flow<()> {
        let name = self.name();
        let ticket_id = self.ticket.id;
        let mut tx = self.fenced(&record.usage).await?;
        // The assistant comment, in this transaction (whose fence added the usage).
        let comment = db::comments::insert(&mut tx, ticket_id, Author::Assistant, Some(name), &record.content).await?;
        let mut events = record.events(&comment, name);
        let end = if self.ticket.schema.is_some() {
            let detail =
                "This ticket needs a result that matches its JSON Schema: call close_ticket with it (or handover_ticket).";
            match self.schema_retry(&mut tx, detail, &mut events).await? {
                Some(fail_message) => {
                    let outcome = Finish::Failed {
                        kind: FailureKind::MaxSchemaRetries,
                        message: fail_message,
                    };
                    db::claims::finish(&mut tx, self.fence, &outcome, name, events).await?;
                    Err(Stop::End(RunEnd::Failed))
                }
                None => {
                    let directive = [ContentBlock::text(transcript::directive(detail))];
                    let directive = db::comments::insert(&mut tx, ticket_id, Author::System, None, &directive).await?;
                    events.push(NewEvent::new(
                        Some(name),
                        EventData::CommentCreated { comment: directive },
                    ));
                    db::events::append(&mut tx, ticket_id, &events).await?;
                    Ok(())
                }
            }
        } else {
            db::events::append(&mut tx, ticket_id, &events).await?;
            db::claims::release(&mut tx, self.fence, Release::Waiting, name).await?;
            Err(Stop::End(RunEnd::Waiting))
        };
        tx.commit().await?;
        self.rt.hub.wake();
        end
    }

    /// A reply cut at the output limit without a tool call: it is stored, and the model is asked
    /// to go on, at most `max_schema_retries` times in a row; then the ticket fails with
    /// `output_truncated`.
    pub(super) async fn continue_truncated_reply(&self, record: ResponseRecord) -> Flow<()> {
        let name = self.name();
        let ticket_id = self.ticket.id;
        let max = self.agent.max_schema_retries.max(0);
        let count = self.streaks.truncated.bump();
        let mut tx = self.fenced(&record.usage).await?;
        let mut events = if record.content.is_empty() {
            // Nothing to store (a cut reply with no text), only that it came.
            let mut events = vec![record.finished];
            events.extend(record.thresholds);
            events
        } else {
            let comment =
                db::comments::insert(&mut tx, ticket_id, Author::Assistant, Some(name), &record.content).await?;
            record.events(&comment, name)
        };
        if count > i64::from(max) {
            let violated = EventData::PolicyViolated {
                kind: FailureKind::MaxSchemaRetries.as_str().into(),
                limit: max.into(),
            };
            events.push(NewEvent::new(Some(name), violated));
            let outcome = Finish::Failed {
                kind: FailureKind::OutputTruncated,
                message: format!(
                    "the reply was cut at the output limit {count} times in a row (max_schema_retries is {max}); \
                     raise the agent's max_tokens"
                ),
            };
            db::claims::finish(&mut tx, self.fence, &outcome, name, events).await?;
            tx.commit().await?;
            self.rt.hub.wake();
            return Err(Stop::End(RunEnd::Failed));
        }
        let directive = [ContentBlock::text(CONTINUE_DIRECTIVE)];
        // A user comment, like the tools' results: compaction folds it away with the rest.
        let directive = db::comments::insert(&mut tx, ticket_id, Author::User, None, &directive).await?;
        events.push(NewEvent::new(
            Some(name),
            EventData::CommentCreated { comment: directive },
        ));
        db::events::append(&mut tx, ticket_id, &events).await?;
        tx.commit().await?;
        self.rt.hub.wake();
        Ok(())
    }

    /// Counts a rejected reply on a schema-bound ticket: adds `schema.retried` to `events`, or,
    /// past the agent's limit, `policy.violated` and returns the failure message.
    pub(super) async fn schema_retry(
        &self,
        tx: &mut PgConnection,
        detail: &str,
        events: &mut Vec<NewEvent>,
    ) -> Result<Option<String>, sqlx::Error> {
        let max = self.agent.max_schema_retries.max(0);
        let count = db::claims::bump_schema_retries(tx, self.ticket.id, false).await?;
        if count > max {
            let violated = EventData::PolicyViolated {
                kind: FailureKind::MaxSchemaRetries.as_str().into(),
                limit: max.into(),
            };
            events.push(NewEvent::new(Some(self.name()), violated));
            return Ok(Some(format!(
                "no acceptable result after {max} schema retries: {detail}"
            )));
        }
        let retried = EventData::SchemaRetried {
            attempt: count,
            max_attempts: max,
            message: detail.into(),
        };
        events.push(NewEvent::new(Some(self.name()), retried));
        Ok(None)
    }
}
