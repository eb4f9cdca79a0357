//! What fits a model's context window: token estimates (about 4 characters per token), the
//! thresholds that start a compaction, and cutting text to fit. Compaction and trimming both
//! measure with these.

use crate::domain::{Author, Comment, ContentBlock};
use crate::llm::ModelRequest;

/// The most a window keeps free for the reply (see `reserve`).
pub const MAX_RESERVE: u64 = 3_000;
/// Compaction starts early at `window − PROACTIVE_MARGIN` (after a first response).
pub const PROACTIVE_MARGIN: u64 = 33_000;
/// What `cut_middle` adds to mark the cut, at most.
pub(super) const CUT_MARKER_MAX: usize = 64;

/// The tokens kept free for the reply: 3000, or a quarter of a small window (a 4096 window
/// would otherwise block at 1096).
pub fn reserve(window: u64) -> u64 {
    MAX_RESERVE.min(window / 4)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    Proactive,
    Blocking,
    Reactive,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Proactive => "proactive",
            Reason::Blocking => "blocking",
            Reason::Reactive => "reactive",
        }
    }
}

/// About 4 characters per token over the system prompt, the tool definitions and the messages.
pub fn estimate_tokens(request: &ModelRequest) -> u64 {
    let mut chars = request.system.len();
    for tool in &request.tools {
        chars += tool.name.len() + tool.description.len() + tool.input_schema.get().len();
    }
    for message in &request.messages {
        chars += message.content.iter().map(block_chars).sum::<usize>();
    }
    (chars as u64).div_ceil(4)
}

/// The length of `value` as compact JSON, counted without building the text.
pub(super) fn json_len(value: &serde_json::Value) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    // Writing a `Value` to a sink that cannot fail does not fail.
    let _ = serde_json::to_writer(&mut counter, value);
    counter.0
}

pub(super) fn block_chars(block: &ContentBlock) -> usize {
    match block {
        ContentBlock::Text { text } => text.len(),
        ContentBlock::ToolUse { name, input, .. } => name.len() + json_len(input),
        ContentBlock::ToolResult { output, .. } => output.len(),
        ContentBlock::Thinking { text, signature } => text.len() + signature.as_ref().map_or(0, String::len),
    }
}

/// Whether to compact before sending `request`, given the window and whether the ticket has had a
/// model response yet.
pub fn trigger(estimated: u64, window: u64, had_response: bool) -> Option<Reason> {
    if estimated >= blocking_threshold(window) {
        return Some(Reason::Blocking);
    }
    let proactive = window.checked_sub(PROACTIVE_MARGIN).filter(|t| *t > 0)?;
    (had_response && estimated >= proactive).then_some(Reason::Proactive)
}

/// No request is sent at or above this many estimated tokens.
pub fn blocking_threshold(window: u64) -> u64 {
    window - reserve(window)
}

/// Whether a task of this many bytes is kept verbatim through compaction: at most a quarter of
/// the window (by the same 4-characters-per-token estimate).
pub fn keeps_task(task_len: usize, window: u64) -> bool {
    (task_len as u64).div_ceil(4) <= window / 4
}

/// The ticket's task as the claim wrote it (a user comment holding exactly the task's text), if
/// it is still there: a summarised task is gone. Not always the first user comment: humans may
/// comment before the first claim writes it.
pub fn task_comment<'c>(comments: &'c [Comment], task: &str) -> Option<&'c Comment> {
    comments.iter().find(|c| {
        c.author == Author::User && matches!(c.content.as_slice(), [ContentBlock::Text { text }] if text == task)
    })
}

/// Keeps the head and the tail of `text` within `max` bytes, on char boundaries.
pub(super) fn cut_middle(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let half = max / 2;
    let mut head = half;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - half;
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    format!(
        "{}\n\n[… {} bytes left out …]\n\n{}",
        &text[..head],
        tail - head,
        &text[tail..]
    )
}
