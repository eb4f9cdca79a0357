//! Whole outputs of tool calls too large to show the model.

use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

pub async fn store(
    conn: &mut PgConnection,
    ticket_id: Uuid,
    call_id: &str,
    tool_name: &str,
    output: &str,
) -> Result<(), sqlx::Error> {
    // A step re-run after a crash may store the same call again: keep one.
    sqlx::query(
        "INSERT INTO tool_outputs (ticket_id, call_id, tool_name, output) VALUES ($1, $2, $3, $4)
         ON CONFLICT (ticket_id, call_id) DO UPDATE SET output = EXCLUDED.output",
    )
    .bind(ticket_id)
    .bind(call_id)
    .bind(tool_name)
    .bind(output)
    .execute(conn)
    .await?;
    Ok(())
}

pub async fn get<'e>(db: impl PgExecutor<'e>, ticket_id: Uuid, call_id: &str) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar("SELECT output FROM tool_outputs WHERE ticket_id = $1 AND call_id = $2")
        .bind(ticket_id)
        .bind(call_id)
        .fetch_optional(db)
        .await
}
