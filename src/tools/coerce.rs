//! Coercion of (repaired) tool arguments toward the tool's JSON Schema. Models often send "3" for
//! an integer, "true" for a boolean, a lone value for a list or null for "not given"; converting
//! where the reading is obvious saves a turn, and validation decides about the rest.

use serde_json::{Map, Value};

/// The JSON Schema type name of a value (`integer` is checked separately).
fn json_type_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn is_integer(n: &serde_json::Number) -> bool {
    n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
}

/// The types a schema accepts, or `None` when it does not say.
fn schema_types(schema: &Map<String, Value>) -> Option<Vec<&str>> {
    match schema.get("type") {
        Some(Value::String(t)) => return Some(vec![t.as_str()]),
        Some(Value::Array(ts)) => return Some(ts.iter().filter_map(Value::as_str).collect()),
        _ => {}
    }
    if let Some(c) = schema.get("const") {
        return Some(vec![json_type_of(c)]);
    }
    if let Some(Value::Array(options)) = schema.get("enum") {
        return Some(options.iter().map(json_type_of).collect());
    }
    if schema.contains_key("properties") {
        return Some(vec!["object"]);
    }
    if schema.contains_key("items") || schema.contains_key("prefixItems") {
        return Some(vec!["array"]);
    }
    None
}

fn accepts(types: &[&str], value: &Value) -> bool {
    types.iter().any(|t| match (*t, value) {
        ("integer", Value::Number(n)) => is_integer(n),
        (t, v) => t == json_type_of(v),
    })
}

/// Whether the schema explicitly allows null (and so a null is meaningful).
fn allows_null(schema: &Value) -> bool {
    let Value::Object(map) = schema else {
        return false;
    };
    if schema_types(map).is_some_and(|ts| ts.contains(&"null")) {
        return true;
    }
    ["anyOf", "oneOf"].iter().any(|k| {
        map.get(*k)
            .and_then(Value::as_array)
            .is_some_and(|branches| branches.iter().any(allows_null))
    })
}

/// Coerces values toward a JSON schema (object schemas with `properties`, nested objects/arrays, `type` possibly a list, `anyOf`/`oneOf` simple cases): "true"/"false" → bool, "30"/"3.5" → number/integer where the schema wants it, a number → string where it wants a string, a string holding a JSON array/object → parsed when the schema wants array/object, a single value → [value] when it wants an array, `{}` → `[]` when it wants an array, null for an optional property → property removed. Never fails; returns the input unchanged where nothing applies.
///
/// `$ref` is not followed: a referenced subschema is left to validation.
pub fn coerce_to_schema(value: Value, schema: &Value) -> Value {
    let Value::Object(map) = schema else {
        return value;
    };
    let value = match map.get("allOf").and_then(Value::as_array) {
        Some(branches) => branches.iter().fold(value, coerce_to_schema),
        None => value,
    };
    if let Some(branches) = map.get("anyOf").or_else(|| map.get("oneOf")).and_then(Value::as_array) {
        return coerce_to_branches(value, branches, map);
    }
    match schema_types(map) {
        Some(types) => coerce_to_types(value, &types, map),
        None => value,
    }
}

fn typed(branch: &Value) -> Option<Vec<&str>> {
    branch.as_object().and_then(schema_types)
}

fn coerce_to_branches(value: Value, branches: &[Value], parent: &Map<String, Value>) -> Value {
    // A branch that takes the value's type as is wins, so a valid value is
    // never converted into another branch's type.
    for branch in branches {
        if typed(branch).is_some_and(|ts| accepts(&ts, &value)) {
            return coerce_to_schema(value, branch);
        }
    }
    for branch in branches {
        if let Some(ts) = typed(branch) {
            let candidate = coerce_to_schema(value.clone(), branch);
            if accepts(&ts, &candidate) {
                return candidate;
            }
        }
    }
    // Siblings of anyOf (e.g. `type`) still apply.
    match schema_types(parent) {
        Some(types) => coerce_to_types(value, &types, parent),
        None => value,
    }
}

fn coerce_to_types(value: Value, types: &[&str], schema: &Map<String, Value>) -> Value {
    let value = if accepts(types, &value) {
        value
    } else {
        convert(value, types)
    };
    match value {
        Value::Object(obj) if types.contains(&"object") => Value::Object(coerce_object(obj, schema)),
        Value::Array(items) if types.contains(&"array") => Value::Array(coerce_array(items, schema)),
        other => other,
    }
}

/// Converts a value whose type the schema does not accept into one it does,
/// when there is an obvious reading; otherwise returns it unchanged.
fn convert(value: Value, types: &[&str]) -> Value {
    let wants = |t: &str| types.contains(&t);
    match value {
        Value::String(s) => {
            let t = s.trim();
            if wants("boolean") {
                match t.to_ascii_lowercase().as_str() {
                    "true" => return Value::Bool(true),
                    "false" => return Value::Bool(false),
                    _ => {}
                }
            }
            if wants("integer") || wants("number") {
                if let Ok(Value::Number(n)) = serde_json::from_str::<Value>(t) {
                    if wants("number") || is_integer(&n) {
                        return Value::Number(n);
                    }
                }
            }
            if wants("null") && t == "null" {
                return Value::Null;
            }
            if (wants("array") && t.starts_with('[')) || (wants("object") && t.starts_with('{')) {
                if let Ok(parsed @ (Value::Array(_) | Value::Object(_))) = serde_json::from_str(t) {
                    if accepts(types, &parsed) {
                        return parsed;
                    }
                }
            }
            if wants("array") {
                return Value::Array(vec![Value::String(s)]);
            }
            Value::String(s)
        }
        Value::Number(n) if wants("string") => Value::String(n.to_string()),
        Value::Bool(b) if wants("string") => Value::String(b.to_string()),
        Value::Object(obj) if obj.is_empty() && wants("array") => Value::Array(Vec::new()),
        Value::Null => Value::Null,
        other if wants("array") && !matches!(other, Value::Array(_)) => Value::Array(vec![other]),
        other => other,
    }
}

fn coerce_object(obj: Map<String, Value>, schema: &Map<String, Value>) -> Map<String, Value> {
    let properties = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut out = Map::with_capacity(obj.len());
    for (key, value) in obj {
        let sub = properties.and_then(|p| p.get(&key)).or(additional);
        let Some(sub) = sub else {
            out.insert(key, value);
            continue;
        };
        // Models often send `null` for "not given"; for an optional property
        // that does not allow null, absence is what they mean.
        if value.is_null() && !required.contains(&key.as_str()) && !allows_null(sub) {
            continue;
        }
        out.insert(key, coerce_to_schema(value, sub));
    }
    out
}

fn coerce_array(items: Vec<Value>, schema: &Map<String, Value>) -> Vec<Value> {
    let prefix = schema
        .get("prefixItems")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let rest = schema.get("items");
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| match prefix.get(i).or(rest) {
            Some(sub) => coerce_to_schema(item, sub),
            None => item,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object_schema(props: Value, required: &[&str]) -> Value {
        json!({"type": "object", "properties": props, "required": required})
    }

    #[test]
    fn strings_to_booleans_and_numbers() {
        let schema = object_schema(
            json!({"flag": {"type": "boolean"}, "n": {"type": "integer"}, "x": {"type": "number"}}),
            &[],
        );
        assert_eq!(
            coerce_to_schema(json!({"flag": "true", "n": "30", "x": "3.5"}), &schema),
            json!({"flag": true, "n": 30, "x": 3.5})
        );
        assert_eq!(
            coerce_to_schema(json!({"flag": "False"}), &schema),
            json!({"flag": false})
        );
        // Not an integer: left for validation to report.
        assert_eq!(coerce_to_schema(json!({"n": "3.5"}), &schema), json!({"n": "3.5"}));
        assert_eq!(coerce_to_schema(json!({"n": "many"}), &schema), json!({"n": "many"}));
    }

    #[test]
    fn numbers_and_booleans_to_strings() {
        let schema = object_schema(json!({"s": {"type": "string"}}), &[]);
        assert_eq!(coerce_to_schema(json!({"s": 42}), &schema), json!({"s": "42"}));
        assert_eq!(coerce_to_schema(json!({"s": 2.5}), &schema), json!({"s": "2.5"}));
        assert_eq!(coerce_to_schema(json!({"s": true}), &schema), json!({"s": "true"}));
    }

    #[test]
    fn stringified_containers_are_parsed() {
        let schema = object_schema(
            json!({"list": {"type": "array", "items": {"type": "integer"}}, "obj": {"type": "object"}}),
            &[],
        );
        assert_eq!(
            coerce_to_schema(json!({"list": "[1, \"2\"]", "obj": "{\"k\": 1}"}), &schema),
            json!({"list": [1, 2], "obj": {"k": 1}})
        );
    }

    #[test]
    fn single_values_and_empty_objects_become_arrays() {
        let schema = object_schema(json!({"labels": {"type": "array", "items": {"type": "string"}}}), &[]);
        assert_eq!(
            coerce_to_schema(json!({"labels": "bug"}), &schema),
            json!({"labels": ["bug"]})
        );
        assert_eq!(
            coerce_to_schema(json!({"labels": 7}), &schema),
            json!({"labels": ["7"]})
        );
        assert_eq!(coerce_to_schema(json!({"labels": {}}), &schema), json!({"labels": []}));
        // A non-empty object is a single item.
        let objects = json!({"type": "array", "items": {"type": "object", "properties": {"n": {"type": "integer"}}}});
        assert_eq!(coerce_to_schema(json!({"n": "1"}), &objects), json!([{"n": 1}]));
        assert_eq!(coerce_to_schema(json!(null), &objects), json!(null));
    }

    #[test]
    fn null_optional_properties_are_removed() {
        let schema = object_schema(
            json!({"a": {"type": "string"}, "b": {"type": ["string", "null"]}, "c": {"type": "string"}, "d": {}}),
            &["c"],
        );
        assert_eq!(
            coerce_to_schema(json!({"a": null, "b": null, "c": null, "d": null}), &schema),
            json!({"b": null, "c": null})
        );
    }

    #[test]
    fn type_lists_and_any_of() {
        let list = json!({"type": ["integer", "null"]});
        assert_eq!(coerce_to_schema(json!("5"), &list), json!(5));
        assert_eq!(coerce_to_schema(json!(null), &list), json!(null));
        let any_of = json!({"anyOf": [{"type": "integer"}, {"type": "boolean"}]});
        assert_eq!(coerce_to_schema(json!("12"), &any_of), json!(12));
        assert_eq!(coerce_to_schema(json!("true"), &any_of), json!(true));
        assert_eq!(coerce_to_schema(json!(false), &any_of), json!(false));
        // A value already valid for some branch is never converted.
        let one_of = json!({"oneOf": [{"type": "string"}, {"type": "integer"}]});
        assert_eq!(coerce_to_schema(json!("12"), &one_of), json!("12"));
        assert_eq!(
            coerce_to_schema(json!("x"), &json!({"anyOf": [{"type": "integer"}]})),
            json!("x")
        );
    }

    #[test]
    fn nested_objects_and_arrays() {
        let schema = json!({
            "type": "object",
            "properties": {
                "outer": {
                    "type": "object",
                    "properties": {
                        "count": {"type": "integer"},
                        "items": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "properties": {"done": {"type": "boolean"}, "note": {"type": "string"}}
                            }
                        }
                    }
                }
            }
        });
        let value = json!({"outer": {"count": "2", "items": [{"done": "true", "note": null}, {"done": "false"}]}});
        assert_eq!(
            coerce_to_schema(value, &schema),
            json!({"outer": {"count": 2, "items": [{"done": true}, {"done": false}]}})
        );
        let stringified = json!({"outer": "{\"count\": \"3\"}"});
        assert_eq!(coerce_to_schema(stringified, &schema), json!({"outer": {"count": 3}}));
    }

    #[test]
    fn unknown_or_untyped_parts_are_unchanged() {
        let schema = object_schema(json!({"a": {"type": "integer"}}), &[]);
        assert_eq!(coerce_to_schema(json!({"zzz": "1"}), &schema), json!({"zzz": "1"}));
        assert_eq!(coerce_to_schema(json!({"a": "1"}), &json!(true)), json!({"a": "1"}));
        assert_eq!(coerce_to_schema(json!("x"), &json!({})), json!("x"));
        assert_eq!(
            coerce_to_schema(json!({"a": "1"}), &json!({"$ref": "#/$defs/x"})),
            json!({"a": "1"})
        );
    }

    #[test]
    fn additional_properties_and_prefix_items_are_used() {
        let schema = json!({"type": "object", "additionalProperties": {"type": "number"}});
        assert_eq!(coerce_to_schema(json!({"a": "1.5"}), &schema), json!({"a": 1.5}));
        let tuple = json!({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]});
        assert_eq!(coerce_to_schema(json!([1, "2"]), &tuple), json!(["1", 2]));
    }

    #[test]
    fn enum_implies_type() {
        let schema = object_schema(json!({"level": {"enum": [1, 2, 3]}}), &[]);
        assert_eq!(coerce_to_schema(json!({"level": "2"}), &schema), json!({"level": 2}));
    }
}
