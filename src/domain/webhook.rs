//! Webhook endpoints and the Standard Webhooks format: secrets, signatures, message ids, and the
//! rules an endpoint's settings follow.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use utoipa::ToSchema;
use uuid::Uuid;

/// The kind of the event `POST /v1/webhooks/{id}/test` sends.
pub const TEST_KIND: &str = "webhook.test";
const SECRET_PREFIX: &str = "whsec_";
/// A secret's key, decoded: 24 to 64 bytes (Standard Webhooks recommends 24 to 64).
const MIN_KEY_LEN: usize = 24;
const MAX_KEY_LEN: usize = 64;
pub const MAX_URL_LEN: usize = 2048;
pub const MAX_PATTERNS: usize = 100;
pub const MAX_DESCRIPTION_LEN: usize = 1000;

/// An endpoint as the API shows it (never with its secret, which only its creation returns).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct Webhook {
    pub id: Uuid,
    #[schema(example = "https://example.com/hook")]
    pub url: String,
    /// Event kinds delivered; an entry may end in `*` (`ticket.*`); empty: every kind.
    pub events: Vec<String>,
    /// Only events of tickets with one of these labels; empty: every ticket.
    pub labels: Vec<String>,
    pub description: Option<String>,
    /// A disabled endpoint receives nothing; enabling it again delivers the events from then on.
    pub disabled: bool,
    /// Why the service disabled it (`gone`: the receiver answered 410), null when a client did.
    pub disabled_reason: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// One attempt to deliver an event to an endpoint.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct Delivery {
    /// The `webhook-id` the receiver was sent: the same for every attempt of one event.
    #[schema(example = "msg_2b5f0c5d9e6a4b1f8c3d7e9a0b1c2d3e")]
    pub event_id: String,
    /// The event's kind.
    #[serde(rename = "type")]
    pub kind: String,
    /// 1 for the first attempt of an event, 2 for its first retry, …
    pub attempt: i32,
    /// The receiver's HTTP status; null when no answer came.
    pub status_code: Option<i32>,
    /// Null when answered with 2xx; else `status 500`, `timeout`, `connection: …`, `forbidden_address`.
    pub error: Option<String>,
    pub duration_ms: i64,
    pub at: DateTime<Utc>,
}

/// A new secret: `whsec_` and the base64 of 32 random bytes.
pub fn generate_secret() -> String {
    let key: [u8; 32] = rand::random();
    format!("{SECRET_PREFIX}{}", BASE64.encode(key))
}

/// The signing key of a secret (`whsec_<base64>`), or why it is not one.
pub fn secret_key(secret: &str) -> Result<Vec<u8>, String> {
    let encoded = secret
        .strip_prefix(SECRET_PREFIX)
        .ok_or_else(|| "secret must start with whsec_".to_string())?;
    let key = BASE64
        .decode(encoded)
        .map_err(|_| "secret must be whsec_ followed by base64".to_string())?;
    if !(MIN_KEY_LEN..=MAX_KEY_LEN).contains(&key.len()) {
        return Err(format!(
            "secret's key must be {MIN_KEY_LEN} to {MAX_KEY_LEN} bytes once decoded, not {}",
            key.len()
        ));
    }
    Ok(key)
}

/// `v1,<base64 HMAC-SHA256(key, "{msg_id}.{timestamp}.{body}")>`: the `webhook-signature` header.
pub fn sign(key: &[u8], msg_id: &str, timestamp: i64, body: &[u8]) -> String {
    // HMAC takes keys of any length.
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC accepts any key length");
    mac.update(msg_id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("v1,{}", BASE64.encode(mac.finalize().into_bytes()))
}

/// The `webhook-id` of an event (by its id in the log) sent to an endpoint: derived from both, so
/// every attempt, from any process, sends the same one.
pub fn message_id(webhook_id: Uuid, event_id: i64) -> String {
    let digest = Sha256::new()
        .chain_update(webhook_id.as_bytes())
        .chain_update(event_id.to_be_bytes())
        .finalize();
    format!("msg_{}", hex::encode(&digest[..16]))
}

/// Checks an `events` entry: an event kind (`ticket.done`), or a prefix ending in `*` (`tool.*`,
/// `*`), of lowercase letters, digits, `.` and `_`.
pub fn check_pattern(pattern: &str) -> Result<(), String> {
    let body = pattern.strip_suffix('*').unwrap_or(pattern);
    let valid = !pattern.is_empty()
        && pattern.len() <= 100
        && body
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '_');
    if valid {
        Ok(())
    } else {
        Err(format!(
            "invalid event pattern {pattern:?}: an event kind such as ticket.done, or a prefix ending in * \
             such as ticket.*"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_the_standard_webhooks_test_vector() {
        let key = secret_key("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let signature = sign(
            &key,
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(signature, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn secrets_are_checked_and_generated_well_formed() {
        assert!(secret_key(&generate_secret()).is_ok_and(|k| k.len() == 32));
        assert_ne!(generate_secret(), generate_secret());
        for bad in ["", "whsec_", "abc", "whsec_!!!!", "whsec_c2hvcnQ="] {
            assert!(secret_key(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn message_ids_are_stable_per_endpoint_and_event() {
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        assert_eq!(message_id(a, 7), message_id(a, 7));
        assert_ne!(message_id(a, 7), message_id(a, 8));
        assert_ne!(message_id(a, 7), message_id(b, 7));
        assert!(!message_id(a, 7).contains('.'));
    }

    #[test]
    fn patterns_are_kinds_or_prefixes() {
        for good in ["ticket.done", "tool.*", "*", "context.limit_exceeded"] {
            assert!(check_pattern(good).is_ok(), "{good}");
        }
        for bad in ["", "Ticket.done", "ti*ck", "a b", "**"] {
            assert!(check_pattern(bad).is_err(), "{bad}");
        }
    }
}
