//! Input schemas generated from a tool's typed arguments (`schemars`), shaped as a model should
//! see them: JSON Schema draft 2020-12 without `$schema`, `title` or a root description, every
//! subschema inline, optional fields without `null` (a model omits what it does not give), doc
//! comments as one-line descriptions, and each description after the keywords it explains.

use schemars::generate::SchemaSettings;
use schemars::JsonSchema;
use serde_json::{Map, Value};

/// The input schema of a tool whose arguments are `T`: derive `JsonSchema` on `T` with
/// `#[schemars(deny_unknown_fields)]` (tool inputs are closed objects) and document each field.
pub fn args_schema<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft2020_12()
        .with(|s| {
            s.meta_schema = None;
            s.inline_subschemas = true;
        })
        .into_generator();
    let mut schema = generator.into_root_schema_for::<T>().to_value();
    if let Value::Object(root) = &mut schema {
        root.remove("title");
        root.remove("description");
        // The order a hand-written schema has: what it is, what it holds, what it requires.
        let order = ["type", "properties", "required", "additionalProperties"];
        reorder(root, |key| order.iter().position(|k| *k == key).unwrap_or(order.len()));
    }
    tidy(&mut schema);
    schema
}

/// Applies the shaping described above to a schema and its subschemas.
fn tidy(schema: &mut Value) {
    let Value::Object(map) = schema else {
        return;
    };
    if let Some(Value::String(text)) = map.get_mut("description") {
        *text = one_line(text);
    }
    // Integer widths are a Rust detail, not a format a validator or model knows.
    if map
        .get("format")
        .and_then(Value::as_str)
        .is_some_and(|f| f.starts_with("int") || f.starts_with("uint"))
    {
        map.remove("format");
    }
    reorder(map, |key| usize::from(key == "description"));
    let required: Vec<String> = map
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default();
    if let Some(Value::Object(properties)) = map.get_mut("properties") {
        for (name, property) in properties.iter_mut() {
            if !required.contains(name) {
                drop_null(property);
            }
            tidy(property);
        }
    }
    if let Some(items) = map.get_mut("items") {
        tidy(items);
    }
}

/// Removes `null` from the types and values an optional field's schema allows (schemars adds it
/// for `Option`).
fn drop_null(schema: &mut Value) {
    let Value::Object(map) = schema else {
        return;
    };
    if let Some(Value::Array(types)) = map.get_mut("type") {
        types.retain(|t| t != "null");
        if types.len() == 1 {
            let only = types.remove(0);
            map.insert("type".into(), only);
        }
    }
    if let Some(Value::Array(values)) = map.get_mut("enum") {
        values.retain(|v| !v.is_null());
    }
}

/// Lines of a doc comment joined with spaces; a blank line still separates paragraphs.
fn one_line(text: &str) -> String {
    text.split("\n\n")
        .map(|paragraph| paragraph.split('\n').map(str::trim).collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// Sorts the keys of `map` by `rank`, keeping the order of keys of equal rank.
fn reorder(map: &mut Map<String, Value>, rank: impl Fn(&str) -> usize) {
    let mut entries: Vec<(String, Value)> = std::mem::take(map).into_iter().collect();
    entries.sort_by_key(|(key, _)| rank(key));
    map.extend(entries);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[allow(dead_code)]
    #[derive(JsonSchema)]
    #[schemars(deny_unknown_fields, rename_all = "lowercase")]
    enum Mode {
        Fast,
        Slow,
    }

    /// Described at the root, which a tool's input schema leaves out.
    #[allow(dead_code)]
    #[derive(JsonSchema)]
    #[schemars(deny_unknown_fields)]
    struct Sample {
        /// A name,
        /// on two lines.
        #[schemars(length(min = 1))]
        name: String,
        /// How.
        mode: Option<Mode>,
        /// Tags.
        tags: Option<Vec<String>>,
        count: u32,
    }

    #[test]
    fn generated_schemas_look_hand_written() {
        let schema = args_schema::<Sample>();
        let expected = json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1, "description": "A name, on two lines."},
                "mode": {"type": "string", "enum": ["fast", "slow"], "description": "How."},
                "tags": {"type": "array", "items": {"type": "string"}, "description": "Tags."},
                "count": {"type": "integer", "minimum": 0}
            },
            "required": ["name", "count"],
            "additionalProperties": false
        });
        assert_eq!(schema.to_string(), expected.to_string());
    }

    #[test]
    fn paragraphs_stay_apart() {
        assert_eq!(one_line("a\nb\n\nc\n d"), "a b\n\nc d");
    }
}
