//! Outbound networking made on a user's behalf: the address guard shared by HTTP tools, MCP
//! servers and webhook deliveries, the limits on what a peer can make the process hold, the one
//! parser of server-sent events, and the one backoff of every retry loop.

pub mod backoff;
pub mod bounded;
pub mod guard;
pub mod secrets;
pub mod sse;

pub use guard::{is_forbidden, AddressGuard, ForbiddenAddress};
pub use secrets::expand_env;
