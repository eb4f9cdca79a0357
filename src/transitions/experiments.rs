//! Experiments after they are made: their figures, read from their tickets; their judges, asked
//! once every arm of a ticket has finished; their end (done once every replay and judge has
//! finished, or cancelled with their open tickets).

use std::collections::BTreeMap;

use rand::seq::SliceRandom;
use serde_json::{json, Value};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::DeskError;
use crate::db;
use crate::db::experiments::{ExperimentRow, JudgementRow, RunRow};
use crate::db::tickets::NewTicket;
use crate::domain::experiment::{
    self, ArmFigures, ArmResult, Experiment, ExperimentStatus, ExperimentTicket, JudgeSpec, Verdict,
    EXPERIMENT_PRIORITY,
};
use crate::domain::ticket::{ReplayTools, Status};
use crate::domain::{ProjectId, Usd};

fn usd(text: &Option<String>) -> Usd {
    text.as_deref().and_then(Usd::parse).unwrap_or_default()
}

fn ticket_status(text: &Option<String>) -> Option<Status> {
    text.as_deref().and_then(Status::parse)
}

/// An experiment as the API shows it, its figures read from its tickets now.
pub async fn view(pool: &PgPool, row: ExperimentRow) -> Result<Experiment, sqlx::Error> {
    let runs = db::experiments::runs(pool, row.id).await?;
    let judgements = db::experiments::judgements(pool, row.id).await?;
    Ok(figures(row, &runs, &judgements))
}

fn figures(row: ExperimentRow, runs: &[RunRow], judgements: &[JudgementRow]) -> Experiment {
    let status = row.status();
    let arm_names: Vec<String> = row.arms.0.iter().map(|a| a.name.clone()).collect();
    let verdicts: Vec<Verdict<'_>> = judgements
        .iter()
        .filter(|j| status_is(&j.status, Status::Done))
        .filter_map(|j| {
            Some(Verdict {
                shown: &j.shown.0,
                result: j.result.as_ref()?,
            })
        })
        .collect();
    let mut judged = row.judge.as_ref().map(|_| experiment::tally(&arm_names, &verdicts));
    let arms = row
        .arms
        .0
        .iter()
        .map(|arm| {
            let mine: Vec<&RunRow> = runs.iter().filter(|r| r.arm == arm.name).collect();
            let count = |s: Status| mine.iter().filter(|r| ticket_status(&r.status) == Some(s)).count() as i64;
            let finished: Vec<&&RunRow> = mine
                .iter()
                .filter(|r| matches!(ticket_status(&r.status), Some(Status::Done | Status::Failed)))
                .collect();
            let valid = finished.iter().filter(|r| schema_valid(r)).count();
            ArmFigures {
                name: arm.name.clone(),
                agent: arm.agent.clone(),
                agent_version: arm.agent_version,
                provider: arm.provider.clone(),
                model: arm.model.clone(),
                done: count(Status::Done),
                failed: count(Status::Failed),
                waiting: count(Status::Waiting),
                cost_usd: mine.iter().fold(Usd::default(), |sum, r| sum.plus(usd(&r.cost_usd))),
                input_tokens: mine.iter().filter_map(|r| r.input_tokens).sum(),
                output_tokens: mine.iter().filter_map(|r| r.output_tokens).sum(),
                duration_ms: experiment::percentiles(finished.iter().filter_map(|r| r.duration_ms).collect()),
                schema_valid: (!finished.is_empty()).then(|| valid as f64 / finished.len() as f64),
                judge: judged.as_mut().and_then(|t| t.remove(&arm.name)),
            }
        })
        .collect::<Vec<_>>();
    let mut tickets: Vec<ExperimentTicket> = vec![];
    for run in runs {
        if tickets.last().is_none_or(|t| t.ticket != run.original_key) {
            tickets.push(ExperimentTicket {
                ticket: run.original_key.clone(),
                results: BTreeMap::new(),
            });
        }
        let (Some(key), Some(status)) = (&run.key, ticket_status(&run.status)) else {
            continue;
        };
        let result = ArmResult {
            key: key.clone(),
            status,
            result: run.result.clone(),
        };
        if let Some(last) = tickets.last_mut() {
            last.results.insert(run.arm.clone(), result);
        }
    }
    let judges_cost = judgements
        .iter()
        .fold(Usd::default(), |sum, j| sum.plus(usd(&j.cost_usd)));
    Experiment {
        id: row.id,
        name: row.name,
        status,
        cost_usd: arms.iter().fold(judges_cost, |sum, a| sum.plus(a.cost_usd)),
        tools: if row.tools == "live" {
            ReplayTools::Live
        } else {
            ReplayTools::Recorded
        },
        arms,
        judge: row.judge.map(|j| j.0),
        tickets,
        created_at: row.created_at,
        finished_at: row.finished_at,
    }
}

fn status_is(text: &Option<String>, wanted: Status) -> bool {
    ticket_status(text) == Some(wanted)
}

/// A finished replay's result matches its ticket's schema (any result does without one); a
/// failed replay has none.
fn schema_valid(run: &RunRow) -> bool {
    if ticket_status(&run.status) != Some(Status::Done) {
        return false;
    }
    match (&run.schema, &run.result) {
        (None, _) => true,
        (Some(schema), Some(result)) => crate::schema::validate_against(schema, result).is_ok(),
        (Some(_), None) => false,
    }
}

/// Moves running experiments on (up to `limit`, each under its row lock, skipping those another
/// process holds): asks the judge about each ticket whose arms have all finished, and ends an
/// experiment whose replays and judges have all finished. Runs every second in every worker
/// process; what it writes commits with the lock, so a judge is asked once. Returns how many
/// experiments changed.
pub async fn advance(pool: &PgPool, limit: i64) -> Result<usize, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let running = db::experiments::lock_running(&mut tx, limit).await?;
    let mut changed = 0;
    for row in running {
        let runs = db::experiments::runs(&mut *tx, row.id).await?;
        let judgements = db::experiments::judgements(&mut *tx, row.id).await?;
        let mut asked = false;
        if let Some(judge) = &row.judge.as_ref().map(|j| j.0.clone()) {
            asked = ask_judges(&mut tx, &row, judge, &runs, &judgements).await?;
        }
        let finished = |s: &Option<String>| ticket_status(s).is_none_or(Status::is_terminal);
        let replays_done = runs.iter().all(|r| finished(&r.status));
        let judges_done = row.judge.is_none()
            || (!asked
                && judgements.iter().all(|j| j.ticket_id.is_none() || finished(&j.status))
                && originals(&runs).len() == judgements.len());
        if replays_done && judges_done {
            db::experiments::finish(&mut tx, row.id, ExperimentStatus::Done).await?;
        }
        if asked || (replays_done && judges_done) {
            changed += 1;
        }
    }
    tx.commit().await?;
    Ok(changed)
}

/// The originals, in the experiment's order.
fn originals(runs: &[RunRow]) -> Vec<Uuid> {
    let mut ids: Vec<Uuid> = vec![];
    for run in runs {
        if !ids.contains(&run.original_id) {
            ids.push(run.original_id);
        }
    }
    ids
}

/// A judge's ticket for each original whose arms have all finished and that has none yet: the
/// task and the results in random order under letters, the arms' names kept with the judgement
/// (and the judge ticket's metadata) only. Fewer than two results: nothing to judge, and that
/// is recorded too. True when any was written.
async fn ask_judges(
    conn: &mut PgConnection,
    row: &ExperimentRow,
    judge: &JudgeSpec,
    runs: &[RunRow],
    judgements: &[JudgementRow],
) -> Result<bool, sqlx::Error> {
    let mut asked = false;
    for original in originals(runs) {
        if judgements.iter().any(|j| j.original_id == original) {
            continue;
        }
        let arms: Vec<&RunRow> = runs.iter().filter(|r| r.original_id == original).collect();
        if !arms
            .iter()
            .all(|r| ticket_status(&r.status).is_none_or(Status::is_terminal))
        {
            continue;
        }
        let mut done: Vec<&&RunRow> = arms
            .iter()
            .filter(|r| ticket_status(&r.status) == Some(Status::Done))
            .collect();
        done.shuffle(&mut rand::rng());
        let letters = experiment::letters(done.len());
        let shown: BTreeMap<String, String> = letters
            .iter()
            .cloned()
            .zip(done.iter().map(|r| r.arm.clone()))
            .collect();
        asked = true;
        if done.len() < 2 {
            db::experiments::insert_judgement(conn, row.id, original, None, &shown).await?;
            continue;
        }
        let task_text = match arms.iter().find_map(|r| r.task.clone()) {
            Some(Value::String(s)) => s,
            Some(other) => serde_json::to_string_pretty(&other).unwrap_or_default(),
            None => String::new(),
        };
        let results: Vec<String> = done
            .iter()
            .map(|r| match &r.result {
                Some(Value::String(s)) => s.clone(),
                Some(other) => serde_json::to_string_pretty(other).unwrap_or_default(),
                None => String::new(),
            })
            .collect();
        let original_key = arms.first().map(|r| r.original_key.clone()).unwrap_or_default();
        let new = NewTicket {
            project: row.project_id,
            task: Value::String(experiment::judge_task(&task_text, judge.criteria.as_deref(), &results)),
            labels: vec![judge.agent.clone()],
            priority: EXPERIMENT_PRIORITY,
            schema: Some(experiment::judge_schema(done.len())),
            parent_id: None,
            // The order shown travels with the judge's ticket, so its verdict can be traced back.
            metadata: json!({"experiment": row.id, "judging": original_key, "shown": shown}),
            max_attempts: crate::domain::ticket::DEFAULT_MAX_ATTEMPTS,
            reporter: "experiment".into(),
            idempotency: None,
            trace_context: None,
            deadline_secs: None,
        };
        let ticket = db::tickets::insert(conn, new).await?;
        db::experiments::insert_judgement(conn, row.id, original, Some(ticket.id), &shown).await?;
    }
    if asked {
        db::tickets::notify_work(conn).await?;
    }
    Ok(asked)
}

/// Cancels a running experiment and its open replays and judges (each with `ticket.cancelled`);
/// a cancelled one is returned as it is, a done one is a conflict.
pub async fn cancel(pool: &PgPool, project: ProjectId, id: Uuid) -> Result<Experiment, DeskError> {
    let mut tx = pool.begin().await?;
    let row = db::experiments::lock(&mut tx, project, id)
        .await?
        .ok_or_else(|| DeskError::NotFound(id.to_string()))?;
    match row.status() {
        ExperimentStatus::Done => {
            return Err(DeskError::Conflict(format!(
                "experiment {id} is done: finished experiments cannot be cancelled"
            )))
        }
        ExperimentStatus::Cancelled => {}
        ExperimentStatus::Running => {
            cancel_tickets(&mut tx, project, id).await?;
            db::experiments::finish(&mut tx, id, ExperimentStatus::Cancelled).await?;
        }
    }
    tx.commit().await?;
    let row = db::experiments::get(pool, project, id)
        .await?
        .ok_or_else(|| DeskError::NotFound(id.to_string()))?;
    Ok(view(pool, row).await?)
}

/// Deletes an experiment, cancelling what of it still runs; its finished tickets stay.
pub async fn delete(pool: &PgPool, project: ProjectId, id: Uuid) -> Result<(), DeskError> {
    let mut tx = pool.begin().await?;
    let row = db::experiments::lock(&mut tx, project, id)
        .await?
        .ok_or_else(|| DeskError::NotFound(id.to_string()))?;
    if row.status() == ExperimentStatus::Running {
        cancel_tickets(&mut tx, project, id).await?;
    }
    db::experiments::delete(&mut tx, project, id).await?;
    tx.commit().await?;
    Ok(())
}

async fn cancel_tickets(conn: &mut PgConnection, project: ProjectId, id: Uuid) -> Result<(), DeskError> {
    for ticket in db::experiments::open_tickets(conn, id).await? {
        super::cancel_in(conn, project, &ticket.to_string()).await?;
    }
    Ok(())
}
