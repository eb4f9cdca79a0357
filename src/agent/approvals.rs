//! Tool calls that wait for a person: calls of tools that need approval
//! (`Tool::requires_approval`), and `ask_human` questions, whose answer is the call's result.
//!
//! A step whose response calls such a tool stores the response with `tool.approval_requested`
//! for those calls and `tool.started` for the others, and the calls that wait in the ticket's
//! `approvals`, in one fenced transaction. The other calls run at once and their results are
//! stored; then the ticket waits (`waiting`) until every call that waits is answered
//! (`transitions::answer_approval`, which puts it back to `todo`). The next claim's first step
//! runs the approved calls and gives the model the denied ones as error results with the reason.
//!
//! Crash safety: the approvals are written with the response, under the ticket's row lock, so a
//! process killed at any point loses none; a new claim that finds some unanswered waits again.
//! An approved call is taken out of `approvals` in the transaction that logs its `tool.started`,
//! before it runs: it runs at most once, and a crash while it runs leaves its call unanswered in
//! the transcript, which the model then reads as interrupted (its effect unknown).

use super::persist::ResponseRecord;
use super::step_state::Step;
use super::tool_calls::PreparedCall;
use super::{aborted, Flow, RunEnd, Stop};
use crate::db;
use crate::db::claims::Release;
use crate::domain::question::{self, Question};
use crate::domain::tool::ApprovalDeadline;
use crate::domain::{Approval, Decision, EventData, NewEvent, TicketUsage};
use crate::tools::builtin::ask_human;
use crate::tools::canned::Canned;
use crate::tools::{Prepared, ToolErrorKind, ToolFailure, ToolOutcome};

/// What the model is told when its question expired and the agent goes on without an answer.
const NOBODY_ANSWERED: &str =
    "Nobody answered the question in time. Go on without the answer, or finish as best you can.";

impl Step<'_> {
    /// A response with calls that wait for a person (an approval, or the answer to an
    /// `ask_human` question): store it and what waits, run the other calls, then wait for the
    /// answers.
    pub(super) async fn hold_for_people(
        &self,
        mut record: ResponseRecord,
        mut calls: Vec<PreparedCall>,
        tool_usage: TicketUsage,
    ) -> Flow<()> {
        let question = self.check_questions(&mut calls);
        if !calls.iter().any(PreparedCall::waits) {
            // Every question was refused: the calls run as any others do.
            return self.run_calls(record, calls, tool_usage).await;
        }
        // Each call's links, which answer it without a token (signed with the desk's key).
        let links: Vec<(String, String, String)> = calls
            .iter()
            .filter(|c| c.requires_approval())
            .map(|c| {
                let (approve, deny) = self.rt.links.for_call(self.ticket.id, &c.id);
                (c.id.clone(), approve, deny)
            })
            .collect();
        // Each call's deadline: the tool's (or its MCP server's), else the agent's; a question's,
        // the agent's. Kept with the call in Postgres, so it holds across restarts.
        let agent_deadline = ApprovalDeadline::of(self.agent.approval_timeout_secs, self.agent.on_timeout);
        let now = chrono::Utc::now();
        let at = |secs: i32| now + chrono::Duration::seconds(i64::from(secs));
        let approvals: Vec<Approval> = calls
            .iter()
            .filter(|c| c.waits())
            .map(|c| {
                let mut approval = Approval {
                    call_id: c.id.clone(),
                    tool_name: c.name.clone(),
                    input: c.shown_input.clone(),
                    decision: None,
                    reason: None,
                    expires_at: None,
                    on_timeout: None,
                    approve_url: None,
                    deny_url: None,
                    question: None,
                    answer: None,
                };
                match question.as_ref().filter(|(id, _)| *id == c.id) {
                    Some((_, q)) => {
                        approval.expires_at = self.agent.question_timeout_secs.map(at);
                        approval.question = Some(q.clone());
                    }
                    None => {
                        let deadline = c
                            .input
                            .as_ref()
                            .ok()
                            .and_then(|p| p.tool.approval_deadline())
                            .or(agent_deadline);
                        approval.expires_at = deadline.map(|d| at(d.secs));
                        approval.on_timeout = deadline.map(|d| d.on_timeout);
                        let urls = links.iter().find(|l| l.0 == c.id);
                        approval.approve_url = urls.map(|l| l.1.clone());
                        approval.deny_url = urls.map(|l| l.2.clone());
                    }
                }
                approval
            })
            .collect();
        let asked = approvals.iter().find_map(|a| {
            let q = a.question.as_ref()?;
            let data = EventData::QuestionAsked {
                id: q.id,
                call_id: a.call_id.clone(),
                question: q.question.clone(),
                response_schema: q.response_schema.clone(),
                choices: q.choices.clone(),
                answer_url: q.answer_url.clone(),
                expires_at: a.expires_at,
            };
            Some((a.call_id.as_str(), data))
        });
        record.request_answers(&calls, &links, asked);
        let usage = record.usage.plus(&tool_usage);
        let write = self.response_write(record, usage);
        // The response and the calls that wait, in one fenced transaction: both or neither.
        let Some(mut tx) = db::claims::fence(&self.rt.pool, self.fence).await? else {
            return aborted();
        };
        if !db::steps::store_step(&mut tx, &write).await? {
            return aborted();
        }
        db::tickets::set_approvals(&mut tx, self.ticket.id, &approvals).await?;
        tx.commit().await?;
        self.rt.hub.wake();
        let others: Vec<PreparedCall> = calls.into_iter().filter(|c| !c.waits()).collect();
        if !others.is_empty() {
            let outcomes = self.execute_tools(&others).await?;
            // A finisher among them ends the ticket here; what waited is dropped with it.
            self.store_results(&others, outcomes, None, &TicketUsage::default())
                .await?;
        }
        self.wait_for_answers().await
    }

    /// Checks the response's `ask_human` calls: the first good one is the question that waits
    /// (returned with its call's id); a bad one, or any after the first, becomes an error result.
    fn check_questions(&self, calls: &mut [PreparedCall]) -> Option<(String, Question)> {
        let mut question: Option<(String, Question)> = None;
        for call in calls.iter_mut().filter(|c| c.asks_human()) {
            let checked = match (&question, &call.input) {
                (Some(_), _) => Err(ToolFailure::invalid(
                    "Ask one question at a time: ask this one again once the other is answered.",
                )),
                (None, Ok(prepared)) => ask_human::asked(&prepared.input),
                (None, Err(failure)) => Err(failure.clone()),
            };
            match checked {
                Ok(asked) => {
                    let on_timeout = self
                        .agent
                        .question_timeout_secs
                        .map(|_| self.agent.on_question_timeout.unwrap_or_default());
                    let q = Question {
                        id: uuid::Uuid::now_v7(),
                        question: asked.question,
                        response_schema: asked.response_schema,
                        choices: asked.choices,
                        answer_url: Some(self.rt.links.for_question(self.ticket.id, &call.id)),
                        on_timeout,
                    };
                    question = Some((call.id.clone(), q));
                }
                Err(failure) => call.input = Err(failure),
            }
        }
        question
    }

    /// The first step of a claim of a ticket with calls that waited for approval: waits again
    /// while some are unanswered; otherwise runs the approved ones and stores every result.
    pub(super) async fn resume_approvals(&self) -> Flow<()> {
        if self.ticket.approvals.iter().any(|a| a.decision.is_none()) {
            return self.wait_for_answers().await;
        }
        let calls: Vec<PreparedCall> = self.ticket.approvals.iter().map(|a| self.answered_call(a)).collect();
        // A question's `question.asked` and `question.answered` stand for its start.
        let started: Vec<NewEvent> = calls
            .iter()
            .zip(&self.ticket.approvals)
            .filter(|(c, a)| c.input.is_ok() && !a.is_question())
            .map(|(c, _)| {
                let data = EventData::ToolStarted {
                    tool_name: c.name.clone(),
                    call_id: c.id.clone(),
                    input: c.shown_input.clone(),
                };
                NewEvent::new(Some(self.name()), data)
            })
            .collect();
        // Taken out of `approvals` before they run, with their `tool.started`: at most once.
        let Some(mut tx) = db::claims::fence(&self.rt.pool, self.fence).await? else {
            return aborted();
        };
        db::tickets::set_approvals(&mut tx, self.ticket.id, &[]).await?;
        db::events::append(&mut tx, self.ticket.id, &started).await?;
        tx.commit().await?;
        self.rt.hub.wake();
        let outcomes = self.execute_tools(&calls).await?;
        self.store_results(&calls, outcomes, None, &TicketUsage::default())
            .await
    }

    /// An answered call, ready to run (approved) or to return to the model (denied, or a tool
    /// that is gone since).
    fn answered_call(&self, approval: &Approval) -> PreparedCall {
        if approval.is_question() {
            let output = match &approval.answer {
                Some(answer) => question::answer_text(answer),
                None => NOBODY_ANSWERED.to_owned(),
            };
            let canned = Canned::new(&approval.tool_name, ToolOutcome::Output(output));
            return PreparedCall {
                id: approval.call_id.clone(),
                name: approval.tool_name.clone(),
                input: Ok(Prepared {
                    tool: std::sync::Arc::new(canned),
                    input: approval.input.clone(),
                }),
                shown_input: approval.input.clone(),
            };
        }
        let input = match approval.decision {
            Some(Decision::Approved) => match self.tools.get(&approval.tool_name) {
                Some(tool) if self.agent.tools.contains(&approval.tool_name) => Ok(Prepared {
                    tool: tool.clone(),
                    input: approval.input.clone(),
                }),
                _ => Err(ToolFailure::new(
                    ToolErrorKind::UnknownTool,
                    format!(
                        "The call was approved, but there is no tool named {:?} available to you any more.",
                        approval.tool_name
                    ),
                )),
            },
            _ => Err(ToolFailure::new(
                ToolErrorKind::Denied,
                match approval.reason.as_deref().filter(|r| !r.trim().is_empty()) {
                    Some(reason) => format!("A person denied this call: {reason}"),
                    None => "A person denied this call.".to_owned(),
                },
            )),
        };
        PreparedCall {
            id: approval.call_id.clone(),
            name: approval.tool_name.clone(),
            input,
            shown_input: approval.input.clone(),
        }
    }

    /// Lets the ticket wait for the answers, unless they all came meanwhile (then the loop goes
    /// on and its next step runs them). Checked under the row lock the answers take too.
    async fn wait_for_answers(&self) -> Flow<()> {
        let Some(mut tx) = db::claims::fence(&self.rt.pool, self.fence).await? else {
            return aborted();
        };
        let approvals = db::tickets::approvals(&mut tx, self.ticket.id).await?;
        if !approvals.iter().any(|a| a.decision.is_none()) {
            // Nothing written: the transaction rolls back as it is dropped.
            return Ok(());
        }
        db::claims::release(&mut tx, self.fence, Release::Waiting, self.name()).await?;
        tx.commit().await?;
        self.rt.hub.wake();
        Err(Stop::End(RunEnd::Waiting))
    }
}
