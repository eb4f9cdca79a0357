//! agentdesk: a ticket desk where AI agents work tickets — a durable job queue on Postgres, an
//! agent runtime and a replayable event log, in one service.

pub mod agent;
pub mod app;
pub mod cli;
pub mod config;
pub mod db;
pub mod domain;
pub mod embedded_pg;
pub mod events;
pub mod http;
pub mod llm;
pub mod maintenance;
pub mod mcp_client;
pub mod net;
pub mod scheduler;
pub mod schema;
pub mod telemetry;
pub mod tools;
pub mod transitions;
pub mod webhooks;
pub mod worker;

/// Turns off glibc's fastbins, before the process allocates much. With them, every allocation of
/// 1 KiB or more first merges all freed small chunks (`malloc_consolidate`), which a service that
/// frees many small JSON values and then reads a request body does thousands of times a second.
/// A no-op on other C libraries. The `agentdesk` binary allocates with mimalloc (`main.rs`);
/// this is for programs that run the service on glibc's malloc (the bench, in its own process).
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets a parameter of the allocator; M_MXFAST = 0 is a documented value.
    unsafe {
        libc::mallopt(libc::M_MXFAST, 0);
    }
}
