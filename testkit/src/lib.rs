//! Test support for agentdesk, used by its test suites and its benchmark, never by the service:
//! a fake model server that speaks the providers' wire formats (failures included), and a fresh
//! database per test.

pub mod fake_llm;
pub mod mcp_server;
pub mod testing;
