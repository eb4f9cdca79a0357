//! `POST /v1/tickets/{ticket}/questions/{id}`: a person's answer to the question an agent asked
//! with `ask_human` (the ticket's `pending_question`).

use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

use super::access::Caller;
use super::error::{ApiResult, ErrorBody};
use super::extract::{ApiJson, ApiPath};
use super::AppState;
use crate::domain::Ticket;
use crate::transitions::questions::{self, AnsweredBy};

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerQuestion {
    /// The answer: one of the question's `choices`, or JSON its `response_schema` accepts (any
    /// JSON but null when it has neither). It returns to the model as the `ask_human` call's result.
    #[schema(value_type = Value)]
    pub answer: Value,
}

/// Answer a question an agent asked
///
/// The answer is checked against the question's `choices` or `response_schema` (422 naming the
/// failing path, and nothing changes); then `question.answered` is emitted and the ticket goes
/// back to `todo` (unless calls still wait for approval), and its agent gets the answer.
#[utoipa::path(post, path = "/tickets/{ticket}/questions/{id}", tag = "tickets", request_body = AnswerQuestion,
    params(("ticket" = String, Path, description = "Ticket id or key"),
        ("id" = Uuid, Path, description = "The question's id, as in `pending_question`")),
    responses((status = 200, description = "The ticket after the answer", body = Ticket),
        (status = 404, description = "No such ticket, or no such question", body = ErrorBody),
        (status = 409, description = "Already answered or expired, or the ticket is finished", body = ErrorBody),
        (status = 422, description = "The answer does not fit the question", body = ErrorBody),
        (status = 400, body = ErrorBody)))]
pub async fn answer_question(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((reference, id)): ApiPath<(String, Uuid)>,
    ApiJson(req): ApiJson<AnswerQuestion>,
) -> ApiResult<Json<Ticket>> {
    let ticket = questions::answer_question(
        &state.pool,
        caller.project_id(),
        &reference,
        id,
        req.answer,
        AnsweredBy::Api,
    )
    .await?;
    state.hub.wake();
    Ok(Json(ticket))
}
