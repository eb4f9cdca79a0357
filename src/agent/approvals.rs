//! Tool calls that wait for a person (`Tool::requires_approval`).
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
use super::state::Step;
use super::tool_calls::PreparedCall;
use super::{aborted, Flow, RunEnd, Stop};
use crate::db;
use crate::db::claims::Release;
use crate::domain::tool::ApprovalDeadline;
use crate::domain::{Approval, Decision, EventData, NewEvent, TicketUsage};
use crate::tools::{Prepared, ToolErrorKind, ToolFailure};

impl Step<'_> {
    /// A response with calls that wait for approval: store it and what waits, run the other
    /// calls, then wait for the answers.
    pub(super) async fn hold_for_approval(
        &self,
        mut record: ResponseRecord,
        calls: Vec<PreparedCall>,
        tool_usage: TicketUsage,
    ) -> Flow<()> {
        // Each call's links, which answer it without a token (signed with the desk's key).
        let links: Vec<(String, String, String)> = calls
            .iter()
            .filter(|c| c.requires_approval())
            .map(|c| {
                let (approve, deny) = self.rt.links.for_call(self.ticket.id, &c.id);
                (c.id.clone(), approve, deny)
            })
            .collect();
        record.request_approvals(&calls, &links);
        // Each call's deadline: the tool's (or its MCP server's), else the agent's; kept with the
        // call in Postgres, so it holds across restarts.
        let agent_deadline = ApprovalDeadline::of(self.agent.approval_timeout_secs, self.agent.on_timeout);
        let now = chrono::Utc::now();
        let approvals: Vec<Approval> = calls
            .iter()
            .filter(|c| c.requires_approval())
            .map(|c| {
                let deadline = c
                    .input
                    .as_ref()
                    .ok()
                    .and_then(|p| p.tool.approval_deadline())
                    .or(agent_deadline);
                Approval {
                    call_id: c.id.clone(),
                    tool_name: c.name.clone(),
                    input: c.shown_input.clone(),
                    decision: None,
                    reason: None,
                    expires_at: deadline.map(|d| now + chrono::Duration::seconds(i64::from(d.secs))),
                    on_timeout: deadline.map(|d| d.on_timeout),
                    approve_url: links.iter().find(|l| l.0 == c.id).map(|l| l.1.clone()),
                    deny_url: links.iter().find(|l| l.0 == c.id).map(|l| l.2.clone()),
                }
            })
            .collect();
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
        let others: Vec<PreparedCall> = calls.into_iter().filter(|c| !c.requires_approval()).collect();
        if !others.is_empty() {
            let outcomes = self.execute_tools(&others).await?;
            // A finisher among them ends the ticket here; what waited is dropped with it.
            self.store_results(&others, outcomes, None, &TicketUsage::default())
                .await?;
        }
        self.wait_for_answers().await
    }

    /// The first step of a claim of a ticket with calls that waited for approval: waits again
    /// while some are unanswered; otherwise runs the approved ones and stores every result.
    pub(super) async fn resume_approvals(&self) -> Flow<()> {
        if self.ticket.approvals.iter().any(|a| a.decision.is_none()) {
            return self.wait_for_answers().await;
        }
        let calls: Vec<PreparedCall> = self.ticket.approvals.iter().map(|a| self.answered_call(a)).collect();
        let started: Vec<NewEvent> = calls
            .iter()
            .filter(|c| c.input.is_ok())
            .map(|c| {
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
