//! Rebuilding a model conversation from a ticket's comments.

use crate::domain::{Author, Comment, ContentBlock};
use crate::llm::{Message, Role};

/// The directive appended when a reply is not accepted on a schema-bound ticket.
pub fn directive(detail: &str) -> String {
    format!(
        "Your previous reply was not accepted.\n\n{detail}\n\nDo not write any text. Your next reply must be a tool call only."
    )
}

/// Messages for a model request. Human and system comments are user turns; consecutive turns of
/// one role are merged. Providers reject a tool call without a result, so a call left unanswered
/// (its step was interrupted) gets an error result, and results answering no call are dropped.
pub fn to_messages(comments: &[Comment]) -> Vec<Message> {
    let mut messages: Vec<Message> = Vec::with_capacity(comments.len());
    let mut unanswered: Vec<String> = vec![];
    for comment in comments {
        let role = match comment.author {
            Author::Assistant => Role::Assistant,
            Author::User | Author::System => Role::User,
        };
        if role == Role::Assistant {
            answer_interrupted(&mut messages, &mut unanswered);
        }
        let mut content = Vec::with_capacity(comment.content.len());
        for block in &comment.content {
            match block {
                ContentBlock::ToolUse { id, .. } if role == Role::Assistant => {
                    unanswered.push(id.clone());
                    content.push(block.clone());
                }
                ContentBlock::ToolResult { tool_use_id, .. } => {
                    if role == Role::User {
                        if let Some(pos) = unanswered.iter().position(|id| id == tool_use_id) {
                            unanswered.remove(pos);
                            content.push(block.clone());
                        }
                    }
                }
                ContentBlock::ToolUse { .. } => {}
                ContentBlock::Text { text } if text.is_empty() => {}
                _ => content.push(block.clone()),
            }
        }
        if content.is_empty() {
            continue;
        }
        match messages.last_mut() {
            Some(last) if last.role == role => last.content.extend(content),
            _ => messages.push(Message { role, content }),
        }
    }
    answer_interrupted(&mut messages, &mut unanswered);
    // Tool results lead a user turn, as the providers expect.
    for m in messages.iter_mut().filter(|m| m.role == Role::User) {
        m.content.sort_by_key(|b| !matches!(b, ContentBlock::ToolResult { .. }));
    }
    messages
}

fn answer_interrupted(messages: &mut Vec<Message>, unanswered: &mut Vec<String>) {
    if unanswered.is_empty() {
        return;
    }
    let results: Vec<ContentBlock> = std::mem::take(unanswered)
        .into_iter()
        .map(|id| ContentBlock::ToolResult {
            tool_use_id: id,
            output: "The tool call was interrupted before it finished; its effect is unknown.".into(),
            is_error: true,
        })
        .collect();
    match messages.last_mut() {
        Some(last) if last.role == Role::User => {
            let mut content = results;
            content.append(&mut last.content);
            last.content = content;
        }
        _ => messages.push(Message {
            role: Role::User,
            content: results,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use serde_json::json;
    use uuid::Uuid;

    fn comment(author: Author, content: Vec<ContentBlock>) -> Comment {
        Comment {
            id: Uuid::now_v7(),
            ticket_id: Uuid::nil(),
            seq: 0,
            author,
            agent: None,
            content,
            created_at: Utc::now(),
        }
    }

    fn tool_use(id: &str) -> ContentBlock {
        ContentBlock::ToolUse {
            id: id.into(),
            name: "read_tickets".into(),
            input: json!({}),
        }
    }

    fn tool_result(id: &str) -> ContentBlock {
        ContentBlock::ToolResult {
            tool_use_id: id.into(),
            output: "ok".into(),
            is_error: false,
        }
    }

    #[test]
    fn consecutive_user_comments_merge_into_one_turn() {
        let messages = to_messages(&[
            comment(Author::User, vec![ContentBlock::text("task")]),
            comment(Author::System, vec![ContentBlock::text("note")]),
            comment(Author::Assistant, vec![ContentBlock::text("question?")]),
            comment(Author::User, vec![ContentBlock::text("answer")]),
        ]);
        assert_eq!(messages.len(), 3);
        assert_eq!(messages[0].content.len(), 2);
        assert_eq!(messages[1].role, Role::Assistant);
    }

    #[test]
    fn an_interrupted_tool_call_gets_an_error_result_and_stray_results_are_dropped() {
        let messages = to_messages(&[
            comment(Author::User, vec![ContentBlock::text("task"), tool_result("stray")]),
            comment(Author::Assistant, vec![tool_use("a"), tool_use("b")]),
            comment(Author::User, vec![tool_result("b")]),
        ]);
        assert_eq!(messages.len(), 3);
        assert_eq!(messages[0].content.len(), 1, "the stray result is dropped");
        let results: Vec<_> = messages[2]
            .content
            .iter()
            .map(|b| match b {
                ContentBlock::ToolResult {
                    tool_use_id, is_error, ..
                } => (tool_use_id.as_str(), *is_error),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(results, vec![("a", true), ("b", false)], "results in call order");
    }

    #[test]
    fn a_trailing_unanswered_call_is_answered_before_the_next_request() {
        let messages = to_messages(&[
            comment(Author::User, vec![ContentBlock::text("task")]),
            comment(Author::Assistant, vec![tool_use("a")]),
        ]);
        assert_eq!(messages.len(), 3);
        assert!(matches!(
            &messages[2].content[0],
            ContentBlock::ToolResult { is_error: true, .. }
        ));
    }
}
