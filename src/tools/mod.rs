//! Built-in tool definitions and the preparation of model-produced tool
//! arguments (repair, coercion, validation) before dispatch.

pub mod placeholders;
pub mod repair;
pub mod run;
pub mod specs;
pub mod validate;

pub use placeholders::substitute_parent;
pub use repair::{coerce_to_schema, repair_json};
pub use specs::{builtin, ToolDefinition, BUILTIN_TOOLS, CLOSE_TICKET, HANDOVER_TICKET, MANAGE_TICKETS, READ_TICKETS};
pub use validate::{compile_schema, prepare_tool_input, validate_against};
