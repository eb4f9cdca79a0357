//! Preparation of a model's raw tool-call arguments for dispatch: repair, coercion to the tool's
//! schema, validation, and an error message that tells the model how to call again.

use jsonschema::Validator;
use serde_json::Value;

use super::coerce::coerce_to_schema;
use super::repair::repair_json;
use crate::schema::{cached_validator, check, summarize};

/// Full preparation of a tool call's raw arguments for dispatch: repair_json, then coerce_to_schema, then validate against `tool_schema`.
/// Ok(input) is the repaired input that is run, stored and shown. Err(message) is what goes back to the model as a tool error: it names the tool, says which required fields are missing or wrong, lists the fields received, and summarises large values (a string over 200 chars shown as `string(20000 chars…)`).
pub fn prepare_tool_input(tool_name: &str, tool_schema: &Value, raw_arguments: &str) -> Result<Value, String> {
    let validator = cached_validator(tool_schema)
        .map_err(|e| format!("Tool `{tool_name}` cannot be called: its input schema is broken ({e})."))?;
    prepare_with(tool_name, tool_schema, &validator, raw_arguments)
}

/// [`prepare_tool_input`] with the schema already compiled (a registered tool keeps its validator).
pub fn prepare_with(
    tool_name: &str,
    tool_schema: &Value,
    validator: &Validator,
    raw_arguments: &str,
) -> Result<Value, String> {
    let (repaired, was_repaired) = repair_json(raw_arguments);
    let input = coerce_to_schema(repaired, tool_schema);
    let Err(problems) = check(validator, &input) else {
        return Ok(input);
    };

    let mut message = format!("Invalid arguments for tool `{tool_name}`.");
    let missing = missing_required(tool_schema, &input);
    if !missing.is_empty() {
        message.push_str(&format!(" Missing required fields: {}.", missing.join(", ")));
    }
    message.push_str(&format!(" Problems: {problems}."));
    match &input {
        Value::Object(map) if map.is_empty() => message.push_str(" Fields received: none."),
        Value::Object(map) => {
            let fields: Vec<String> = map.iter().map(|(k, v)| format!("{k}: {}", summarize(v))).collect();
            message.push_str(&format!(" Fields received: {}.", fields.join(", ")));
        }
        other => message.push_str(&format!(
            " The arguments must be a JSON object, received: {}.",
            summarize(other)
        )),
    }
    if was_repaired {
        message.push_str(&format!(
            " The arguments were not valid JSON ({} chars, possibly cut off) and were repaired as far as possible.",
            raw_arguments.chars().count()
        ));
    }
    message.push_str(&format!(
        " Call `{tool_name}` again with complete, valid JSON arguments that match its schema."
    ));
    Err(message)
}

/// Required top-level fields absent from the input, in schema order.
fn missing_required(schema: &Value, input: &Value) -> Vec<String> {
    let Some(required) = schema.get("required").and_then(Value::as_array) else {
        return Vec::new();
    };
    required
        .iter()
        .filter_map(Value::as_str)
        .filter(|name| input.get(*name).is_none())
        .map(str::to_string)
        .collect()
}
