//! A small W3C WebDriver client over reqwest for the board's browser test: `chromedriver` driving
//! Debian's headless Chromium. It speaks the handful of commands the test uses (the protocol is
//! plain JSON over HTTP), which keeps a WebDriver crate and its dependencies out of the build.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use base64::Engine;
use serde_json::{json, Value};

pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// The key WebDriver wraps element references in.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A headless Chromium session; dropping it ends chromedriver (and with it the browser).
pub struct Browser {
    http: reqwest::Client,
    /// `http://127.0.0.1:PORT/session/ID`
    session: String,
    _driver: tokio::process::Child,
}

/// Fails, saying what to install, when Chromium or its WebDriver is missing. The browser tests
/// are `#[ignore]`d (`cargo test` passes on a machine without a browser, and says they were
/// ignored); `cargo test --test board -- --ignored` runs them, as CI does.
pub fn require_browser() {
    let missing: Vec<&str> = [CHROMIUM, CHROMEDRIVER]
        .into_iter()
        .filter(|p| !Path::new(p).exists())
        .collect();
    assert!(
        missing.is_empty(),
        "the board's browser tests need {missing:?}: install them with `apt-get install -y chromium \
         chromium-driver` (.ci/run does)"
    );
}

impl Browser {
    /// Starts chromedriver on a free port and opens a headless Chromium session of `width`×`height`.
    pub async fn start(width: u32, height: u32) -> anyhow::Result<Browser> {
        Browser::start_with(width, height, &[]).await
    }

    /// A session that can reach only this machine's loopback addresses: no host name resolves,
    /// and everything else goes to a proxy that refuses every connection (a port just closed).
    pub async fn start_offline(width: u32, height: u32) -> anyhow::Result<Browser> {
        let refused = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let resolver = "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1".to_owned();
        let proxy = format!("--proxy-server=http://127.0.0.1:{refused}");
        Browser::start_with(width, height, &[resolver, proxy]).await
    }

    /// `start` with more command-line arguments for Chromium.
    pub async fn start_with(width: u32, height: u32, extra_args: &[String]) -> anyhow::Result<Browser> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let driver = tokio::process::Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("start chromedriver")?;
        let http = reqwest::Client::builder().timeout(Duration::from_secs(60)).build()?;
        let base = format!("http://127.0.0.1:{port}");
        let started = tokio::time::Instant::now();
        loop {
            let ready = match http.get(format!("{base}/status")).send().await {
                Ok(r) => r.json::<Value>().await.ok().and_then(|v| v["value"]["ready"].as_bool()) == Some(true),
                Err(_) => false,
            };
            if ready {
                break;
            }
            if started.elapsed() > Duration::from_secs(20) {
                bail!("chromedriver did not become ready on port {port}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let mut args: Vec<String> = [
            "--headless=new",
            "--no-sandbox",
            "--disable-dev-shm-usage",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
        ]
        .map(str::to_owned)
        .into();
        args.push(format!("--window-size={width},{height}"));
        args.extend_from_slice(extra_args);
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": { "binary": CHROMIUM, "args": args },
        }}});
        let answer = command(
            &http,
            reqwest::Method::POST,
            &format!("{base}/session"),
            Some(capabilities),
        )
        .await?;
        let id = answer["sessionId"]
            .as_str()
            .ok_or_else(|| anyhow!("no session id in {answer}"))?;
        Ok(Browser {
            session: format!("{base}/session/{id}"),
            http,
            _driver: driver,
        })
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> anyhow::Result<Value> {
        command(&self.http, method, &format!("{}{path}", self.session), body).await
    }

    pub async fn goto(&self, url: &str) -> anyhow::Result<()> {
        self.call(reqwest::Method::POST, "/url", Some(json!({ "url": url })))
            .await
            .map(drop)
    }

    /// Runs `script` (a function body; `arguments[i]` are `args`) and returns what it returns.
    pub async fn execute(&self, script: &str, args: Vec<Value>) -> anyhow::Result<Value> {
        self.call(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({ "script": script, "args": args })),
        )
        .await
    }

    /// Polls `script` until it returns something truthy; returns that, or fails after `timeout`
    /// with `what` and the script's last answer.
    pub async fn wait_for(&self, what: &str, script: &str, timeout: Duration) -> anyhow::Result<Value> {
        let started = tokio::time::Instant::now();
        loop {
            let value = self.execute(script, vec![]).await?;
            let truthy = !matches!(&value, Value::Null | Value::Bool(false)) && value != json!("") && value != json!(0);
            if truthy {
                return Ok(value);
            }
            if started.elapsed() > timeout {
                bail!("timed out after {timeout:?} waiting for {what} (last: {value})");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn element(&self, css: &str) -> anyhow::Result<String> {
        let found = self
            .call(
                reqwest::Method::POST,
                "/element",
                Some(json!({ "using": "css selector", "value": css })),
            )
            .await
            .with_context(|| format!("find {css}"))?;
        found[ELEMENT]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| anyhow!("no element reference for {css}: {found}"))
    }

    pub async fn click(&self, css: &str) -> anyhow::Result<()> {
        let id = self.element(css).await?;
        self.call(reqwest::Method::POST, &format!("/element/{id}/click"), Some(json!({})))
            .await
            .with_context(|| format!("click {css}"))
            .map(drop)
    }

    /// Types `text` into the element, as keystrokes.
    pub async fn type_into(&self, css: &str, text: &str) -> anyhow::Result<()> {
        let id = self.element(css).await?;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{id}/value"),
            Some(json!({ "text": text })),
        )
        .await
        .with_context(|| format!("type into {css}"))
        .map(drop)
    }

    /// Saves a PNG of the viewport.
    pub async fn screenshot(&self, path: &Path) -> anyhow::Result<()> {
        let encoded = self.call(reqwest::Method::GET, "/screenshot", None).await?;
        let png = base64::engine::general_purpose::STANDARD
            .decode(encoded.as_str().ok_or_else(|| anyhow!("no screenshot data"))?)?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, png).with_context(|| format!("write {}", path.display()))
    }

    /// Emulates `prefers-color-scheme: dark` (or light) through Chromium's DevTools protocol.
    pub async fn color_scheme(&self, scheme: &str) -> anyhow::Result<()> {
        let params = json!({"features": [{"name": "prefers-color-scheme", "value": scheme}]});
        self.call(
            reqwest::Method::POST,
            "/goog/cdp/execute",
            Some(json!({"cmd": "Emulation.setEmulatedMedia", "params": params})),
        )
        .await
        .map(drop)
    }

    /// What the page's error hook (`window.__errors`: uncaught errors, rejected promises, failed
    /// asset loads, `console.error`) collected.
    pub async fn page_errors(&self) -> anyhow::Result<Vec<String>> {
        let errors = self
            .execute("return window.__errors || ['the error hook is missing']", vec![])
            .await?;
        Ok(serde_json::from_value(errors)?)
    }

    pub async fn close(self) {
        let _ = self.call(reqwest::Method::DELETE, "", None).await;
    }
}

/// One WebDriver command; its `value`, or the WebDriver error as an error.
async fn command(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    body: Option<Value>,
) -> anyhow::Result<Value> {
    let mut request = http.request(method, url);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.with_context(|| format!("WebDriver {url}"))?;
    let status = response.status();
    let mut answer: Value = response.json().await.context("a WebDriver answer")?;
    let value = answer["value"].take();
    if !status.is_success() || value.get("error").is_some() {
        bail!("WebDriver {url}: {status} {}", value);
    }
    Ok(value)
}
