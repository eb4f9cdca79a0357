//! Replays with recorded tools: a replay's tool call that equals one of the original ticket's
//! (the same tool, equal arguments as JSON; the n-th such call of the replay matching the n-th of
//! the original) returns the original's result and runs nothing; any other call returns "not in
//! the recording" and logs `tool.replay_mismatch`. `close_ticket` acts on the replay as ever.
//! Nothing outside the desk is called and no approval is asked; the original is only read.

use std::sync::Arc;

use serde_json::Value;

use super::step_state::Step;
use super::tool_calls::PreparedCall;
use super::Flow;
use crate::db;
use crate::domain::ticket::ReplayTools;
use crate::domain::{ContentBlock, EventData, NewEvent};
use crate::tools::canned::Canned;
use crate::tools::{Prepared, ToolErrorKind, ToolFailure, ToolOutcome, CLOSE_TICKET};

/// A call of the original and its result.
struct Recorded {
    name: String,
    input: Value,
    outcome: ToolOutcome,
}

/// The original's calls in order, with their results (a call left without one is not recorded).
fn recording(comments: &[crate::domain::Comment], failures: &[(String, String)]) -> Vec<Recorded> {
    let mut calls: Vec<(String, Recorded)> = vec![];
    let mut results: Vec<(String, ToolOutcome)> = vec![];
    for block in comments.iter().flat_map(|c| &c.content) {
        match block {
            ContentBlock::ToolUse { id, name, input } => calls.push((
                id.clone(),
                Recorded {
                    name: name.clone(),
                    input: input.clone(),
                    outcome: ToolOutcome::Output(String::new()),
                },
            )),
            ContentBlock::ToolResult {
                tool_use_id,
                output,
                is_error,
            } => {
                let outcome = if *is_error {
                    let kind = failures
                        .iter()
                        .find(|(call, _)| call == tool_use_id)
                        .and_then(|(_, kind)| ToolErrorKind::parse(kind))
                        .unwrap_or(ToolErrorKind::Remote);
                    ToolOutcome::Failed {
                        kind,
                        message: output.clone(),
                    }
                } else {
                    ToolOutcome::Output(output.clone())
                };
                results.push((tool_use_id.clone(), outcome));
            }
            _ => {}
        }
    }
    calls
        .into_iter()
        .filter_map(|(id, mut call)| {
            let (_, outcome) = results.iter().find(|(r, _)| *r == id)?;
            call.outcome = outcome.clone();
            Some(call)
        })
        .collect()
}

impl Step<'_> {
    /// A replay's calls, answered from the recording when it replays with recorded tools; the
    /// events of the calls that are not in it.
    pub(super) async fn answer_from_recording(
        &self,
        mut calls: Vec<PreparedCall>,
    ) -> Flow<(Vec<PreparedCall>, Vec<NewEvent>)> {
        let Some(replay) = self.ticket.replay.as_ref().filter(|r| r.tools == ReplayTools::Recorded) else {
            return Ok((calls, vec![]));
        };
        let original = db::comments::all(&self.rt.pool, replay.of).await?;
        let failures = db::events::failed_calls(&self.rt.pool, replay.of).await?;
        let recorded = recording(&original, &failures);
        // The calls this replay made before, each of which used up its match.
        let mine = db::comments::all(&self.rt.pool, self.ticket.id).await?;
        let mut made: Vec<(String, Value)> = mine
            .iter()
            .flat_map(|c| &c.content)
            .filter_map(|b| match b {
                ContentBlock::ToolUse { name, input, .. } => Some((name.clone(), input.clone())),
                _ => None,
            })
            .collect();
        let mut mismatches = vec![];
        for call in calls.iter_mut() {
            if call.name == CLOSE_TICKET {
                continue;
            }
            let before = made
                .iter()
                .filter(|(name, input)| *name == call.name && *input == call.shown_input)
                .count();
            made.push((call.name.clone(), call.shown_input.clone()));
            let matched = recorded
                .iter()
                .filter(|r| r.name == call.name && r.input == call.shown_input)
                .nth(before);
            call.input = match matched {
                Some(r) => Ok(Prepared {
                    tool: Arc::new(Canned::new(&call.name, r.outcome.clone())),
                    input: call.shown_input.clone(),
                }),
                None => {
                    mismatches.push(NewEvent::new(
                        Some(self.name()),
                        EventData::ToolReplayMismatch {
                            call_id: call.id.clone(),
                            tool_name: call.name.clone(),
                        },
                    ));
                    Err(ToolFailure::new(
                        ToolErrorKind::ReplayMismatch,
                        "not in the recording: this replay answers only the calls the original ticket made \
                         (the same tool with equal arguments)",
                    ))
                }
            };
        }
        Ok((calls, mismatches))
    }
}
