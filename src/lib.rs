//! agentdesk: a ticket desk where AI agents work tickets — a durable job queue on Postgres, an
//! agent runtime and a replayable event log, in one service.

pub mod agent;
pub mod app;
pub mod config;
pub mod db;
pub mod desk;
pub mod domain;
pub mod embedded_pg;
pub mod events;
pub mod fake_llm;
pub mod http;
pub mod intake;
pub mod llm;
pub mod testing;
pub mod tools;
pub mod worker;
