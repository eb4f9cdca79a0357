//! The few system calls the embedded server needs that std does not offer, each behind a safe
//! function: these are the only `unsafe` blocks of `embedded_pg`.

use std::os::fd::AsRawFd;

/// Whether this process runs as root (initdb and postgres refuse to).
pub(super) fn is_root() -> bool {
    // SAFETY: geteuid takes no arguments, cannot fail and touches no memory of ours.
    unsafe { libc::geteuid() == 0 }
}

/// kill(2): sends `signal` (0 only checks that the process exists); the OS error on failure.
pub(super) fn kill(pid: i32, signal: i32) -> std::io::Result<()> {
    // SAFETY: kill takes plain integers and touches no memory of ours; a wrong pid is an error
    // it returns, not undefined behaviour.
    if unsafe { libc::kill(pid, signal) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Reaps `pid` if it is a child of ours that has exited, without waiting.
pub(super) fn reap(pid: i32) {
    // SAFETY: a null status pointer is allowed (the status is not stored); WNOHANG never blocks.
    unsafe {
        libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG);
    }
}

/// Takes an exclusive flock(2) on the file without waiting; the OS error when it cannot.
pub(super) fn try_lock(file: &std::fs::File) -> std::io::Result<()> {
    // SAFETY: the descriptor belongs to `file`, which outlives the call; flock touches no memory.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
