//! What the service tells operators besides its logs: Prometheus metrics (`metric`, served at
//! `/metrics`) and OpenTelemetry traces over OTLP (`trace`). Imports nothing of the crate, so any
//! module may report through it.

pub mod metric;
pub mod trace;
