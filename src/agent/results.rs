//! Storing the results of a response's tool calls: every result in one user comment, the tools'
//! events, and the outcome when a finisher closed the ticket or schema retries ran out.

use serde_json::Value;
use sqlx::{PgConnection, Postgres, Transaction};

use super::persist::ResponseRecord;
use super::step_state::Step;
use super::tool_calls::PreparedCall;
use super::{aborted, outputs, transcript, Flow, RunEnd, Stop};
use crate::db;
use crate::db::claims::Finish;
use crate::db::steps::{StepResult, StepWrite};
use crate::domain::{Author, ContentBlock, EventData, FailureKind, NewEvent, TicketUsage};
use crate::tools::{self, Finisher, ToolErrorKind, ToolOutcome};

/// The transaction of writes that must precede a step's result (a handover's new ticket, stored
/// outputs, a schema retry's count), opened on first use by taking the claim's row lock. Locking
/// the ticket first, as every fenced transaction does, keeps lock order: a handover's child
/// insert share-locks the parent, and holding that while a cancel waits for the parent's row
/// would deadlock with the fence after it.
struct Prelude<'s, 'a> {
    step: &'s Step<'a>,
    tx: Option<Transaction<'static, Postgres>>,
}

impl Prelude<'_, '_> {
    /// The open transaction; stops the step when the claim is lost.
    async fn conn(&mut self) -> Flow<&mut PgConnection> {
        let tx = match self.tx.take() {
            Some(tx) => tx,
            None => match db::claims::fence(&self.step.rt.pool, self.step.fence).await? {
                Some(tx) => tx,
                None => return aborted(),
            },
        };
        Ok(&mut **self.tx.insert(tx))
    }
}

/// What the calls' outcomes add to the step: their events and result blocks, and whether the
/// ticket was closed (with its result), handed over, or a result failed the ticket's schema.
#[derive(Default)]
struct Applied {
    events: Vec<NewEvent>,
    results: Vec<ContentBlock>,
    closed_with: Option<Value>,
    created_work: bool,
    schema_failure: Option<String>,
    /// A call's input failed validation (or named no tool it may use).
    invalid_input: bool,
    /// A call succeeded.
    succeeded: bool,
}

impl Step<'_> {
    /// Stores every result in one user comment; a finisher closes the ticket as its last event.
    /// With `response`, the response that made the calls is stored first. Everything is one
    /// statement (`db::steps::store_step`) that checks the claim and adds `usage`; alone, it is
    /// its own transaction, shared with other tickets' steps. Writes that must come first open
    /// a fenced transaction around it (`Prelude`).
    pub(super) async fn store_results(
        &self,
        calls: &[PreparedCall],
        mut outcomes: Vec<ToolOutcome>,
        response: Option<ResponseRecord>,
        usage: &TicketUsage,
    ) -> Flow<()> {
        let mut prelude = Prelude { step: self, tx: None };
        self.offload_large_outputs(calls, &mut outcomes, &mut prelude).await?;
        let mut applied = self.apply_outcomes(calls, outcomes, &mut prelude).await?;
        let mut failed = None;
        if applied.closed_with.is_none() {
            if let Some(detail) = &applied.schema_failure {
                let conn = prelude.conn().await?;
                match self.schema_retry(conn, detail, &mut applied.events).await? {
                    Some(message) => failed = Some((FailureKind::MaxSchemaRetries, message)),
                    None => applied.results.push(ContentBlock::text(transcript::directive(detail))),
                }
            }
        }
        if let Some(message) = self.count_invalid_input(&mut applied) {
            failed = failed.or(Some((FailureKind::InvalidToolInput, message)));
        }
        let (outcome, end) = if let Some(result) = applied.closed_with.take() {
            (Some(Finish::Done(result)), Some(RunEnd::Done))
        } else if let Some((kind, message)) = failed {
            let outcome = Finish::Failed { kind, message };
            (Some(outcome), Some(RunEnd::Failed))
        } else {
            (None, None)
        };
        let created_work = applied.created_work;
        let write = self.step_write(response, applied, outcome, usage);
        let held = match prelude.tx.as_mut() {
            Some(tx) => db::steps::store_step(tx, &write).await?,
            None => self.rt.steps.store(write).await?,
        };
        if !held {
            // An open transaction rolls back as it is dropped.
            return aborted();
        }
        if let Some(tx) = prelude.tx {
            tx.commit().await?;
        }
        self.rt.hub.wake();
        if created_work {
            self.rt.hub.work_available();
        }
        match end {
            Some(end) => Err(Stop::End(end)),
            None => Ok(()),
        }
    }

    /// Steps in a row whose calls had invalid input and none succeeded count against
    /// `max_schema_retries` (a model sending `{}` forever stops); a successful call starts the
    /// count again. Past the limit: `policy.violated` is added and the failure message returned.
    fn count_invalid_input(&self, applied: &mut Applied) -> Option<String> {
        let streak = &self.streaks.invalid_input;
        if applied.succeeded || applied.closed_with.is_some() {
            streak.take();
            return None;
        }
        if !applied.invalid_input {
            return None;
        }
        let count = streak.bump();
        let max = self.agent.max_schema_retries.max(0);
        if count <= i64::from(max) {
            return None;
        }
        let violated = EventData::PolicyViolated {
            kind: FailureKind::MaxSchemaRetries.as_str().into(),
            limit: max.into(),
        };
        applied.events.push(NewEvent::new(Some(self.name()), violated));
        Some(format!(
            "the tool calls had invalid input {count} times in a row (max_schema_retries is {max})"
        ))
    }

    /// Large outputs are kept whole for download; the model gets a stub with a preview.
    async fn offload_large_outputs(
        &self,
        calls: &[PreparedCall],
        outcomes: &mut [ToolOutcome],
        prelude: &mut Prelude<'_, '_>,
    ) -> Flow<()> {
        let sizes: Vec<usize> = outcomes
            .iter()
            .map(|o| match o {
                ToolOutcome::Output(text) => text.len(),
                _ => 0,
            })
            .collect();
        for i in outputs::select_offloads(&sizes) {
            if let ToolOutcome::Output(text) = &mut outcomes[i] {
                let conn = prelude.conn().await?;
                db::outputs::store(conn, self.ticket.id, &calls[i].id, &calls[i].name, text).await?;
                *text = outputs::stub(&self.ticket.key, &calls[i].id, text);
            }
        }
        Ok(())
    }

    /// Turns each outcome into its event and result block; a finisher is applied here (a
    /// handover in the prelude's transaction), and only the first one of a reply counts.
    async fn apply_outcomes(
        &self,
        calls: &[PreparedCall],
        outcomes: Vec<ToolOutcome>,
        prelude: &mut Prelude<'_, '_>,
    ) -> Flow<Applied> {
        let name = self.name();
        let mut applied = Applied {
            results: Vec::with_capacity(calls.len()),
            ..Applied::default()
        };
        for (call, outcome) in calls.iter().zip(outcomes) {
            let outcome = match outcome {
                ToolOutcome::Finish(_) if applied.closed_with.is_some() => ToolOutcome::Failed {
                    kind: ToolErrorKind::Conflict,
                    message: "This ticket was already closed by an earlier call in the same reply.".into(),
                },
                ToolOutcome::Finish(Finisher::Close { result }) => {
                    applied.closed_with = Some(result);
                    ToolOutcome::Output(tools::closed_output(&self.ticket))
                }
                ToolOutcome::Finish(finisher) => {
                    applied.created_work |= matches!(finisher, Finisher::Handover { .. });
                    let conn = prelude.conn().await?;
                    let (output, result) =
                        tools::apply_finisher(conn, self.fence, &self.ticket, name, &finisher).await?;
                    applied.closed_with = Some(result);
                    ToolOutcome::Output(output)
                }
                other => other,
            };
            let (data, block) = match outcome {
                ToolOutcome::Output(output) => {
                    applied.succeeded = true;
                    let finished = EventData::ToolFinished {
                        tool_name: call.name.clone(),
                        call_id: call.id.clone(),
                        output: output.clone(),
                    };
                    (finished, tool_result(call, output, false))
                }
                ToolOutcome::Failed { kind, message } => {
                    applied.invalid_input |= matches!(kind, ToolErrorKind::InvalidInput | ToolErrorKind::UnknownTool);
                    if kind == ToolErrorKind::ResultInvalid {
                        applied.schema_failure = Some(message.clone());
                    }
                    let failed = EventData::ToolFailed {
                        tool_name: call.name.clone(),
                        call_id: call.id.clone(),
                        kind: kind.as_str().into(),
                        message: message.clone(),
                    };
                    (failed, tool_result(call, message, true))
                }
                ToolOutcome::Finish(_) => unreachable!("finishers were applied above"),
            };
            applied.events.push(NewEvent::new(Some(name), data));
            applied.results.push(block);
        }
        Ok(applied)
    }

    /// The step's write, in log order: the response (`request.finished`, its comment,
    /// `tool.started`), the tools' events, the results' comment, then the outcome's event (added
    /// by `store_step`).
    fn step_write(
        &self,
        response: Option<ResponseRecord>,
        applied: Applied,
        outcome: Option<Finish>,
        usage: &TicketUsage,
    ) -> StepWrite {
        let name = self.name();
        let mut comments = vec![];
        let (mut events, mut carries) = (vec![], vec![]);
        if let Some(response) = response {
            let (assistant, response_events, response_carries) = response.into_step(self.ticket.id, name);
            comments.push(assistant);
            events.extend(response_events);
            carries.extend(response_carries);
        }
        carries.extend(applied.events.iter().map(|_| None));
        events.extend(applied.events);
        let results_comment = db::steps::new_comment(self.ticket.id, Author::User, None, applied.results);
        events.push(NewEvent::new(
            Some(name),
            EventData::CommentCreated {
                comment: results_comment.clone(),
            },
        ));
        carries.push(Some(comments.len()));
        comments.push(results_comment);
        StepWrite {
            fence: self.fence,
            agent: name.to_owned(),
            step: StepResult {
                usage: *usage,
                comments,
                events,
                carries,
                outcome,
            },
        }
    }
}

fn tool_result(call: &PreparedCall, output: String, is_error: bool) -> ContentBlock {
    ContentBlock::ToolResult {
        tool_use_id: call.id.clone(),
        output,
        is_error,
    }
}
