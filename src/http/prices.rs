//! `/v1/prices`: what models cost, in US dollars per million tokens. The desk's own prices,
//! and a built-in table of current OpenAI and Anthropic models that they override.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::error::{ApiError, ApiResult, ErrorBody};
use super::extract::{ApiJson, ApiPath, ApiQuery};
use super::AppState;
use crate::db;
use crate::domain::price::{is_valid_model_pattern, Price, PriceSource, BUILT_IN};
use crate::domain::Usd;

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutPrice {
    /// US dollars per million input tokens.
    #[schema(value_type = f64, minimum = 0, maximum = 1000000000)]
    pub input: Usd,
    /// US dollars per million output tokens.
    #[schema(value_type = f64, minimum = 0, maximum = 1000000000)]
    pub output: Usd,
    /// Per million cached input tokens read; null or omitted: charged as input.
    #[serde(default)]
    #[schema(value_type = Option<f64>, minimum = 0, maximum = 1000000000)]
    pub cache_read: Option<Usd>,
    /// Per million input tokens written to the cache; null or omitted: charged as input.
    #[serde(default)]
    #[schema(value_type = Option<f64>, minimum = 0, maximum = 1000000000)]
    pub cache_creation: Option<Usd>,
    /// Requests sent at or after it pay this price; default: now. A price with the same model,
    /// provider and `effective_from` is replaced; others are kept as its history.
    #[serde(default)]
    pub effective_from: Option<DateTime<Utc>>,
}

#[derive(Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PriceQuery {
    /// The provider the price holds for (`openai`, `anthropic` or a named provider); omitted: any
    /// provider serving that model name.
    #[param(pattern = "^[A-Za-z0-9._-]{1,64}$")]
    pub provider: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct PriceList {
    /// The desk's own prices first (each one's history newest first), then the built-in table.
    pub items: Vec<Price>,
    /// Always null: every price is in `items`.
    pub next_cursor: Option<String>,
}

fn provider_of(q: &PriceQuery) -> ApiResult<Option<&str>> {
    match q.provider.as_deref() {
        None => Ok(None),
        Some(p) if crate::domain::agent::is_valid_agent_name(p) => Ok(Some(p)),
        Some(p) => Err(ApiError::BadRequest(format!("provider {p:?} is not a provider name"))),
    }
}

fn check_model(model: &str) -> ApiResult<()> {
    if is_valid_model_pattern(model) {
        Ok(())
    } else {
        Err(ApiError::Validation(format!(
            "{model:?} is not a model name: 1 to 200 characters, with at most one '*', at the end (a prefix)"
        )))
    }
}

/// List prices
#[utoipa::path(get, path = "/prices", tag = "prices",
    responses((status = 200, body = PriceList), (status = 401, body = ErrorBody)))]
pub async fn list_prices(State(state): State<AppState>) -> ApiResult<Json<PriceList>> {
    let mut items = db::prices::all(&state.pool).await?;
    items.extend(BUILT_IN.iter().cloned());
    Ok(Json(PriceList {
        items,
        next_cursor: None,
    }))
}

/// Get a model's price
///
/// The desk's price of that model and provider in force now (else its earliest coming one),
/// or the built-in one of that name.
#[utoipa::path(get, path = "/prices/{model}", tag = "prices",
    params(("model" = String, Path, min_length = 1, max_length = 200, pattern = "^[^*\\x00-\\x1f\\x7f-\\x9f]*\\*?$", description = "The model name as sent, or a prefix ending in `*` (URL-encoded)"), PriceQuery),
    responses((status = 200, body = Price), (status = 404, body = ErrorBody), (status = 400, body = ErrorBody)))]
pub async fn get_price(
    State(state): State<AppState>,
    ApiPath(model): ApiPath<String>,
    ApiQuery(q): ApiQuery<PriceQuery>,
) -> ApiResult<Json<Price>> {
    let provider = provider_of(&q)?;
    let now = Utc::now();
    let desk = db::prices::all(&state.pool).await?;
    let named = |p: &&Price| p.model == model && p.provider.as_deref() == provider;
    let mut own: Vec<&Price> = desk.iter().filter(named).collect();
    own.sort_by_key(|p| p.effective_from);
    let in_force = own.iter().rev().find(|p| p.effective_from.is_none_or(|f| f <= now));
    let found = in_force
        .or(own.first())
        .map(|p| (*p).clone())
        .or_else(|| BUILT_IN.iter().find(named).cloned());
    found.map(Json).ok_or_else(|| {
        ApiError::NotFound(format!(
            "no price for model {model:?}{}",
            provider.map(|p| format!(" and provider {p:?}")).unwrap_or_default()
        ))
    })
}

/// Set a model's price
///
/// US dollars per million tokens, for requests sent at or after `effective_from`. A trailing `*`
/// in the name matches every model with that prefix; without `?provider=` the price holds for any
/// provider. An exact name beats a prefix, a provider's own price one for any provider, and a
/// desk price a built-in one. Tickets waiting for a price go back to `todo`.
#[utoipa::path(put, path = "/prices/{model}", tag = "prices", request_body = PutPrice,
    params(("model" = String, Path, min_length = 1, max_length = 200, pattern = "^[^*\\x00-\\x1f\\x7f-\\x9f]*\\*?$", description = "The model name as sent, or a prefix ending in `*` (URL-encoded)"), PriceQuery),
    responses((status = 200, body = Price), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub async fn put_price(
    State(state): State<AppState>,
    ApiPath(model): ApiPath<String>,
    ApiQuery(q): ApiQuery<PriceQuery>,
    ApiJson(req): ApiJson<PutPrice>,
) -> ApiResult<Json<Price>> {
    check_model(&model)?;
    let provider = provider_of(&q)?;
    for (name, value) in [
        ("input", Some(req.input)),
        ("output", Some(req.output)),
        ("cache_read", req.cache_read),
        ("cache_creation", req.cache_creation),
    ] {
        super::agents::non_negative_usd(name, value)?;
    }
    let price = Price {
        model,
        provider: provider.map(str::to_owned),
        input: req.input,
        output: req.output,
        cache_read: req.cache_read,
        cache_creation: req.cache_creation,
        effective_from: req.effective_from,
        source: PriceSource::Desk,
    };
    let mut tx = state.pool.begin().await?;
    // Serialised with tickets starting to wait for a price (`db::prices::lock`).
    db::prices::lock(&mut tx).await?;
    let stored = db::prices::put(&mut *tx, &price).await?;
    let resumed = db::budgets::resume_priced(&mut tx).await?;
    tx.commit().await?;
    state.prices.reload(&state.pool).await?;
    if resumed > 0 {
        state.hub.wake();
        state.hub.work_available();
    }
    Ok(Json(stored))
}

/// Delete a model's price
///
/// Deletes the desk's price of that model and provider, with its history; requests then pay what
/// applies next (a prefix, a price for any provider, the built-in table) or are unpriced.
#[utoipa::path(delete, path = "/prices/{model}", tag = "prices",
    params(("model" = String, Path, min_length = 1, max_length = 200, pattern = "^[^*\\x00-\\x1f\\x7f-\\x9f]*\\*?$", description = "The model name as sent, or a prefix ending in `*` (URL-encoded)"), PriceQuery),
    responses((status = 204, description = "Deleted"), (status = 404, body = ErrorBody), (status = 400, body = ErrorBody)))]
pub async fn delete_price(
    State(state): State<AppState>,
    ApiPath(model): ApiPath<String>,
    ApiQuery(q): ApiQuery<PriceQuery>,
) -> ApiResult<StatusCode> {
    let provider = provider_of(&q)?;
    let mut tx = state.pool.begin().await?;
    db::prices::lock(&mut tx).await?;
    let deleted = db::prices::delete(&mut *tx, &model, provider).await?;
    tx.commit().await?;
    if deleted == 0 {
        let built_in = BUILT_IN
            .iter()
            .any(|p| p.model == model && p.provider.as_deref() == provider);
        let why = if built_in {
            " (built-in prices cannot be deleted; override them with PUT)"
        } else {
            ""
        };
        return Err(ApiError::NotFound(format!(
            "the desk has no price for model {model:?}{why}"
        )));
    }
    state.prices.reload(&state.pool).await?;
    Ok(StatusCode::NO_CONTENT)
}
