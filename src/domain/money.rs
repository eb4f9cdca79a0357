//! Money as exact numbers: US dollars held as a whole number of picodollars (10⁻¹² $). A price
//! per million tokens given to the micro-dollar is then a whole number of picodollars per token,
//! so a request's cost is exact; sums never drift as floating point would. The database keeps
//! dollars as `numeric`; the API writes JSON numbers (a rendering only: nothing is computed on
//! them).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Picodollars in a dollar.
const SCALE: i128 = 1_000_000_000_000;
/// Decimal places a dollar amount may have.
pub const DECIMALS: usize = 12;
/// The largest amount the API takes (a price per million tokens, a budget): a billion dollars.
pub const MAX_USD: i128 = 1_000_000_000 * SCALE;

/// An amount of US dollars, exact to the picodollar.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Usd(i128);

impl Usd {
    pub const ZERO: Usd = Usd(0);

    pub fn from_pico(pico: i128) -> Usd {
        Usd(pico)
    }

    pub fn pico(self) -> i128 {
        self.0
    }

    pub fn is_negative(self) -> bool {
        self.0 < 0
    }

    pub fn plus(self, other: Usd) -> Usd {
        Usd(self.0.saturating_add(other.0))
    }

    pub fn minus(self, other: Usd) -> Usd {
        Usd(self.0.saturating_sub(other.0))
    }

    /// `tokens` at this price per million tokens, rounded half up to the picodollar (exact for
    /// prices given to the micro-dollar).
    pub fn per_million(self, tokens: u64) -> Usd {
        let product = self.0.saturating_mul(tokens as i128);
        Usd((product + 500_000) / 1_000_000)
    }

    /// Parses a decimal number of dollars (`12`, `0.15`, `-3.5`, `1e-3` as Postgres or a JSON
    /// number may write it); None when it is not one or has more than 12 decimal places.
    pub fn parse(text: &str) -> Option<Usd> {
        Usd::parse_with(text, false)
    }

    /// `parse`, rounding (half up) to the picodollar what has more decimal places.
    pub fn parse_rounded(text: &str) -> Option<Usd> {
        Usd::parse_with(text, true)
    }

    fn parse_with(text: &str, round: bool) -> Option<Usd> {
        let text = text.trim();
        let (mantissa, exponent) = match text.find(['e', 'E']) {
            Some(at) => (&text[..at], text[at + 1..].parse::<i32>().ok()?),
            None => (text, 0),
        };
        let (negative, digits) = match mantissa.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, mantissa.strip_prefix('+').unwrap_or(mantissa)),
        };
        let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
        if whole.is_empty() && fraction.is_empty() {
            return None;
        }
        if !whole.bytes().chain(fraction.bytes()).all(|b| b.is_ascii_digit()) {
            return None;
        }
        // All digits as one integer, and where the point goes.
        let all = format!("{whole}{fraction}");
        let all = all.trim_start_matches('0');
        let mut places = fraction.len() as i64 - i64::from(exponent);
        let mut digits = all.to_owned();
        // Trailing zeros after the point say nothing.
        while places > 0 && digits.ends_with('0') {
            digits.pop();
            places -= 1;
        }
        if places > DECIMALS as i64 {
            if !round {
                return None;
            }
            // Keep 12 decimal places; the first digit dropped rounds.
            let drop = (places - DECIMALS as i64) as usize;
            let keep = digits.len().saturating_sub(drop);
            let up = drop <= digits.len() && digits.as_bytes().get(keep).is_some_and(|d| *d >= b'5');
            let kept: i128 = if keep == 0 { 0 } else { digits[..keep].parse().ok()? };
            let pico = kept + i128::from(up);
            return Some(Usd(if negative { -pico } else { pico }));
        }
        if digits.len() > 30 {
            return None;
        }
        let value: i128 = if digits.is_empty() { 0 } else { digits.parse().ok()? };
        let shift = DECIMALS as i64 - places;
        if shift > 38 {
            return if value == 0 { Some(Usd::ZERO) } else { None };
        }
        let pico = value.checked_mul(10i128.checked_pow(shift as u32)?)?;
        Some(Usd(if negative { -pico } else { pico }))
    }

    /// The amount as a JSON number (the nearest double for a fraction, an integer when whole).
    pub fn to_json(self) -> serde_json::Value {
        if self.0 % SCALE == 0 {
            if let Ok(whole) = i64::try_from(self.0 / SCALE) {
                return whole.into();
            }
        }
        let float: f64 = self.to_string().parse().unwrap_or(0.0);
        serde_json::Number::from_f64(float).map_or(serde_json::Value::Null, serde_json::Value::Number)
    }
}

impl fmt::Display for Usd {
    /// Dollars with no more decimal places than it needs: `0.00015`, `2`, `-1.5`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.0 < 0 { "-" } else { "" };
        let abs = self.0.unsigned_abs();
        let whole = abs / SCALE as u128;
        let fraction = abs % SCALE as u128;
        if fraction == 0 {
            return write!(f, "{sign}{whole}");
        }
        let fraction = format!("{fraction:012}");
        write!(f, "{sign}{whole}.{}", fraction.trim_end_matches('0'))
    }
}

impl Serialize for Usd {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Usd {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Usd, D::Error> {
        use serde::de::Error;
        // A JSON number arrives as the double nearest to what was written; its shortest form
        // (which Rust's Display gives, without an exponent) is what was written.
        let text = match serde_json::Value::deserialize(d)? {
            serde_json::Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
                (Some(i), _, _) => i.to_string(),
                (_, Some(u), _) => u.to_string(),
                (_, _, Some(f)) if f.is_finite() => format!("{f}"),
                _ => return Err(D::Error::custom("not a finite number")),
            },
            serde_json::Value::String(s) => s,
            _ => return Err(D::Error::custom("expected an amount of US dollars (a number)")),
        };
        Usd::parse_rounded(&text).ok_or_else(|| D::Error::custom(format!("{text} is not an amount of US dollars")))
    }
}

impl utoipa::PartialSchema for Usd {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::Number)
            .description(Some("US dollars (exact to 10⁻¹² $)"))
            .into()
    }
}

impl utoipa::ToSchema for Usd {}

/// Reads a `numeric` column written as text (`col::text`).
pub fn from_db(text: Option<String>) -> Option<Usd> {
    text.as_deref().and_then(Usd::parse)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_parse_and_print_exactly() {
        for (text, shown) in [
            ("0.15", "0.15"),
            ("2", "2"),
            ("2.000", "2"),
            ("-1.5", "-1.5"),
            ("0.000000000001", "0.000000000001"),
            ("1e-3", "0.001"),
            ("1.5E2", "150"),
            ("0", "0"),
            (".5", "0.5"),
            ("12345678901234.000001", "12345678901234.000001"),
        ] {
            assert_eq!(
                Usd::parse(text).map(|u| u.to_string()).as_deref(),
                Some(shown),
                "{text}"
            );
        }
        for bad in ["", "-", "abc", "0.0000000000001", "1.2.3", "1e", "NaN", "--1"] {
            assert_eq!(Usd::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn cost_per_million_tokens_is_exact() {
        let price = Usd::parse("0.15").unwrap();
        assert_eq!(price.per_million(1000).to_string(), "0.00015");
        assert_eq!(price.per_million(1).to_string(), "0.00000015");
        let cache = Usd::parse("0.075").unwrap();
        assert_eq!(cache.per_million(3).to_string(), "0.000000225");
        // A tenth of a micro-dollar per million rounds to the picodollar.
        let odd = Usd::parse("0.0000001").unwrap();
        assert_eq!(odd.per_million(4).pico(), 0);
        assert_eq!(odd.per_million(6).pico(), 1);
    }

    #[test]
    fn json_numbers_round_trip() {
        for text in ["0.15", "2", "0.00015", "1234.5678"] {
            let usd = Usd::parse(text).unwrap();
            let json = serde_json::to_string(&usd).unwrap();
            assert_eq!(json, text);
            assert_eq!(serde_json::from_str::<Usd>(&json).unwrap(), usd);
        }
        assert_eq!(serde_json::from_str::<Usd>("\"0.1\"").unwrap().to_string(), "0.1");
        assert!(serde_json::from_str::<Usd>("true").is_err());
        // More decimal places than a picodollar round to it.
        assert_eq!(serde_json::from_str::<Usd>("1e-20").unwrap(), Usd::ZERO);
        assert_eq!(Usd::parse_rounded("0.0000000000015").unwrap().pico(), 2);
        assert_eq!(Usd::parse_rounded("0.0000000000014999").unwrap().pico(), 1);
        assert_eq!(Usd::parse_rounded("2.5e-300").unwrap(), Usd::ZERO);
    }
}
