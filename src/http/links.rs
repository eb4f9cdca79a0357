//! `/links/approvals/{token}` and `/links/questions/{token}`: the signed links of a call that waits
//! for approval and of a question (`ask_human`), for people who never open the desk (a chat
//! message, an e-mail). `GET` shows a small page (the tool and its input, or the question, the
//! ticket's task, and a form; no script needed); `POST` answers, without an API token: an approval
//! with an optional `reason`, a question with its answer (form or JSON). The token is the
//! authority (`domain::link`); a link works once and only while its call waits, then answers 410
//! with what became of the call. Links are not in the OpenAPI document (they serve pages) and
//! never appear in logs (see `http::router`).

mod question_page;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};

use super::error::{ApiError, ApiResult};
use super::AppState;
use crate::db;
use crate::domain::link::{CallLink, LinkAction};
use crate::domain::{Approval, Decision, Ticket};
use crate::transitions;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/links/approvals/{token}", get(show).post(answer))
        .route(
            "/links/questions/{token}",
            get(question_page::show).post(question_page::answer),
        )
}

/// The ticket and call a link names, when its signature holds, it does one of `actions`, and the
/// ticket exists.
async fn open(
    state: &AppState,
    token: &str,
    actions: &[LinkAction],
) -> ApiResult<Result<(CallLink, Ticket), Response>> {
    let link = state
        .links
        .verify(token, actions)
        .ok_or_else(|| ApiError::NotFound("no such link".into()))?;
    let Some(ticket) = db::tickets::find_by_id(&state.pool, link.ticket_id).await? else {
        // A genuine link whose ticket was deleted: gone, not unknown.
        let body = "<h1>This link no longer works</h1><p>The ticket it answered was deleted.</p>";
        return Ok(Err(page(StatusCode::GONE, "Link used", body)));
    };
    Ok(Ok((link, ticket)))
}

/// The call, while it waits for an answer.
fn waiting<'t>(ticket: &'t Ticket, link: &CallLink) -> Option<&'t Approval> {
    if ticket.status.is_terminal() {
        return None;
    }
    ticket
        .approvals
        .iter()
        .find(|a| a.call_id == link.call_id && a.decision.is_none())
}

const APPROVAL_LINKS: &[LinkAction] = &[LinkAction::Approve, LinkAction::Deny];

async fn show(State(state): State<AppState>, Path(token): Path<String>) -> ApiResult<Response> {
    let (link, ticket) = match open(&state, &token, APPROVAL_LINKS).await? {
        Ok(opened) => opened,
        Err(gone) => return Ok(gone),
    };
    let Some(approval) = waiting(&ticket, &link) else {
        return gone(&state, &ticket, &link).await;
    };
    let approve = link.action == LinkAction::Approve;
    let verb = if approve { "Approve" } else { "Deny" };
    let input = serde_json::to_string_pretty(&approval.input).unwrap_or_default();
    let body = format!(
        "<h1>{verb} a call of {tool}?</h1>\
         <p>Ticket <b>{key}</b> waits for a person's answer.</p>\
         <h2>Task</h2><pre>{task}</pre>\
         <h2>The call</h2><p><code>{tool}</code></p><pre>{input}</pre>\
         <form method=\"post\"><label for=\"reason\">Reason (optional)</label><br>\
         <textarea id=\"reason\" name=\"reason\" rows=\"3\" cols=\"60\"></textarea><br>\
         <button type=\"submit\">{verb}</button></form>",
        tool = escape(&approval.tool_name),
        key = escape(&ticket.key),
        task = escape(&ticket.task_text()),
        input = escape(&input),
    );
    Ok(page(StatusCode::OK, &format!("{verb} {}", approval.tool_name), &body))
}

async fn answer(
    State(state): State<AppState>,
    Path(token): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    let (link, ticket) = match open(&state, &token, APPROVAL_LINKS).await? {
        Ok(opened) => opened,
        Err(gone) => return Ok(gone),
    };
    if waiting(&ticket, &link).is_none() {
        return gone(&state, &ticket, &link).await;
    }
    let reason = reason(&headers, &body)?;
    let approve = link.action == LinkAction::Approve;
    let decision = transitions::Decision {
        call_id: link.call_id.clone(),
        approve,
        reason,
    };
    let answered = transitions::answer_approvals(
        &state.pool,
        ticket.project,
        &ticket.id.to_string(),
        transitions::Decisions::Each(vec![decision]),
    )
    .await;
    let ticket = match answered {
        Ok(ticket) => ticket,
        // Answered meanwhile (the other link, the API): what became of it.
        Err(transitions::DeskError::Conflict(_) | transitions::DeskError::Missing(_)) => {
            return gone(&state, &ticket, &link).await
        }
        Err(other) => return Err(other.into()),
    };
    state.hub.wake();
    if wants_json(&headers) {
        return Ok(Json(ticket).into_response());
    }
    let done = if approve { "approved" } else { "denied" };
    let body = format!(
        "<h1>The call was {done}</h1><p>Ticket <b>{}</b> goes on. You can close this page.</p>",
        escape(&ticket.key)
    );
    Ok(page(StatusCode::OK, done, &body))
}

/// 410: the link was used, or its call was answered otherwise, or its ticket ended.
async fn gone(state: &AppState, ticket: &Ticket, link: &CallLink) -> ApiResult<Response> {
    let answered = ticket.approvals.iter().find(|a| a.call_id == link.call_id);
    let what = match answered.and_then(|a| a.decision) {
        Some(Decision::Approved) => "It was approved.".to_owned(),
        Some(Decision::Denied) => "It was denied.".to_owned(),
        None if ticket.status.is_terminal() => format!("Its ticket is {}.", ticket.status.as_str()),
        None => {
            let mut conn = state.pool.acquire().await?;
            match db::events::call_answer(&mut conn, ticket.id, &link.call_id).await? {
                Some(outcome) => format!("It was {outcome}."),
                None => "It no longer waits for an answer.".to_owned(),
            }
        }
    };
    let body = format!(
        "<h1>This link no longer works</h1><p>The call it answered on ticket <b>{}</b> does not wait any more. {}</p>",
        escape(&ticket.key),
        escape(&what)
    );
    Ok(page(StatusCode::GONE, "Link used", &body))
}

/// The optional `reason` of a form or a JSON body.
fn reason(headers: &HeaderMap, body: &[u8]) -> ApiResult<Option<String>> {
    if body.is_empty() {
        return Ok(None);
    }
    let reason = if is_form(headers) {
        url::form_urlencoded::parse(body)
            .find(|(name, _)| name == "reason")
            .map(|(_, value)| value.into_owned())
    } else {
        let value: serde_json::Value = serde_json::from_slice(body)
            .map_err(|_| ApiError::BadRequest("the body is a form or a JSON object with an optional reason".into()))?;
        match value.get("reason") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            Some(_) => return Err(ApiError::Validation("reason must be text".into())),
        }
    };
    let reason = reason.map(|r| r.trim().to_owned()).filter(|r| !r.is_empty());
    if reason.as_ref().is_some_and(|r| r.len() > 4000) {
        return Err(ApiError::Validation("reason must be at most 4000 bytes".into()));
    }
    Ok(reason)
}

fn is_form(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/x-www-form-urlencoded"))
}

fn wants_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("application/json") && !a.contains("text/html"))
}

fn page(status: StatusCode, title: &str, body: &str) -> Response {
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta name=\"referrer\" content=\"no-referrer\"><title>{} · agentdesk</title>\
         <style>body{{font:16px system-ui,sans-serif;max-width:42rem;margin:2rem auto;padding:0 1rem}}\
         pre{{background:#f3f3f3;padding:.5rem;overflow:auto;white-space:pre-wrap}}\
         button{{font:inherit;padding:.4rem 1.2rem}}</style></head><body>{body}</body></html>",
        escape(title)
    );
    // The page holds the link's token in its URL: it is not kept or passed on.
    // No script, no frames (a page that approves must not be clickjacked), forms post here only.
    let headers = [
        (header::CACHE_CONTROL, "no-store"),
        (header::REFERRER_POLICY, "no-referrer"),
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
        (header::X_FRAME_OPTIONS, "DENY"),
    ];
    (status, headers, Html(html)).into_response()
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}
