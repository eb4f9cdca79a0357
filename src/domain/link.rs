//! Signed links that answer a waiting tool call without an API token: an approval's `approve_url`
//! and `deny_url`, a question's `answer_url`. A link names the ticket, the call and what it does,
//! signed with the desk's key (HMAC-SHA256), so it cannot be made up or changed; it works once,
//! because a call is answered once (afterwards the link answers 410).

use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use uuid::Uuid;

/// The paths links are served under: approvals' and questions'.
pub const APPROVAL_PATH: &str = "/links/approvals/";
pub const QUESTION_PATH: &str = "/links/questions/";

/// Whether a request's path is a link's (which holds its token).
pub fn is_link_path(path: &str) -> bool {
    path.starts_with(APPROVAL_PATH) || path.starts_with(QUESTION_PATH)
}

/// A path as logs may show it: a link's without its token.
pub fn redacted(path: &str) -> &str {
    if path.starts_with(APPROVAL_PATH) {
        "/links/approvals/…"
    } else if path.starts_with(QUESTION_PATH) {
        "/links/questions/…"
    } else {
        path
    }
}

/// What a link does to its call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkAction {
    Approve,
    Deny,
    /// Answers an `ask_human` question.
    Answer,
}

impl LinkAction {
    fn code(self) -> &'static str {
        match self {
            LinkAction::Approve => "1",
            LinkAction::Deny => "0",
            LinkAction::Answer => "a",
        }
    }

    fn path(self) -> &'static str {
        match self {
            LinkAction::Approve | LinkAction::Deny => APPROVAL_PATH,
            LinkAction::Answer => QUESTION_PATH,
        }
    }
}

/// What a link does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallLink {
    pub ticket_id: Uuid,
    pub call_id: String,
    pub action: LinkAction,
}

fn mac(key: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC accepts any key length");
    mac.update(payload);
    mac.finalize().into_bytes().to_vec()
}

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

impl CallLink {
    /// The link's token: its payload and signature, base64url.
    pub fn sign(&self, key: &[u8]) -> String {
        let payload = format!("{}\n{}\n{}", self.ticket_id, self.action.code(), self.call_id);
        let signature = mac(key, payload.as_bytes());
        format!("{}.{}", B64.encode(payload), B64.encode(signature))
    }

    /// The link a token stands for, when its signature holds.
    pub fn verify(token: &str, key: &[u8]) -> Option<CallLink> {
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
        let action = match parts.next()? {
            "1" => LinkAction::Approve,
            "0" => LinkAction::Deny,
            "a" => LinkAction::Answer,
            _ => return None,
        };
        let call_id = parts.next()?.to_owned();
        Some(CallLink {
            ticket_id,
            call_id,
            action,
        })
    }

    /// The absolute URL of the link on `base` (no trailing `/`).
    pub fn url(&self, base: &str, key: &[u8]) -> String {
        format!("{base}{}{}", self.action.path(), self.sign(key))
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
        (
            self.url(ticket_id, call_id, LinkAction::Approve),
            self.url(ticket_id, call_id, LinkAction::Deny),
        )
    }

    /// A question's `answer_url`.
    pub fn for_question(&self, ticket_id: Uuid, call_id: &str) -> String {
        self.url(ticket_id, call_id, LinkAction::Answer)
    }

    fn url(&self, ticket_id: Uuid, call_id: &str, action: LinkAction) -> String {
        let link = CallLink {
            ticket_id,
            call_id: call_id.to_owned(),
            action,
        };
        link.url(&self.base, &self.key)
    }

    /// The link a token stands for, when its signature holds and it does `action` (an approval's
    /// token does not open a question's page, nor the other way round).
    pub fn verify(&self, token: &str, actions: &[LinkAction]) -> Option<CallLink> {
        CallLink::verify(token, &self.key).filter(|l| actions.contains(&l.action))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_verifies_with_its_key_only_and_cannot_be_changed() {
        let link = CallLink {
            ticket_id: Uuid::now_v7(),
            call_id: "call.with\nodd bytes".into(),
            action: LinkAction::Approve,
        };
        let token = link.sign(b"key one");
        assert_eq!(CallLink::verify(&token, b"key one"), Some(link.clone()));
        assert_eq!(CallLink::verify(&token, b"key two"), None);
        let deny = CallLink {
            action: LinkAction::Deny,
            ..link
        };
        let (_, signature) = token.split_once('.').unwrap();
        let (payload, _) = deny
            .sign(b"key one")
            .split_once('.')
            .map(|(p, s)| (p.to_owned(), s.to_owned()))
            .unwrap();
        assert_eq!(CallLink::verify(&format!("{payload}.{signature}"), b"key one"), None);
        assert_eq!(CallLink::verify("garbage", b"key one"), None);
    }
}
