//! The transcript: comments in order, numbered per ticket.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

use crate::domain::{Author, Comment, ContentBlock};

#[derive(sqlx::FromRow)]
struct CommentRow {
    id: Uuid,
    ticket_id: Uuid,
    seq: i64,
    author: String,
    agent: Option<String>,
    content: Value,
    created_at: DateTime<Utc>,
}

impl From<CommentRow> for Comment {
    fn from(r: CommentRow) -> Comment {
        Comment {
            id: r.id,
            ticket_id: r.ticket_id,
            seq: r.seq,
            author: Author::parse(&r.author).unwrap_or(Author::System),
            agent: r.agent,
            // Content is written only from `ContentBlock`s; an unreadable block is kept as text
            // rather than dropping the whole transcript.
            content: serde_json::from_value(r.content.clone())
                .unwrap_or_else(|_| vec![ContentBlock::text(r.content.to_string())]),
            created_at: r.created_at,
        }
    }
}

/// Appends a comment. The statement takes the ticket's row lock (or re-enters the caller's), so
/// seqs are gap-free and in commit order.
pub async fn insert(
    conn: &mut PgConnection,
    ticket_id: Uuid,
    author: Author,
    agent: Option<&str>,
    content: &[ContentBlock],
) -> Result<Comment, sqlx::Error> {
    let row: CommentRow = sqlx::query_as(
        "WITH t AS (
            UPDATE tickets SET last_comment_seq = last_comment_seq + 1, updated_at = now() WHERE id = $2
            RETURNING last_comment_seq)
         INSERT INTO comments (id, ticket_id, seq, author, agent, content)
         SELECT $1, $2, t.last_comment_seq, $3, $4, $5 FROM t
         RETURNING id, ticket_id, seq, author, agent, content, created_at",
    )
    .bind(Uuid::now_v7())
    .bind(ticket_id)
    .bind(author.as_str())
    .bind(agent)
    .bind(content_json(content))
    .fetch_optional(conn)
    .await?
    .ok_or(sqlx::Error::RowNotFound)?;
    Ok(row.into())
}

/// A comment's content as it is stored.
pub(crate) fn content_json(content: &[ContentBlock]) -> Value {
    serde_json::to_value(content).unwrap_or(Value::Array(vec![]))
}

/// A page of the transcript after `after_seq`, and whether more follow.
pub async fn list<'e>(
    db: impl PgExecutor<'e>,
    ticket_id: Uuid,
    after_seq: i64,
    limit: i64,
) -> Result<(Vec<Comment>, bool), sqlx::Error> {
    let rows: Vec<CommentRow> = sqlx::query_as(
        "SELECT id, ticket_id, seq, author, agent, content, created_at FROM comments
         WHERE ticket_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
    )
    .bind(ticket_id)
    .bind(after_seq)
    .bind(limit + 1)
    .fetch_all(db)
    .await?;
    let (rows, more) = super::page_of(rows, limit);
    Ok((rows.into_iter().map(Comment::from).collect(), more))
}

/// The whole transcript, for rebuilding a model conversation.
pub async fn all<'e>(db: impl PgExecutor<'e>, ticket_id: Uuid) -> Result<Vec<Comment>, sqlx::Error> {
    let rows: Vec<CommentRow> = sqlx::query_as(
        "SELECT id, ticket_id, seq, author, agent, content, created_at FROM comments
         WHERE ticket_id = $1 ORDER BY seq",
    )
    .bind(ticket_id)
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(Comment::from).collect())
}

/// The last `limit` comments of a transcript, oldest first: what a glance at a ticket shows.
pub async fn latest<'e>(db: impl PgExecutor<'e>, ticket_id: Uuid, limit: i64) -> Result<Vec<Comment>, sqlx::Error> {
    let rows: Vec<CommentRow> = sqlx::query_as(
        "SELECT * FROM (
             SELECT id, ticket_id, seq, author, agent, content, created_at FROM comments
             WHERE ticket_id = $1 ORDER BY seq DESC LIMIT $2
         ) last ORDER BY seq",
    )
    .bind(ticket_id)
    .bind(limit)
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(Comment::from).collect())
}

/// Compaction: removes the comments the summary replaces (all but the system ones, up to and
/// including `up_to_seq`, and but the one at `keep_seq`); comments written while the summariser
/// ran are kept.
pub async fn delete_non_system(
    conn: &mut PgConnection,
    ticket_id: Uuid,
    up_to_seq: i64,
    keep_seq: Option<i64>,
) -> Result<u64, sqlx::Error> {
    let done = sqlx::query(
        "DELETE FROM comments WHERE ticket_id = $1 AND author <> 'system' AND seq <= $2
         AND seq IS DISTINCT FROM $3",
    )
    .bind(ticket_id)
    .bind(up_to_seq)
    .bind(keep_seq)
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Compaction without a summary: removes these comments (by seq) of the ticket.
pub async fn delete_seqs(conn: &mut PgConnection, ticket_id: Uuid, seqs: &[i64]) -> Result<u64, sqlx::Error> {
    if seqs.is_empty() {
        return Ok(0);
    }
    let done = sqlx::query("DELETE FROM comments WHERE ticket_id = $1 AND seq = ANY($2)")
        .bind(ticket_id)
        .bind(seqs)
        .execute(conn)
        .await?;
    Ok(done.rows_affected())
}

/// Compaction without a summary: replaces a comment's content with a shortened one.
pub async fn rewrite(
    conn: &mut PgConnection,
    ticket_id: Uuid,
    seq: i64,
    content: &[ContentBlock],
) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE comments SET content = $3 WHERE ticket_id = $1 AND seq = $2")
        .bind(ticket_id)
        .bind(seq)
        .bind(content_json(content))
        .execute(conn)
        .await?;
    Ok(())
}
