//! Tools by name: dispatch, the specs offered to models, and the preparation of a model's call.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use jsonschema::Validator;
use serde_json::Value;

use super::prepare::prepare_with;
use super::{builtin, Tool, ToolContext, ToolErrorKind, ToolFailure, ToolOutcome};
use crate::llm::ToolSpec;
use crate::schema::compile_schema;

/// A registered tool with what is derived from it once: the spec sent to models (schema already
/// serialised) and the compiled input schema.
#[derive(Clone)]
struct Entry {
    tool: Arc<dyn Tool>,
    spec: ToolSpec,
    validator: Arc<Validator>,
}

/// Tools by name. Cheap to clone (everything in it is shared), so a set that changes at run time
/// (HTTP tools, MCP servers) can be rebuilt and swapped whole while running calls keep theirs.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: HashMap<String, Entry>,
    /// Names in registration order.
    order: Vec<String>,
}

/// A model's call made ready to run: its tool and the repaired, validated input (what is run,
/// stored and shown).
#[derive(Clone)]
pub struct Prepared {
    pub tool: Arc<dyn Tool>,
    pub input: Value,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("tool", &self.tool.name())
            .field("input", &self.input)
            .finish()
    }
}

impl Prepared {
    pub async fn run(&self, ctx: &ToolContext<'_>) -> ToolOutcome {
        self.tool.call(ctx, &self.input).await
    }
}

impl ToolRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// A registry holding the built-in tools, to add tools defined at run time to.
    pub fn with_builtins() -> Self {
        let mut registry = Self::new();
        for tool in builtin::all() {
            registry
                .register(tool)
                .expect("the built-in tools have valid, distinct definitions");
        }
        registry
    }

    /// The built-in tools, built once for the life of the process.
    pub fn builtin() -> &'static ToolRegistry {
        static BUILTIN: LazyLock<ToolRegistry> = LazyLock::new(ToolRegistry::with_builtins);
        &BUILTIN
    }

    /// Adds a tool, or replaces the one of the same name. Err when its input schema is not a
    /// valid JSON Schema or not an object schema.
    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Result<(), String> {
        let name = tool.name().to_owned();
        let schema = tool.input_schema();
        if schema.get("type").and_then(Value::as_str) != Some("object") {
            return Err(format!("tool {name:?}: the input schema must be an object schema"));
        }
        let validator = Arc::new(compile_schema(schema).map_err(|e| format!("tool {name:?}: {e}"))?);
        let spec = ToolSpec::new(&name, tool.description(), schema);
        if !self.tools.contains_key(&name) {
            self.order.push(name.clone());
        }
        self.tools.insert(name, Entry { tool, spec, validator });
        Ok(())
    }

    /// Removes a tool; true when there was one of that name.
    pub fn remove(&mut self, name: &str) -> bool {
        self.order.retain(|n| n != name);
        self.tools.remove(name).is_some()
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name).map(|e| &e.tool)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.tools.contains_key(name)
    }

    /// Names in registration order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.order.iter().map(String::as_str)
    }

    /// The specs of the named tools, in the order given; names not registered are skipped. The
    /// specs share their text with the registry, so this costs no serialisation.
    pub fn specs<'n>(&self, names: impl IntoIterator<Item = &'n str>) -> Vec<ToolSpec> {
        names
            .into_iter()
            .filter_map(|name| self.tools.get(name))
            .map(|e| e.spec.clone())
            .collect()
    }

    /// Readies a model's call of `name` with its raw arguments: the tool must be registered and
    /// among `offered` (the agent's tools); the arguments are repaired, coerced to the tool's
    /// schema and validated. Err is what goes back to the model: `unknown_tool` or
    /// `invalid_input`.
    pub fn prepare(&self, offered: &[String], name: &str, raw_arguments: &str) -> Result<Prepared, ToolFailure> {
        let entry = offered
            .iter()
            .any(|t| t == name)
            .then(|| self.tools.get(name))
            .flatten()
            .ok_or_else(|| {
                ToolFailure::new(
                    ToolErrorKind::UnknownTool,
                    format!("There is no tool named {name:?} available to you."),
                )
            })?;
        let input = prepare_with(name, entry.tool.input_schema(), &entry.validator, raw_arguments)
            .map_err(ToolFailure::invalid)?;
        Ok(Prepared {
            tool: entry.tool.clone(),
            input,
        })
    }

    /// Runs a tool with an input that was already prepared; an unknown name is an `unknown_tool`
    /// failure.
    pub async fn call(&self, ctx: &ToolContext<'_>, name: &str, input: &Value) -> ToolOutcome {
        match self.tools.get(name) {
            Some(entry) => entry.tool.call(ctx, input).await,
            None => ToolFailure::new(
                ToolErrorKind::UnknownTool,
                format!("there is no tool named {name:?}; the tools are {}", self.listed()),
            )
            .into(),
        }
    }

    /// "a, b and c".
    fn listed(&self) -> String {
        match self.order.split_last() {
            None => "none".to_owned(),
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        }
    }
}

/// Runs a built-in tool; `input` was already repaired and validated against the tool's own JSON
/// schema (the tools still check what would do harm).
pub async fn run_builtin(ctx: &ToolContext<'_>, name: &str, input: &Value) -> ToolOutcome {
    ToolRegistry::builtin().call(ctx, name, input).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::builtin::{ALL_BUILTIN_TOOLS, CLOSE_TICKET, READ_TICKETS};
    use async_trait::async_trait;
    use serde_json::json;

    /// A tool defined at run time, as an HTTP or MCP tool would be.
    struct Echo {
        schema: Value,
    }

    #[async_trait]
    impl Tool for Echo {
        fn name(&self) -> &str {
            "echo"
        }
        fn description(&self) -> &str {
            "Says it back."
        }
        fn input_schema(&self) -> &Value {
            &self.schema
        }
        async fn call(&self, _ctx: &ToolContext<'_>, input: &Value) -> ToolOutcome {
            ToolOutcome::Output(input["text"].to_string())
        }
    }

    fn echo() -> Arc<dyn Tool> {
        Arc::new(Echo {
            schema: json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
        })
    }

    #[test]
    fn the_builtins_are_registered_in_order_with_their_specs() {
        let registry = ToolRegistry::builtin();
        assert_eq!(registry.names().collect::<Vec<_>>(), ALL_BUILTIN_TOOLS);
        let specs = registry.specs([READ_TICKETS, "nope", CLOSE_TICKET]);
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, [READ_TICKETS, CLOSE_TICKET]);
        // Every request shares the registry's text.
        let again = registry.specs([READ_TICKETS]);
        assert!(Arc::ptr_eq(&specs[0].input_schema, &again[0].input_schema));
        assert_eq!(
            registry.listed(),
            "close_ticket, handover_ticket, read_tickets, manage_tickets and ask_human"
        );
    }

    #[test]
    fn tools_defined_at_run_time_are_added_replaced_and_removed() {
        let mut registry = ToolRegistry::with_builtins();
        registry.register(echo()).unwrap();
        assert!(registry.contains("echo"));
        assert_eq!(registry.names().last(), Some("echo"));
        registry.register(echo()).unwrap();
        assert_eq!(registry.names().filter(|n| *n == "echo").count(), 1);
        let spec = &registry.specs(["echo"])[0];
        assert_eq!(&*spec.description, "Says it back.");
        assert!(registry.remove("echo"));
        assert!(!registry.contains("echo"));
        assert!(!ToolRegistry::builtin().contains("echo"), "the built-in set is its own");

        let broken = Arc::new(Echo {
            schema: json!({"type": "object", "properties": {"text": {"type": 5}}}),
        });
        assert!(registry.register(broken).unwrap_err().contains("invalid JSON Schema"));
        let not_an_object = Arc::new(Echo {
            schema: json!({"type": "string"}),
        });
        assert!(registry.register(not_an_object).is_err());
    }

    #[test]
    fn prepare_checks_the_offer_and_the_arguments() {
        let mut registry = ToolRegistry::with_builtins();
        registry.register(echo()).unwrap();
        let offered = vec!["echo".to_string(), CLOSE_TICKET.to_string()];

        let prepared = registry.prepare(&offered, "echo", r#"{"text": "hi"#).unwrap();
        assert_eq!(prepared.tool.name(), "echo");
        assert_eq!(prepared.input, json!({"text": "hi"}));
        assert!(
            !prepared.tool.writes_nothing(),
            "a tool says false unless it knows better"
        );

        let close = registry.prepare(&offered, CLOSE_TICKET, r#"{"result": 1}"#).unwrap();
        assert!(close.tool.writes_nothing());

        let Err(not_offered) = registry.prepare(&offered, READ_TICKETS, "{}") else {
            panic!("read_tickets is not offered")
        };
        assert_eq!(not_offered.kind, ToolErrorKind::UnknownTool);
        assert_eq!(
            not_offered.message,
            "There is no tool named \"read_tickets\" available to you."
        );
        let Err(unknown) = registry.prepare(&["ghost".to_string()], "ghost", "{}") else {
            panic!("ghost is not registered")
        };
        assert_eq!(unknown.kind, ToolErrorKind::UnknownTool);

        let Err(invalid) = registry.prepare(&offered, "echo", r#"{"other": true, "#) else {
            panic!("the arguments are wrong")
        };
        assert_eq!(invalid.kind, ToolErrorKind::InvalidInput);
        assert!(
            invalid.message.starts_with("Invalid arguments for tool `echo`."),
            "{}",
            invalid.message
        );
    }
}
