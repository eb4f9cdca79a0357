//! Compaction: when a ticket's transcript nears the model's context window, one summariser
//! request (no tools, not retried) condenses it, and the summary replaces every non-system
//! comment in one transaction, except the ticket's task when it is small enough to keep verbatim.
//! When the summariser fails, answers empty or its summary does not fit, `trim` makes room
//! without it.

use sqlx::{Postgres, Transaction};

use super::step_state::Step;
use super::trim::{Announce, Target};
pub use super::window::{
    blocking_threshold, estimate_tokens, keeps_task, reserve, task_comment, trigger, Reason, MAX_RESERVE,
    PROACTIVE_MARGIN,
};
use super::window::{cut_middle, CUT_MARKER_MAX};
use super::{request, Flow};
use crate::db;
use crate::domain::{Author, Comment, ContentBlock, EventData, NewEvent};
use crate::llm::{Delta, Message, ModelRequest, Provider, Role};

const SUMMARISER_PROMPT: &str = "You condense the work on a ticket so that an agent can continue it \
with only your summary. Write a complete, self-contained summary: the task and its requirements, \
what has been done, the results of tool calls that matter (keys, values, names), decisions made, \
what the humans said, open questions, and the next steps. Keep every fact the work depends on; \
leave out chatter. Answer with the summary only.";

const SUMMARISER_OPEN: &str = "<transcript>\n";
const SUMMARISER_CLOSE: &str = "</transcript>\n\nWrite the summary now.";

/// The summariser request, which fits the window: the transcript as text, its middle cut so that
/// the request's estimate stays within `window − reserve`, and `max_tokens` the reserve.
pub fn summariser_request(model: &str, comments: &[Comment], window: u64) -> ModelRequest {
    let mut transcript = String::new();
    for comment in comments.iter().filter(|c| c.author != Author::System) {
        for block in &comment.content {
            let line = match block {
                ContentBlock::Text { text } => format!("[{}] {text}", comment.author.as_str()),
                ContentBlock::ToolUse { name, input, .. } => format!("[assistant called {name}] {input}"),
                ContentBlock::ToolResult { output, is_error, .. } => {
                    format!("[tool {}] {output}", if *is_error { "error" } else { "result" })
                }
                ContentBlock::Thinking { .. } => continue,
            };
            transcript.push_str(&line);
            transcript.push_str("\n\n");
        }
    }
    let input_chars = (blocking_threshold(window) * 4) as usize;
    let overhead = SUMMARISER_PROMPT.len() + SUMMARISER_OPEN.len() + SUMMARISER_CLOSE.len() + CUT_MARKER_MAX;
    let transcript = cut_middle(&transcript, input_chars.saturating_sub(overhead));
    ModelRequest {
        model: model.to_owned(),
        system: SUMMARISER_PROMPT.to_owned(),
        messages: vec![Message {
            role: Role::User,
            content: vec![ContentBlock::text(format!(
                "{SUMMARISER_OPEN}{transcript}{SUMMARISER_CLOSE}"
            ))],
        }],
        tools: vec![],
        temperature: None,
        max_tokens: Some(reserve(window) as u32),
        thinking_budget: None,
        tool_choice: Default::default(),
    }
}

/// The comment that replaces the transcript.
pub fn summary_comment(summary: &str) -> Vec<ContentBlock> {
    vec![ContentBlock::text(format!(
        "Summary of the work on this ticket so far (the earlier transcript was compacted):\n\n{summary}"
    ))]
}

impl Step<'_> {
    /// Summarises the transcript and replaces it. Ok(true) when compacted, Ok(false) when a
    /// proactive compaction failed (the request still fits); a failed blocking or reactive
    /// compaction fails the ticket.
    pub(super) async fn compact(
        &self,
        provider: &dyn Provider,
        window: u64,
        reason: Reason,
        tokens_before: u64,
    ) -> Flow<bool> {
        let name = self.name();
        let comments = db::comments::all(&self.rt.pool, self.ticket.id).await?;
        let summariser = summariser_request(&self.agent.model, &comments, window);
        // Priced and reserved like any request: a summariser that does not fit its budget waits
        // (before `compaction.started`, so that a compaction begun is always seen to end).
        let provider_label = self.agent.provider.as_deref().unwrap_or(provider.name()).to_owned();
        let mut charge = self.charge_for(&provider_label, &summariser).await?;
        let started = EventData::CompactionStarted {
            reason: reason.as_str().into(),
        };
        self.append_events(vec![NewEvent::new(Some(name), started)]).await?;
        // One request, no tools, no retries: a failing summariser is reported, not hammered.
        let mut ignore_deltas = |_: Delta| {};
        // The summariser's request counts against the provider's capacity like any other.
        let slot = self.take_slot(provider).await?;
        let result = tokio::select! {
            biased;
            _ = self.signals.abort.cancelled() => return super::aborted(),
            r = provider.stream(&summariser, &mut ignore_deltas, self.rt.stream_idle) => r,
        };
        drop(slot);
        let result = result.map(|mut response| {
            request::estimate_usage(&summariser, &mut response);
            response
        });
        if let Err(err) = &result {
            self.log_failure(provider, err, "compaction fails");
        }
        // A failed summariser request counts as a request too.
        let usage = match &result {
            Ok(r) => self.priced(&charge, request::ticket_usage(&r.usage, 1, !r.usage_reported), true),
            Err(_) => request::ticket_usage(&Default::default(), 1, false),
        };
        self.record_cost(&provider_label, &usage);
        let thresholds = self.settle(&mut charge, &usage).await?;
        self.append_thresholds(thresholds).await?;
        let outcome = match result {
            Ok(response) if !response.text.trim().is_empty() => Ok(response.text),
            Ok(_) => Err("the summariser returned an empty summary".to_owned()),
            Err(err) => Err(format!("{}: {}", err.kind.as_str(), err.message)),
        };
        let mut tx = self.fenced(&usage).await?;
        let threshold = blocking_threshold(window);
        // One `compaction.started`, then one `compaction.finished` or `compaction.failed`: when
        // the summary does not fit, or the summariser gave none, the compaction goes on without
        // it, and that part says how it ended.
        let why = match outcome {
            Ok(summary) => {
                // Only what the summariser saw is replaced: a comment written meanwhile stays.
                let summarised = comments.iter().map(|c| c.seq).max().unwrap_or(0);
                // A small task stays verbatim, ahead of the summary (a summariser may invent one).
                let task = self.ticket.task_text();
                let kept = task_comment(&comments, &task)
                    .filter(|_| keeps_task(task.len(), window))
                    .map(|c| c.seq);
                db::comments::delete_non_system(&mut tx, self.ticket.id, summarised, kept).await?;
                let content = summary_comment(&summary);
                let after = self
                    .append_compacted(&mut tx, &content, reason, tokens_before, Some(threshold))
                    .await?;
                tx.commit().await?;
                self.rt.hub.wake();
                if after < threshold {
                    return Ok(true);
                }
                format!("the summary did not fit: about {after} tokens for a limit of {threshold}")
            }
            Err(message) if reason == Reason::Proactive => {
                // The request still fits: go on as it is.
                let failed = EventData::CompactionFailed {
                    reason: reason.as_str().into(),
                    message,
                };
                db::events::append(&mut tx, self.ticket.id, &[NewEvent::new(Some(name), failed)]).await?;
                tx.commit().await?;
                self.rt.hub.wake();
                return Ok(false);
            }
            Err(message) => {
                tx.commit().await?;
                format!("the summariser failed: {message}")
            }
        };
        // The request does not fit: make room without the summariser.
        let target = Target::Tokens(threshold);
        self.trim_transcript(window, target, reason, &why, tokens_before, Announce::No)
            .await?;
        Ok(true)
    }

    /// The end of a compaction's change, inside its fenced transaction: `content` is appended to
    /// the transcript with its `comment.created`, and `compaction.finished` (with the estimate of
    /// what the next request holds) with it, unless that estimate is not below `finish_below`
    /// (the compaction goes on). The events never describe a transcript that was not committed.
    /// Returns the estimate.
    pub(super) async fn append_compacted(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        content: &[ContentBlock],
        reason: Reason,
        tokens_before: u64,
        finish_below: Option<u64>,
    ) -> Flow<u64> {
        let name = self.name();
        let comment = db::comments::insert(tx, self.ticket.id, Author::User, None, content).await?;
        let kept = db::comments::all(&mut **tx, self.ticket.id).await?;
        let tokens_after = estimate_tokens(&request::build(&self.agent, &self.tools, &self.ticket, &kept));
        let mut events = vec![NewEvent::new(Some(name), EventData::CommentCreated { comment })];
        if finish_below.is_none_or(|limit| tokens_after < limit) {
            let finished = EventData::CompactionFinished {
                reason: reason.as_str().into(),
                tokens_before,
                tokens_after,
            };
            events.push(NewEvent::new(Some(name), finished));
        }
        db::events::append(tx, self.ticket.id, &events).await?;
        Ok(tokens_after)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::window::*;
    use serde_json::json;

    #[test]
    fn json_len_is_the_length_of_the_compact_text() {
        let value = json!({"a": [1, "two", null, {"é": "\"quoted\"\n"}], "b": 2.5, "c": true});
        assert_eq!(json_len(&value), value.to_string().len());
        assert_eq!(json_len(&json!(null)), 4);
    }

    #[test]
    fn triggers_follow_the_window() {
        // A 4096 window keeps 1024 free (not 3000): it blocks at 3072.
        assert_eq!(trigger(1_097, 4_096, false), None);
        assert_eq!(trigger(3_072, 4_096, false), Some(Reason::Blocking));
        assert_eq!(
            trigger(1_000, 4_096, true),
            None,
            "no proactive margin in a small window"
        );
        assert_eq!(
            trigger(100_000, 128_000, false),
            None,
            "proactive only after a first response"
        );
        assert_eq!(trigger(100_000, 128_000, true), Some(Reason::Proactive));
        assert_eq!(trigger(125_000, 128_000, false), Some(Reason::Blocking));
    }

    #[test]
    fn the_reserve_is_3000_or_a_quarter_of_a_small_window() {
        assert_eq!((reserve(2_048), blocking_threshold(2_048)), (512, 1_536));
        assert_eq!((reserve(4_096), blocking_threshold(4_096)), (1_024, 3_072));
        assert_eq!((reserve(12_000), blocking_threshold(12_000)), (3_000, 9_000));
        assert_eq!((reserve(128_000), blocking_threshold(128_000)), (3_000, 125_000));
        assert_eq!(
            trigger(1_535, 2_048, true),
            None,
            "no proactive margin in a small window"
        );
        assert_eq!(trigger(1_536, 2_048, false), Some(Reason::Blocking));
        assert_eq!(trigger(0, 0, false), Some(Reason::Blocking));
    }

    fn comment(seq: i64, author: Author, text: &str) -> Comment {
        Comment {
            id: uuid::Uuid::nil(),
            ticket_id: uuid::Uuid::nil(),
            seq,
            author,
            agent: None,
            content: vec![ContentBlock::text(text)],
            created_at: chrono::Utc::now(),
        }
    }

    #[test]
    fn the_summariser_request_fits_small_windows() {
        let long = "word ".repeat(20_000);
        let comments = [
            comment(1, Author::User, "Say hi."),
            comment(2, Author::Assistant, &long),
            comment(3, Author::User, &long),
        ];
        for window in [2_048u64, 4_096, 200_000] {
            let request = summariser_request("m", &comments, window);
            assert_eq!(request.max_tokens, Some(reserve(window) as u32), "{window}");
            let estimated = estimate_tokens(&request);
            assert!(estimated <= blocking_threshold(window), "{window}: {estimated}");
            let ContentBlock::Text { text } = &request.messages[0].content[0] else {
                panic!("the summariser gets text");
            };
            assert!(text.starts_with("<transcript>\n[user] Say hi."), "{window}");
            assert!(text.ends_with("Write the summary now."), "{window}");
            if window < 200_000 {
                assert!(text.contains("left out"), "{window}");
            }
        }
    }

    #[test]
    fn a_task_is_kept_when_it_takes_at_most_a_quarter_of_the_window() {
        // 2048 / 4 = 512 tokens, about 2048 characters.
        assert!(keeps_task(2_048, 2_048));
        assert!(!keeps_task(2_049, 2_048));
        assert!(keeps_task(4_096, 4_096));
        assert!(!keeps_task(4_100, 4_096));
        let comments = [comment(1, Author::User, "Say hi."), comment(2, Author::Assistant, "hi")];
        assert_eq!(task_comment(&comments, "Say hi.").map(|c| c.seq), Some(1));
        assert!(task_comment(&comments, "another task").is_none());
        // After a summary replaced the task, the first user comment is the summary.
        let summarised = [
            comment(5, Author::User, "Summary of the work …"),
            comment(6, Author::System, "Say hi."),
        ];
        assert!(task_comment(&summarised, "Say hi.").is_none());
    }

    #[test]
    fn the_middle_of_an_oversized_transcript_is_cut_on_char_boundaries() {
        let text = "é".repeat(10_000);
        let cut = cut_middle(&text, 1_001);
        assert!(cut.len() < 1_200);
        assert!(cut.contains("left out"));
    }

    #[test]
    fn the_task_comment_is_found_after_earlier_human_comments() {
        let comment = |seq: i64, text: &str| Comment {
            id: uuid::Uuid::nil(),
            ticket_id: uuid::Uuid::nil(),
            seq,
            author: Author::User,
            agent: None,
            content: vec![ContentBlock::text(text)],
            created_at: chrono::Utc::now(),
        };
        let comments = [comment(1, "a note posted before the claim"), comment(2, "the task")];
        assert_eq!(task_comment(&comments, "the task").map(|c| c.seq), Some(2));
        assert!(task_comment(&comments[..1], "the task").is_none());
    }
}
