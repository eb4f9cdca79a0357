//! The agentdesk under test: either in this process (`App::start`) or the real `agentdesk` binary
//! as a child process, so that its memory and CPU can be read from /proc apart from the bench's.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use std::time::{Duration, Instant};

use agentdesk::app::{App, Mode};
use agentdesk::config::Config;
use agentdesk::llm::{openai::OpenAi, Providers};
use anyhow::{bail, Context, Result};

/// How the service is started.
#[derive(Clone, Debug)]
pub struct ServerSpec {
    pub mode: Mode,
    pub workers: usize,
    pub db_max_connections: u32,
    /// Run the `agentdesk` binary as a child process instead of in this process.
    pub child: bool,
    /// `AGENTDESK_RETENTION_DAYS`: finished tickets older than this are deleted; None keeps all.
    pub retention: Option<Duration>,
    /// `AGENTDESK_CLAIMERS`; None: the service's default (or the bench's own environment's).
    pub claimers: Option<usize>,
    /// `AGENTDESK_SHUTDOWN_GRACE_SECS`; None: the service's default.
    pub shutdown_grace: Option<Duration>,
    /// `AGENTDESK_OPENAI_HTTP2`: the model requests share one HTTP/2 connection.
    pub model_http2: bool,
    /// `AGENTDESK_STREAM_IDLE_SECS`; None: the service's default.
    pub stream_idle: Option<Duration>,
}

pub enum Server {
    InProcess(Box<App>),
    Child {
        child: ChildGuard,
        url: String,
        program: String,
    },
}

/// Kills the child when dropped while still running, so a failed scenario never leaves one behind.
pub struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

impl Server {
    pub async fn start(spec: &ServerSpec, database_url: &str, openai_base_url: &str, log: &Path) -> Result<Server> {
        if spec.child {
            start_child(spec, database_url, openai_base_url, log).await
        } else {
            let config = Config {
                database_url: Some(database_url.to_string()),
                addr: "127.0.0.1:0".parse().expect("a socket address"),
                workers: spec.workers,
                db_max_connections: spec.db_max_connections,
                // The bench's webhook receiver listens on loopback.
                allow_private_urls: true,
                retention: spec.retention,
                ..Config::default()
            };
            let config = Config {
                claimers: spec.claimers.unwrap_or(config.claimers),
                shutdown_grace: spec.shutdown_grace.unwrap_or(config.shutdown_grace),
                stream_idle: spec.stream_idle.unwrap_or(config.stream_idle),
                ..config
            };
            let openai = OpenAi::new(openai_base_url.to_string(), None).with_http2(spec.model_http2);
            let providers = Providers::new(Some(openai), None);
            let app = tokio::time::timeout(Duration::from_secs(60), App::start(config, spec.mode, providers))
                .await
                .context("agentdesk did not start within 60 s")??;
            Ok(Server::InProcess(Box::new(app)))
        }
    }

    pub fn url(&self) -> String {
        match self {
            Server::InProcess(app) => app.url(),
            Server::Child { url, .. } => url.clone(),
        }
    }

    /// The process whose memory and CPU are the service's (this process when in-process).
    pub fn pid(&self) -> u32 {
        match self {
            Server::InProcess(_) => std::process::id(),
            Server::Child { child, .. } => child.0.id(),
        }
    }

    /// Where the service ran, for the report.
    pub fn describe(&self) -> String {
        match self {
            Server::InProcess(_) => "in the bench process (App::start)".into(),
            Server::Child { program, .. } => format!("child process {program}"),
        }
    }

    /// Fails when the child process has exited.
    pub fn ensure_alive(&mut self) -> Result<()> {
        if let Server::Child { child, .. } = self {
            if let Some(status) = child.0.try_wait()? {
                bail!("the agentdesk process exited ({status}); see its log in bench-results/");
            }
        }
        Ok(())
    }

    /// Kills the service with SIGKILL, as a crash would (an in-process one is shut down: it
    /// cannot be killed apart from the bench).
    pub async fn kill(self) {
        match self {
            Server::InProcess(app) => app.shutdown().await,
            Server::Child { child: mut guard, .. } => {
                let _ = guard.0.kill();
                let _ = guard.0.wait();
            }
        }
    }

    pub async fn shutdown(self) {
        match self {
            Server::InProcess(app) => {
                let _ = tokio::time::timeout(Duration::from_secs(30), app.shutdown()).await;
            }
            Server::Child { child: mut guard, .. } => {
                let child = &mut guard.0;
                // SAFETY: kill(2) on our own child's pid, which has not been reaped yet.
                unsafe {
                    libc::kill(child.id() as i32, libc::SIGTERM);
                }
                let deadline = Instant::now() + Duration::from_secs(20);
                while Instant::now() < deadline {
                    if let Ok(Some(_)) = child.try_wait() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// The program to run as the service: the `agentdesk` binary next to this executable when it was
/// linked after the last build of the library (both come from the same target directory), else this executable
/// in its `__agentdesk` role, which runs the same `App` from the same library build. Returns the
/// program, the arguments before the mode, and a description for the report.
pub fn agentdesk_program() -> Result<(PathBuf, Vec<String>, String)> {
    if let Some(path) = PROGRAM.get() {
        return Ok((path.clone(), vec![], format!("{} (--agentdesk)", path.display())));
    }
    let exe = std::env::current_exe().context("cannot find the bench executable")?;
    let sibling = exe.with_file_name("agentdesk");
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    // The newest build of the library both executables link.
    let library = std::fs::read_dir(exe.with_file_name("deps"))
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with("libagentdesk-") && n.ends_with(".rlib"))
        })
        .filter_map(|e| modified(&e.path()))
        .max();
    match (modified(&sibling), library.or_else(|| modified(&exe))) {
        (Some(bin), Some(me)) if bin >= me => Ok((sibling.clone(), vec![], sibling.display().to_string())),
        _ => Ok((
            exe.clone(),
            vec![SERVE_ROLE.to_string()],
            format!(
                "{} {SERVE_ROLE} (the agentdesk binary was missing or older than the library)",
                exe.display()
            ),
        )),
    }
}

/// The program `--agentdesk` named, when it did.
static PROGRAM: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Runs `path` as agentdesk in every scenario that starts a child process.
pub fn set_program(path: PathBuf) {
    let _ = PROGRAM.set(path);
}

/// The argument that makes the bench executable act as `agentdesk <mode>`.
pub const SERVE_ROLE: &str = "__agentdesk";

/// `agentdesk-bench __agentdesk <serve|api|worker>`: what `agentdesk` does, configured from the
/// environment, until SIGTERM or Ctrl-C.
pub fn serve_role(mode: &str) -> Result<()> {
    let mode = match mode {
        "serve" => Mode::Serve,
        "api" => Mode::Api,
        "worker" => Mode::Worker,
        other => bail!("unknown mode {other:?}"),
    };
    let config = Config::from_env().map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let providers = Providers::from_config(&config);
        let app = App::start(config, mode, providers).await?;
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        app.shutdown().await;
        Ok(())
    })
}

fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("cannot find a free port")?;
    Ok(l.local_addr()?.port())
}

async fn start_child(spec: &ServerSpec, database_url: &str, openai_base_url: &str, log: &Path) -> Result<Server> {
    let (program, pre_args, described) = agentdesk_program()?;
    let port = free_port()?;
    let log_file = std::fs::File::create(log).with_context(|| format!("cannot create {}", log.display()))?;
    let subcommand = match spec.mode {
        Mode::Serve => "serve",
        Mode::Api => "api",
        Mode::Worker => "worker",
    };
    let mut command = Command::new(&program);
    command.args(&pre_args).arg(subcommand).env_clear();
    // The only settings taken from the bench's environment: the child's runtime size and its
    // claimers, to compare.
    for name in ["AGENTDESK_RUNTIME_THREADS", "AGENTDESK_CLAIMERS"] {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    if let Some(claimers) = spec.claimers {
        command.env("AGENTDESK_CLAIMERS", claimers.to_string());
    }
    if let Some(grace) = spec.shutdown_grace {
        command.env("AGENTDESK_SHUTDOWN_GRACE_SECS", grace.as_secs_f64().to_string());
    }
    if spec.model_http2 {
        command.env("AGENTDESK_OPENAI_HTTP2", "true");
    }
    if let Some(idle) = spec.stream_idle {
        command.env("AGENTDESK_STREAM_IDLE_SECS", idle.as_secs_f64().to_string());
    }
    if let Some(keep) = spec.retention {
        command.env("AGENTDESK_RETENTION_DAYS", (keep.as_secs_f64() / 86_400.0).to_string());
    }
    let child = command
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("DATABASE_URL", database_url)
        .env("OPENAI_BASE_URL", openai_base_url)
        .env("AGENTDESK_ADDR", format!("127.0.0.1:{port}"))
        .env("AGENTDESK_WORKERS", spec.workers.to_string())
        .env("AGENTDESK_DB_MAX_CONNECTIONS", spec.db_max_connections.to_string())
        .env("AGENTDESK_ALLOW_PRIVATE_URLS", "true")
        .env("RUST_LOG", "warn")
        // An empty directory: no stray .env file changes the configuration.
        .current_dir(std::env::temp_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log_file)
        .spawn()
        .with_context(|| format!("cannot start {}", program.display()))?;
    let url = format!("http://127.0.0.1:{port}");
    let mut server = Server::Child {
        child: ChildGuard(child),
        url: url.clone(),
        program: described,
    };
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        server.ensure_alive()?;
        let ready = client
            .get(format!("{url}/readyz"))
            .timeout(Duration::from_secs(2))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        if ready {
            return Ok(server);
        }
        if Instant::now() > deadline {
            bail!("agentdesk did not become ready within 60 s; see {}", log.display());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A field of /proc/<pid>/status in kB (e.g. "VmRSS", "VmHWM").
pub fn status_kb(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(field)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

pub fn rss_mb(pid: u32) -> f64 {
    status_kb(pid, "VmRSS").unwrap_or(0) as f64 / 1024.0
}

/// CPU seconds (user + system, all threads) the process has used so far.
pub fn cpu_secs(pid: u32) -> f64 {
    cpu_ticks(pid, false).map_or(f64::NAN, ticks_to_secs)
}

/// CPU seconds used so far by the process's children that have exited and been waited for.
pub fn reaped_children_cpu_secs(pid: u32) -> f64 {
    let with = cpu_ticks(pid, true);
    let without = cpu_ticks(pid, false);
    with.zip(without).map_or(f64::NAN, |(w, o)| ticks_to_secs(w - o))
}

/// CPU seconds used so far by every PostgreSQL process on this machine, with those of backends
/// that have exited (counted in their parent, the postmaster). 0 when none is visible here.
pub fn postgres_cpu_secs() -> f64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    let ticks: u64 = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "postgres"))
        .filter_map(|pid| cpu_ticks(pid, true))
        .sum();
    ticks_to_secs(ticks)
}

/// CPU seconds used so far by one PostgreSQL cluster: its postmaster (with its exited backends,
/// reaped by it) and every live process it started. Other servers on the machine (a test suite's)
/// are not counted.
pub fn cluster_cpu_secs(postmaster: u32) -> f64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    let children: u64 = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| parent(pid) == Some(postmaster))
        .filter_map(|pid| cpu_ticks(pid, false))
        .sum();
    ticks_to_secs(children + cpu_ticks(postmaster, true).unwrap_or(0))
}

/// The parent of a process, from /proc/<pid>/stat.
pub fn parent(pid: u32) -> Option<u32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = text.rfind(')').map(|i| &text[i + 2..])?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// utime + stime of /proc/<pid>/stat, plus cutime + cstime (reaped children) if asked.
fn cpu_ticks(pid: u32, with_children: bool) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces: fields are counted after its closing parenthesis.
    let rest = text.rfind(')').map(|i| &text[i + 2..])?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime, stime, cutime and cstime are fields 14 to 17 of the line, 12 to 15 after the command.
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    let children = if with_children { ticks(13) + ticks(14) } else { 0 };
    Some(ticks(11) + ticks(12) + children)
}

fn ticks_to_secs(ticks: u64) -> f64 {
    // SAFETY: sysconf reads a system setting; it touches no memory of ours.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    ticks as f64 / hz
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let me = std::process::id();
        assert!(status_kb(me, "VmRSS").unwrap() > 0);
        assert!(cpu_secs(me) >= 0.0);
        assert!(postgres_cpu_secs() >= 0.0);
    }
}
