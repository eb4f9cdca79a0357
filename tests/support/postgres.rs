//! A private PostgreSQL's server programs (for tests that stop and start a server), run as the
//! `postgres` user when the tests run as root.

pub fn pg_bindir() -> String {
    let out = std::process::Command::new("pg_config")
        .arg("--bindir")
        .output()
        .expect("pg_config");
    let bindir = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if std::path::Path::new(&bindir).join("pg_ctl").exists() {
        return bindir;
    }
    let mut versions: Vec<_> = std::fs::read_dir("/usr/lib/postgresql")
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    versions.sort();
    versions.last().unwrap().join("bin").display().to_string()
}

/// initdb and postgres refuse root; the embedded server runs as `postgres` then.
pub fn as_postgres_user(cmd: &mut std::process::Command) -> &mut std::process::Command {
    // SAFETY: geteuid takes no arguments, cannot fail and touches no memory.
    if unsafe { libc::geteuid() } == 0 {
        use std::os::unix::process::CommandExt;
        let id = |flag: &str| -> u32 {
            let out = std::process::Command::new("id")
                .args([flag, "postgres"])
                .output()
                .unwrap();
            String::from_utf8(out.stdout).unwrap().trim().parse().unwrap()
        };
        cmd.uid(id("-u")).gid(id("-g"));
    }
    cmd
}
