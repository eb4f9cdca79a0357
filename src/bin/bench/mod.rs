//! Parts of the benchmark program.

pub mod harness;
pub mod pgbench;
pub mod report;
pub mod scenarios;
pub mod server;
pub mod sse;
