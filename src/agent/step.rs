//! One step of the loop, top-down: check the ticket and the agent's limits, build the request
//! (compacting first when it nears the window), call the model, then either settle a text reply
//! or run the tool calls and store their results.

use std::sync::Arc;

use super::compaction::{self, Reason};
use super::model_call::ModelOutcome;
use super::persist::{self, ResponseRecord};
use super::step_state::Step;
use super::tool_calls::{self, PreparedCall};
use super::trim::{Announce, Target};
use super::{aborted, request, Flow, Runtime, Signals, Streaks};
use crate::db;
use crate::db::claims::{FirstRead, Holder};
use crate::domain::provider::BUILTIN_PROVIDERS;
use crate::domain::{Comment, EventData, FailureKind, NewEvent, Status, TicketUsage};
use crate::llm::{self, LlmError, LlmErrorKind, ModelRequest, ModelResponse, Provider, StopReason};
use crate::telemetry::trace::AgentSpan;

/// Runs one step of a claimed ticket. `first`: what a new claim read, which its first step works
/// from instead of reading it again.
pub(super) async fn run(
    rt: &Runtime,
    claim: &Holder,
    first: Option<Box<FirstRead>>,
    signals: &Signals,
    streaks: &Streaks,
    span: &AgentSpan,
) -> Flow<()> {
    let fence = claim.fence;
    let agent_name = claim.agent.as_str();
    let (state, first) = match first.map(|first| *first) {
        Some(FirstRead {
            ticket,
            definition,
            transcript,
        }) => (Some((ticket, fence.generation)), Some((definition, transcript))),
        None => (db::claims::loop_state(&rt.pool, fence.ticket_id).await?, None),
    };
    let Some((ticket, generation)) = state else {
        return aborted();
    };
    if generation != fence.generation || ticket.status != Status::InProgress {
        return aborted();
    }
    let (claimed_definition, transcript) = first.unzip();
    let definition = match (claimed_definition, ticket.agent_version) {
        (Some(Some(agent)), _) => Some(agent),
        // A pinned ticket runs its version of the agent on every step.
        (_, Some(version)) if ticket.version_pinned => {
            db::agents::version(&rt.pool, ticket.project, agent_name, version).await?
        }
        _ => db::agents::get(&rt.pool, ticket.project, agent_name).await?,
    };
    // A replay runs with the provider and model it was given instead of its agent's.
    let definition = definition.map(|mut agent| {
        if let Some(replay) = &ticket.replay {
            if let Some(model) = &replay.model {
                agent.model = model.clone();
            }
            if let Some(provider) = &replay.provider {
                agent.provider = Some(provider.clone());
            }
        }
        agent
    });
    let Some(agent) = definition else {
        let message = format!("agent {agent_name:?} no longer exists");
        let usage = TicketUsage::default();
        return Box::pin(persist::fail(
            rt,
            fence,
            agent_name,
            (FailureKind::AgentMissing, &message),
            vec![],
            &usage,
        ))
        .await;
    };
    // As the claim wrote it: a comment posted since is seen by the next request, as one posted
    // during this request would be.
    let transcript = transcript.flatten();
    let step_tools = rt.catalog.for_agent(&rt.pool, ticket.project, &agent.tools).await?;
    let (tools, mut agent) = (step_tools.registry, agent);
    if let Some(offered) = step_tools.offered {
        agent.tools = offered;
    }
    let step = Step {
        rt,
        fence,
        agent,
        ticket,
        tools,
        signals,
        streaks,
        failed_usage: Default::default(),
        span,
        charged: Default::default(),
    };
    let outcome = step.work(transcript).await;
    if matches!(outcome, Err(super::Stop::End(super::RunEnd::Aborted))) {
        Box::pin(step.keep_failed_requests()).await?;
    }
    outcome
}

impl Step<'_> {
    pub fn name(&self) -> &str {
        &self.agent.name
    }

    async fn work(&self, transcript: Option<Vec<Comment>>) -> Flow<()> {
        if !self.ticket.approvals.is_empty() {
            // The last step's calls that waited for a person: wait on, or run them now.
            return Box::pin(self.resume_approvals()).await;
        }
        if let Some((policy, limit)) = request::policy_violation(&self.agent, &self.ticket) {
            let event = NewEvent::new(
                Some(self.name()),
                EventData::PolicyViolated {
                    kind: policy.as_str().into(),
                    limit,
                },
            );
            let message = format!("the ticket reached the agent's {policy} limit ({limit}) before it was closed");
            return Box::pin(self.fail(policy, &message, vec![event])).await;
        }
        let provider = match self.provider().await? {
            Ok(p) => p,
            Err(err) => {
                // No request was made, so `log_failure` never sees it: the operator's one line.
                tracing::warn!(
                    ticket = %self.ticket.key,
                    agent = %self.agent.name,
                    kind = %err.kind.as_str(),
                    "{}; the ticket fails",
                    err.message
                );
                return Box::pin(self.fail_request(err.kind.into(), &err.message)).await;
            }
        };
        let window = self.window();
        // The transcript is dropped once the request is built: not held while the model thinks.
        let mut request = {
            let transcript = match transcript {
                Some(transcript) => transcript,
                None => db::comments::all(&self.rt.pool, self.ticket.id).await?,
            };
            request::build(&self.agent, &self.tools, &self.ticket, &transcript)
        };
        let compacted = match window {
            Some(window) => Box::pin(self.compact_before_request(provider.as_ref(), window, &mut request)).await?,
            None => false,
        };
        let response = match self.call_model(provider.as_ref(), &request).await? {
            ModelOutcome::Response(r) => r,
            ModelOutcome::Overflow(err) => {
                Box::pin(self.recover_from_overflow(provider.as_ref(), window, compacted, request, err)).await?
            }
        };
        // Boxed, as the other paths around the model call: a task's future is as large as its
        // largest state, and each ticket waiting on its model holds one, so what runs before or
        // after the call is allocated only while it runs (BENCHMARKS.md, round 25).
        Box::pin(self.act_on(response)).await
    }

    /// The model's context window: the agent's setting, else the model's known one.
    fn window(&self) -> Option<u64> {
        self.agent
            .context_window
            .map(|w| w as u64)
            .or_else(|| llm::known_context_window(&self.agent.model).map(u64::from))
    }

    /// A named provider's key in this process (its clients, its slots): its name, after its
    /// project's id outside `default` (two projects may each name a provider `local`).
    pub(super) fn provider_key(&self, name: &str) -> String {
        if self.ticket.project == crate::domain::ProjectId::DEFAULT || BUILTIN_PROVIDERS.contains(&name) {
            name.to_owned()
        } else {
            format!("{}/{name}", self.ticket.project)
        }
    }

    /// The agent's provider: a built-in one, or a named one as its definition reads now (a change
    /// through the API takes effect with the next request, in every process).
    async fn provider(&self) -> Flow<Result<Arc<dyn Provider>, LlmError>> {
        let name = match self.agent.provider.as_deref() {
            None => None,
            Some(name) if BUILTIN_PROVIDERS.contains(&name) => Some(name),
            Some(name) => {
                return Ok(
                    match db::providers::get(&self.rt.pool, self.ticket.project, name).await? {
                        Some(def) => Ok(self.rt.providers.named(&self.provider_key(name), &(&def).into())),
                        None => Err(LlmError::new(
                            LlmErrorKind::ProviderUnconfigured,
                            format!("unknown provider '{name}': define it with PUT /v1/providers/{name}"),
                        )),
                    },
                )
            }
        };
        Ok(self.rt.providers.get(name))
    }

    /// Compacts the transcript when the request nears the window (see `compaction::trigger`) and
    /// rebuilds the request; true when it was compacted. A request still too large afterwards
    /// fails the ticket.
    async fn compact_before_request(
        &self,
        provider: &dyn Provider,
        window: u64,
        request: &mut ModelRequest,
    ) -> Flow<bool> {
        let estimated = compaction::estimate_tokens(request);
        let Some(reason) = compaction::trigger(estimated, window, self.ticket.usage.requests > 0) else {
            return Ok(false);
        };
        if reason == Reason::Blocking {
            let data = EventData::ContextLimitExceeded {
                estimated_tokens: estimated,
                threshold_tokens: compaction::blocking_threshold(window),
            };
            self.append_events(vec![NewEvent::new(Some(self.name()), data)]).await?;
        }
        // A summary that does not fit is trimmed within the compaction.
        let compacted = self.compact(provider, window, reason, estimated).await?;
        *request = self.rebuild_request().await?;
        if compaction::estimate_tokens(request) >= compaction::blocking_threshold(window) {
            return self
                .fail(FailureKind::ContextWindowExceeded, persist::STILL_TOO_LARGE, vec![])
                .await;
        }
        Ok(compacted)
    }

    /// Reactive compaction: the provider says the context is full (its tokens are not our
    /// estimate's). Compact and try again; while it still overflows, make room without the
    /// summariser, a third smaller each time, a few times before the ticket fails.
    async fn recover_from_overflow(
        &self,
        provider: &dyn Provider,
        window: Option<u64>,
        compacted: bool,
        mut request: ModelRequest,
        mut err: LlmError,
    ) -> Flow<ModelResponse> {
        /// Rounds of making room after the provider reported a full window.
        const ROUNDS: u32 = 3;
        let Some(window) = window else {
            return self.overflow_failure(&err, compacted).await;
        };
        for round in 0..ROUNDS {
            let estimated = compaction::estimate_tokens(&request);
            if round == 0 && !compacted {
                self.compact(provider, window, Reason::Reactive, estimated).await?;
            } else {
                let why = format!("the model server reported a full context window: {}", err.message);
                let shrunk = self
                    .trim_transcript(
                        window,
                        Target::ShrinkByAThird,
                        Reason::Reactive,
                        &why,
                        estimated,
                        Announce::Yes,
                    )
                    .await?;
                if !shrunk {
                    // Only the task, the role and the tools are left.
                    break;
                }
            }
            request = self.rebuild_request().await?;
            match self.call_model(provider, &request).await? {
                ModelOutcome::Response(r) => return Ok(r),
                ModelOutcome::Overflow(again) => err = again,
            }
        }
        self.overflow_failure(&err, true).await
    }

    async fn rebuild_request(&self) -> Flow<ModelRequest> {
        let comments = db::comments::all(&self.rt.pool, self.ticket.id).await?;
        Ok(request::build(&self.agent, &self.tools, &self.ticket, &comments))
    }

    async fn overflow_failure<T>(&self, err: &LlmError, after_compaction: bool) -> Flow<T> {
        let message = if after_compaction {
            let task_tokens = (self.ticket.task_text().len() as u64).div_ceil(4);
            let window = self.window().map_or_else(|| "unknown".to_owned(), |w| w.to_string());
            format!(
                "{} (the task is about {task_tokens} tokens, the context window {window}): {}",
                persist::STILL_TOO_LARGE,
                err.message
            )
        } else {
            err.message.clone()
        };
        self.fail_request(err.kind.into(), &message).await
    }

    /// A text reply settles the step; tool calls run, and their results are stored.
    async fn act_on(&self, response: ModelResponse) -> Flow<()> {
        let calls = tool_calls::prepare(&self.agent, &self.tools, &response);
        let (calls, mismatches) = self.answer_from_recording(calls).await?;
        let mut record = ResponseRecord::of(&self.agent, &response, &calls, self.take_charged());
        record.notes = mismatches;
        record.usage = self.with_failed_requests(record.usage);
        if calls.is_empty() && response.stop_reason == StopReason::MaxTokens {
            return self.continue_truncated_reply(record).await;
        }
        self.streaks.truncated.take();
        if calls.is_empty() {
            return self.settle_text_reply(record).await;
        }
        let tool_usage = TicketUsage {
            tool_calls: calls.len() as i64,
            ..TicketUsage::default()
        };
        if calls.iter().any(|c| c.requires_approval() || c.asks_human()) {
            return self.hold_for_people(record, calls, tool_usage).await;
        }
        self.run_calls(record, calls, tool_usage).await
    }

    /// Runs a response's calls (none waits for a person) and stores it with their results.
    pub(super) async fn run_calls(
        &self,
        record: ResponseRecord,
        calls: Vec<PreparedCall>,
        tool_usage: TicketUsage,
    ) -> Flow<()> {
        if calls.iter().all(PreparedCall::writes_nothing) {
            // Nothing these calls do writes (finishers apply at commit): run them first, then
            // store the response, the results and the outcome in one transaction. A crash before
            // the commit leaves no trace, exactly like a crash during the model call.
            let outcomes = self.execute_tools(&calls).await?;
            let usage = record.usage.plus(&tool_usage);
            return self.store_results(&calls, outcomes, Some(record), &usage).await;
        }
        // Tools with side effects: the response and `tool.started` are stored before they run.
        let usage = record.usage;
        let write = self.response_write(record, usage);
        if !self.rt.steps.store(write).await? {
            return aborted();
        }
        self.rt.hub.wake();
        let outcomes = self.execute_tools(&calls).await?;
        self.store_results(&calls, outcomes, None, &tool_usage).await
    }
}
