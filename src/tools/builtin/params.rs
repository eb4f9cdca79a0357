//! Readers of the built-in tools' parameters, for `#[serde(deserialize_with)]`: each says what
//! is wrong in the words a model is shown. A parameter that was not given arrives as null (see
//! `shape::parse_args`), so absent and null read alike.

use serde::de::value::StrDeserializer;
use serde::de::{DeserializeOwned, Deserializer, Error};
use serde::Deserialize;
use serde_json::Value;

/// A required text parameter that must not be blank, as given (untrimmed); `empty` and
/// `not_string` are the messages for a blank string and for any other JSON type.
pub(super) fn required_text<'de, D: Deserializer<'de>>(
    d: D,
    name: &str,
    empty: &str,
    not_string: &str,
) -> Result<String, D::Error> {
    match Value::deserialize(d)? {
        Value::String(s) if !s.trim().is_empty() => Ok(s),
        Value::String(_) => Err(D::Error::custom(empty)),
        Value::Null => Err(D::Error::custom(format!("missing required parameter `{name}`"))),
        _ => Err(D::Error::custom(not_string)),
    }
}

/// An optional string parameter, as given (untrimmed).
pub(super) fn optional_string<'de, D: Deserializer<'de>>(d: D, name: &str) -> Result<Option<String>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s)),
        _ => Err(D::Error::custom(format!("`{name}` must be a string"))),
    }
}

/// An optional string parameter, trimmed; null and blank are both "not given".
fn trimmed_text<'de, D: Deserializer<'de>>(d: D, name: &str) -> Result<Option<String>, D::Error> {
    let text = optional_string(d, name)?;
    Ok(text.map(|s| s.trim().to_string()).filter(|s| !s.is_empty()))
}

/// `key`, as [`trimmed_text`] reads it.
pub(super) fn key<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    trimmed_text(d, "key")
}

/// `status`, as [`trimmed_text`] reads it.
pub(super) fn status<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    trimmed_text(d, "status")
}

/// `label`, as [`trimmed_text`] reads it.
pub(super) fn label<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    trimmed_text(d, "label")
}

/// `query`, as [`trimmed_text`] reads it.
pub(super) fn query<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    trimmed_text(d, "query")
}

/// The `action` parameter, trimmed; None when it is absent or not a string.
pub(super) fn action_name<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::String(s) => Some(s.trim().to_string()),
        _ => None,
    })
}

/// `name` as one of the actions of `A` (named in lowercase); `valid` lists them for the model.
pub(super) fn known_action<A: DeserializeOwned, E: Error>(name: Option<&str>, valid: &str) -> Result<A, E> {
    let Some(name) = name else {
        return Err(E::custom(format!("missing required parameter `action`: use {valid}")));
    };
    A::deserialize(StrDeserializer::<serde::de::value::Error>::new(name))
        .map_err(|_| E::custom(format!("unknown action {name:?}: use {valid}")))
}
