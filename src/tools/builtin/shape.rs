//! The one shape of a built-in tool: a name, a description, typed arguments (their schema is
//! generated from the type, their parsing derived) and what a call does with them. [`Builtin`]
//! makes any of them a [`Tool`].

use std::marker::PhantomData;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::tools::args::args_schema;
use crate::tools::{Tool, ToolContext, ToolFailure, ToolOutcome};

/// A built-in tool. Its `Args` derive `JsonSchema` (the input schema models see, see
/// [`args_schema`]) and `Deserialize`, with the readers of `super::params` where a model must be
/// told more than serde would say.
#[async_trait]
pub trait BuiltinTool: Send + Sync + 'static {
    /// The name the model calls it by.
    const NAME: &'static str;
    const DESCRIPTION: &'static str;
    /// See [`Tool::writes_nothing`].
    const WRITES_NOTHING: bool;

    type Args: DeserializeOwned + JsonSchema + Send;

    async fn run(ctx: &ToolContext<'_>, args: Self::Args) -> ToolOutcome;
}

/// A [`BuiltinTool`] as a [`Tool`], with its input schema built once.
pub struct Builtin<T> {
    schema: Value,
    tool: PhantomData<fn() -> T>,
}

impl<T: BuiltinTool> Builtin<T> {
    pub fn new() -> Self {
        Builtin {
            schema: args_schema::<T::Args>(),
            tool: PhantomData,
        }
    }
}

impl<T: BuiltinTool> Default for Builtin<T> {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl<T: BuiltinTool> Tool for Builtin<T> {
    fn name(&self) -> &str {
        T::NAME
    }

    fn description(&self) -> &str {
        T::DESCRIPTION
    }

    fn input_schema(&self) -> &Value {
        &self.schema
    }

    fn writes_nothing(&self) -> bool {
        T::WRITES_NOTHING
    }

    fn asks_human(&self) -> bool {
        T::NAME == super::ASK_HUMAN
    }

    async fn call(&self, ctx: &ToolContext<'_>, input: &Value) -> ToolOutcome {
        match parse_args(&self.schema, input) {
            Ok(args) => T::run(ctx, args).await,
            Err(failure) => failure.into(),
        }
    }
}

/// Reads `input` as `A`. Each parameter of the schema reaches its field, in the schema's order
/// and as null when not given, so every field reads absent and null alike and reports its own
/// problem, and the first parameter that fails is the one the model hears about. Anything else
/// in the input (or an input that is not an object) is ignored, as the schema check before the
/// call already reported it.
pub(super) fn parse_args<A: DeserializeOwned>(schema: &Value, input: &Value) -> Result<A, ToolFailure> {
    let given = input.as_object();
    let params: Map<String, Value> = schema["properties"]
        .as_object()
        .into_iter()
        .flat_map(|properties| properties.keys())
        .map(|name| {
            let value = given.and_then(|g| g.get(name)).cloned().unwrap_or(Value::Null);
            (name.clone(), value)
        })
        .collect();
    // The readers' errors are the messages themselves (no position: the input is a value).
    serde_json::from_value(Value::Object(params)).map_err(|e| ToolFailure::invalid(e.to_string()))
}
