//! What keeps a web page from using a desk that trusts whoever reaches it.
//!
//! Without tokens the desk answers anyone who can open a connection to it, which on a laptop is
//! any program on the machine and also any web page its browser shows: a page may send a "simple"
//! cross-site request (a `POST` with a `text/plain` body needs no CORS preflight), and through DNS
//! rebinding (a host name of the attacker's that resolves to 127.0.0.1) it may even read the
//! answers. Three rules close that, the way local developer servers do:
//!
//! - without tokens, the `Host` must name this machine: `localhost`, a loopback address, the
//!   listen address (any address when it listens on all of them), `AGENTDESK_PUBLIC_URL`'s host,
//!   or one of `AGENTDESK_ALLOWED_HOSTS`. A rebinding page's requests carry its own host name;
//! - without tokens, a request from another origin (its `Origin` header) may only read; `/mcp`
//!   refuses one on every method, as the MCP transport asks. The board, served by the desk
//!   itself, is of the same origin;
//! - a request body is JSON, declared `application/json` (or a `+json` type) or not declared at
//!   all; the types a page may send without a preflight (`text/plain`, forms) are 415.
//!
//! With tokens, a browser cannot attach the bearer header to a cross-site request without a
//! preflight the desk never grants, and the desk keeps no cookies, so only the third rule applies.

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::net::IpAddr;

use super::error::ApiError;
use super::AppState;
use crate::config::Config;

pub async fn refuse_cross_site(State(state): State<AppState>, request: Request, next: Next) -> Response {
    match check(&state.config, &request) {
        Ok(()) => next.run(request).await,
        Err(refused) => refused.into_response(),
    }
}

fn check(config: &Config, request: &Request) -> Result<(), ApiError> {
    let headers = request.headers();
    // A signed link is its own authority, and its page posts a form; the Host rule still holds.
    let link = crate::domain::link::is_link_path(request.uri().path());
    if config.api_tokens.is_empty() {
        let host = request_host(request);
        if let Some(host) = host {
            if !host_allowed(config, host) {
                return Err(ApiError::Forbidden(format!(
                    "this desk has no API tokens, so it answers only requests addressed to this machine, \
                     and the Host header names {host:?}; add that name to AGENTDESK_ALLOWED_HOSTS, or set \
                     AGENTDESK_API_TOKENS"
                )));
            }
        }
        let reads_only = link || matches!(*request.method(), Method::GET | Method::HEAD | Method::OPTIONS);
        let protocol_endpoint = request.uri().path() == "/mcp";
        if !reads_only || protocol_endpoint {
            if let Some(origin) = headers.get(header::ORIGIN) {
                let origin = origin.to_str().unwrap_or("null");
                if !origin_allowed(config, origin, host) {
                    let allowed = if protocol_endpoint {
                        "is refused"
                    } else {
                        "may only read"
                    };
                    return Err(ApiError::Forbidden(format!(
                        "a request from the web page at {origin:?} {allowed}: this desk has no API \
                         tokens, and answers changes only from its own pages (the board) and from programs"
                    )));
                }
            }
        }
    }
    if carries_body(request.method()) && !link {
        check_content_type(headers)?;
    }
    Ok(())
}

/// The host the request is addressed to: the `Host` header, else the URI's authority (HTTP/2).
/// None when neither names one; such a request does not come from a browser.
fn request_host(request: &Request) -> Option<&str> {
    request
        .headers()
        .get(header::HOST)
        .and_then(|value| value.to_str().ok())
        .or_else(|| request.uri().authority().map(|a| a.as_str()))
}

/// The host part of an authority (`name`, `name:port`, `[v6]:port`), lower case, without brackets.
fn host_name(authority: &str) -> String {
    let host = match authority.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(rest),
        None => authority.rsplit_once(':').map_or(authority, |(host, _port)| host),
    };
    host.trim_end_matches('.').to_ascii_lowercase()
}

fn host_allowed(config: &Config, authority: &str) -> bool {
    let host = host_name(authority);
    if host == "localhost" || host.ends_with(".localhost") {
        return true;
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        // An address cannot be rebound: a page that sends it was loaded from that address. The
        // listen address is this machine; listening on all addresses, any of the machine's is.
        let listen = config.addr.ip();
        return ip.is_loopback() || ip == listen || listen.is_unspecified();
    }
    let public_host = config
        .public_url
        .as_deref()
        .and_then(|url| url::Url::parse(url).ok())
        .and_then(|url| url.host_str().map(str::to_ascii_lowercase));
    if public_host.is_some_and(|public| public == host) {
        return true;
    }
    listed(config, &host, true)
}

/// Whether `host` is on `AGENTDESK_ALLOWED_HOSTS`; `*` counts only where `wildcard` says so.
fn listed(config: &Config, host: &str, wildcard: bool) -> bool {
    config
        .allowed_hosts
        .iter()
        .any(|allowed| match allowed.strip_prefix('.') {
            _ if allowed == "*" => wildcard,
            Some(domain) => host == domain || host.ends_with(allowed.as_str()),
            None => host == allowed,
        })
}

/// Whether a request from `origin` may change things: it is the origin the request is addressed
/// to (the board's own pages), `AGENTDESK_PUBLIC_URL`'s, or one on an allowed host name.
fn origin_allowed(config: &Config, origin: &str, host: Option<&str>) -> bool {
    let Ok(url) = url::Url::parse(origin) else {
        // `null` (a sandboxed frame, a file) and anything unreadable.
        return false;
    };
    let Some(origin_host) = url.host_str() else {
        return false;
    };
    let authority = match url.port() {
        Some(port) => format!("{origin_host}:{port}"),
        None => origin_host.to_owned(),
    };
    if host.is_some_and(|host| host.eq_ignore_ascii_case(&authority)) {
        return true;
    }
    let public_origin = config
        .public_url
        .as_deref()
        .and_then(|public| url::Url::parse(public).ok())
        .map(|public| public.origin());
    if public_origin.is_some_and(|public| public == url.origin()) {
        return true;
    }
    // `*` lets any name address the desk, not any page change it.
    listed(config, &host_name(&authority), false)
}

fn carries_body(method: &Method) -> bool {
    matches!(*method, Method::POST | Method::PUT | Method::PATCH | Method::DELETE)
}

/// 415 unless the declared type of the body is JSON. An undeclared type passes, so that programs
/// sending JSON without saying so keep working; a page's body without a type (a `Blob`) carries
/// an `Origin`, which the rule above judges.
fn check_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(declared) = headers.get(header::CONTENT_TYPE) else {
        return Ok(());
    };
    let essence = declared
        .to_str()
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let json = essence == "application/json"
        || essence
            .strip_prefix("application/")
            .is_some_and(|sub| sub.ends_with("+json"));
    if json {
        return Ok(());
    }
    Err(ApiError::UnsupportedMediaType(format!(
        "request bodies are JSON, sent with Content-Type: application/json, not {:?} (with curl: --json '{{…}}' \
         or -H 'Content-Type: application/json')",
        declared.to_str().unwrap_or("(unreadable)")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(configure: impl FnOnce(&mut Config)) -> Config {
        let mut config = Config::default();
        configure(&mut config);
        config
    }

    #[test]
    fn hosts_that_name_this_machine_pass() {
        let c = config(|_| {});
        for host in [
            "localhost",
            "localhost:8080",
            "LOCALHOST.:8080",
            "app.localhost",
            "127.0.0.1:8080",
            "[::1]:8080",
            "127.0.0.2",
        ] {
            assert!(host_allowed(&c, host), "{host}");
        }
        for host in [
            "evil.example.com",
            "evil.example.com:8080",
            "10.0.0.5:8080",
            "localhost.evil.com",
            "[::2]",
        ] {
            assert!(!host_allowed(&c, host), "{host}");
        }
    }

    #[test]
    fn the_public_url_the_allowed_list_and_the_listen_address_add_hosts() {
        let c = config(|c| {
            c.public_url = Some("https://Desk.Example.com".into());
            c.allowed_hosts = vec!["box.lan".into(), ".corp.example".into()];
            c.addr = "10.0.0.5:8080".parse().unwrap();
        });
        for host in [
            "desk.example.com",
            "box.lan:8080",
            "corp.example",
            "a.b.corp.example",
            "10.0.0.5:8080",
        ] {
            assert!(host_allowed(&c, host), "{host}");
        }
        for host in ["other.example.com", "notcorp.example", "10.0.0.6"] {
            assert!(!host_allowed(&c, host), "{host}");
        }
        let any = config(|c| c.allowed_hosts = vec!["*".into()]);
        assert!(host_allowed(&any, "anything.example"));
    }

    #[test]
    fn only_the_desks_own_origins_may_change_things() {
        let c = config(|c| c.public_url = Some("https://desk.example.com".into()));
        assert!(origin_allowed(&c, "http://localhost:8080", Some("localhost:8080")));
        assert!(origin_allowed(&c, "http://127.0.0.1:8080", Some("127.0.0.1:8080")));
        assert!(origin_allowed(&c, "https://desk.example.com", Some("127.0.0.1:8080")));
        assert!(!origin_allowed(&c, "http://evil.example.com", Some("127.0.0.1:8080")));
        assert!(!origin_allowed(&c, "http://localhost:3000", Some("localhost:8080")));
        assert!(!origin_allowed(&c, "null", Some("localhost:8080")));
        assert!(!origin_allowed(&c, "http://desk.example.com", Some("127.0.0.1:8080")));
    }

    #[test]
    fn bodies_must_be_declared_json_or_not_declared() {
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::CONTENT_TYPE, value.parse().unwrap());
            check_content_type(&headers).is_ok()
        };
        assert!(check_content_type(&HeaderMap::new()).is_ok());
        assert!(with("application/json"));
        assert!(with("Application/JSON; charset=utf-8"));
        assert!(with("application/merge-patch+json"));
        assert!(!with("text/plain"));
        assert!(!with("text/plain;charset=UTF-8"));
        assert!(!with("application/x-www-form-urlencoded"));
        assert!(!with("multipart/form-data; boundary=x"));
    }
}
