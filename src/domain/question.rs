//! Questions an agent asks a person with the built-in `ask_human` tool. A question is the
//! `ask_human` call of a step, kept with the step's other calls that wait for a person (the
//! ticket's `approvals`, see `Approval::question`): it waits, is answered (by the API, its signed
//! `answer_url` or a comment) or expires like an approval, and its answer is the call's result.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;
use uuid::Uuid;

/// The most choices a question may offer, and the longest choice.
pub const MAX_CHOICES: usize = 50;
pub const MAX_CHOICE_CHARS: usize = 500;
/// The longest question.
pub const MAX_QUESTION_CHARS: usize = 8000;

/// What the desk does when nobody answers a question by its deadline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum QuestionTimeout {
    /// The ticket fails (`question_expired`).
    #[default]
    Fail,
    /// The model is told that nobody answered, and goes on.
    Continue,
}

impl QuestionTimeout {
    pub fn as_str(self) -> &'static str {
        match self {
            QuestionTimeout::Fail => "fail",
            QuestionTimeout::Continue => "continue",
        }
    }

    pub fn parse(s: &str) -> Option<QuestionTimeout> {
        match s {
            "fail" => Some(QuestionTimeout::Fail),
            "continue" => Some(QuestionTimeout::Continue),
            _ => None,
        }
    }
}

/// A question as the `ask_human` call holds it while it waits (inside its `Approval`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Question {
    pub id: Uuid,
    pub question: String,
    #[serde(default)]
    pub response_schema: Option<Value>,
    #[serde(default)]
    pub choices: Option<Vec<String>>,
    /// The signed link that answers it without a token.
    #[serde(default)]
    pub answer_url: Option<String>,
    /// What happens at its deadline (the call's `expires_at`), when it has one.
    #[serde(default)]
    pub on_timeout: Option<QuestionTimeout>,
}

/// A question that waits for an answer, as a ticket shows it (`pending_question`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PendingQuestion {
    /// Answer it with `POST /v1/tickets/{ticket}/questions/{id}`.
    pub id: Uuid,
    pub question: String,
    /// The JSON Schema an answer must match; null: any answer.
    #[serde(default)]
    #[schema(value_type = Option<Object>, required = true)]
    pub response_schema: Option<Value>,
    /// The answers to choose from; null: any answer (that matches the schema).
    #[serde(default)]
    #[schema(required = true)]
    pub choices: Option<Vec<String>>,
    /// Opens a page with a form that answers it, without an API token; works once, while it waits.
    #[serde(default)]
    #[schema(required = true)]
    pub answer_url: Option<String>,
    /// When the desk stops waiting (the agent's `on_question_timeout` decides what then); null: never.
    #[serde(default)]
    #[schema(required = true)]
    pub expires_at: Option<DateTime<Utc>>,
}

/// A form field of a question's answer page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FieldKind {
    Text,
    Integer,
    Number,
    Boolean,
    /// One of these strings.
    Choice(Vec<String>),
}

/// How an answer page asks for the answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AnswerForm {
    /// One field `answer`: pick one of the choices.
    Choices(Vec<String>),
    /// One field `answer`: free text, read as a string.
    Text,
    /// One field `answer`: JSON text (the schema wants something other than a string).
    Json,
    /// One field per property of an object schema of plain fields: (name, kind, required).
    Fields(Vec<(String, FieldKind, bool)>),
    /// The schema is too complex for a form: only the API answers it.
    ApiOnly,
}

/// The form of a question: its choices, else the schema's plain fields, else a text or JSON box.
pub fn answer_form(response_schema: Option<&Value>, choices: Option<&[String]>) -> AnswerForm {
    if let Some(choices) = choices {
        return AnswerForm::Choices(choices.to_vec());
    }
    let Some(schema) = response_schema else {
        return AnswerForm::Text;
    };
    if let Some(kind) = plain_field(schema) {
        return match kind {
            FieldKind::Text => AnswerForm::Text,
            FieldKind::Choice(values) => AnswerForm::Choices(values),
            _ => AnswerForm::Json,
        };
    }
    if schema.get("type").and_then(Value::as_str) == Some("object") {
        let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
            return AnswerForm::ApiOnly;
        };
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut fields = vec![];
        for (name, property) in properties {
            let Some(kind) = plain_field(property) else {
                return AnswerForm::ApiOnly;
            };
            fields.push((name.clone(), kind, required.contains(&name.as_str())));
        }
        if fields.is_empty() {
            return AnswerForm::ApiOnly;
        }
        return AnswerForm::Fields(fields);
    }
    // Any other schema: the answer is written as JSON.
    AnswerForm::Json
}

/// A schema a single form field can fill: a string, number, integer or boolean, or an enum of
/// strings; None for anything else.
fn plain_field(schema: &Value) -> Option<FieldKind> {
    let object = schema.as_object()?;
    if let Some(values) = object.get("enum").and_then(Value::as_array) {
        let strings: Option<Vec<String>> = values.iter().map(|v| v.as_str().map(str::to_owned)).collect();
        return strings.filter(|s| !s.is_empty()).map(FieldKind::Choice);
    }
    match object.get("type").and_then(Value::as_str)? {
        "string" => Some(FieldKind::Text),
        "integer" => Some(FieldKind::Integer),
        "number" => Some(FieldKind::Number),
        "boolean" => Some(FieldKind::Boolean),
        _ => None,
    }
}

/// The answer a submitted form stands for (its fields by name), before it is checked against the
/// schema; Err says which field could not be read.
pub fn answer_from_form(form: &AnswerForm, fields: &[(String, String)]) -> Result<Value, String> {
    let field = |name: &str| fields.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
    match form {
        AnswerForm::Choices(_) | AnswerForm::Text => match field("answer") {
            Some(text) => Ok(Value::String(text.trim().to_owned())),
            None => Err("the form has no field answer".into()),
        },
        AnswerForm::Json => {
            let text = field("answer").ok_or("the form has no field answer")?;
            serde_json::from_str(text).map_err(|e| format!("answer: not JSON ({e})"))
        }
        AnswerForm::Fields(kinds) => {
            let mut object = Map::new();
            for (name, kind, _) in kinds {
                let text = field(name).map(str::trim).unwrap_or("");
                let value = match kind {
                    // An unchecked box sends nothing: false.
                    FieldKind::Boolean => Value::Bool(matches!(text, "true" | "on" | "yes" | "1")),
                    _ if text.is_empty() => continue,
                    FieldKind::Text | FieldKind::Choice(_) => Value::String(text.to_owned()),
                    FieldKind::Integer => text
                        .parse::<i64>()
                        .map(Value::from)
                        .map_err(|_| format!("{name}: not a whole number"))?,
                    FieldKind::Number => text
                        .parse::<f64>()
                        .ok()
                        .and_then(|n| serde_json::Number::from_f64(n).map(Value::Number))
                        .ok_or_else(|| format!("{name}: not a number"))?,
                };
                object.insert(name.clone(), value);
            }
            Ok(Value::Object(object))
        }
        AnswerForm::ApiOnly => Err("this question is answered through the API only".into()),
    }
}

/// What the model reads as the `ask_human` call's result: a text answer as it is, any other JSON
/// as JSON text.
pub fn answer_text(answer: &Value) -> String {
    match answer {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_form_follows_the_choices_then_the_schemas_plain_fields() {
        let choices = ["yes".to_owned(), "no".to_owned()];
        assert_eq!(answer_form(None, Some(&choices)), AnswerForm::Choices(choices.to_vec()));
        assert_eq!(answer_form(None, None), AnswerForm::Text);
        assert_eq!(answer_form(Some(&json!({"type": "string"})), None), AnswerForm::Text);
        assert_eq!(answer_form(Some(&json!({"type": "integer"})), None), AnswerForm::Json);
        let schema = json!({"type": "object", "required": ["n"],
                            "properties": {"n": {"type": "integer"}, "ok": {"type": "boolean"},
                                           "size": {"enum": ["s", "m"]}}});
        let AnswerForm::Fields(fields) = answer_form(Some(&schema), None) else {
            panic!("plain fields make a form")
        };
        assert_eq!(fields[0], ("n".into(), FieldKind::Integer, true));
        let form = answer_form(Some(&schema), None);
        let answer = answer_from_form(&form, &[("n".into(), "3".into()), ("size".into(), "m".into())]).unwrap();
        assert_eq!(answer, json!({"n": 3, "ok": false, "size": "m"}));
        assert!(answer_from_form(&form, &[("n".into(), "three".into())])
            .unwrap_err()
            .contains("n:"));
        let nested = json!({"type": "object", "properties": {"a": {"type": "object"}}});
        assert_eq!(answer_form(Some(&nested), None), AnswerForm::ApiOnly);
    }
}
