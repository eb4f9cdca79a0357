//! A call whose outcome is known before it runs: a question's answer, or a recorded output. It
//! runs nothing and returns that outcome, so it goes through the loop's ordinary path (its
//! `tool.finished`, its result in the transcript) like any other call.

use async_trait::async_trait;
use serde_json::{json, Value};

use super::{Tool, ToolContext, ToolOutcome};

pub struct Canned {
    name: String,
    outcome: ToolOutcome,
    schema: Value,
}

impl Canned {
    pub fn new(name: &str, outcome: ToolOutcome) -> Canned {
        Canned {
            name: name.to_owned(),
            outcome,
            schema: json!({"type": "object"}),
        }
    }
}

#[async_trait]
impl Tool for Canned {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        "A call whose outcome is known."
    }

    fn input_schema(&self) -> &Value {
        &self.schema
    }

    fn writes_nothing(&self) -> bool {
        true
    }

    async fn call(&self, _ctx: &ToolContext<'_>, _input: &Value) -> ToolOutcome {
        self.outcome.clone()
    }
}
