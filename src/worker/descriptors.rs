//! File descriptors for the tickets in flight: each ticket waiting on a model over HTTP/1.1 holds
//! a connection of its own, so a process with `AGENTDESK_WORKERS` in the tens of thousands needs
//! more descriptors than the usual soft limit of 1024. The soft limit is raised to what the
//! workers need (never lowered); when the hard limit is below it, the start-up log says so.

/// Descriptors beside the tickets' model connections: the database pool, the API's clients and
/// streams, MCP servers, log and data files.
const BESIDES_TICKETS: u64 = 4096;

/// What a process running `workers` tickets at once with `db_connections` pooled connections
/// should be able to open.
pub fn wanted(workers: usize, db_connections: u32) -> u64 {
    workers as u64 + u64::from(db_connections) + BESIDES_TICKETS
}

/// The soft and hard limits of open files, as the system has them now.
fn limits() -> Option<(u64, u64)> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the `rlimit` it is given, which lives on this stack frame.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    (rc == 0).then_some((lim.rlim_cur, lim.rlim_max))
}

fn set_limits(soft: u64, hard: u64) -> bool {
    let lim = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: setrlimit only reads the `rlimit` it is given, which lives on this stack frame.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) == 0 }
}

/// Raises the soft limit towards `wanted` (and the hard one, where the process may); returns the
/// soft limit now in force. Logs what it did, and warns when the system's limit is lower.
pub fn ensure(wanted: u64, workers: usize) -> u64 {
    let Some((soft, hard)) = limits() else {
        return 0;
    };
    if soft >= wanted {
        return soft;
    }
    // A privileged process (root in a container, CAP_SYS_RESOURCE) may raise the hard limit too;
    // elsewhere this fails and the soft limit goes up to the hard one.
    let raised = (hard < wanted && set_limits(wanted, wanted)) || set_limits(wanted.min(hard), hard);
    let now = limits().map_or(soft, |(soft, _)| soft);
    if now >= wanted {
        tracing::info!(
            from = soft,
            to = now,
            workers,
            "raised the open-file limit for the tickets in flight"
        );
    } else {
        tracing::warn!(
            limit = now,
            wanted,
            workers,
            raised,
            "the open-file limit is lower than AGENTDESK_WORKERS needs (a model connection per ticket in flight over \
             HTTP/1.1): raise it (ulimit -n, systemd LimitNOFILE, docker --ulimit nofile), lower AGENTDESK_WORKERS, \
             or speak HTTP/2 to the provider (AGENTDESK_OPENAI_HTTP2)"
        );
    }
    now
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wants_a_descriptor_per_ticket_and_pooled_connection_and_a_margin() {
        assert_eq!(wanted(100_000, 16), 100_000 + 16 + BESIDES_TICKETS);
        assert_eq!(wanted(0, 0), BESIDES_TICKETS);
    }

    #[test]
    fn never_lowers_the_limit() {
        let (soft, _) = limits().expect("getrlimit works on Linux");
        assert!(ensure(1, 0) >= soft);
        assert_eq!(limits().map(|(s, _)| s), Some(soft));
    }
}
