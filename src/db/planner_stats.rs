//! Keeps the planner's picture of the tables close to their size while they grow fast.
//!
//! Connections keep generic plans (see `connect`), and Postgres re-plans a statement only when
//! its tables' statistics change. A plan made while `tickets` held a few hundred rows joins by
//! scanning the whole table; on a new desk taking work, the table grows tenfold long before
//! autovacuum (which looks once a minute) analyses it, and every append would read every ticket
//! until then. So each process looks every second and analyses a table that has grown since
//! its last analysis by half: a handful of times while a desk fills, never once it is steady.

use std::collections::HashMap;

use sqlx::PgPool;

/// The table that statements join to by key (appends, claims, renewals). The others are read
/// only along an index's order (the event cursor, a ticket's comments), which no size changes.
const TABLES: [&str; 1] = ["tickets"];
/// Below this many rows a whole-table scan costs next to nothing, whatever the plan.
const SMALL: f64 = 500.0;

/// Whether a table with `live` rows, analysed when it had `analysed` (negative: never), should be
/// analysed again.
fn has_outgrown(live: f64, analysed: f64) -> bool {
    live >= SMALL && live >= 1.5 * analysed.max(0.0)
}

/// The size a table was last analysed at: the statistics' row count (`reltuples`), or the live
/// rows when this process last tried, as long as the statistics have not changed since.
fn known_size(tried: Option<(f64, f64)>, reltuples: f64) -> f64 {
    match tried {
        Some((live_then, reltuples_then)) if reltuples_then == reltuples => live_then.max(reltuples),
        _ => reltuples,
    }
}

/// Analyses the tables that have outgrown their statistics. Remembers the size at which it last
/// analysed each, so that an `ANALYZE` which changes nothing (a role that does not own the table
/// gets only a warning) is not repeated every second; once the statistics change (its own
/// `ANALYZE` took, or autovacuum's), they are the measure again.
#[derive(Default)]
pub struct Refresher {
    /// Per table: the live rows when this process analysed it, and the statistics' row count then.
    analysed_at: HashMap<String, (f64, f64)>,
}

impl Refresher {
    /// One look at the tables; returns the names of those it analysed.
    pub async fn refresh_if_outgrown(&mut self, pool: &PgPool) -> Result<Vec<String>, sqlx::Error> {
        let rows: Vec<(String, f64, i64)> = sqlx::query_as(
            "SELECT c.relname::text, c.reltuples::float8, s.n_live_tup
             FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid
             WHERE s.schemaname = current_schema() AND c.relname = ANY($1)",
        )
        .bind(&TABLES[..])
        .fetch_all(pool)
        .await?;
        let mut analysed = Vec::new();
        for (table, reltuples, live) in rows {
            let known = known_size(self.analysed_at.get(&table).copied(), reltuples);
            if has_outgrown(live as f64, known) && TABLES.contains(&table.as_str()) {
                // Statistics only: takes no lock that writers wait for.
                sqlx::query(&format!("ANALYZE {table}")).execute(pool).await?;
                self.analysed_at.insert(table.clone(), (live as f64, reltuples));
                analysed.push(table);
            }
        }
        Ok(analysed)
    }
}

#[cfg(test)]
mod tests {
    use super::{has_outgrown, known_size};

    #[test]
    fn a_tried_analysis_counts_until_the_statistics_change() {
        assert_eq!(known_size(None, 900.0), 900.0);
        assert_eq!(
            known_size(Some((2000.0, -1.0)), -1.0),
            2000.0,
            "the analysis changed nothing"
        );
        assert_eq!(
            known_size(Some((100_000.0, 90_000.0)), 1000.0),
            1000.0,
            "analysed since, and smaller"
        );
    }

    #[test]
    fn a_table_is_analysed_when_it_has_grown_by_half_and_is_no_longer_small() {
        assert!(!has_outgrown(100.0, -1.0), "small tables are left alone");
        assert!(has_outgrown(500.0, -1.0), "never analysed and no longer small");
        assert!(has_outgrown(1500.0, 900.0));
        assert!(!has_outgrown(1200.0, 900.0), "grown, not by half");
        assert!(!has_outgrown(100_000.0, 90_000.0), "steady");
    }
}
