//! `/links/questions/{token}`: a question's page. `GET` shows the question and a form built from
//! its choices or its schema's plain fields (or says that only the API can answer a schema too
//! complex for a form); `POST` answers with the form's fields or a JSON `{"answer": …}`, checked
//! like an answer through the API.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::Value;

use super::{escape, is_form, open, page, wants_json};
use crate::domain::link::{CallLink, LinkAction};
use crate::domain::question::{answer_form, answer_from_form, AnswerForm, FieldKind, Question};
use crate::domain::Ticket;
use crate::http::error::{ApiError, ApiResult};
use crate::http::AppState;
use crate::transitions::questions::{self, AnsweredBy};
use crate::transitions::DeskError;

const QUESTION_LINKS: &[LinkAction] = &[LinkAction::Answer];

/// The question, while it waits for an answer.
fn waiting<'t>(ticket: &'t Ticket, link: &CallLink) -> Option<&'t Question> {
    if ticket.status.is_terminal() {
        return None;
    }
    ticket
        .approvals
        .iter()
        .find(|a| a.call_id == link.call_id && a.is_pending())
        .and_then(|a| a.question.as_ref())
}

pub(super) async fn show(State(state): State<AppState>, Path(token): Path<String>) -> ApiResult<Response> {
    let (link, ticket) = match open(&state, &token, QUESTION_LINKS).await? {
        Ok(opened) => opened,
        Err(gone) => return Ok(gone),
    };
    let Some(question) = waiting(&ticket, &link) else {
        return Ok(gone(&ticket));
    };
    Ok(question_page(StatusCode::OK, &ticket, question, None))
}

pub(super) async fn answer(
    State(state): State<AppState>,
    Path(token): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    let (link, ticket) = match open(&state, &token, QUESTION_LINKS).await? {
        Ok(opened) => opened,
        Err(gone) => return Ok(gone),
    };
    let Some(question) = waiting(&ticket, &link) else {
        return Ok(gone(&ticket));
    };
    let form = is_form(&headers);
    let answer = if form {
        let fields: Vec<(String, String)> = url::form_urlencoded::parse(&body).into_owned().collect();
        let shape = answer_form(question.response_schema.as_ref(), question.choices.as_deref());
        match answer_from_form(&shape, &fields) {
            Ok(answer) => answer,
            Err(problem) => {
                return Ok(question_page(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    &ticket,
                    question,
                    Some(&problem),
                ))
            }
        }
    } else {
        let value: Value = serde_json::from_slice(&body)
            .map_err(|_| ApiError::BadRequest("the body is a form or a JSON object with an answer".into()))?;
        match value.get("answer") {
            Some(answer) if value.as_object().is_some_and(|o| o.len() == 1) => answer.clone(),
            _ => return Err(ApiError::Validation("the body must be {\"answer\": …}".into())),
        }
    };
    let answered = questions::answer_question(
        &state.pool,
        ticket.project,
        &ticket.id.to_string(),
        question.id,
        answer,
        AnsweredBy::Link,
    )
    .await;
    let after = match answered {
        Ok(after) => after,
        Err(DeskError::Invalid(problem)) if form => {
            return Ok(question_page(
                StatusCode::UNPROCESSABLE_ENTITY,
                &ticket,
                question,
                Some(&problem),
            ))
        }
        // Answered meanwhile (the API, a comment, the deadline): what became of it.
        Err(DeskError::Conflict(_) | DeskError::Missing(_)) => return Ok(gone(&ticket)),
        Err(other) => return Err(other.into()),
    };
    state.hub.wake();
    if wants_json(&headers) || !form {
        return Ok(Json(after).into_response());
    }
    let body = format!(
        "<h1>Thank you</h1><p>Your answer was sent; ticket <b>{}</b> goes on. You can close this page.</p>",
        escape(&ticket.key)
    );
    Ok(page(StatusCode::OK, "Answered", &body))
}

/// 410: the question was answered (by this link or otherwise), expired, or its ticket ended.
fn gone(ticket: &Ticket) -> Response {
    let what = if ticket.status.is_terminal() {
        format!("Its ticket is {}.", ticket.status.as_str())
    } else {
        "It was answered already, or nobody answered it in time.".to_owned()
    };
    let body = format!(
        "<h1>This link no longer works</h1><p>The question it answered on ticket <b>{}</b> does not wait any more. {}</p>",
        escape(&ticket.key),
        escape(&what)
    );
    page(StatusCode::GONE, "Link used", &body)
}

fn question_page(status: StatusCode, ticket: &Ticket, question: &Question, problem: Option<&str>) -> Response {
    let shape = answer_form(question.response_schema.as_ref(), question.choices.as_deref());
    let problem = problem
        .map(|p| format!("<p role=\"alert\"><b>Not accepted:</b> {}</p>", escape(p)))
        .unwrap_or_default();
    let form = match &shape {
        AnswerForm::ApiOnly => format!(
            "<p>The answer has a shape too complex for a form. Answer through the API: \
             <code>POST /v1/tickets/{}/questions/{}</code> with <code>{{\"answer\": …}}</code>.</p>",
            escape(&ticket.key),
            question.id
        ),
        shape => format!(
            "<form method=\"post\">{}<p><button type=\"submit\">Answer</button></p></form>",
            fields_html(shape)
        ),
    };
    let schema = question
        .response_schema
        .as_ref()
        .map(|s| {
            format!(
                "<details><summary>The answer's JSON Schema</summary><pre>{}</pre></details>",
                escape(&serde_json::to_string_pretty(s).unwrap_or_default())
            )
        })
        .unwrap_or_default();
    let body = format!(
        "<h1>A question for you</h1><p>Ticket <b>{key}</b> waits for your answer.</p>\
         <h2>Question</h2><pre>{question}</pre>{problem}{form}{schema}\
         <h2>Task</h2><pre>{task}</pre>",
        key = escape(&ticket.key),
        question = escape(&question.question),
        task = escape(&ticket.task_text()),
    );
    page(status, "Question", &body)
}

/// The form's fields, as plain HTML controls.
fn fields_html(shape: &AnswerForm) -> String {
    match shape {
        AnswerForm::Choices(choices) => choices
            .iter()
            .enumerate()
            .map(|(i, c)| {
                format!(
                    "<p><input type=\"radio\" id=\"c{i}\" name=\"answer\" value=\"{v}\" required> \
                     <label for=\"c{i}\">{v}</label></p>",
                    v = escape(c)
                )
            })
            .collect(),
        AnswerForm::Text => "<p><label for=\"answer\">Your answer</label><br>\
             <textarea id=\"answer\" name=\"answer\" rows=\"4\" cols=\"60\" required></textarea></p>"
            .into(),
        AnswerForm::Json => "<p><label for=\"answer\">Your answer, as JSON</label><br>\
             <textarea id=\"answer\" name=\"answer\" rows=\"4\" cols=\"60\" required></textarea></p>"
            .into(),
        AnswerForm::Fields(fields) => fields
            .iter()
            .map(|(name, kind, required)| {
                let name = escape(name);
                let required = if *required { " required" } else { "" };
                let control = match kind {
                    FieldKind::Text => format!("<input type=\"text\" id=\"{name}\" name=\"{name}\"{required}>"),
                    FieldKind::Integer => {
                        format!("<input type=\"number\" step=\"1\" id=\"{name}\" name=\"{name}\"{required}>")
                    }
                    FieldKind::Number => {
                        format!("<input type=\"number\" step=\"any\" id=\"{name}\" name=\"{name}\"{required}>")
                    }
                    FieldKind::Boolean => {
                        format!("<input type=\"checkbox\" id=\"{name}\" name=\"{name}\" value=\"true\">")
                    }
                    FieldKind::Choice(values) => {
                        let options: String = values
                            .iter()
                            .map(|v| format!("<option>{}</option>", escape(v)))
                            .collect();
                        format!("<select id=\"{name}\" name=\"{name}\"{required}>{options}</select>")
                    }
                };
                format!("<p><label for=\"{name}\">{name}</label><br>{control}</p>")
            })
            .collect(),
        AnswerForm::ApiOnly => String::new(),
    }
}
