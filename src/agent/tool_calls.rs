//! A response's tool calls: prepared (the tool looked up, the input repaired and checked against
//! its schema) and then run concurrently.

use std::time::Instant;

use serde_json::Value;

use super::step_state::Step;
use super::{aborted, Flow};
use crate::domain::Agent;
use crate::llm::ModelResponse;
use crate::telemetry::metric;
use crate::tools::{self, Prepared, ToolContext, ToolFailure, ToolOutcome, ToolRegistry};

/// A tool call as the model made it, with its input repaired and checked.
pub(super) struct PreparedCall {
    pub id: String,
    pub name: String,
    /// The tool and its repaired input (what is run, stored and shown), or why it cannot run.
    pub input: Result<Prepared, ToolFailure>,
    pub shown_input: Value,
}

impl PreparedCall {
    /// Calls whose running writes nothing: reads, finishers (applied at commit), and calls that
    /// do not run at all.
    pub fn writes_nothing(&self) -> bool {
        self.input.as_ref().map_or(true, |p| p.tool.writes_nothing())
    }

    /// A call that waits for a person's approval before it runs.
    pub fn requires_approval(&self) -> bool {
        self.input.as_ref().is_ok_and(|p| p.tool.requires_approval())
    }

    /// A call of the built-in `ask_human`: a question that waits for a person's answer.
    pub fn asks_human(&self) -> bool {
        self.input.as_ref().is_ok_and(|p| p.tool.asks_human())
    }

    /// Waits for a person: its approval, or its answer.
    pub fn waits(&self) -> bool {
        self.requires_approval() || self.asks_human()
    }
}

pub(super) fn prepare(agent: &Agent, tools: &ToolRegistry, response: &ModelResponse) -> Vec<PreparedCall> {
    response
        .tool_calls
        .iter()
        .enumerate()
        .map(|(i, call)| {
            let id = if call.id.is_empty() {
                format!("call_{i}")
            } else {
                call.id.clone()
            };
            let input = tools.prepare(&agent.tools, &call.name, &call.arguments);
            let shown_input = match &input {
                Ok(p) => p.input.clone(),
                Err(_) => tools::repair_json(&call.arguments).0,
            };
            PreparedCall {
                id,
                name: call.name.clone(),
                input,
                shown_input,
            }
        })
        .collect()
}

impl Step<'_> {
    /// Runs the calls concurrently; outcomes keep call order. Cancel aborts them.
    pub(super) async fn execute_tools(&self, calls: &[PreparedCall]) -> Flow<Vec<ToolOutcome>> {
        let runs = calls.iter().map(|call| async {
            let ctx = ToolContext {
                pool: &self.rt.pool,
                fence: self.fence,
                ticket: &self.ticket,
                agent: &self.agent.name,
                call_id: &call.id,
                cancel: self.signals.abort.clone(),
            };
            // A name the agent does not have is the model's invention: one label for all of them.
            let tool = if self.agent.tools.contains(&call.name) {
                call.name.as_str()
            } else {
                "unknown"
            };
            let span = self.span.tool(tool, &call.id);
            let started = Instant::now();
            let outcome = match &call.input {
                Err(failure) => failure.clone().into(),
                Ok(prepared) => prepared.run(&ctx).await,
            };
            let label = match &outcome {
                ToolOutcome::Failed { kind, message } => {
                    span.fail(kind.as_str(), message);
                    kind.as_str()
                }
                ToolOutcome::Output(_) | ToolOutcome::Finish(_) => "ok",
            };
            metric::tool_call(tool, label, started.elapsed());
            span.content(|| {
                let mut attributes = vec![("gen_ai.tool.call.arguments", call.shown_input.to_string())];
                if let ToolOutcome::Output(output) = &outcome {
                    attributes.push(("gen_ai.tool.call.result", output.clone()));
                }
                attributes
            });
            outcome
        });
        tokio::select! {
            biased;
            _ = self.signals.abort.cancelled() => aborted(),
            outcomes = futures::future::join_all(runs) => Ok(outcomes),
        }
    }
}
