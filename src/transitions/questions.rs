//! Answers to the questions agents ask people (`ask_human`): by the API, by the question's
//! signed link, or by a comment whose text the question accepts. An answer is checked against
//! the question's `choices` or `response_schema` before anything changes; it is stored on the
//! question's call under the ticket's row lock, with `question.answered`, in one transaction,
//! so two answers cannot both win and a worker's next step reads it whole (and returns it to the
//! model as the call's result).

use serde_json::Value;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::{lock, store_answers, DeskError};
use crate::db;
use crate::domain::question::Question;
use crate::domain::{Decision, EventData, NewEvent, ProjectId, Ticket};

/// The largest answer kept (it goes back to the model).
pub const MAX_ANSWER_BYTES: usize = 65_536;

/// How a question was answered, as `question.answered` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnsweredBy {
    Api,
    Link,
    Comment,
}

impl AnsweredBy {
    pub fn as_str(self) -> &'static str {
        match self {
            AnsweredBy::Api => "api",
            AnsweredBy::Link => "link",
            AnsweredBy::Comment => "comment",
        }
    }
}

/// Whether `answer` answers `question`: one of its choices, or a value its schema accepts. Err
/// names the failing path, as result schemas do.
pub fn check_answer(question: &Question, answer: &Value) -> Result<(), String> {
    if answer.is_null() {
        return Err("answer: required, and not null".into());
    }
    if answer.to_string().len() > MAX_ANSWER_BYTES {
        return Err(format!("answer: at most {MAX_ANSWER_BYTES} bytes of JSON"));
    }
    if let Some(choices) = &question.choices {
        let chosen = answer.as_str().map(str::trim);
        if !chosen.is_some_and(|c| choices.iter().any(|choice| choice == c)) {
            return Err(format!(
                "(root): {} is not one of the choices: {}",
                crate::schema::summarize(answer),
                choices.join(", ")
            ));
        }
    }
    if let Some(schema) = &question.response_schema {
        crate::schema::validate_against(schema, answer)?;
    }
    Ok(())
}

/// A choice as stored: trimmed, as the choices are.
fn normalized(question: &Question, answer: Value) -> Value {
    match (&question.choices, answer) {
        (Some(_), Value::String(s)) => Value::String(s.trim().to_owned()),
        (_, answer) => answer,
    }
}

/// A person's answer to the ticket's question `id`. 404 when it has no such question, 409 when
/// it was answered or expired (or the ticket ended), 422 when the answer does not fit; nothing
/// changes then.
pub async fn answer_question(
    pool: &PgPool,
    project: ProjectId,
    reference: &str,
    id: Uuid,
    answer: Value,
    by: AnsweredBy,
) -> Result<Ticket, DeskError> {
    let mut tx = pool.begin().await?;
    let ticket = lock(&mut tx, project, reference).await?;
    let Some(question) = ticket
        .approvals
        .iter()
        .find_map(|a| a.question.as_ref().filter(|q| q.id == id))
    else {
        // Said whole, so that an answer that lost to another (or to the deadline) knows what won.
        return Err(
            match db::events::question_outcome(&mut tx, ticket.id, id).await?.as_deref() {
                Some("question.answered") => {
                    DeskError::Conflict(format!("the question {id} of {} was already answered", ticket.key))
                }
                Some("question.expired") => DeskError::Conflict(format!(
                    "the question {id} of {} expired: nobody answered it in time",
                    ticket.key
                )),
                Some(_) => DeskError::Conflict(format!(
                    "the question {id} of {} no longer waits: its ticket is {}",
                    ticket.key,
                    ticket.status.as_str()
                )),
                None => DeskError::Missing(format!("{}: no question {id}", ticket.key)),
            },
        );
    };
    check_answer(question, &answer).map_err(DeskError::Invalid)?;
    let answer = normalized(question, answer);
    let ticket = answer_in(&mut tx, ticket.clone(), id, answer, by)
        .await?
        .ok_or_else(|| {
            DeskError::Conflict(format!(
                "the question {id} of {} was already answered or the ticket is {}",
                ticket.key,
                ticket.status.as_str()
            ))
        })?;
    tx.commit().await?;
    Ok(ticket)
}

/// Stores `answer` on the waiting question `id` of a locked ticket with `question.answered`;
/// once nothing else waits, the ticket goes back to `todo`. None when the question does not
/// wait (answered, expired, or the ticket ended). The answer was checked by the caller.
pub(crate) async fn answer_in(
    conn: &mut PgConnection,
    ticket: Ticket,
    id: Uuid,
    answer: Value,
    by: AnsweredBy,
) -> Result<Option<Ticket>, sqlx::Error> {
    let mut approvals = ticket.approvals.clone();
    let Some(call) = approvals
        .iter_mut()
        .find(|a| a.question.as_ref().is_some_and(|q| q.id == id))
    else {
        return Ok(None);
    };
    if !call.is_pending() || ticket.status.is_terminal() {
        return Ok(None);
    }
    call.decision = Some(Decision::Approved);
    call.answer = Some(answer.clone());
    let mut events = vec![NewEvent::new(
        None,
        EventData::QuestionAnswered {
            id,
            call_id: call.call_id.clone(),
            answer,
            by: by.as_str().into(),
        },
    )];
    let requeued = store_answers(conn, &ticket, &approvals, &mut events).await?;
    db::events::append(conn, ticket.id, &events).await?;
    let ticket = match requeued {
        Some(ticket) => ticket,
        None => db::tickets::find_by_id(&mut *conn, ticket.id).await?.unwrap_or(ticket),
    };
    Ok(Some(ticket))
}

/// The answer a comment's text gives the ticket's waiting question, when the question accepts
/// that text as a string.
pub fn comment_answer(ticket: &Ticket, text: &str) -> Option<(Uuid, Value)> {
    let question = ticket
        .approvals
        .iter()
        .filter(|a| a.is_pending())
        .find_map(|a| a.question.as_ref())?;
    let answer = Value::String(text.trim().to_owned());
    check_answer(question, &answer).ok()?;
    Some((question.id, answer))
}
