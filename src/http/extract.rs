//! Extractors whose rejections speak the API's error format.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::error::ApiError;

/// A JSON body: malformed JSON is 400, JSON of the wrong shape is 422, over 1 MiB is 413.
/// The content type is not insisted on, so a plain `curl -d` works.
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::PayloadTooLarge
            } else {
                ApiError::BadRequest(format!("cannot read the request body: {rejection}"))
            }
        })?;
        parse_json(&bytes).map(ApiJson)
    }
}

pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::BadRequest(
            "the request body is empty; expected a JSON object".into(),
        ));
    }
    // Read as a JSON value first: anything unreadable is malformed (400), a readable value of the
    // wrong shape is invalid (422).
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| ApiError::BadRequest(format!("malformed JSON: {e}")))?;
    // Every body the API takes is an object; serde would read a struct from an array too
    // (`[null, null]` as its first two fields), which the document does not allow.
    if !value.is_object() {
        return Err(ApiError::Validation("the request body must be a JSON object".into()));
    }
    if contains_nul(&value) {
        // Postgres stores no NUL character in text or jsonb; refusing here keeps it from a 500.
        return Err(ApiError::Validation(
            "strings must not contain the NUL character (\\u0000)".into(),
        ));
    }
    typed(value)
}

/// A JSON value as `T`; 422 when it has the wrong shape. JSON counts `3.0` as an integer, as
/// the document's schemas do, and serde does not: a value holding such a number is read again
/// with it written as `3` when the first reading fails. A value without one (the usual body)
/// is read once, and moved, not copied.
pub fn typed<T: DeserializeOwned>(value: Value) -> Result<T, ApiError> {
    if !has_integral_float(&value) {
        return T::deserialize(value).map_err(|e| invalid_body(&e));
    }
    T::deserialize(&value).or_else(|e| {
        let mut value = value;
        integral_floats_to_integers(&mut value);
        T::deserialize(value).map_err(|_| invalid_body(&e))
    })
}

fn invalid_body(e: &serde_json::Error) -> ApiError {
    ApiError::Validation(format!("invalid request body: {e}"))
}

/// A number with no fraction that fits an i64 but is written as a float (`3.0`).
fn is_integral_float(n: &serde_json::Number) -> bool {
    // 2^63 is not an i64; every integral f64 below it in magnitude is.
    n.is_f64()
        && n.as_f64()
            .is_some_and(|f| f.fract() == 0.0 && f.abs() < 9_223_372_036_854_775_808.0)
}

fn has_integral_float(value: &Value) -> bool {
    match value {
        Value::Number(n) => is_integral_float(n),
        Value::Array(items) => items.iter().any(has_integral_float),
        Value::Object(map) => map.values().any(has_integral_float),
        _ => false,
    }
}

fn integral_floats_to_integers(value: &mut Value) {
    match value {
        Value::Number(n) if is_integral_float(n) => {
            let whole = n.as_f64().unwrap_or_default() as i64;
            *value = Value::from(whole);
        }
        Value::Array(items) => items.iter_mut().for_each(integral_floats_to_integers),
        Value::Object(map) => map.values_mut().for_each(integral_floats_to_integers),
        _ => {}
    }
}

fn contains_nul(value: &Value) -> bool {
    match value {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(contains_nul),
        Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || contains_nul(v)),
        _ => false,
    }
}

/// `%00` in a path or query decodes to a NUL character, which names nothing and which Postgres
/// cannot store.
fn has_encoded_nul(s: &str) -> bool {
    s.as_bytes().windows(3).any(|w| w == b"%00")
}

/// Query parameters: anything that does not parse is 400.
pub struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        let query = parts.uri.query().unwrap_or_default();
        if has_encoded_nul(query) {
            return Err(bad_query("the NUL character (%00) is not allowed"));
        }
        serde_urlencoded_from_str(query).map(ApiQuery)
    }
}

fn serde_urlencoded_from_str<T: DeserializeOwned>(query: &str) -> Result<T, ApiError> {
    axum::extract::Query::<T>::try_from_uri(
        &format!("/?{query}")
            .parse()
            .map_err(|_| bad_query("unreadable query string"))?,
    )
    .map(|q| q.0)
    .map_err(|e| bad_query(&e.body_text()))
}

fn bad_query(detail: &str) -> ApiError {
    ApiError::BadRequest(format!("invalid query: {detail}"))
}

/// A path segment, with axum's rejection (e.g. invalid UTF-8) turned into a 404.
pub struct ApiPath<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        if has_encoded_nul(parts.uri.path()) {
            return Err(ApiError::NotFound(
                "no such resource: the path contains a NUL character".into(),
            ));
        }
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| ApiPath(p.0))
            .map_err(|e| ApiError::NotFound(format!("no such resource: {}", e.body_text())))
    }
}

/// A field that is present (even as null) is `Some`: tells a PATCH's `null` (clear it) from a
/// field left out (keep it).
pub fn present<'de, D: serde::Deserializer<'de>, T: serde::Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    <Option<T> as serde::Deserialize>::deserialize(d).map(Some)
}

/// A nested object, or null: serde would read a struct from an array too (`[null, null]` as its
/// first two fields), which the document does not allow.
pub fn object<'de, D: serde::Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<Option<T>, D::Error> {
    use serde::de::Error;
    match <Option<Value> as serde::Deserialize>::deserialize(d)? {
        None | Some(Value::Null) => Ok(None),
        Some(value @ Value::Object(_)) => T::deserialize(value).map(Some).map_err(D::Error::custom),
        Some(_) => Err(D::Error::custom("expected a JSON object or null")),
    }
}

/// `object`, telling a PATCH's `null` (clear it) from a field left out (keep it), as `present`.
pub fn present_object<'de, D: serde::Deserializer<'de>, T: DeserializeOwned>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    object(d).map(Some)
}
