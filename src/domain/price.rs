//! Prices of models, per million tokens, and which one a request pays: the desk's own prices
//! (`PUT /v1/prices/{model}`) and a built-in table of current OpenAI and Anthropic models
//! (`src/llm/prices.json`, compiled in).

use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::money::Usd;
use super::TicketUsage;

/// Where a price comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PriceSource {
    /// Set with `PUT /v1/prices/{model}`.
    Desk,
    /// The table compiled into agentdesk.
    BuiltIn,
}

/// A model's price in US dollars per million tokens.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Price {
    /// The model name as sent to the provider; a trailing `*` matches every name with that prefix.
    pub model: String,
    /// The provider it holds for (`openai`, `anthropic` or a named provider); null for any.
    pub provider: Option<String>,
    pub input: Usd,
    pub output: Usd,
    /// Cached input tokens read; null: charged as input.
    pub cache_read: Option<Usd>,
    /// Input tokens written to the cache; null: charged as input.
    pub cache_creation: Option<Usd>,
    /// Requests sent at or after it pay this price (until a later one takes effect); null for the
    /// built-in table, which always applies.
    pub effective_from: Option<DateTime<Utc>>,
    pub source: PriceSource,
}

impl Price {
    /// Whether it prices `model` served by `provider`.
    pub fn matches(&self, model: &str, provider: &str) -> bool {
        let name = match self.model.strip_suffix('*') {
            Some(prefix) => model.starts_with(prefix),
            None => self.model == model,
        };
        name && self.provider.as_deref().is_none_or(|p| p == provider)
    }

    /// How strongly it applies, higher first: an exact name beats a prefix, a provider's own
    /// price beats one for any provider, a desk price beats a built-in one; then a longer prefix
    /// beats a shorter one, and the latest in force wins.
    fn rank(&self) -> (bool, bool, bool, usize, Option<DateTime<Utc>>) {
        (
            !self.model.ends_with('*'),
            self.provider.is_some(),
            self.source == PriceSource::Desk,
            self.model.len(),
            self.effective_from,
        )
    }

    /// What `usage` costs at this price: each kind of token at its rate (cache reads and writes
    /// at the input rate when the price names none for them).
    pub fn cost(&self, usage: &TicketUsage) -> Usd {
        let count = |n: i64| n.max(0) as u64;
        self.input
            .per_million(count(usage.input_tokens))
            .plus(self.output.per_million(count(usage.output_tokens)))
            .plus(
                self.cache_read
                    .unwrap_or(self.input)
                    .per_million(count(usage.cache_read_tokens)),
            )
            .plus(
                self.cache_creation
                    .unwrap_or(self.input)
                    .per_million(count(usage.cache_creation_tokens)),
            )
    }

    /// The worst case of a request: its estimated input and at most `max_output` tokens.
    pub fn worst_case(&self, input_tokens: u64, max_output: u64) -> Usd {
        self.input
            .per_million(input_tokens)
            .plus(self.output.per_million(max_output))
    }
}

/// The price a request for `model` on `provider` sent at `at` pays, among `prices` (the desk's
/// and the built-in ones together); None when none applies.
pub fn price_for<'a>(
    prices: impl IntoIterator<Item = &'a Price>,
    model: &str,
    provider: &str,
    at: DateTime<Utc>,
) -> Option<&'a Price> {
    prices
        .into_iter()
        .filter(|p| p.matches(model, provider) && p.effective_from.is_none_or(|from| from <= at))
        .max_by_key(|p| p.rank())
}

/// The built-in table as compiled in.
#[derive(Deserialize)]
struct Table {
    prices: Vec<BuiltInRow>,
}

#[derive(Deserialize)]
struct BuiltInRow {
    model: String,
    provider: Option<String>,
    input: Usd,
    output: Usd,
    cache_read: Option<Usd>,
    cache_creation: Option<Usd>,
}

/// The built-in prices of current OpenAI and Anthropic models (see the README for when the table
/// was taken); the desk's own prices override them.
pub static BUILT_IN: LazyLock<Vec<Price>> = LazyLock::new(|| {
    let table: Table = serde_json::from_str(include_str!("../llm/prices.json")).expect("src/llm/prices.json is valid");
    table
        .prices
        .into_iter()
        .map(|row| Price {
            model: row.model,
            provider: row.provider,
            input: row.input,
            output: row.output,
            cache_read: row.cache_read,
            cache_creation: row.cache_creation,
            effective_from: None,
            source: PriceSource::BuiltIn,
        })
        .collect()
});

/// Whether a model name (or prefix pattern) is acceptable as a price's name.
pub fn is_valid_model_pattern(name: &str) -> bool {
    let bare = name.strip_suffix('*').unwrap_or(name);
    !name.is_empty() && name.chars().count() <= 200 && !bare.contains('*') && !name.chars().any(char::is_control)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usd(text: &str) -> Usd {
        Usd::parse(text).unwrap()
    }

    fn desk(model: &str, provider: Option<&str>, input: &str, from: Option<&str>) -> Price {
        Price {
            model: model.into(),
            provider: provider.map(Into::into),
            input: usd(input),
            output: usd("1"),
            cache_read: None,
            cache_creation: None,
            effective_from: from.map(|f| f.parse().unwrap()),
            source: PriceSource::Desk,
        }
    }

    #[test]
    fn the_most_specific_price_in_force_wins() {
        let now: DateTime<Utc> = "2026-06-01T00:00:00Z".parse().unwrap();
        let mut prices: Vec<Price> = BUILT_IN.clone();
        let pick = |prices: &[Price], model: &str, provider: &str| {
            price_for(prices, model, provider, now).map(|p| p.input.to_string())
        };
        assert_eq!(pick(&prices, "gpt-4o-mini", "openai").as_deref(), Some("0.15"));
        assert_eq!(
            pick(&prices, "gpt-4o-mini-2024-07-18", "openai").as_deref(),
            Some("0.15")
        );
        // Built-in prices hold for any provider serving the name.
        assert_eq!(pick(&prices, "gpt-4o-mini", "local").as_deref(), Some("0.15"));
        prices.push(desk("gpt-4o-mini-*", None, "9", None));
        assert_eq!(pick(&prices, "gpt-4o-mini-2024-07-18", "openai").as_deref(), Some("9"));
        prices.push(desk("gpt-4o-mini", None, "0.2", Some("2026-01-01T00:00:00Z")));
        prices.push(desk("gpt-4o-mini", None, "0.3", Some("2026-07-01T00:00:00Z")));
        assert_eq!(pick(&prices, "gpt-4o-mini", "openai").as_deref(), Some("0.2"));
        assert_eq!(pick(&prices, "gpt-4o-mini", "local").as_deref(), Some("0.2"));
        prices.push(desk("gpt-4o-mini", Some("local"), "0.01", None));
        assert_eq!(pick(&prices, "gpt-4o-mini", "local").as_deref(), Some("0.01"));
        // A desk prefix beats a built-in one; an exact name still beats a prefix.
        prices.push(desk("gpt-4o-mini-2024-*", Some("openai"), "7", None));
        assert_eq!(pick(&prices, "gpt-4o-mini-2024-07-18", "openai").as_deref(), Some("7"));
        assert_eq!(pick(&prices, "gpt-4o-mini", "openai").as_deref(), Some("0.2"));
        // Future prices wait for their time.
        let later: DateTime<Utc> = "2026-08-01T00:00:00Z".parse().unwrap();
        assert_eq!(
            price_for(&prices, "gpt-4o-mini", "openai", later).map(|p| p.input.to_string()),
            Some("0.3".into())
        );
    }

    #[test]
    fn cost_counts_every_kind_of_token() {
        let price = &BUILT_IN.iter().find(|p| p.model == "claude-sonnet-4-5*").unwrap();
        let usage = TicketUsage {
            input_tokens: 1000,
            output_tokens: 100,
            cache_read_tokens: 10_000,
            cache_creation_tokens: 2000,
            ..TicketUsage::default()
        };
        // 1000 × 3 + 100 × 15 + 10 000 × 0.30 + 2000 × 3.75, per million.
        assert_eq!(price.cost(&usage).to_string(), "0.015");
    }
}
