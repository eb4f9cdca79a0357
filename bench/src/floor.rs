//! The fan-out floor: the least an SSE server on this machine can do for the same subscribers.
//!
//! `agentdesk-bench __fanout_floor <bursts per second> <events per burst>` runs as a child process
//! (like agentdesk, so the two are measured alike): it answers every `GET` with an event-stream
//! head, then, at the given rate, writes one chunk of `events per burst` frames stamped with the
//! time of the burst to every connection. No HTTP framework, database, log or filter: what is left
//! is the cost of the TCP writes and the subscribers' reads, which bounds any server's latency.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;

pub const FLOOR_ROLE: &str = "__fanout_floor";

/// About the size of a persisted agentdesk event's frame.
const PADDING: usize = 400;

/// The floor server as a child process; killed when dropped.
pub struct Floor {
    child: Child,
    pub addr: SocketAddr,
}

impl Floor {
    pub async fn start(bursts_per_s: f64, events_per_burst: usize) -> Result<Floor> {
        let exe = std::env::current_exe().context("cannot find the bench executable")?;
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").context("cannot find a free port")?;
            l.local_addr()?.port()
        };
        let child = Command::new(exe)
            .args([
                FLOOR_ROLE,
                &port.to_string(),
                &bursts_per_s.to_string(),
                &events_per_burst.to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .context("cannot start the fan-out floor server")?;
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let floor = Floor { child, addr };
        for _ in 0..200 {
            if TcpStream::connect(addr).await.is_ok() {
                return Ok(floor);
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        bail!("the fan-out floor server did not listen within 5 s")
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Floor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `agentdesk-bench __fanout_floor <port> <bursts per second> <events per burst>`.
pub fn floor_role(args: &[String]) -> Result<()> {
    let parse = |i: usize| {
        args.get(i)
            .context("usage: __fanout_floor <port> <bursts/s> <events/burst>")
    };
    let port: u16 = parse(0)?.parse()?;
    let rate: f64 = parse(1)?.parse()?;
    let events: usize = parse(2)?.parse()?;
    if rate <= 0.0 {
        bail!("the burst rate must be positive");
    }
    crate::harness::raise_fd_limit();
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        let listener = TcpListener::bind(("127.0.0.1", port)).await?;
        let (tx, _) = broadcast::channel::<Bytes>(64);
        let emitter = tx.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
            loop {
                tick.tick().await;
                let _ = emitter.send(burst(events));
            }
        });
        loop {
            let (stream, _) = listener.accept().await?;
            let rx = tx.subscribe();
            tokio::spawn(async move {
                let _ = serve(stream, rx).await;
            });
        }
    })
}

/// One chunk of `events` frames, each stamped now.
fn burst(events: usize) -> Bytes {
    let at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    let padding = "x".repeat(PADDING);
    let mut body = String::new();
    for i in 0..events {
        body.push_str(&format!(
            "id: {i}\ndata: {{\"kind\":\"floor.event\",\"at\":\"{at}\",\"data\":\"{padding}\"}}\n\n"
        ));
    }
    Bytes::from(format!("{:x}\r\n{body}\r\n", body.len()))
}

async fn serve(stream: TcpStream, mut rx: broadcast::Receiver<Bytes>) -> Result<()> {
    stream.set_nodelay(true)?;
    let mut stream = BufReader::new(stream);
    // The request head ends with an empty line.
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let byte = stream.read_u8().await?;
        head.push(byte);
        if head.len() > 8192 {
            bail!("request head too long");
        }
    }
    let mut stream = stream.into_inner();
    stream
        .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        .await?;
    loop {
        match rx.recv().await {
            Ok(chunk) => stream.write_all(&chunk).await?,
            Err(broadcast::error::RecvError::Lagged(_)) => continue,
            Err(broadcast::error::RecvError::Closed) => return Ok(()),
        }
    }
}
