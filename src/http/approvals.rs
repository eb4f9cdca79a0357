//! `POST /v1/tickets/{ticket}/approvals/{call_id}`: a person's answer to a tool call that waits
//! for approval; `POST /v1/tickets/{ticket}/approvals`: several at once, all or nothing.

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

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApprovalDecision {
    pub call_id: String,
    pub approve: bool,
    #[schema(max_length = 4000)]
    pub reason: Option<String>,
}

/// Exactly one of `decisions`, `approve_all` and `deny_all`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerApprovals {
    /// An answer for each of these calls.
    #[serde(default)]
    pub decisions: Option<Vec<ApprovalDecision>>,
    /// true: approve every pending call.
    #[serde(default)]
    pub approve_all: Option<bool>,
    /// true: deny every pending call (with `reason`).
    #[serde(default)]
    pub deny_all: Option<bool>,
    /// With `deny_all` or `approve_all`: the reason given for each.
    #[serde(default)]
    #[schema(max_length = 4000)]
    pub reason: Option<String>,
}

/// Approve or deny several waiting tool calls at once
///
/// All or nothing: an unknown call is 404, one already answered 409, and then none of them is
/// answered. `{"approve_all": true}` and `{"deny_all": true, "reason": …}` answer every pending call.
#[utoipa::path(post, path = "/tickets/{ticket}/approvals", tag = "tickets", request_body = AnswerApprovals,
    params(("ticket" = String, Path, description = "Ticket id or key")),
    responses((status = 200, description = "The ticket after the answers", body = Ticket),
        (status = 404, description = "No such ticket, or a call that does not wait", body = ErrorBody),
        (status = 409, description = "A call already answered, nothing pending, or the ticket is finished", body = ErrorBody),
        (status = 422, body = ErrorBody), (status = 400, body = ErrorBody)))]
pub async fn answer_approvals(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(reference): ApiPath<String>,
    ApiJson(req): ApiJson<AnswerApprovals>,
) -> ApiResult<Json<Ticket>> {
    let too_long = |r: &Option<String>| r.as_ref().is_some_and(|r| r.len() > MAX_REASON_LEN);
    let decisions = match (req.decisions, req.approve_all, req.deny_all) {
        (Some(each), None | Some(false), None | Some(false)) => {
            if each.is_empty() {
                return Err(ApiError::Validation("decisions must name at least one call".into()));
            }
            if req.reason.is_some() {
                return Err(ApiError::Validation(
                    "reason goes inside each decision (it stands alone only with approve_all or deny_all)".into(),
                ));
            }
            let mut seen = std::collections::HashSet::new();
            for d in &each {
                if !seen.insert(d.call_id.as_str()) {
                    return Err(ApiError::Validation(format!("call {:?} is answered twice", d.call_id)));
                }
                if too_long(&d.reason) {
                    return Err(ApiError::Validation(format!(
                        "reason must be at most {MAX_REASON_LEN} bytes"
                    )));
                }
            }
            let each = each
                .into_iter()
                .map(|d| transitions::Decision {
                    call_id: d.call_id,
                    approve: d.approve,
                    reason: d.reason,
                })
                .collect();
            transitions::Decisions::Each(each)
        }
        (None, Some(true), None | Some(false)) | (None, None | Some(false), Some(true)) => {
            if too_long(&req.reason) {
                return Err(ApiError::Validation(format!(
                    "reason must be at most {MAX_REASON_LEN} bytes"
                )));
            }
            transitions::Decisions::All {
                approve: req.approve_all == Some(true),
                reason: req.reason,
            }
        }
        _ => {
            return Err(ApiError::Validation(
                "give exactly one of decisions, approve_all: true and deny_all: true".into(),
            ))
        }
    };
    let ticket = transitions::answer_approvals(&state.pool, caller.project_id(), &reference, decisions).await?;
    state.hub.wake();
    Ok(Json(ticket))
}
