//! `POST /v1/tickets/{ticket}/approvals/{call_id}`: a person's answer to a tool call that waits
//! for approval.

use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use utoipa::ToSchema;

use super::access::Caller;
use super::error::{ApiError, ApiResult, ErrorBody};
use super::extract::{ApiJson, ApiPath};
use super::AppState;
use crate::domain::ProjectId;
use crate::domain::Ticket;
use crate::transitions;

/// The longest reason kept (it goes back to the model).
const MAX_REASON_LEN: usize = 4000;

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerApproval {
    /// true runs the call with the ticket's next claim; false returns it to the model as an
    /// error result holding `reason`.
    pub approve: bool,
    /// Shown to the model (a denial) and in the `tool.approved`/`tool.denied` event.
    #[schema(max_length = 4000)]
    pub reason: Option<String>,
}

/// Approve or deny a tool call that waits for approval
///
/// Once every waiting call of the step is answered, a `waiting` ticket goes back to `todo`; the
/// next claim runs the approved calls and returns the denied ones to the model with the reason.
#[utoipa::path(post, path = "/tickets/{ticket}/approvals/{call_id}", tag = "tickets", request_body = AnswerApproval,
    params(("ticket" = String, Path, description = "Ticket id or key"),
        ("call_id" = String, Path, description = "The tool call's id, as in `pending_approvals`")),
    responses((status = 200, description = "The ticket after the answer", body = Ticket),
        (status = 404, description = "No such ticket, or no such call waiting", body = ErrorBody),
        (status = 409, description = "Already answered, or the ticket is finished", body = ErrorBody),
        (status = 422, body = ErrorBody), (status = 400, body = ErrorBody)))]
pub async fn answer_approval(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((reference, call_id)): ApiPath<(String, String)>,
    ApiJson(req): ApiJson<AnswerApproval>,
) -> ApiResult<Json<Ticket>> {
    Ok(Json(
        answer(&state, caller.project_id(), &reference, &call_id, req).await?,
    ))
}

/// Answers a waiting tool call: the endpoint above, and the MCP server's `answer_approval`.
pub async fn answer(
    state: &AppState,
    project: ProjectId,
    reference: &str,
    call_id: &str,
    req: AnswerApproval,
) -> ApiResult<Ticket> {
    if req.reason.as_ref().is_some_and(|r| r.len() > MAX_REASON_LEN) {
        return Err(ApiError::Validation(format!(
            "reason must be at most {MAX_REASON_LEN} bytes"
        )));
    }
    let ticket =
        transitions::answer_approval(&state.pool, project, reference, call_id, req.approve, req.reason).await?;
    state.hub.wake();
    Ok(ticket)
}
