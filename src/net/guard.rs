//! The address guard: outbound requests made on a user's behalf (HTTP tools, MCP servers, webhook
//! deliveries) may not reach the desk's own network — loopback, private, link-local, unique-local
//! or cloud-metadata addresses — unless `AGENTDESK_ALLOW_PRIVATE_URLS=true`.
//!
//! The check runs on the resolved address, as the connection is made: a hostname that resolves
//! inward is refused like an address literal, and a DNS answer that changes between a check and
//! the connect (rebinding) cannot slip through, since the connector only ever sees the addresses
//! this resolver let pass. Redirects are followed only to allowed addresses. A refused request
//! sends nothing.

use std::error::Error as StdError;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::redirect;
use reqwest::Url;

/// How many redirects a guarded request follows.
const MAX_REDIRECTS: usize = 10;

/// The error a refused address produces; find it in a `reqwest::Error` with [`is_forbidden`].
#[derive(Debug, Clone)]
pub struct ForbiddenAddress {
    /// The host as the request named it (never a resolved address list, which says nothing more).
    pub host: String,
}

impl fmt::Display for ForbiddenAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "forbidden_address: {} is a loopback, private, link-local or metadata address \
             (set AGENTDESK_ALLOW_PRIVATE_URLS=true to allow it)",
            self.host
        )
    }
}

impl StdError for ForbiddenAddress {}

/// The guard's one setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressGuard {
    pub allow_private: bool,
}

impl AddressGuard {
    /// Refuses a URL whose host is an address literal the guard forbids. Hostnames pass here and
    /// are checked by the client's resolver when the connection is made.
    pub fn check_url(&self, url: &Url) -> Result<(), ForbiddenAddress> {
        if self.allow_private {
            return Ok(());
        }
        let forbidden = match url.host() {
            Some(url::Host::Ipv4(ip)) => is_forbidden_ip(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => is_forbidden_ip(IpAddr::V6(ip)),
            Some(url::Host::Domain(_)) => false,
            None => true,
        };
        if forbidden {
            return Err(ForbiddenAddress {
                host: url.host_str().unwrap_or("").to_string(),
            });
        }
        Ok(())
    }

    /// A client builder whose resolver and redirect policy enforce the guard. Callers add their
    /// own settings (timeouts, pool) and build it once: the client is meant to be reused.
    pub fn client_builder(&self) -> reqwest::ClientBuilder {
        let guard = *self;
        // HTTP/1.1 as always: a tool's or webhook's host that offers HTTP/2 would otherwise get every
        // call on one connection, queued behind its limit of streams (see `llm::endpoint::client`).
        let builder = reqwest::Client::builder()
            .http1_only()
            .connect_timeout(Duration::from_secs(10))
            .tcp_nodelay(true)
            .redirect(redirect::Policy::custom(move |attempt| {
                if attempt.previous().len() >= MAX_REDIRECTS {
                    return attempt.error("too many redirects");
                }
                match guard.check_url(attempt.url()) {
                    Ok(()) => attempt.follow(),
                    Err(e) => attempt.error(e),
                }
            }));
        if self.allow_private {
            builder
        } else {
            builder.dns_resolver(Arc::new(GuardedResolver))
        }
    }
}

/// True when the error (or any error under it) is the guard refusing an address.
pub fn is_forbidden(err: &(dyn StdError + 'static)) -> bool {
    let mut source: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = source {
        if e.is::<ForbiddenAddress>() {
            return true;
        }
        source = e.source();
    }
    false
}

/// Resolves with the system resolver, then keeps only allowed addresses; a name with none left
/// fails with [`ForbiddenAddress`], so the connector never dials an inward address.
struct GuardedResolver;

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        Box::pin(async move {
            let host = name.as_str().to_string();
            let resolved: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> = resolved.into_iter().filter(|a| !is_forbidden_ip(a.ip())).collect();
            if allowed.is_empty() {
                return Err(Box::new(ForbiddenAddress { host }) as Box<dyn StdError + Send + Sync>);
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

/// Loopback, private, shared (CGNAT), link-local (which holds the usual metadata address
/// 169.254.169.254), unique-local (which holds AWS's fd00:ec2::254), unspecified, broadcast,
/// multicast and documentation ranges, and IPv4 addresses inside IPv6 (mapped, compatible, 6to4,
/// NAT64) by the IPv4 address they carry.
pub fn is_forbidden_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_forbidden_v4(v4),
        IpAddr::V6(v6) => is_forbidden_v6(v6),
    }
}

fn is_forbidden_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0 // "this network"
        || (a == 100 && (64..128).contains(&b)) // shared address space (CGNAT; Alibaba's metadata)
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 198 && (b == 18 || b == 19)) // benchmarking
        || a >= 240 // reserved
        || ip == Ipv4Addr::new(168, 63, 129, 16) // Azure's platform endpoint
}

fn is_forbidden_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_forbidden_v4(v4);
    }
    let seg = ip.segments();
    // ::a.b.c.d (deprecated compatible form), but not :: and ::1 which are handled below.
    if seg[..6] == [0; 6] && (seg[6] != 0 || seg[7] > 1) {
        return is_forbidden_v4(Ipv4Addr::new(
            (seg[6] >> 8) as u8,
            seg[6] as u8,
            (seg[7] >> 8) as u8,
            seg[7] as u8,
        ));
    }
    // NAT64 (64:ff9b::/96) and 6to4 (2002::/16) carry an IPv4 address that may be inward.
    if seg[0] == 0x64 && seg[1] == 0xff9b && seg[2..6] == [0; 4] {
        return is_forbidden_v4(Ipv4Addr::new(
            (seg[6] >> 8) as u8,
            seg[6] as u8,
            (seg[7] >> 8) as u8,
            seg[7] as u8,
        ));
    }
    if seg[0] == 0x2002 {
        return is_forbidden_v4(Ipv4Addr::new(
            (seg[1] >> 8) as u8,
            seg[1] as u8,
            (seg[2] >> 8) as u8,
            seg[2] as u8,
        ));
    }
    ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || (seg[0] & 0xfe00) == 0xfc00 // unique-local fc00::/7
        || (seg[0] & 0xffc0) == 0xfe80 // link-local fe80::/10
        || (seg[0] & 0xffc0) == 0xfec0 // site-local (deprecated) fec0::/10
        || (seg[0] == 0x2001 && seg[1] == 0x0db8) // documentation
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forbidden(s: &str) -> bool {
        is_forbidden_ip(s.parse().unwrap())
    }

    #[test]
    fn inward_addresses_are_forbidden() {
        for ip in [
            "127.0.0.1",
            "127.8.9.10",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.100.100.200",
            "0.0.0.0",
            "255.255.255.255",
            "::1",
            "::",
            "fd00:ec2::254",
            "fc00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::a00:1",
            "2002:7f00:1::",
        ] {
            assert!(forbidden(ip), "{ip} should be forbidden");
        }
    }

    #[test]
    fn public_addresses_are_allowed() {
        for ip in [
            "1.1.1.1",
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            assert!(!forbidden(ip), "{ip} should be allowed");
        }
    }

    #[test]
    fn literal_urls_are_checked_and_hostnames_left_to_the_resolver() {
        let guard = AddressGuard { allow_private: false };
        assert!(guard.check_url(&"http://127.0.0.1:9/x".parse().unwrap()).is_err());
        assert!(guard.check_url(&"http://[::1]/".parse().unwrap()).is_err());
        assert!(guard.check_url(&"https://example.com/".parse().unwrap()).is_ok());
        let open = AddressGuard { allow_private: true };
        assert!(open.check_url(&"http://127.0.0.1:9/x".parse().unwrap()).is_ok());
    }

    #[tokio::test]
    async fn a_hostname_resolving_inward_is_refused_before_anything_is_sent() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let client = AddressGuard { allow_private: false }.client_builder().build().unwrap();
        let err = client
            .get(format!("http://localhost:{port}/"))
            .send()
            .await
            .unwrap_err();
        assert!(is_forbidden(&err), "{err:?}");
        // Nothing connected.
        assert!(listener.accept().is_err());
    }

    #[tokio::test]
    async fn a_redirect_to_an_inward_address_is_not_followed() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        // The inward target: it must never see a connection.
        let target = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target_port = target.local_addr().unwrap().port();
        // The redirector, reached through a name pinned to it (a test-only override that stands
        // in for a public host).
        let redirector = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let redirector_addr = redirector.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut conn, _) = redirector.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let _ = conn.read(&mut buf).await;
            let reply = format!(
                "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:{target_port}/inside\r\nContent-Length: 0\r\n\r\n"
            );
            conn.write_all(reply.as_bytes()).await.unwrap();
        });
        let client = AddressGuard { allow_private: false }
            .client_builder()
            .resolve("redirector.test", redirector_addr)
            .build()
            .unwrap();
        let err = client
            .get(format!("http://redirector.test:{}/", redirector_addr.port()))
            .send()
            .await
            .unwrap_err();
        assert!(is_forbidden(&err), "{err:?}");
        let accepted = tokio::time::timeout(Duration::from_millis(200), target.accept()).await;
        assert!(accepted.is_err(), "the inward target was connected to");
    }
}
