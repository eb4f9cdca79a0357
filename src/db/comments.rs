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

/// A comment to append with `insert_many`.
pub struct NewComment<'a> {
    pub ticket_id: Uuid,
    pub author: Author,
    pub agent: Option<&'a str>,
    pub content: &'a [ContentBlock],
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
    let new = NewComment {
        ticket_id,
        author,
        agent,
        content,
    };
    let mut comments = insert_many(conn, &[new]).await?;
    comments.pop().ok_or(sqlx::Error::RowNotFound)
}

/// Appends comments to one or more tickets in one statement, returned in the order given. Each
/// gets its ticket's next `seq` under the ticket's row lock; for several tickets the caller must
/// already hold their row locks, so that no lock order is at stake.
pub async fn insert_many(conn: &mut PgConnection, comments: &[NewComment<'_>]) -> Result<Vec<Comment>, sqlx::Error> {
    if comments.is_empty() {
        return Ok(vec![]);
    }
    let ids: Vec<Uuid> = comments.iter().map(|_| Uuid::now_v7()).collect();
    let tickets: Vec<Uuid> = comments.iter().map(|c| c.ticket_id).collect();
    let authors: Vec<&str> = comments.iter().map(|c| c.author.as_str()).collect();
    let agents: Vec<Option<&str>> = comments.iter().map(|c| c.agent).collect();
    let contents: Vec<Value> = comments
        .iter()
        .map(|c| serde_json::to_value(c.content).unwrap_or(Value::Array(vec![])))
        .collect();
    let mut rows: Vec<(i64, CommentRow)> = sqlx::query_as::<_, OrderedRow>(
        "WITH c AS (
            SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::jsonb[])
                WITH ORDINALITY AS c(id, ticket_id, author, agent, content, ord)),
         counts AS (SELECT ticket_id, count(*) AS n FROM c GROUP BY ticket_id),
         t AS (
            UPDATE tickets SET last_comment_seq = last_comment_seq + counts.n, updated_at = now() FROM counts
            WHERE tickets.id = counts.ticket_id
            RETURNING tickets.id, tickets.last_comment_seq - counts.n AS base),
         inserted AS (
            INSERT INTO comments (id, ticket_id, seq, author, agent, content)
            SELECT c.id, c.ticket_id, t.base + row_number() OVER (PARTITION BY c.ticket_id ORDER BY c.ord),
                   c.author, c.agent, c.content
            FROM c JOIN t ON t.id = c.ticket_id
            RETURNING id, ticket_id, seq, author, agent, content, created_at)
         SELECT c.ord, i.id, i.ticket_id, i.seq, i.author, i.agent, i.content, i.created_at
         FROM inserted i JOIN c ON c.id = i.id",
    )
    .bind(&ids)
    .bind(&tickets)
    .bind(&authors)
    .bind(&agents)
    .bind(&contents)
    .fetch_all(conn)
    .await?
    .into_iter()
    .map(|r| (r.ord, r.row))
    .collect();
    rows.sort_by_key(|(ord, _)| *ord);
    Ok(rows.into_iter().map(|(_, row)| row.into()).collect())
}

#[derive(sqlx::FromRow)]
struct OrderedRow {
    ord: i64,
    #[sqlx(flatten)]
    row: CommentRow,
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
    let more = rows.len() as i64 > limit;
    let mut comments: Vec<Comment> = rows.into_iter().map(Comment::from).collect();
    comments.truncate(limit as usize);
    Ok((comments, more))
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

/// Compaction: removes the comments the summary replaces (all but the system ones, up to and
/// including `up_to_seq`); comments written while the summariser ran are kept.
pub async fn delete_non_system(conn: &mut PgConnection, ticket_id: Uuid, up_to_seq: i64) -> Result<u64, sqlx::Error> {
    let done = sqlx::query("DELETE FROM comments WHERE ticket_id = $1 AND author <> 'system' AND seq <= $2")
        .bind(ticket_id)
        .bind(up_to_seq)
        .execute(conn)
        .await?;
    Ok(done.rows_affected())
}
