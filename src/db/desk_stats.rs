//! Aggregates for `/v1/stats`.

use serde::Serialize;
use sqlx::PgExecutor;
use std::collections::BTreeMap;
use utoipa::ToSchema;

use crate::domain::{ProjectId, Usd};

#[derive(Clone, Debug, Default, Serialize, ToSchema)]
pub struct StatusCounts {
    pub todo: i64,
    pub in_progress: i64,
    pub waiting: i64,
    pub done: i64,
    pub failed: i64,
    pub cancelled: i64,
}

#[derive(Clone, Debug, Default, Serialize, ToSchema)]
pub struct Figures {
    pub by_status: StatusCounts,
    pub requests: i64,
    pub tool_calls: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    /// done / (done + failed); 0 before any ticket finished.
    pub success_rate: f64,
    /// Mean time from creation to finish of finished tickets, in ms.
    pub avg_ticket_ms: f64,
    /// Mean time agents spent working on a finished ticket (summed over its claims), in ms.
    pub avg_work_ms: f64,
    /// What the tickets' priced requests cost, in US dollars.
    #[schema(value_type = f64)]
    pub cost_usd: Usd,
    /// Tickets with some request whose model had no price (not in `cost_usd`).
    pub unpriced_tickets: i64,
}

/// One model's figures in `by_model`: the usage of the tickets whose agent ran it.
#[derive(Clone, Debug, Default, Serialize, ToSchema)]
pub struct ModelFigures {
    pub requests: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    #[schema(value_type = f64)]
    pub cost_usd: Usd,
}

#[derive(Clone, Debug, Default, Serialize, ToSchema)]
pub struct Stats {
    #[serde(flatten)]
    pub all: Figures,
    pub by_label: BTreeMap<String, Figures>,
    pub by_agent: BTreeMap<String, Figures>,
    /// By the model the tickets' agent ran at their latest claim.
    pub by_model: BTreeMap<String, ModelFigures>,
    /// What the database stores now (retention keeps it from growing without end).
    pub storage: super::retention::Storage,
}

const FIGURES: &str = "count(*) FILTER (WHERE status = 'todo') AS todo,
    count(*) FILTER (WHERE status = 'in_progress') AS in_progress,
    count(*) FILTER (WHERE status = 'waiting') AS waiting,
    count(*) FILTER (WHERE status = 'done') AS done,
    count(*) FILTER (WHERE status = 'failed') AS failed,
    count(*) FILTER (WHERE status = 'cancelled') AS cancelled,
    coalesce(sum(requests), 0)::bigint AS requests,
    coalesce(sum(tool_calls), 0)::bigint AS tool_calls,
    coalesce(sum(input_tokens), 0)::bigint AS input_tokens,
    coalesce(sum(output_tokens), 0)::bigint AS output_tokens,
    coalesce(avg(extract(epoch FROM finished_at - created_at) * 1000) FILTER (WHERE status IN ('done', 'failed')), 0)::float8 AS avg_ticket_ms,
    coalesce(avg(work_ms) FILTER (WHERE status IN ('done', 'failed')), 0)::float8 AS avg_work_ms,
    coalesce(sum(cost_usd), 0)::text AS cost_usd,
    count(*) FILTER (WHERE unpriced) AS unpriced_tickets";

#[derive(sqlx::FromRow)]
struct FigureRow {
    group_key: Option<String>,
    todo: i64,
    in_progress: i64,
    waiting: i64,
    done: i64,
    failed: i64,
    cancelled: i64,
    requests: i64,
    tool_calls: i64,
    input_tokens: i64,
    output_tokens: i64,
    avg_ticket_ms: f64,
    avg_work_ms: f64,
    cost_usd: String,
    unpriced_tickets: i64,
}

impl From<&FigureRow> for Figures {
    fn from(r: &FigureRow) -> Figures {
        let finished = r.done + r.failed;
        Figures {
            by_status: StatusCounts {
                todo: r.todo,
                in_progress: r.in_progress,
                waiting: r.waiting,
                done: r.done,
                failed: r.failed,
                cancelled: r.cancelled,
            },
            requests: r.requests,
            tool_calls: r.tool_calls,
            input_tokens: r.input_tokens,
            output_tokens: r.output_tokens,
            success_rate: if finished > 0 {
                r.done as f64 / finished as f64
            } else {
                0.0
            },
            avg_ticket_ms: r.avg_ticket_ms,
            avg_work_ms: r.avg_work_ms,
            cost_usd: Usd::parse(&r.cost_usd).unwrap_or_default(),
            unpriced_tickets: r.unpriced_tickets,
        }
    }
}

/// A project's figures (`/v1/stats` shows the request's project only).
pub async fn compute<'e>(db: impl PgExecutor<'e>, project: ProjectId) -> Result<Stats, sqlx::Error> {
    let sql = format!(
        "SELECT 'all' AS scope, NULL::text AS group_key, {FIGURES} FROM tickets WHERE project_id = $1
         UNION ALL
         SELECT 'label', l.label, {FIGURES} FROM tickets, unnest(labels) AS l(label) WHERE project_id = $1
         GROUP BY l.label
         UNION ALL
         SELECT 'agent', agent, {FIGURES} FROM tickets WHERE project_id = $1 AND agent IS NOT NULL GROUP BY agent
         UNION ALL
         SELECT 'model', model, {FIGURES} FROM tickets WHERE project_id = $1 AND model IS NOT NULL GROUP BY model"
    );
    let rows = sqlx::query(&sql).bind(project).fetch_all(db).await?;
    let mut stats = Stats::default();
    for row in &rows {
        use sqlx::{FromRow, Row};
        let scope: String = row.try_get("scope")?;
        let figures = FigureRow::from_row(row)?;
        let key = figures.group_key.clone().unwrap_or_default();
        match scope.as_str() {
            "all" => stats.all = Figures::from(&figures),
            "label" => {
                stats.by_label.insert(key, Figures::from(&figures));
            }
            "model" => {
                let model = ModelFigures {
                    requests: figures.requests,
                    input_tokens: figures.input_tokens,
                    output_tokens: figures.output_tokens,
                    cost_usd: Usd::parse(&figures.cost_usd).unwrap_or_default(),
                };
                stats.by_model.insert(key, model);
            }
            _ => {
                stats.by_agent.insert(key, Figures::from(&figures));
            }
        }
    }
    Ok(stats)
}
