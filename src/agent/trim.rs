//! Compaction without the summariser: when it fails, answers empty, or its summary does not fit,
//! the transcript is made to fit by keeping the task (as the compaction rule says) and the latest
//! comments, cutting the middle of the comment where the room runs out and leaving out everything
//! older, with a note saying what was left out. `plan` decides without the database, so the
//! rules are tested alone; `Step::trim_transcript` stores the plan.

use super::step_state::Step;
use super::window::{block_chars, cut_middle, estimate_tokens, keeps_task, task_comment, Reason, CUT_MARKER_MAX};
use super::{request, Flow};
use crate::db;
use crate::domain::{Author, Comment, ContentBlock, EventData, FailureKind, NewEvent, TicketUsage};

/// Tokens kept for the note that says what was left out.
const NOTE_TOKENS: u64 = 120;
/// A comment cut to less than this many tokens is left out instead: its head and tail would say
/// nothing.
const MIN_CUT_TOKENS: u64 = 64;

/// What to change in the transcript.
#[derive(Debug, PartialEq)]
pub struct Trim {
    /// Comments (by seq) left out.
    pub delete: Vec<i64>,
    /// Comments (by seq) whose content is cut to this.
    pub rewrite: Vec<(i64, Vec<ContentBlock>)>,
    /// The note appended to the transcript.
    pub note: String,
}

/// The task alone leaves no room: the request's fixed part (instructions, tools) and the task
/// reach the window's limit.
#[derive(Debug, PartialEq)]
pub struct TaskTooLarge {
    pub task_tokens: u64,
    pub fixed_tokens: u64,
    pub window: u64,
}

impl TaskTooLarge {
    /// The ticket's error message: the sizes in plain digits.
    pub fn message(&self) -> String {
        format!(
            "the ticket's task alone leaves no room in the context window: the task is about {} tokens, \
             the instructions and tools about {}, and the window holds {} tokens with room kept for the reply",
            self.task_tokens, self.fixed_tokens, self.window
        )
    }
}

/// What the plan starts from.
pub struct Transcript<'a> {
    pub comments: &'a [Comment],
    /// The ticket's task, and the seq of the comment that holds it verbatim (None once a summary
    /// replaced it).
    pub task: &'a str,
    pub task_seq: Option<i64>,
    /// The estimated tokens of the request without its messages (system prompt and tools).
    pub fixed_tokens: u64,
    pub window: u64,
}

/// How much room to make.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// The whole request within this many estimated tokens.
    Tokens(u64),
    /// A third less of what can be left out or cut: the provider counts tokens its own way and
    /// still reported a full window.
    ShrinkByAThird,
}

/// Plans a transcript whose request stays within `target`. `why` says why the summariser was
/// not used, for the note.
pub fn plan(t: &Transcript<'_>, target: Target, why: &str) -> Result<Trim, TaskTooLarge> {
    let tokens = |chars: usize| (chars as u64).div_ceil(4);
    let comment_tokens = |c: &Comment| tokens(c.content.iter().map(block_chars).sum());
    let system: u64 = t
        .comments
        .iter()
        .filter(|c| c.author == Author::System)
        .map(comment_tokens)
        .sum();
    let mut rewrite = Vec::new();
    // The task: whole when it is small enough, else its middle cut to a quarter of the window.
    let task_comment = t.task_seq.and_then(|seq| t.comments.iter().find(|c| c.seq == seq));
    let task_tokens = match task_comment {
        Some(_) if keeps_task(t.task.len(), t.window) => tokens(t.task.len()),
        Some(c) => {
            let cut = cut_middle(t.task, (t.window / 4 * 4) as usize);
            let cut_tokens = tokens(cut.len());
            rewrite.push((c.seq, vec![ContentBlock::text(cut)]));
            cut_tokens
        }
        None => 0,
    };
    let fixed = t.fixed_tokens + system + NOTE_TOKENS;
    let candidates: Vec<&Comment> = t
        .comments
        .iter()
        .filter(|c| c.author != Author::System && Some(c.seq) != t.task_seq)
        .collect();
    let room = match target {
        Target::Tokens(target) => target.checked_sub(fixed + task_tokens).filter(|r| *r > 0),
        Target::ShrinkByAThird => Some(candidates.iter().map(|c| comment_tokens(c)).sum::<u64>() * 2 / 3),
    };
    let Some(mut room) = room else {
        return Err(TaskTooLarge {
            task_tokens: tokens(t.task.len()),
            fixed_tokens: t.fixed_tokens + system,
            window: t.window,
        });
    };
    // The newest comments first, whole while they fit; the one where the room runs out is cut,
    // and everything older is left out.
    let mut kept = candidates.len();
    let mut cut = 0;
    for (i, comment) in candidates.iter().enumerate().rev() {
        let cost = comment_tokens(comment);
        if cost <= room {
            room -= cost;
            kept = i;
            continue;
        }
        if let Some(content) = cut_to_fit(&comment.content, room) {
            rewrite.push((comment.seq, content));
            kept = i;
            cut += 1;
        }
        break;
    }
    let delete: Vec<i64> = candidates[..kept].iter().map(|c| c.seq).collect();
    let task_cut = task_comment.is_some() && !keeps_task(t.task.len(), t.window);
    let note = note(delete.len(), cut, task_cut, t.window, why);
    Ok(Trim { delete, rewrite, note })
}

/// `content` cut to about `room` tokens: the middle of each text and tool output shortened in
/// proportion; thinking is left out (its signature covers the whole). None when what cannot be
/// cut (tool call inputs) does not fit, or too little would be left.
fn cut_to_fit(content: &[ContentBlock], room: u64) -> Option<Vec<ContentBlock>> {
    if room < MIN_CUT_TOKENS {
        return None;
    }
    let budget = room as usize * 4;
    let cuttable = |b: &ContentBlock| matches!(b, ContentBlock::Text { .. } | ContentBlock::ToolResult { .. });
    let fixed: usize = content
        .iter()
        .filter(|b| !cuttable(b) && !matches!(b, ContentBlock::Thinking { .. }))
        .map(block_chars)
        .sum();
    let parts = content.iter().filter(|b| cuttable(b)).count();
    let total: usize = content.iter().filter(|b| cuttable(b)).map(block_chars).sum();
    let left = budget.checked_sub(fixed + parts * CUT_MARKER_MAX)?;
    if total == 0 || left < MIN_CUT_TOKENS as usize * 4 {
        return None;
    }
    let share = |len: usize| ((len as u128 * left as u128) / total as u128) as usize;
    let out = content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text { text } => Some(ContentBlock::text(cut_middle(text, share(text.len())))),
            ContentBlock::ToolResult {
                tool_use_id,
                output,
                is_error,
            } => Some(ContentBlock::ToolResult {
                tool_use_id: tool_use_id.clone(),
                output: cut_middle(output, share(output.len())),
                is_error: *is_error,
            }),
            ContentBlock::Thinking { .. } => None,
            other => Some(other.clone()),
        })
        .collect();
    Some(out)
}

fn note(dropped: usize, cut: usize, task_cut: bool, window: u64, why: &str) -> String {
    let mut parts = Vec::new();
    if dropped > 0 {
        let plural = if dropped == 1 { "" } else { "s" };
        parts.push(format!("the {dropped} oldest comment{plural} left out"));
    }
    if cut > 0 {
        parts.push("the middle of the oldest comment kept cut".to_owned());
    }
    if task_cut {
        parts.push("the middle of the task cut".to_owned());
    }
    let what = if parts.is_empty() {
        "nothing had to be left out".to_owned()
    } else {
        parts.join("; ")
    };
    format!(
        "Note: the transcript of this ticket was shortened to fit the model's {window}-token context window \
         without a summary ({why}): {what}. Continue the task with what is above."
    )
}

/// Whether a compaction without the summariser begins with its own `compaction.started` (it
/// is a compaction of its own), or goes on with one that already started.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Announce {
    Yes,
    No,
}

impl Step<'_> {
    /// Makes the transcript fit `target` estimated tokens without the summariser (see `plan`),
    /// in one fenced transaction: the comments left out are deleted, the cut ones rewritten, and
    /// the note appended, with `comment.created` and `compaction.finished` (after a
    /// `compaction.started` of its own when `announce` says so). A task that alone leaves no room
    /// fails the ticket with `context_window_exceeded`.
    /// Ok(false) when there was nothing to leave out or cut (a compaction that had started then
    /// ends with `compaction.failed`).
    pub(super) async fn trim_transcript(
        &self,
        window: u64,
        target: Target,
        reason: Reason,
        why: &str,
        tokens_before: u64,
        announce: Announce,
    ) -> Flow<bool> {
        let name = self.name();
        let comments = db::comments::all(&self.rt.pool, self.ticket.id).await?;
        let task = self.ticket.task_text();
        let fixed_tokens = estimate_tokens(&request::build(&self.agent, &self.tools, &self.ticket, &[]));
        let transcript = Transcript {
            comments: &comments,
            task: &task,
            task_seq: task_comment(&comments, &task).map(|c| c.seq),
            fixed_tokens,
            window,
        };
        let failed = |message: String| {
            let data = EventData::CompactionFailed {
                reason: reason.as_str().into(),
                message,
            };
            NewEvent::new(Some(name), data)
        };
        let trim = match plan(&transcript, target, why) {
            Ok(trim) => trim,
            Err(too_large) => {
                let message = too_large.message();
                let events = match announce {
                    Announce::No => vec![failed(message.clone())],
                    Announce::Yes => vec![],
                };
                return self.fail(FailureKind::ContextWindowExceeded, &message, events).await;
            }
        };
        if trim.delete.is_empty() && trim.rewrite.is_empty() {
            if announce == Announce::No {
                let message = format!("{why}; nothing is left to leave out or cut");
                self.append_events(vec![failed(message)]).await?;
            }
            return Ok(false);
        }
        tracing::warn!(
            ticket = %self.ticket.key,
            agent = %name,
            left_out = trim.delete.len(),
            cut = trim.rewrite.len(),
            "compacted without a summary: {why}"
        );
        // One transaction under the claim's fence: the transcript is never seen half trimmed, and
        // a worker that lost its claim changes nothing.
        let mut tx = self.fenced(&TicketUsage::default()).await?;
        if announce == Announce::Yes {
            let started = EventData::CompactionStarted {
                reason: reason.as_str().into(),
            };
            db::events::append(&mut tx, self.ticket.id, &[NewEvent::new(Some(name), started)]).await?;
        }
        db::comments::delete_seqs(&mut tx, self.ticket.id, &trim.delete).await?;
        for (seq, content) in &trim.rewrite {
            db::comments::rewrite(&mut tx, self.ticket.id, *seq, content).await?;
        }
        let note = [ContentBlock::text(trim.note)];
        self.append_compacted(&mut tx, &note, reason, tokens_before, None)
            .await?;
        tx.commit().await?;
        self.rt.hub.wake();
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn comment(seq: i64, author: Author, content: Vec<ContentBlock>) -> Comment {
        Comment {
            id: uuid::Uuid::nil(),
            ticket_id: uuid::Uuid::nil(),
            seq,
            author,
            agent: None,
            content,
            created_at: chrono::Utc::now(),
        }
    }

    fn text(seq: i64, author: Author, chars: usize) -> Comment {
        comment(seq, author, vec![ContentBlock::text("x".repeat(chars))])
    }

    fn result(seq: i64, chars: usize) -> Comment {
        comment(
            seq,
            Author::User,
            vec![ContentBlock::ToolResult {
                tool_use_id: format!("c{seq}"),
                output: "y".repeat(chars),
                is_error: false,
            }],
        )
    }

    fn call(seq: i64) -> Comment {
        comment(
            seq,
            Author::Assistant,
            vec![ContentBlock::ToolUse {
                id: format!("c{}", seq + 1),
                name: "fetch".into(),
                input: serde_json::json!({"url": "http://example.com"}),
            }],
        )
    }

    /// The estimated tokens of what the plan keeps.
    fn kept_tokens(comments: &[Comment], trim: &Trim) -> u64 {
        comments
            .iter()
            .filter(|c| !trim.delete.contains(&c.seq))
            .map(|c| {
                let content = trim
                    .rewrite
                    .iter()
                    .find(|(seq, _)| *seq == c.seq)
                    .map_or(&c.content, |(_, content)| content);
                content.iter().map(block_chars).sum::<usize>() as u64 / 4
            })
            .sum()
    }

    #[test]
    fn the_task_and_the_latest_turns_are_kept_and_the_oldest_left_out() {
        let task = "Summarise the report.";
        let comments = vec![
            comment(1, Author::User, vec![ContentBlock::text(task)]),
            call(2),
            result(3, 20_000),
            call(4),
            result(5, 400),
            text(6, Author::Assistant, 200),
        ];
        let t = Transcript {
            comments: &comments,
            task,
            task_seq: Some(1),
            fixed_tokens: 300,
            window: 2_048,
        };
        let trim = plan(&t, Target::Tokens(1_536), "the summariser answered empty").unwrap();
        assert!(!trim.delete.contains(&1), "the task stays");
        assert!(trim.delete.contains(&2), "{trim:?}");
        for seq in [4, 5, 6] {
            assert!(!trim.delete.contains(&seq), "{seq}: {trim:?}");
        }
        // The 20 000-character output is where the room runs out: its middle is cut.
        let (seq, content) = &trim.rewrite[0];
        assert_eq!(*seq, 3);
        let ContentBlock::ToolResult {
            output, tool_use_id, ..
        } = &content[0]
        else {
            panic!("{content:?}")
        };
        assert_eq!(tool_use_id, "c3");
        assert!(output.contains("left out") && output.len() < 20_000, "{}", output.len());
        assert!(kept_tokens(&comments, &trim) + 300 + NOTE_TOKENS <= 1_536);
        assert!(trim.note.contains("2048-token"), "{}", trim.note);
        assert!(trim.note.contains("the summariser answered empty"), "{}", trim.note);
        assert!(trim.note.contains("the 1 oldest comment left out"), "{}", trim.note);
    }

    #[test]
    fn a_long_task_is_cut_to_a_quarter_of_the_window() {
        let task = "t".repeat(6_000);
        let comments = vec![
            comment(1, Author::User, vec![ContentBlock::text(&task)]),
            text(2, Author::Assistant, 100),
        ];
        let t = Transcript {
            comments: &comments,
            task: &task,
            task_seq: Some(1),
            fixed_tokens: 100,
            window: 2_048,
        };
        let trim = plan(&t, Target::Tokens(1_536), "why").unwrap();
        let (seq, content) = &trim.rewrite[0];
        assert_eq!(*seq, 1);
        assert!(block_chars(&content[0]) <= 2_048 + CUT_MARKER_MAX);
        assert!(trim.delete.is_empty());
        assert!(trim.note.contains("the middle of the task cut"), "{}", trim.note);
    }

    #[test]
    fn a_task_that_alone_leaves_no_room_is_an_error_naming_the_sizes() {
        let task = "t".repeat(2_000);
        let comments = vec![comment(1, Author::User, vec![ContentBlock::text(&task)])];
        let t = Transcript {
            comments: &comments,
            task: &task,
            task_seq: Some(1),
            fixed_tokens: 1_200,
            window: 2_048,
        };
        let err = plan(&t, Target::Tokens(1_536), "why").unwrap_err();
        assert_eq!(
            err,
            TaskTooLarge {
                task_tokens: 500,
                fixed_tokens: 1_200,
                window: 2_048
            }
        );
        let message = err.message();
        assert!(
            message.contains("about 500 tokens") && message.contains("holds 2048 tokens"),
            "{message}"
        );
    }

    #[test]
    fn a_comment_that_cannot_be_cut_usefully_is_left_out() {
        let task = "task";
        let comments = vec![
            comment(1, Author::User, vec![ContentBlock::text(task)]),
            text(2, Author::Assistant, 4_000),
            text(3, Author::Assistant, 1_600),
        ];
        let t = Transcript {
            comments: &comments,
            task,
            task_seq: Some(1),
            fixed_tokens: 0,
            // Room: 1000 − 120 (note) − 1 (task) = 879; the newest takes 400, leaving 479.
            window: 4_000,
        };
        let trim = plan(&t, Target::Tokens(1_000), "why").unwrap();
        assert_eq!(trim.rewrite.len(), 1);
        assert_eq!(trim.rewrite[0].0, 2);
        let trim = plan(&t, Target::Tokens(560), "why").unwrap();
        assert_eq!(trim.delete, vec![2], "39 tokens left: too few to keep a cut");
        assert!(trim.rewrite.is_empty());
    }

    #[test]
    fn shrinking_by_a_third_cuts_the_oldest_first() {
        let task = "task";
        let comments = vec![
            comment(1, Author::User, vec![ContentBlock::text(task)]),
            text(2, Author::Assistant, 1_200),
            text(3, Author::Assistant, 1_200),
            text(4, Author::Assistant, 1_200),
        ];
        let t = Transcript {
            comments: &comments,
            task,
            task_seq: Some(1),
            fixed_tokens: 100_000,
            window: 200_000,
        };
        // 900 tokens can move; 600 stay: two whole, the oldest left out.
        let trim = plan(&t, Target::ShrinkByAThird, "why").unwrap();
        assert_eq!(trim.delete, vec![2]);
        assert!(trim.rewrite.is_empty());
        let only_task = &comments[..1];
        let t = Transcript {
            comments: only_task,
            ..t
        };
        let trim = plan(&t, Target::ShrinkByAThird, "why").unwrap();
        assert!(trim.delete.is_empty() && trim.rewrite.is_empty(), "nothing to cut");
    }

    #[test]
    fn system_comments_stay_and_count() {
        let task = "task";
        let comments = vec![
            comment(1, Author::User, vec![ContentBlock::text(task)]),
            text(2, Author::System, 2_000),
            text(3, Author::Assistant, 400),
        ];
        let t = Transcript {
            comments: &comments,
            task,
            task_seq: Some(1),
            fixed_tokens: 0,
            window: 4_000,
        };
        let trim = plan(&t, Target::Tokens(800), "why").unwrap();
        assert!(!trim.delete.contains(&2));
        assert!(trim.delete.is_empty() && trim.rewrite.is_empty(), "{trim:?}");
        assert!(
            plan(&t, Target::Tokens(600), "why").is_err(),
            "500 + 120 + 1 leave no room at 600"
        );
    }
}
