//! `/v1/experiments`: tickets × arms, each pair a replay run at low priority, compared by their
//! figures and an optional blind judge (`transitions::experiments`).

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::access::Caller;
use super::error::{ApiError, ApiResult, ErrorBody};
use super::extract::{ApiJson, ApiPath};
use super::replays::{self, ReplayTicket};
use super::AppState;
use crate::db;
use crate::domain::experiment::{Arm, Experiment, JudgeSpec, EXPERIMENT_PRIORITY, MAX_ARMS, MAX_TICKETS};
use crate::domain::ticket::{ReplayTools, Status};
use crate::domain::Ticket;
use crate::transitions::{self, DeskError};

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateExperiment {
    #[schema(min_length = 1, max_length = 200)]
    pub name: String,
    /// The tickets to replay (ids or keys); or give `filter`.
    #[schema(max_items = 100)]
    pub tickets: Option<Vec<String>>,
    /// Picks the project's tickets (not replays), newest first; or give `tickets`.
    pub filter: Option<ExperimentFilter>,
    /// 1 to 10 arms with distinct names.
    #[schema(min_items = 1, max_items = 10)]
    pub arms: Vec<Arm>,
    pub judge: Option<JudgeSpec>,
    /// `recorded` (default) or `live`, for every replay.
    pub tools: Option<ReplayTools>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExperimentFilter {
    /// Only tickets with this label.
    pub label: Option<String>,
    pub status: Option<Status>,
    /// Only tickets created at or after this time.
    pub since: Option<DateTime<Utc>>,
    /// At most this many (1 to 100, default 20).
    #[schema(minimum = 1, maximum = 100)]
    pub limit: Option<i64>,
}

#[derive(Serialize, ToSchema)]
pub struct ExperimentList {
    pub items: Vec<Experiment>,
}

/// Start an experiment
///
/// Each ticket × arm becomes a replay (`metadata.replay_of`, `metadata.experiment`) that runs at
/// low priority through the ordinary queue, budgets and fair share; with a `judge`, once every
/// arm of a ticket has finished, the judge agent gets the task and the results in random order
/// without the arms' names and answers through a result schema. Nothing is created unless all is.
#[utoipa::path(post, path = "/experiments", tag = "experiments", request_body = CreateExperiment,
    responses((status = 201, body = Experiment),
        (status = 404, description = "A named ticket does not exist", body = ErrorBody),
        (status = 422, description = "Invalid arms, filter, agent, version or provider", body = ErrorBody),
        (status = 400, body = ErrorBody)))]
pub async fn create_experiment(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(req): ApiJson<CreateExperiment>,
) -> ApiResult<(StatusCode, Json<Experiment>)> {
    let project = &caller.project;
    let name = req.name.trim().to_owned();
    if name.is_empty() || name.chars().count() > 200 {
        return Err(ApiError::Validation("name must be 1 to 200 characters".into()));
    }
    check_arms(&req.arms)?;
    let originals = originals(&state, project.id, req.tickets, req.filter).await?;
    if let Some(judge) = &req.judge {
        if db::agents::get(&state.pool, project.id, &judge.agent).await?.is_none() {
            return Err(ApiError::Validation(format!(
                "judge agent {:?} does not exist in this project",
                judge.agent
            )));
        }
        if judge.criteria.as_ref().is_some_and(|c| c.chars().count() > 4000) {
            return Err(ApiError::Validation(
                "judge criteria must be at most 4000 characters".into(),
            ));
        }
    }
    let tools = req.tools.unwrap_or_default();
    let id = Uuid::now_v7();
    // Every replay is prepared (and so checked) before any is written.
    let mut prepared = Vec::with_capacity(originals.len() * req.arms.len());
    for (position, original) in originals.iter().enumerate() {
        for arm in &req.arms {
            let replay = ReplayTicket {
                agent: arm.agent.clone(),
                agent_version: arm.agent_version,
                provider: arm.provider.clone(),
                model: arm.model.clone(),
                tools: Some(tools),
            };
            let (mut new, extras) = replays::prepare(&state, project, original, replay).await?;
            new.priority = EXPERIMENT_PRIORITY;
            if let serde_json::Value::Object(m) = &mut new.metadata {
                m.insert("experiment".into(), serde_json::json!(id));
            }
            prepared.push((position as i32, original, arm.name.clone(), new, extras));
        }
    }
    super::projects::admit_ticket(&state.pool, project).await?;
    // The experiment and all its replays, in one transaction: all or nothing.
    let mut tx = state.pool.begin().await?;
    let tools_name = match tools {
        ReplayTools::Recorded => "recorded",
        ReplayTools::Live => "live",
    };
    db::experiments::insert(
        &mut tx,
        project.id,
        id,
        &name,
        tools_name,
        &req.arms,
        req.judge.as_ref(),
    )
    .await?;
    for (position, original, arm, new, extras) in prepared {
        let replay = db::tickets::insert_with(&mut tx, new, extras).await?;
        db::experiments::insert_run(&mut tx, id, position, (original.id, &original.key), &arm, replay.id).await?;
    }
    db::tickets::notify_work(&mut tx).await?;
    tx.commit().await?;
    state.hub.wake();
    state.hub.work_available();
    let row = db::experiments::get(&state.pool, project.id, id)
        .await?
        .ok_or(ApiError::Internal)?;
    Ok((
        StatusCode::CREATED,
        Json(transitions::experiments::view(&state.pool, row).await?),
    ))
}

fn check_arms(arms: &[Arm]) -> ApiResult<()> {
    if arms.is_empty() || arms.len() > MAX_ARMS {
        return Err(ApiError::Validation(format!("arms must hold 1 to {MAX_ARMS} arms")));
    }
    for (i, arm) in arms.iter().enumerate() {
        let name = arm.name.trim();
        if name.is_empty() || name.chars().count() > 64 {
            return Err(ApiError::Validation(format!(
                "arms[{i}].name must be 1 to 64 characters"
            )));
        }
        if arms[..i].iter().any(|a| a.name == arm.name) {
            return Err(ApiError::Validation(format!(
                "arms: the name {:?} is used twice",
                arm.name
            )));
        }
    }
    Ok(())
}

/// The tickets an experiment replays: those named, or those its filter picks.
async fn originals(
    state: &AppState,
    project: crate::domain::ProjectId,
    tickets: Option<Vec<String>>,
    filter: Option<ExperimentFilter>,
) -> ApiResult<Vec<Ticket>> {
    let originals = match (tickets, filter) {
        (Some(refs), None) => {
            if refs.is_empty() || refs.len() > MAX_TICKETS {
                return Err(ApiError::Validation(format!(
                    "tickets must name 1 to {MAX_TICKETS} tickets"
                )));
            }
            let mut found: Vec<Ticket> = Vec::with_capacity(refs.len());
            for reference in refs {
                let ticket = transitions::find(&state.pool, project, &reference).await?;
                if !found.iter().any(|t| t.id == ticket.id) {
                    found.push(ticket);
                }
            }
            found
        }
        (None, Some(filter)) => {
            let limit = filter.limit.unwrap_or(20);
            if !(1..=MAX_TICKETS as i64).contains(&limit) {
                return Err(ApiError::Validation(format!(
                    "filter.limit must be between 1 and {MAX_TICKETS}"
                )));
            }
            db::tickets::for_experiment(
                &state.pool,
                project,
                filter.label.as_deref(),
                filter.status,
                filter.since,
                limit,
            )
            .await?
        }
        _ => return Err(ApiError::Validation("give exactly one of tickets and filter".into())),
    };
    if originals.is_empty() {
        return Err(ApiError::Validation("the filter picks no ticket".into()));
    }
    Ok(originals)
}

/// List experiments
#[utoipa::path(get, path = "/experiments", tag = "experiments",
    responses((status = 200, body = ExperimentList), (status = 401, body = ErrorBody)))]
pub async fn list_experiments(State(state): State<AppState>, caller: Caller) -> ApiResult<Json<ExperimentList>> {
    let rows = db::experiments::list(&state.pool, caller.project_id(), 100).await?;
    let mut items = Vec::with_capacity(rows.len());
    for row in rows {
        items.push(transitions::experiments::view(&state.pool, row).await?);
    }
    Ok(Json(ExperimentList { items }))
}

/// Show an experiment: each arm's figures, and each ticket's results side by side
#[utoipa::path(get, path = "/experiments/{id}", tag = "experiments",
    params(("id" = Uuid, Path, description = "The experiment's id")),
    responses((status = 200, body = Experiment), (status = 404, body = ErrorBody), (status = 400, body = ErrorBody)))]
pub async fn get_experiment(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> ApiResult<Json<Experiment>> {
    let row = db::experiments::get(&state.pool, caller.project_id(), id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no experiment {id}")))?;
    Ok(Json(transitions::experiments::view(&state.pool, row).await?))
}

/// Cancel an experiment and its open replays and judges
#[utoipa::path(post, path = "/experiments/{id}/cancel", tag = "experiments",
    params(("id" = Uuid, Path, description = "The experiment's id")),
    responses((status = 200, body = Experiment), (status = 404, body = ErrorBody),
        (status = 409, description = "The experiment is done", body = ErrorBody), (status = 400, body = ErrorBody)))]
pub async fn cancel_experiment(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> ApiResult<Json<Experiment>> {
    let experiment = transitions::experiments::cancel(&state.pool, caller.project_id(), id)
        .await
        .map_err(missing_experiment)?;
    state.hub.wake();
    Ok(Json(experiment))
}

/// Delete an experiment (what still runs of it is cancelled; its tickets stay)
#[utoipa::path(delete, path = "/experiments/{id}", tag = "experiments",
    params(("id" = Uuid, Path, description = "The experiment's id")),
    responses((status = 204, description = "Deleted"), (status = 404, body = ErrorBody), (status = 400, body = ErrorBody)))]
pub async fn delete_experiment(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> ApiResult<StatusCode> {
    transitions::experiments::delete(&state.pool, caller.project_id(), id)
        .await
        .map_err(missing_experiment)?;
    state.hub.wake();
    Ok(StatusCode::NO_CONTENT)
}

fn missing_experiment(err: DeskError) -> ApiError {
    match err {
        DeskError::NotFound(id) => ApiError::NotFound(format!("no experiment {id}")),
        other => other.into(),
    }
}
