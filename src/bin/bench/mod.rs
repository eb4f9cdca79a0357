//! Parts of the benchmark program.

pub mod floor;
pub mod harness;
pub mod pgbench;
pub mod report;
pub mod scenarios;
pub mod server;
pub mod sse;
