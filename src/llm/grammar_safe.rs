//! Tool schemas in the form that schema-to-grammar converters accept.
//!
//! Local servers constrain a tool call's arguments with a grammar built from the tool's schema
//! (llama.cpp, llama-cpp-python, vLLM's guided decoding). Their converters reject a subschema that
//! names no type, such as close_ticket's `result` (a bare description: any JSON value), and then
//! fall back to free-form JSON, which a small model fills with other keys. So a subschema that
//! allows any value is sent with the types spelled out, and keywords the converters cannot turn
//! into a grammar are left out. Only what is sent changes: calls are still validated against the
//! tool's own schema.

use serde_json::{Map, Value};

/// What "any JSON value" is sent as. Null is left out: a tool parameter that takes anything
/// takes something (close_ticket refuses a null result), and a model offered null tends to pick it.
const ANY_TYPE: [&str; 5] = ["string", "number", "boolean", "object", "array"];

/// Keywords that say which values a schema takes; a schema with none of them takes any value.
const SHAPING: [&str; 10] = [
    "type",
    "$ref",
    "enum",
    "const",
    "anyOf",
    "oneOf",
    "allOf",
    "properties",
    "items",
    "prefixItems",
];

/// Keywords that converters cannot express and reject or misread (they constrain what a value
/// is not, or depend on another value); validation after the call still applies them.
const DROPPED: [&str; 4] = ["not", "if", "then", "else"];

/// Keywords whose value is a map of names to subschemas.
const SCHEMA_MAPS: [&str; 4] = ["properties", "$defs", "definitions", "patternProperties"];

/// Keywords whose value is one subschema.
const SCHEMA_ONE: [&str; 3] = ["additionalProperties", "items", "contains"];

/// Keywords whose value is a list of subschemas.
const SCHEMA_LISTS: [&str; 4] = ["anyOf", "oneOf", "allOf", "prefixItems"];

/// `schema` as it is sent to a model: the same constraints, in a form grammar converters accept.
pub fn grammar_safe(schema: &Value) -> Value {
    subschema(schema, true)
}

/// One subschema. `root`: the tool's input schema itself, which is an object schema already.
fn subschema(schema: &Value, root: bool) -> Value {
    let Value::Object(map) = schema else {
        // `true` takes anything; `false` (takes nothing) is left for the converter to refuse.
        return match schema {
            Value::Bool(true) => any_value(Map::new()),
            other => other.clone(),
        };
    };
    let mut out = Map::with_capacity(map.len() + 1);
    for (key, value) in map {
        let key = key.as_str();
        if DROPPED.contains(&key) {
            continue;
        }
        let value = if SCHEMA_MAPS.contains(&key) {
            match value {
                Value::Object(subs) => Value::Object(
                    subs.iter()
                        .map(|(name, sub)| (name.clone(), subschema(sub, false)))
                        .collect(),
                ),
                other => other.clone(),
            }
        } else if SCHEMA_LISTS.contains(&key) {
            match value {
                Value::Array(subs) => Value::Array(subs.iter().map(|sub| subschema(sub, false)).collect()),
                other => other.clone(),
            }
        } else if SCHEMA_ONE.contains(&key) {
            match value {
                // `additionalProperties: true` is understood as it is.
                Value::Object(_) => subschema(value, false),
                // Old-style tuple items.
                Value::Array(subs) => Value::Array(subs.iter().map(|sub| subschema(sub, false)).collect()),
                other => other.clone(),
            }
        } else {
            value.clone()
        };
        out.insert(key.to_owned(), value);
    }
    if root || SHAPING.iter().any(|k| out.contains_key(*k)) {
        Value::Object(out)
    } else {
        any_value(out)
    }
}

/// A schema taking any value but null, keeping `annotations` (description, title, …).
fn any_value(mut annotations: Map<String, Value>) -> Value {
    let types = ANY_TYPE.iter().map(|t| Value::from(*t)).collect();
    // First, as a reader (and a converter) expects.
    let mut out = Map::with_capacity(annotations.len() + 1);
    out.insert("type".to_owned(), Value::Array(types));
    out.append(&mut annotations);
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const ANY: [&str; 5] = ANY_TYPE;

    #[test]
    fn a_parameter_taking_any_value_gets_its_types_spelled_out() {
        let schema = json!({
            "type": "object",
            "properties": {"result": {"description": "The result: any JSON value."}},
            "required": ["result"],
            "additionalProperties": false
        });
        assert_eq!(
            grammar_safe(&schema),
            json!({
                "type": "object",
                "properties": {"result": {"type": ANY, "description": "The result: any JSON value."}},
                "required": ["result"],
                "additionalProperties": false
            })
        );
    }

    #[test]
    fn every_place_a_subschema_goes_is_made_safe() {
        let schema = json!({
            "type": "object",
            "properties": {
                "a": {},
                "b": true,
                "c": {"type": "array", "items": {"title": "anything"}},
                "d": {"anyOf": [{"type": "string"}, {}]},
                "e": {"type": "object", "additionalProperties": {}},
                "f": {"$ref": "#/$defs/thing"},
                "g": {"not": {"type": "null"}},
                "h": {"type": "string", "not": {"const": ""}},
                "i": {"type": "object", "additionalProperties": true},
                "j": {"enum": [1, "x"]}
            },
            "$defs": {"thing": {"description": "a thing"}}
        });
        let safe = grammar_safe(&schema);
        let p = &safe["properties"];
        assert_eq!(p["a"], json!({"type": ANY}));
        assert_eq!(p["b"], json!({"type": ANY}));
        assert_eq!(
            p["c"],
            json!({"type": "array", "items": {"type": ANY, "title": "anything"}})
        );
        assert_eq!(p["d"], json!({"anyOf": [{"type": "string"}, {"type": ANY}]}));
        assert_eq!(p["e"], json!({"type": "object", "additionalProperties": {"type": ANY}}));
        assert_eq!(p["f"], json!({"$ref": "#/$defs/thing"}));
        assert_eq!(p["g"], json!({"type": ANY}), "a negation is left out");
        assert_eq!(p["h"], json!({"type": "string"}));
        assert_eq!(p["i"], json!({"type": "object", "additionalProperties": true}));
        assert_eq!(p["j"], json!({"enum": [1, "x"]}));
        assert_eq!(safe["$defs"]["thing"], json!({"type": ANY, "description": "a thing"}));
    }

    #[test]
    fn a_schema_that_is_already_safe_is_sent_as_it_is() {
        let schema = json!({
            "type": "object",
            "properties": {
                "to": {"type": "string", "minLength": 1, "description": "an agent's label"},
                "n": {"type": ["integer", "null"], "minimum": 0, "format": "uint32"},
                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
                "where": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}
            },
            "required": ["to"],
            "additionalProperties": false
        });
        assert_eq!(grammar_safe(&schema), schema);
    }
}
