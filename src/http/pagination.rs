//! `?limit=` and opaque `?cursor=` of list endpoints.
//!
//! A cursor is opaque to clients, but the document gives each list's cursors a pattern, and a
//! string matching it is always a position the list can start from: a client (or a fuzzer) that
//! sends what the document allows is never refused, and anything else is 400.

use serde::Deserialize;
use utoipa::IntoParams;

use super::error::ApiError;

pub const DEFAULT_LIMIT: i64 = 50;
pub const MAX_LIMIT: i64 = 200;

/// The most digits of a number cursor: every 18-digit number fits an i64.
const MAX_NUMBER_DIGITS: usize = 18;
/// The most bytes of a name cursor (names are at most 64).
const MAX_NAME_BYTES: usize = 128;

/// An opaque list cursor: a position (a number or a name), hex-encoded (lower case) with a tag.
#[derive(Clone)]
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

    /// Exactly the strings the patterns below allow (upper-case hex, a sign or a NUL are not).
    pub fn decode(s: &str) -> Option<Cursor> {
        if !s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
            return None;
        }
        let text = String::from_utf8(hex::decode(s).ok()?).ok()?;
        let (tag, rest) = text.split_at_checked(1)?;
        match tag {
            "n" if (1..=MAX_NUMBER_DIGITS).contains(&rest.len()) && rest.bytes().all(|b| b.is_ascii_digit()) => {
                rest.parse().ok().map(Cursor::Number)
            }
            "s" if (1..=MAX_NAME_BYTES).contains(&rest.len()) && rest.bytes().all(|b| (1..0x80).contains(&b)) => {
                Some(Cursor::Name(rest.to_owned()))
            }
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

    /// A name cursor holding an id, in the one spelling `Uuid` prints (and the pattern allows).
    pub fn into_id(self) -> Option<uuid::Uuid> {
        let name = self.into_name()?;
        uuid::Uuid::parse_str(&name).ok().filter(|id| id.to_string() == name)
    }
}

/// `?limit=&cursor=` of a list in the order of a number (tickets, comments, deliveries).
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct NumberPageQuery {
    /// 1 to 200, default 50.
    #[param(value_type = Option<i64>, minimum = 1, maximum = 200)]
    pub limit: Option<String>,
    /// A `next_cursor` of this list.
    #[param(pattern = "^(6e(3[0-9]){1,18})?$")]
    pub cursor: Option<String>,
}

/// `?limit=&cursor=` of a list in the order of names (agents, tools).
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct NamePageQuery {
    /// 1 to 200, default 50.
    #[param(value_type = Option<i64>, minimum = 1, maximum = 200)]
    pub limit: Option<String>,
    /// A `next_cursor` of this list.
    #[param(pattern = "^(73(0[1-9a-f]|[1-7][0-9a-f]){1,128})?$")]
    pub cursor: Option<String>,
}

/// `?limit=&cursor=` of a list in the order of ids (schedules, webhooks).
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct IdPageQuery {
    /// 1 to 200, default 50.
    #[param(value_type = Option<i64>, minimum = 1, maximum = 200)]
    pub limit: Option<String>,
    /// A `next_cursor` of this list.
    #[param(
        pattern = "^(73(3[0-9]|6[1-6]){8}2d(3[0-9]|6[1-6]){4}2d(3[0-9]|6[1-6]){4}2d(3[0-9]|6[1-6]){4}2d(3[0-9]|6[1-6]){12})?$"
    )]
    pub cursor: Option<String>,
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

    /// How many rows to read for the page: one more than it shows, to know whether more follow.
    pub fn fetch(&self) -> i64 {
        self.limit + 1
    }

    /// The cursor of a list in name order: the name after which the page starts.
    pub fn after_name(&self) -> Result<Option<String>, ApiError> {
        self.cursor
            .clone()
            .map(|c| c.into_name().ok_or_else(Page::bad_cursor))
            .transpose()
    }

    /// The cursor of a list in id order: the id after which the page starts.
    pub fn after_id(&self) -> Result<Option<uuid::Uuid>, ApiError> {
        self.cursor
            .clone()
            .map(|c| c.into_id().ok_or_else(Page::bad_cursor))
            .transpose()
    }

    /// The page's rows, read with [`fetch`](Page::fetch): those it shows, and the next page's
    /// cursor (made from the last row shown by `cursor`) when more follow.
    pub fn finish<T>(&self, rows: Vec<T>, cursor: impl Fn(&T) -> Cursor) -> (Vec<T>, Option<String>) {
        let (rows, more) = crate::db::page_of(rows, self.limit);
        let next = next_cursor(more, &rows, cursor);
        (rows, next)
    }
}

/// The next page's cursor when more follow: made from the last row shown.
pub fn next_cursor<T>(more: bool, rows: &[T], cursor: impl Fn(&T) -> Cursor) -> Option<String> {
    if more {
        rows.last().map(|r| cursor(r).encode())
    } else {
        None
    }
}

/// A page of a short list read whole (providers, MCP servers), in the order of `rank` and then
/// of names (which are unique): the items after the cursor's, at most `limit`, and the cursor of
/// the next page. The cursor is a name, so a page stays right when items before it go away.
pub fn page_of_names<T>(
    q: &NamePageQuery,
    mut items: Vec<T>,
    name: impl Fn(&T) -> &str,
    rank: impl Fn(&str) -> usize,
) -> Result<(Vec<T>, Option<String>), ApiError> {
    let page = Page::parse(q.limit.as_deref(), q.cursor.as_deref())?;
    let key = |n: &str| (rank(n), n.to_owned());
    items.sort_by_cached_key(|item| key(name(item)));
    if let Some(after) = page.after_name()? {
        let after = key(&after);
        items.retain(|item| key(name(item)) > after);
    }
    Ok(page.finish(items, |item| Cursor::Name(name(item).to_owned())))
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
        let id = uuid::Uuid::now_v7();
        assert_eq!(Cursor::Name(id.to_string()).into_id(), Some(id));
        assert_eq!(Cursor::Name(id.to_string().to_uppercase()).into_id(), None);
        // "", "zz", "n", "n-1", "x", "n+1", upper-case hex, "s\0", 19 digits.
        for bad in [
            "",
            "zz",
            "6e",
            "6e2d31",
            "78",
            "6e2b31",
            "6E31",
            "7300",
            "6e31323334353637383930313233343536373839",
        ] {
            assert!(Cursor::decode(bad).is_none(), "{bad}");
        }
    }

    /// The pattern a query type documents for `cursor`.
    fn documented<T: IntoParams>() -> regex::Regex {
        let params = serde_json::to_value(T::into_params(|| None)).unwrap();
        let cursor = params
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "cursor")
            .unwrap();
        regex::Regex::new(cursor["schema"]["pattern"].as_str().unwrap()).unwrap()
    }

    /// A string the document allows is a position of that list, and one it does not is refused.
    #[test]
    fn the_documented_patterns_are_what_each_list_accepts() {
        let id = uuid::Uuid::now_v7().to_string();
        let samples: Vec<String> = [
            "n0",
            "n42",
            "n999999999999999999",
            "n9999999999999999999",
            "n-1",
            "n+1",
            "n",
            "n1a",
            "s",
            "sa",
            "s\u{1}",
            "s\u{7f}",
            "sé",
            "s\0",
            "x1",
            &format!("s{id}"),
            &format!("s{}", id.to_uppercase()),
            &format!("s{}", id.replace('-', "")),
            &format!("s{}", "a".repeat(128)),
            &format!("s{}", "a".repeat(129)),
        ]
        .iter()
        .map(hex::encode)
        .chain(["zz", "6E31", "6e3", "__main__", " 6e31"].map(String::from))
        .collect();
        let number = documented::<NumberPageQuery>();
        let name = documented::<NamePageQuery>();
        let id_pattern = documented::<IdPageQuery>();
        for s in &samples {
            let as_number = Cursor::decode(s).and_then(|c| c.as_number());
            assert_eq!(number.is_match(s), as_number.is_some(), "number cursor {s}");
            let as_name = Cursor::decode(s).and_then(Cursor::into_name);
            assert_eq!(name.is_match(s), as_name.is_some(), "name cursor {s}");
            let as_id = Cursor::decode(s).and_then(Cursor::into_id);
            assert_eq!(id_pattern.is_match(s), as_id.is_some(), "id cursor {s}");
        }
        // The ticket list spells its number cursor out again (a pattern must be a literal).
        let tickets = documented::<super::super::tickets::ListTicketsQuery>();
        assert_eq!(tickets.as_str(), number.as_str());
        for pattern in [number, name, id_pattern] {
            assert!(pattern.is_match(""), "an empty cursor is no cursor");
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
