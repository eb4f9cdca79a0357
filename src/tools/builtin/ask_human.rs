//! `ask_human`: asks a person a question and waits for the answer. The call is never run like
//! the others: the agent loop keeps it as the ticket's `pending_question` (see
//! `agent::approvals`), and the person's answer becomes its result on the next claim.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::de::{Deserializer, Error};
use serde::Deserialize;
use serde_json::Value;

use super::params;
use super::shape::BuiltinTool;
use super::ASK_HUMAN;
use crate::domain::question::{MAX_CHOICES, MAX_CHOICE_CHARS, MAX_QUESTION_CHARS};
use crate::tools::{ToolContext, ToolErrorKind, ToolFailure, ToolOutcome};

const DESCRIPTION: &str = "Ask a person a question and wait for the answer, which comes back as this \
    call's result. Use it when you cannot go on without a decision or information only a person \
    has. Give `choices` when the answer is one of a few options, or `response_schema` (a JSON \
    Schema) when it must have a shape; the answer is checked against them. Ask one question at a \
    time; the ticket waits until it is answered.";

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Args {
    /// The question, written for a person who has not seen this ticket.
    #[serde(deserialize_with = "question")]
    pub question: String,
    /// Optional JSON Schema (draft 2020-12) the answer must satisfy.
    #[schemars(extend("type" = "object"))]
    pub response_schema: Option<Value>,
    /// Optional answers to choose from; the answer is one of them.
    #[serde(deserialize_with = "choices")]
    pub choices: Option<Vec<String>>,
}

fn question<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let text = params::required_text(
        d,
        "question",
        "`question` must not be empty",
        "`question` must be a string",
    )?;
    if text.chars().count() > MAX_QUESTION_CHARS {
        return Err(D::Error::custom(format!(
            "`question` must be at most {MAX_QUESTION_CHARS} characters"
        )));
    }
    Ok(text.trim().to_owned())
}

fn choices<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    let Some(list) =
        Option::<Vec<Value>>::deserialize(d).map_err(|_| D::Error::custom("`choices` must be a list of strings"))?
    else {
        return Ok(None);
    };
    if list.is_empty() || list.len() > MAX_CHOICES {
        return Err(D::Error::custom(format!(
            "`choices` must hold 1 to {MAX_CHOICES} strings"
        )));
    }
    let mut choices: Vec<String> = vec![];
    for item in list {
        let Value::String(choice) = item else {
            return Err(D::Error::custom("`choices` must be a list of strings"));
        };
        let choice = choice.trim().to_owned();
        if choice.is_empty() || choice.chars().count() > MAX_CHOICE_CHARS {
            return Err(D::Error::custom(format!(
                "each choice must be 1 to {MAX_CHOICE_CHARS} characters"
            )));
        }
        if !choices.contains(&choice) {
            choices.push(choice);
        }
    }
    Ok(Some(choices))
}

/// A question as the model asked it, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Asked {
    pub question: String,
    pub response_schema: Option<Value>,
    pub choices: Option<Vec<String>>,
}

/// Reads an `ask_human` call's (already schema-checked) input; Err is the error result the
/// model gets instead of a question.
pub fn asked(input: &Value) -> Result<Asked, ToolFailure> {
    static SCHEMA: std::sync::LazyLock<Value> = std::sync::LazyLock::new(crate::tools::args::args_schema::<Args>);
    let args: Args = super::shape::parse_args(&SCHEMA, input)?;
    if let Some(schema) = &args.response_schema {
        crate::transitions::check_schema(schema)
            .map_err(|e| ToolFailure::invalid(format!("invalid `response_schema`: {e}")))?;
        if let Some(choices) = &args.choices {
            // Choices the schema refuses could never be answered.
            if let Some(bad) = choices
                .iter()
                .find(|c| crate::schema::validate_against(schema, &Value::String((*c).clone())).is_err())
            {
                return Err(ToolFailure::invalid(format!(
                    "the choice {bad:?} does not match `response_schema`; give choices the schema accepts"
                )));
            }
        }
    }
    Ok(Asked {
        question: args.question,
        response_schema: args.response_schema,
        choices: args.choices,
    })
}

pub struct AskHuman;

#[async_trait]
impl BuiltinTool for AskHuman {
    const NAME: &'static str = ASK_HUMAN;
    const DESCRIPTION: &'static str = DESCRIPTION;
    const WRITES_NOTHING: bool = false;
    type Args = Args;

    /// Never reached through the loop, which keeps the call as a question instead.
    async fn run(_ctx: &ToolContext<'_>, _args: Args) -> ToolOutcome {
        ToolFailure::new(
            ToolErrorKind::Internal,
            "ask_human waits for a person; it cannot be run here",
        )
        .into()
    }
}
