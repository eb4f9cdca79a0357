//! The service's log output kept in memory, for tests of what it logs (and never logs).

use std::io::Write;
use std::sync::{Arc, Mutex};

/// Every log line of this test binary from `install` on.
#[derive(Clone, Default)]
pub struct CapturedLogs(Arc<Mutex<Vec<u8>>>);

impl CapturedLogs {
    /// Sets the process's tracing subscriber (`filter`, no colours) to write here; panics when
    /// one is set already, since its lines would then never be seen.
    pub fn install(filter: &str) -> CapturedLogs {
        let logs = CapturedLogs::default();
        let writer = logs.clone();
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .init();
        logs
    }

    /// What was logged so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl Write for CapturedLogs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
