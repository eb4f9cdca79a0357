//! `?limit=` and opaque `?cursor=` of list endpoints.

use super::error::ApiError;

pub const DEFAULT_LIMIT: i64 = 50;
pub const MAX_LIMIT: i64 = 200;

/// An opaque list cursor: a position (a number or a name), hex-encoded with a tag.
pub enum Cursor {
    Number(i64),
    Name(String),
}

impl Cursor {
    pub fn number(n: i64) -> Cursor {
        Cursor::Number(n)
    }

    pub fn encode(&self) -> String {
        match self {
            Cursor::Number(n) => hex::encode(format!("n{n}")),
            Cursor::Name(name) => hex::encode(format!("s{name}")),
        }
    }

    pub fn decode(s: &str) -> Option<Cursor> {
        let text = String::from_utf8(hex::decode(s).ok()?).ok()?;
        let (tag, rest) = text.split_at_checked(1)?;
        match tag {
            "n" => rest.parse().ok().filter(|n| *n >= 0).map(Cursor::Number),
            "s" if !rest.is_empty() => Some(Cursor::Name(rest.to_owned())),
            _ => None,
        }
    }

    pub fn as_number(&self) -> Option<i64> {
        match self {
            Cursor::Number(n) => Some(*n),
            Cursor::Name(_) => None,
        }
    }

    pub fn into_name(self) -> Option<String> {
        match self {
            Cursor::Name(n) => Some(n),
            Cursor::Number(_) => None,
        }
    }
}

pub struct Page {
    pub limit: i64,
    pub cursor: Option<Cursor>,
}

impl Page {
    pub fn parse(limit: Option<&str>, cursor: Option<&str>) -> Result<Page, ApiError> {
        // Exactly as documented: an integer; `?limit=` (empty) is not one.
        let limit = match limit {
            None => DEFAULT_LIMIT,
            Some(l) => l
                .parse::<i64>()
                .ok()
                .filter(|l| (1..=MAX_LIMIT).contains(l))
                .ok_or_else(|| ApiError::BadRequest(format!("limit must be an integer from 1 to {MAX_LIMIT}")))?,
        };
        let cursor = match cursor.filter(|c| !c.is_empty()) {
            None => None,
            Some(c) => Some(Cursor::decode(c).ok_or_else(Page::bad_cursor)?),
        };
        Ok(Page { limit, cursor })
    }

    pub fn bad_cursor() -> ApiError {
        ApiError::BadRequest("cursor is not one this list returned".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_garbage_is_rejected() {
        assert_eq!(
            Cursor::decode(&Cursor::number(42).encode()).unwrap().as_number(),
            Some(42)
        );
        assert_eq!(
            Cursor::decode(&Cursor::Name("a-b".into()).encode())
                .unwrap()
                .into_name()
                .as_deref(),
            Some("a-b")
        );
        for bad in ["", "zz", "6e", "6e2d31", "78"] {
            assert!(Cursor::decode(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn limits_outside_1_to_200_are_rejected() {
        assert_eq!(Page::parse(None, None).unwrap().limit, 50);
        assert_eq!(Page::parse(Some("200"), None).unwrap().limit, 200);
        for bad in ["0", "201", "-1", "abc", "1.5", "", " 5"] {
            assert!(Page::parse(Some(bad), None).is_err(), "{bad}");
        }
    }
}
