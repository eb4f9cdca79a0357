//! The planner's statistics follow a fast-growing desk: generic plans made while `tickets` was
//! nearly empty must not outlive it.

use std::time::Duration;

use agentdesk::db;

#[tokio::test]
async fn a_tickets_table_that_outgrew_its_statistics_is_analysed_once_then_left_alone() {
    let url = agentdesk::testing::fresh_database().await.unwrap();
    let pool = db::connect(&url, 2).await.unwrap();
    db::migrate(&pool).await.unwrap();
    assert!(
        db::statistics::refresh_if_outgrown(&pool).await.unwrap().is_empty(),
        "an empty desk is left alone"
    );

    sqlx::query(
        "INSERT INTO tickets (id, task) SELECT gen_random_uuid(), to_jsonb('filler ' || n) FROM generate_series(1, 2000) n",
    )
    .execute(&pool)
    .await
    .unwrap();

    // The live-row count reaches the statistics views within about a second of the commit.
    let mut analysed = Vec::new();
    for _ in 0..50 {
        analysed = db::statistics::refresh_if_outgrown(&pool).await.unwrap();
        if !analysed.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(analysed, ["tickets"]);
    let reltuples: f32 = sqlx::query_scalar("SELECT reltuples FROM pg_class WHERE relname = 'tickets'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(reltuples, 2000.0, "the planner now knows the table's size");
    assert!(
        db::statistics::refresh_if_outgrown(&pool).await.unwrap().is_empty(),
        "a table that has not grown since is not analysed again"
    );
    pool.close().await;
}
