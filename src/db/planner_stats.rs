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
/// The least time between two analyses of a table for its changes alone.
const CHANGES_EVERY: std::time::Duration = std::time::Duration::from_secs(10);
/// Below this many rows a whole-table scan costs next to nothing, whatever the plan.
const SMALL: f64 = 500.0;

/// Whether a table with `live` rows, analysed when it had `analysed` (negative: never), should be
/// analysed again.
fn has_outgrown(live: f64, analysed: f64) -> bool {
    live >= SMALL && live >= 1.5 * analysed.max(0.0)
}

/// Whether a table whose rows changed `modified` times since its last analysis should be analysed
/// again although its size did not change: as many changes as it has rows. When thousands of
/// tickets are claimed at once, the statistics still say none is in progress, and statements
/// that look tickets up by a set of keys scan the in-progress index once per key until then.
fn has_changed(live: f64, modified: f64) -> bool {
    live >= SMALL && modified >= live
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
    /// When this process last analysed a table for its changes (`has_changed`): at most once per
    /// `CHANGES_EVERY`, since an `ANALYZE` that does not take (a role that does not own the table)
    /// leaves the count of changes as it was.
    changes_analysed: HashMap<String, std::time::Instant>,
}

impl Refresher {
    /// One look at the tables; returns the names of those it analysed.
    pub async fn refresh_if_outgrown(&mut self, pool: &PgPool) -> Result<Vec<String>, sqlx::Error> {
        let rows: Vec<(String, f64, i64, i64)> = sqlx::query_as(
            "SELECT c.relname::text, c.reltuples::float8, s.n_live_tup, s.n_mod_since_analyze
             FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid
             WHERE s.schemaname = current_schema() AND c.relname = ANY($1)",
        )
        .bind(&TABLES[..])
        .fetch_all(pool)
        .await?;
        let mut analysed = Vec::new();
        for (table, reltuples, live, modified) in rows {
            let known = known_size(self.analysed_at.get(&table).copied(), reltuples);
            let changed = has_changed(live as f64, modified as f64)
                && self
                    .changes_analysed
                    .get(&table)
                    .is_none_or(|at| at.elapsed() >= CHANGES_EVERY);
            if changed {
                self.changes_analysed.insert(table.clone(), std::time::Instant::now());
            }
            if (has_outgrown(live as f64, known) || changed) && TABLES.contains(&table.as_str()) {
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
    use super::{has_changed, has_outgrown, known_size};

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

    #[test]
    fn a_table_is_analysed_when_as_many_rows_changed_as_it_holds() {
        assert!(has_changed(50_000.0, 50_000.0), "every ticket claimed at once");
        assert!(!has_changed(50_000.0, 20_000.0));
        assert!(!has_changed(100.0, 1_000.0), "small tables are left alone");
    }
}
