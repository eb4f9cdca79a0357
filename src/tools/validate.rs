//! Schema compilation and validation with messages written for models: every
//! error says where it is (JSON pointer) and large values are summarised so a
//! 20 000-character string does not come back verbatim in the tool error.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use jsonschema::{ValidationError, Validator};
use serde_json::Value;

use super::repair::{coerce_to_schema, repair_json};

/// Errors listed in one message; the rest are only counted.
const MAX_ERRORS: usize = 10;
/// Strings longer than this (in chars) are summarised instead of shown.
const MAX_SHOWN_CHARS: usize = 200;

/// Compiles a JSON Schema (draft 2020-12) after checking it against the meta-schema. Err(message) says what is wrong in one line.
pub fn compile_schema(schema: &serde_json::Value) -> Result<jsonschema::Validator, String> {
    if let Err(error) = jsonschema::draft202012::meta::validate(schema) {
        return Err(format!("invalid JSON Schema: {}", describe(&error)));
    }
    jsonschema::draft202012::new(schema).map_err(|error| format!("invalid JSON Schema: {}", describe(&error)))
}

/// Compiled validators by schema text, so that a tool call or a result is not checked by a
/// validator compiled anew each time: compiling was most of a tool call's CPU. Cleared whole when
/// full; ticket schemas are user input, so the set is bounded.
static VALIDATORS: LazyLock<Mutex<HashMap<String, Arc<Validator>>>> = LazyLock::new(Default::default);
const MAX_CACHED_VALIDATORS: usize = 256;

/// [`compile_schema`], once per distinct schema.
pub fn cached_validator(schema: &Value) -> Result<Arc<Validator>, String> {
    let key = schema.to_string();
    // A poisoned lock only means another thread panicked while holding it; the map is still whole.
    if let Some(validator) = VALIDATORS.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(validator.clone());
    }
    let validator = Arc::new(compile_schema(schema)?);
    let mut cache = VALIDATORS.lock().unwrap_or_else(|e| e.into_inner());
    if cache.len() >= MAX_CACHED_VALIDATORS {
        cache.clear();
    }
    cache.insert(key, validator.clone());
    Ok(validator)
}

/// Validates an instance; Err holds a readable message listing each error with its JSON pointer path, e.g. "/answer: \"x\" is not of type \"integer\"; (root): \"name\" is a required property". At most ~10 errors listed.
pub fn validate_against(schema: &serde_json::Value, instance: &serde_json::Value) -> Result<(), String> {
    let validator = cached_validator(schema)?;
    check(&validator, instance)
}

fn check(validator: &Validator, instance: &Value) -> Result<(), String> {
    let mut messages = Vec::new();
    let mut total = 0usize;
    for error in validator.iter_errors(instance) {
        total += 1;
        if messages.len() < MAX_ERRORS {
            messages.push(describe(&error));
        }
    }
    if total == 0 {
        return Ok(());
    }
    let mut message = messages.join("; ");
    if total > messages.len() {
        message.push_str(&format!("; … and {} more errors", total - messages.len()));
    }
    Err(message)
}

/// `path: message`, with the offending value summarised when it is large.
fn describe(error: &ValidationError<'_>) -> String {
    let path = match error.instance_path.as_str() {
        "" => "(root)",
        p => p,
    };
    let text = if error.instance.to_string().chars().count() > MAX_SHOWN_CHARS {
        error.masked_with(summarize(&error.instance)).to_string()
    } else {
        error.to_string()
    };
    // Keep the whole error on one line whatever the instance contained.
    format!("{path}: {}", text.replace('\n', " "))
}

/// A compact rendering of a value for error messages: long strings become
/// `string(N chars…)`, large arrays/objects `array(N items)`/`object(N fields)`.
pub(crate) fn summarize(value: &Value) -> String {
    match value {
        Value::String(s) => {
            let chars = s.chars().count();
            if chars > MAX_SHOWN_CHARS {
                format!("string({chars} chars…)")
            } else {
                value.to_string()
            }
        }
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(summarize).collect();
            let shown = format!("[{}]", inner.join(", "));
            if shown.chars().count() > MAX_SHOWN_CHARS {
                format!("array({} items)", items.len())
            } else {
                shown
            }
        }
        Value::Object(map) => {
            let inner: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{}: {}", Value::String(k.clone()), summarize(v)))
                .collect();
            let shown = format!("{{{}}}", inner.join(", "));
            if shown.chars().count() > MAX_SHOWN_CHARS {
                format!("object({} fields)", map.len())
            } else {
                shown
            }
        }
        other => other.to_string(),
    }
}

/// Full preparation of a tool call's raw arguments for dispatch: repair_json, then coerce_to_schema, then validate against `tool_schema`.
/// Ok(input) is the repaired input that is run, stored and shown. Err(message) is what goes back to the model as a tool error: it names the tool, says which required fields are missing or wrong, lists the fields received, and summarises large values (a string over 200 chars shown as `string(20000 chars…)`).
pub fn prepare_tool_input(
    tool_name: &str,
    tool_schema: &serde_json::Value,
    raw_arguments: &str,
) -> Result<serde_json::Value, String> {
    let validator = cached_validator(tool_schema)
        .map_err(|e| format!("Tool `{tool_name}` cannot be called: its input schema is broken ({e})."))?;
    let (repaired, was_repaired) = repair_json(raw_arguments);
    let input = coerce_to_schema(repaired, tool_schema);
    let Err(problems) = check(&validator, &input) else {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::specs::{builtin, CLOSE_TICKET, HANDOVER_TICKET};
    use serde_json::json;

    #[test]
    fn a_schema_is_compiled_once_and_the_cache_stays_bounded() {
        let schema = json!({"type": "object", "properties": {"cached": {"type": "integer"}}});
        let first = cached_validator(&schema).unwrap();
        assert!(Arc::ptr_eq(&first, &cached_validator(&schema).unwrap()));
        let other = cached_validator(&json!({"type": "object", "properties": {"other": {"type": "string"}}})).unwrap();
        assert!(!Arc::ptr_eq(&first, &other));
        for n in 0..MAX_CACHED_VALIDATORS + 5 {
            cached_validator(&json!({"maxLength": n})).unwrap();
        }
        assert!(VALIDATORS.lock().unwrap().len() <= MAX_CACHED_VALIDATORS);
        assert!(cached_validator(&json!({"type": "invalid_type"})).is_err());
    }

    #[test]
    fn compiles_a_valid_schema() {
        let validator = compile_schema(&json!({"type": "object", "properties": {"a": {"type": "integer"}}})).unwrap();
        assert!(validator.is_valid(&json!({"a": 1})));
        assert!(!validator.is_valid(&json!({"a": "x"})));
        assert!(compile_schema(&json!(true)).is_ok());
    }

    #[test]
    fn rejects_an_invalid_schema_in_one_line() {
        let err = compile_schema(&json!({"type": "invalid_type"})).unwrap_err();
        assert!(err.starts_with("invalid JSON Schema: /type:"), "{err}");
        assert!(!err.contains('\n'));
        let err = compile_schema(&json!({"properties": {"a": {"minLength": "five"}}})).unwrap_err();
        assert!(err.contains("/properties/a/minLength"), "{err}");
        assert!(compile_schema(&json!(42)).is_err());
    }

    #[test]
    fn error_message_lists_paths_and_reasons() {
        let schema = json!({
            "type": "object",
            "properties": {"answer": {"type": "integer"}, "name": {"type": "string"}},
            "required": ["name"]
        });
        assert!(validate_against(&schema, &json!({"name": "n", "answer": 1})).is_ok());
        let err = validate_against(&schema, &json!({"answer": "x"})).unwrap_err();
        assert!(err.contains(r#"/answer: "x" is not of type "integer""#), "{err}");
        assert!(err.contains(r#"(root): "name" is a required property"#), "{err}");
        assert_eq!(err.matches("; ").count(), 1, "{err}");
    }

    #[test]
    fn nested_paths_use_json_pointers() {
        let schema = json!({"type": "object", "properties": {"list": {"type": "array", "items": {"type": "boolean"}}}});
        let err = validate_against(&schema, &json!({"list": [true, 3]})).unwrap_err();
        assert!(err.starts_with("/list/1: 3 is not of type \"boolean\""), "{err}");
    }

    #[test]
    fn at_most_ten_errors_are_listed() {
        let schema = json!({"type": "array", "items": {"type": "string"}});
        let err = validate_against(&schema, &json!((0..25).collect::<Vec<_>>())).unwrap_err();
        assert_eq!(err.matches("is not of type").count(), 10, "{err}");
        assert!(err.ends_with("… and 15 more errors"), "{err}");
    }

    #[test]
    fn large_values_are_summarised_in_errors() {
        let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
        let long = "x".repeat(20_000);
        let err = validate_against(&schema, &json!({ "n": long })).unwrap_err();
        assert_eq!(err, "/n: string(20000 chars…) is not of type \"integer\"");
    }

    #[test]
    fn invalid_schema_is_reported_by_validate_against() {
        let err = validate_against(&json!({"type": 5}), &json!(1)).unwrap_err();
        assert!(err.starts_with("invalid JSON Schema"), "{err}");
    }

    #[test]
    fn summarize_shapes() {
        assert_eq!(summarize(&json!("short")), "\"short\"");
        assert_eq!(summarize(&json!("é".repeat(201))), "string(201 chars…)");
        assert_eq!(summarize(&json!({"a": [1, 2]})), "{\"a\": [1, 2]}");
        assert_eq!(summarize(&json!(vec!["y".repeat(50); 10])), "array(10 items)");
        assert_eq!(
            summarize(&json!({"big": "z".repeat(500)})),
            "{\"big\": string(500 chars…)}"
        );
    }

    fn close_schema() -> Value {
        builtin(CLOSE_TICKET).unwrap().input_schema.clone()
    }

    #[test]
    fn prepare_accepts_a_good_call() {
        assert_eq!(
            prepare_tool_input(CLOSE_TICKET, &close_schema(), r#"{"result": {"ok": true}}"#),
            Ok(json!({"result": {"ok": true}}))
        );
    }

    #[test]
    fn prepare_repairs_a_truncated_close_ticket_call() {
        assert_eq!(
            prepare_tool_input(CLOSE_TICKET, &close_schema(), r#"{"result": "The answer is 4"#),
            Ok(json!({"result": "The answer is 4"}))
        );
    }

    #[test]
    fn prepare_reports_a_call_cut_before_its_value() {
        let err = prepare_tool_input(CLOSE_TICKET, &close_schema(), r#"{"resu"#).unwrap_err();
        assert!(err.contains("`close_ticket`"), "{err}");
        assert!(err.contains("Missing required fields: result."), "{err}");
        assert!(err.contains("Fields received: none."), "{err}");
        assert!(err.contains("were not valid JSON (6 chars"), "{err}");
    }

    #[test]
    fn prepare_coerces_before_validating() {
        let schema = json!({
            "type": "object",
            "properties": {"count": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}},
            "required": ["count"],
            "additionalProperties": false
        });
        let err = prepare_tool_input("t", &schema, r#"{"count": "3", "tags": "a", "extra": null"#).unwrap_err();
        assert!(
            err.contains("Additional properties are not allowed ('extra' was unexpected)"),
            "{err}"
        );
        assert!(
            err.contains("Fields received: count: 3, tags: [\"a\"], extra: null."),
            "{err}"
        );
        assert_eq!(
            prepare_tool_input("t", &schema, r#"{"count": "3", "tags": "a""#),
            Ok(json!({"count": 3, "tags": ["a"]}))
        );
    }

    #[test]
    fn prepare_error_names_wrong_fields_and_summarises_values() {
        let schema = builtin(HANDOVER_TICKET).unwrap().input_schema.clone();
        let raw = json!({"to": "reviewer", "result": "r".repeat(20_000), "extra": 1}).to_string();
        let err = prepare_tool_input(HANDOVER_TICKET, &schema, &raw).unwrap_err();
        assert!(
            err.starts_with("Invalid arguments for tool `handover_ticket`."),
            "{err}"
        );
        assert!(err.contains("Missing required fields: task."), "{err}");
        assert!(err.contains("\"task\" is a required property"), "{err}");
        assert!(err.contains("extra"), "{err}");
        assert!(
            err.contains("Fields received: to: \"reviewer\", result: string(20000 chars…), extra: 1."),
            "{err}"
        );
        assert!(!err.contains("rrrrrrrrrr"), "{err}");
        assert!(!err.contains("were not valid JSON"), "{err}");
    }

    #[test]
    fn prepare_rejects_non_object_arguments() {
        let err = prepare_tool_input(CLOSE_TICKET, &close_schema(), "[1, 2]").unwrap_err();
        assert!(err.contains("must be a JSON object, received: [1, 2]"), "{err}");
    }

    #[test]
    fn prepare_reports_a_broken_tool_schema() {
        let err = prepare_tool_input("bad", &json!({"type": "nope"}), "{}").unwrap_err();
        assert!(err.starts_with("Tool `bad` cannot be called"), "{err}");
    }
}
