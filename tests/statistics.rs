//! The planner's statistics follow a fast-growing desk: generic plans made while `tickets` was
//! nearly empty must not outlive it.

use std::time::Duration;

use agentdesk::db;
use sqlx::Connection;

/// Inserts `n` tickets on a connection of its own and closes it: a backend reports its row counts
/// to the statistics views when it exits (an idle one may wait ten seconds).
async fn insert_tickets(url: &str, n: i64) {
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::query("INSERT INTO tickets (id, task) SELECT gen_random_uuid(), '\"filler\"' FROM generate_series(1, $1)")
        .bind(n)
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
}

/// Looks until the refresher analyses something (the row counts reach the statistics views
/// within moments of the writer's exit); returns what it analysed.
async fn first_analysis(refresher: &mut db::planner_stats::Refresher, pool: &sqlx::PgPool) -> Vec<String> {
    for _ in 0..50 {
        let analysed = refresher.refresh_if_outgrown(pool).await.unwrap();
        if !analysed.is_empty() {
            return analysed;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    vec![]
}

#[tokio::test]
async fn a_tickets_table_that_outgrew_its_statistics_is_analysed_once_then_left_alone() {
    let url = testkit::testing::fresh_database().await.unwrap();
    let pool = db::connect(&url, 2).await.unwrap();
    db::migrate(&pool).await.unwrap();
    let mut refresher = db::planner_stats::Refresher::default();
    assert!(
        refresher.refresh_if_outgrown(&pool).await.unwrap().is_empty(),
        "an empty desk is left alone"
    );

    insert_tickets(&url, 2000).await;

    let analysed = first_analysis(&mut refresher, &pool).await;
    assert_eq!(analysed, ["tickets"]);
    let reltuples: f32 = sqlx::query_scalar("SELECT reltuples FROM pg_class WHERE relname = 'tickets'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(reltuples, 2000.0, "the planner now knows the table's size");
    assert!(
        refresher.refresh_if_outgrown(&pool).await.unwrap().is_empty(),
        "a table that has not grown since is not analysed again"
    );
    pool.close().await;
}

#[tokio::test]
async fn a_role_that_cannot_analyse_the_table_does_not_try_again_every_second() {
    let url = testkit::testing::fresh_database().await.unwrap();
    let owner = db::connect(&url, 2).await.unwrap();
    db::migrate(&owner).await.unwrap();
    // Roles are shared by every database of the server (and by tests running at once).
    sqlx::query("DO $$ BEGIN CREATE ROLE agentdesk_not_owner LOGIN PASSWORD 'not-owner'; EXCEPTION WHEN duplicate_object THEN NULL; END $$")
        .execute(&owner)
        .await
        .unwrap();
    insert_tickets(&url, 1000).await;

    let not_owner = url
        .parse::<sqlx::postgres::PgConnectOptions>()
        .unwrap()
        .username("agentdesk_not_owner")
        .password("not-owner");
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect_with(not_owner)
        .await
        .unwrap();
    let mut refresher = db::planner_stats::Refresher::default();
    let analysed = first_analysis(&mut refresher, &pool).await;
    assert_eq!(analysed, ["tickets"], "it tried once (Postgres only warns)");
    let reltuples: f32 = sqlx::query_scalar("SELECT reltuples FROM pg_class WHERE relname = 'tickets'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(reltuples < 1000.0, "the statistics did not change: {reltuples}");
    assert!(
        refresher.refresh_if_outgrown(&pool).await.unwrap().is_empty(),
        "and does not try again before the table grows by half"
    );
    pool.close().await;
    owner.close().await;
}

/// A counter update (a fenced event append raises `last_event_seq`) changes no indexed column, so
/// it can stay on its page and skip the ticket's nine indexes, if the page has room: the tickets
/// table leaves a fifth of each page free for that.
#[tokio::test]
async fn updates_of_a_tickets_counters_stay_on_their_page_and_skip_the_indexes() {
    let url = testkit::testing::fresh_database().await.unwrap();
    let pool = db::connect(&url, 2).await.unwrap();
    db::migrate(&pool).await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("INSERT INTO tickets (id, task) SELECT gen_random_uuid(), '\"filler\"' FROM generate_series(1, 500)")
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query("UPDATE tickets SET last_event_seq = last_event_seq + 1")
        .execute(&mut *tx)
        .await
        .unwrap();
    // This transaction's own counts, visible before it ends.
    let (updated, hot): (i64, i64) = sqlx::query_as(
        "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables WHERE relname = 'tickets'
           AND schemaname = current_schema()",
    )
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    assert_eq!(updated, 500);
    // Every row updated at once fills the free fifth after about one update in four; with pages
    // packed full, none at all would be HOT.
    assert!(hot >= 100, "only {hot} of 500 updates were HOT");
}

#[tokio::test]
async fn a_row_version_is_written_only_into_the_indexes_some_query_needs() {
    let url = testkit::testing::fresh_database().await.unwrap();
    let pool = db::connect(&url, 2).await.unwrap();
    db::migrate(&pool).await.unwrap();
    let indexes = |table: &'static str| {
        let pool = pool.clone();
        async move {
            let names: Vec<String> = sqlx::query_scalar(
                "SELECT indexdef FROM pg_indexes WHERE tablename = $1 AND schemaname = current_schema() ORDER BY indexname",
            )
            .bind(table)
            .fetch_all(&pool)
            .await
            .unwrap();
            names.join("\n")
        }
    };
    let tickets = indexes("tickets").await;
    assert!(
        !tickets.contains("(key)"),
        "the key is found through the number's index:\n{tickets}"
    );
    let events = indexes("events").await;
    assert!(
        !events.contains("(id)"),
        "no query looks an event up by id alone:\n{events}"
    );
    assert!(
        // Unique rather than the primary key: a project's own events have no ticket.
        events.contains("UNIQUE INDEX events_ticket_seq ON public.events USING btree (ticket_id, seq)"),
        "{events}"
    );

    // Only tickets that have an idempotency key have an entry in its index, which is still unique
    // (within a project: two projects' clients may pick the same key).
    assert!(
        tickets.contains("UNIQUE INDEX tickets_idempotency_key_idx ON public.tickets USING btree (project_id, idempotency_key) WHERE (idempotency_key IS NOT NULL)"),
        "{tickets}"
    );
    sqlx::query("INSERT INTO tickets (id, task, idempotency_key) VALUES (gen_random_uuid(), '\"keyed\"', 'k-1')")
        .execute(&pool)
        .await
        .unwrap();
    let again =
        sqlx::query("INSERT INTO tickets (id, task, idempotency_key) VALUES (gen_random_uuid(), '\"again\"', 'k-1')")
            .execute(&pool)
            .await;
    assert!(again.is_err(), "an idempotency key is still unique");
}
