//! JSON Schema (draft 2020-12) compilation and validation, shared by the desk (ticket result
//! schemas) and the tools (tool inputs). Messages are written for models: every error says where
//! it is (JSON pointer) and large values are summarised so a 20 000-character string does not come
//! back verbatim.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use jsonschema::{ValidationError, Validator};
use serde_json::Value;

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

/// Checks an instance against a compiled validator; Err as for [`validate_against`].
pub fn check(validator: &Validator, instance: &Value) -> Result<(), String> {
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

#[cfg(test)]
mod tests {
    use super::*;
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
}
