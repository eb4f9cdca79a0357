//! Field types for the providers' stream chunks.
//!
//! The chunk structs derive `Deserialize`, but a stream is read leniently: a field of an
//! unexpected JSON type counts as absent, as `serde_json::Value`'s accessors would read it, instead
//! of failing the whole chunk. Strings borrow from the event data unless they contain escapes, so a
//! chunk is parsed once and without allocating for the fields that are only looked at.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::value::{MapAccessDeserializer, StrDeserializer};
use serde::de::{self, DeserializeOwned, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

/// A JSON value kept by shape: a string, an unsigned integer, an object read as `T`, or anything
/// else (which is skipped).
#[derive(Clone, Debug, Default)]
pub(crate) enum Json<'a, T = IgnoredAny> {
    /// The field was not there.
    #[default]
    Missing,
    Null,
    Str(Cow<'a, str>),
    U64(u64),
    Obj(T),
    /// A bool, a negative or fractional number, or an array.
    Other,
}

impl<T> Json<'_, T> {
    /// Like `Value::as_str`.
    pub fn str(&self) -> Option<&str> {
        match self {
            Json::Str(s) => Some(s),
            _ => None,
        }
    }

    /// Like `Value::as_u64`.
    pub fn u64(&self) -> Option<u64> {
        match self {
            Json::U64(n) => Some(*n),
            _ => None,
        }
    }

    pub fn obj(&self) -> Option<&T> {
        match self {
            Json::Obj(t) => Some(t),
            _ => None,
        }
    }

    /// Present with a value other than `null`.
    pub fn is_set(&self) -> bool {
        !matches!(self, Json::Missing | Json::Null)
    }
}

/// Skips a JSON array.
fn skip_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

/// Scalars a visitor takes as `$value` (every JSON scalar but those it handles itself).
macro_rules! other_scalars {
    ($value:expr; $($method:ident($ty:ty)),*) => {
        $(fn $method<E: de::Error>(self, _: $ty) -> Result<Self::Value, E> {
            Ok($value)
        })*
    };
}

struct JsonVisitor<'a, T>(PhantomData<fn() -> Json<'a, T>>);

impl<'de: 'a, 'a, T: Deserialize<'de>> Visitor<'de> for JsonVisitor<'a, T> {
    type Value = Json<'a, T>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    other_scalars!(Json::Other; visit_bool(bool), visit_i64(i64), visit_f64(f64), visit_i128(i128), visit_u128(u128),
        visit_bytes(&[u8]));

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Json::U64(v))
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Json::Str(Cow::Borrowed(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Json::Str(Cow::Owned(v.to_owned())))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Json::Str(Cow::Owned(v)))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Json::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Json::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        Json::deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        skip_seq(seq)?;
        Ok(Json::Other)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        T::deserialize(MapAccessDeserializer::new(map)).map(Json::Obj)
    }
}

impl<'de: 'a, 'a, T: Deserialize<'de>> Deserialize<'de> for Json<'a, T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(JsonVisitor(PhantomData))
    }
}

/// A JSON array of `T`; anything else reads as empty.
#[derive(Debug)]
pub(crate) struct List<T>(pub Vec<T>);

impl<T> Default for List<T> {
    fn default() -> Self {
        List(Vec::new())
    }
}

struct ListVisitor<T>(PhantomData<fn() -> T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for ListVisitor<T> {
    type Value = List<T>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    other_scalars!(List(Vec::new()); visit_bool(bool), visit_i64(i64), visit_u64(u64), visit_f64(f64),
        visit_i128(i128), visit_u128(u128), visit_str(&str), visit_bytes(&[u8]));

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(List(Vec::new()))
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(List(Vec::new()))
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        List::deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(16));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(List(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(List(Vec::new()))
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for List<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ListVisitor(PhantomData))
    }
}

/// A string naming one of a fixed set of kinds (an enum with a `#[serde(other)]` variant for
/// names it does not know); `None` when the value is not a string.
#[derive(Debug)]
pub(crate) struct Tag<E>(pub Option<E>);

impl<E> Default for Tag<E> {
    fn default() -> Self {
        Tag(None)
    }
}

impl<'de, E: DeserializeOwned> Deserialize<'de> for Tag<E> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = Json::<IgnoredAny>::deserialize(d)?;
        Ok(Tag(value.str().and_then(tag)))
    }
}

/// Reads a name (e.g. an SSE `event:` field) as a tag enum.
pub(crate) fn tag<E: DeserializeOwned>(name: &str) -> Option<E> {
    E::deserialize(StrDeserializer::<de::value::Error>::new(name)).ok()
}

/// The error object of a stream chunk (`{"error": {"type", "code", "message"}}`, OpenAI and
/// Anthropic alike); `code` is a string or, from some servers, an HTTP status.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct WireError<'a> {
    #[serde(borrow)]
    pub message: Json<'a>,
    #[serde(borrow, rename = "type")]
    pub kind: Json<'a>,
    #[serde(borrow)]
    pub code: Json<'a>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, Deserialize)]
    #[serde(default)]
    struct Probe<'a> {
        #[serde(borrow)]
        a: Json<'a>,
        #[serde(borrow)]
        obj: Json<'a, WireError<'a>>,
        #[serde(borrow)]
        list: List<Json<'a>>,
        kind: Tag<Kind>,
    }

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum Kind {
        First,
        #[serde(other)]
        Unknown,
    }

    fn probe(s: &str) -> Probe<'_> {
        serde_json::from_str(s).unwrap()
    }

    #[test]
    fn fields_are_read_by_shape() {
        let p = probe(r#"{"a":"plain","zzz":{"deep":[1,{"x":null}]},"obj":{"message":"m","code":429}}"#);
        assert!(matches!(p.a, Json::Str(Cow::Borrowed("plain"))));
        let e = p.obj.obj().unwrap();
        assert_eq!(
            (e.message.str(), e.code.u64(), e.kind.is_set()),
            (Some("m"), Some(429), false)
        );
        assert!(p.list.0.is_empty());
        assert_eq!(p.kind.0, None);

        assert!(matches!(probe(r#"{"a":"tab\t"}"#).a, Json::Str(Cow::Owned(ref s)) if s == "tab\t"));
        assert!(matches!(probe(r#"{"a":null}"#).a, Json::Null));
        assert!(matches!(probe("{}").a, Json::Missing));
        for other in ["-1", "1.5", "true", "[1,[2]]"] {
            let text = format!(r#"{{"a":{other},"obj":{other}}}"#);
            let p = probe(&text);
            assert!(matches!(p.a, Json::Other), "{other}");
            assert!(p.a.is_set() && p.a.str().is_none() && p.a.u64().is_none());
            assert!(p.obj.obj().is_none(), "{other}");
        }
        assert!(matches!(probe(r#"{"a":{"b":1}}"#).a, Json::Obj(_)));
        assert!(probe(r#"{"obj":"text"}"#).obj.obj().is_none());
    }

    #[test]
    fn lists_and_tags() {
        let p = probe(r#"{"list":["x",1,{}],"kind":"first"}"#);
        assert_eq!(p.list.0.len(), 3);
        assert_eq!(p.list.0[0].str(), Some("x"));
        assert_eq!(p.kind.0, Some(Kind::First));
        for not_a_list in [r#"{"a":1}"#, "\"x\"", "7", "null"] {
            let text = format!(r#"{{"list":{not_a_list}}}"#);
            let p = probe(&text);
            assert!(p.list.0.is_empty(), "{not_a_list}");
        }
        assert_eq!(probe(r#"{"kind":"brand_new"}"#).kind.0, Some(Kind::Unknown));
        assert_eq!(probe(r#"{"kind":3}"#).kind.0, None);
        assert_eq!(tag::<Kind>("first"), Some(Kind::First));
        assert_eq!(tag::<Kind>("ping"), Some(Kind::Unknown));
    }

    #[test]
    fn malformed_json_still_fails() {
        assert!(serde_json::from_str::<Probe>(r#"{"zzz":[1,}"#).is_err());
        assert!(serde_json::from_str::<Json<Probe>>(r#"{"a":"x"} trailing"#).is_err());
    }
}
