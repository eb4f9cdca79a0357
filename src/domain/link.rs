//! Signed links that answer a waiting tool call without an API token: `approve_url` and
//! `deny_url`. A link names the ticket, the call and the answer, signed with the desk's key
//! (HMAC-SHA256), so it cannot be made up or changed; it works once, because a call is answered
//! once (afterwards the link answers 410).

use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use uuid::Uuid;

/// The path links are served under.
pub const LINK_PATH: &str = "/links/approvals/";

/// What a link does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApprovalLink {
    pub ticket_id: Uuid,
    pub call_id: String,
    pub approve: bool,
}

fn mac(key: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC accepts any key length");
    mac.update(payload);
    mac.finalize().into_bytes().to_vec()
}

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

impl ApprovalLink {
    /// The link's token: its payload and signature, base64url.
    pub fn sign(&self, key: &[u8]) -> String {
        let payload = format!("{}\n{}\n{}", self.ticket_id, u8::from(self.approve), self.call_id);
        let signature = mac(key, payload.as_bytes());
        format!("{}.{}", B64.encode(payload), B64.encode(signature))
    }

    /// The link a token stands for, when its signature holds.
    pub fn verify(token: &str, key: &[u8]) -> Option<ApprovalLink> {
        let (payload, signature) = token.split_once('.')?;
        let payload = B64.decode(payload).ok()?;
        let signature = B64.decode(signature).ok()?;
        let mut check = Hmac::<Sha256>::new_from_slice(key).ok()?;
        check.update(&payload);
        // Compared in constant time.
        check.verify_slice(&signature).ok()?;
        let payload = String::from_utf8(payload).ok()?;
        let mut parts = payload.splitn(3, '\n');
        let ticket_id = Uuid::parse_str(parts.next()?).ok()?;
        let approve = match parts.next()? {
            "1" => true,
            "0" => false,
            _ => return None,
        };
        let call_id = parts.next()?.to_owned();
        Some(ApprovalLink {
            ticket_id,
            call_id,
            approve,
        })
    }

    /// The absolute URL of the link on `base` (no trailing `/`).
    pub fn url(&self, base: &str, key: &[u8]) -> String {
        format!("{base}{LINK_PATH}{}", self.sign(key))
    }
}

/// The desk's links as a process makes and checks them: the key and the base URL.
#[derive(Clone)]
pub struct Links {
    key: std::sync::Arc<[u8]>,
    base: std::sync::Arc<str>,
}

impl Links {
    /// `base`: `AGENTDESK_PUBLIC_URL`, else the address the API listens on (no trailing `/`).
    pub fn new(key: Vec<u8>, base: &str) -> Links {
        Links {
            key: key.into(),
            base: base.trim_end_matches('/').into(),
        }
    }

    /// A waiting call's `approve_url` and `deny_url`.
    pub fn for_call(&self, ticket_id: Uuid, call_id: &str) -> (String, String) {
        let link = |approve| ApprovalLink {
            ticket_id,
            call_id: call_id.to_owned(),
            approve,
        };
        (
            link(true).url(&self.base, &self.key),
            link(false).url(&self.base, &self.key),
        )
    }

    pub fn verify(&self, token: &str) -> Option<ApprovalLink> {
        ApprovalLink::verify(token, &self.key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_verifies_with_its_key_only_and_cannot_be_changed() {
        let link = ApprovalLink {
            ticket_id: Uuid::now_v7(),
            call_id: "call.with\nodd bytes".into(),
            approve: true,
        };
        let token = link.sign(b"key one");
        assert_eq!(ApprovalLink::verify(&token, b"key one"), Some(link.clone()));
        assert_eq!(ApprovalLink::verify(&token, b"key two"), None);
        let deny = ApprovalLink { approve: false, ..link };
        let (_, signature) = token.split_once('.').unwrap();
        let (payload, _) = deny
            .sign(b"key one")
            .split_once('.')
            .map(|(p, s)| (p.to_owned(), s.to_owned()))
            .unwrap();
        assert_eq!(
            ApprovalLink::verify(&format!("{payload}.{signature}"), b"key one"),
            None
        );
        assert_eq!(ApprovalLink::verify("garbage", b"key one"), None);
    }
}
