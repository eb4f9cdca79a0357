//! `/v1/webhooks`: endpoints that receive the desk's events as signed Standard Webhooks, and
//! their delivery log. The deliveries themselves run in `crate::webhooks`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Deserializer, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::access::Caller;
use super::error::{ApiError, ApiResult, ErrorBody};
use super::extract::{ApiJson, ApiPath, ApiQuery};
use super::pagination::{next_cursor, Cursor, IdPageQuery, NumberPageQuery, Page};
use super::AppState;
use crate::db;
use crate::db::webhooks::{NewWebhook, WebhookPatch};
use crate::domain::webhook::{
    check_pattern, generate_secret, secret_key, Delivery, Webhook, MAX_DESCRIPTION_LEN, MAX_PATTERNS,
};
use crate::transitions;

#[derive(Deserialize, ToSchema)]
pub struct CreateWebhook {
    #[schema(schema_with = super::formats::webhook_url)]
    pub url: String,
    #[serde(default)]
    #[schema(schema_with = super::formats::event_patterns)]
    pub events: Vec<String>,
    #[serde(default)]
    #[schema(schema_with = super::formats::webhook_labels)]
    pub labels: Vec<String>,
    #[schema(schema_with = super::formats::webhook_secret)]
    pub secret: Option<String>,
    pub description: Option<String>,
    /// true creates it stopped (enable it with `PATCH {"disabled": false}`).
    #[serde(default)]
    pub disabled: bool,
}

/// A created endpoint, with its secret: the only time the secret is shown.
#[derive(Serialize, ToSchema)]
pub struct CreatedWebhook {
    #[serde(flatten)]
    pub webhook: Webhook,
    /// The signing secret (`whsec_…`); keep it, it is not shown again.
    pub secret: String,
}

/// The secret is not among what a PATCH changes (it is shown once, when created): a body that
/// names it, or any other field, is refused (422) rather than answered as if it had applied.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchWebhook {
    #[schema(schema_with = super::formats::optional_webhook_url)]
    pub url: Option<String>,
    #[schema(schema_with = super::formats::optional_event_patterns)]
    pub events: Option<Vec<String>>,
    #[schema(schema_with = super::formats::optional_webhook_labels)]
    pub labels: Option<Vec<String>>,
    /// A string sets it, null clears it, omitted leaves it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    pub description: Option<Option<String>>,
    /// true stops deliveries; false starts them again with the events from then on.
    pub disabled: Option<bool>,
}

/// A field that is present (even as null) is `Some`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

#[derive(Serialize, ToSchema)]
pub struct WebhookList {
    pub items: Vec<Webhook>,
    pub next_cursor: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct DeliveryList {
    /// Newest first.
    pub items: Vec<Delivery>,
    pub next_cursor: Option<String>,
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::Validation(message.into())
}

fn not_found(id: &str) -> ApiError {
    ApiError::NotFound(format!("no webhook {id:?}"))
}

fn parse_id(id: &str) -> ApiResult<Uuid> {
    Uuid::parse_str(id).map_err(|_| not_found(id))
}

fn check_url(url: &str) -> ApiResult<String> {
    let url = url.trim();
    super::formats::check_url_length(url).map_err(invalid)?;
    let parsed = reqwest::Url::parse(url).map_err(|e| invalid(format!("url {url:?} is not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none_or(str::is_empty) {
        return Err(invalid(format!(
            "url must be an http or https URL with a host, not {url:?}"
        )));
    }
    // Where it points is checked each time a delivery connects (the address guard), not here:
    // a name's addresses change, and an endpoint refused by the guard shows it in its deliveries
    // (`forbidden_address`), as a tool or an MCP server does.
    Ok(url.to_owned())
}

fn check_events(events: Vec<String>) -> ApiResult<Vec<String>> {
    if events.len() > MAX_PATTERNS {
        return Err(invalid(format!("at most {MAX_PATTERNS} event patterns")));
    }
    let mut out: Vec<String> = Vec::with_capacity(events.len());
    for pattern in events {
        check_pattern(&pattern).map_err(invalid)?;
        if !out.contains(&pattern) {
            out.push(pattern);
        }
    }
    Ok(out)
}

fn check_description(description: Option<String>) -> ApiResult<Option<String>> {
    match description {
        Some(d) if d.chars().count() > MAX_DESCRIPTION_LEN => Err(invalid(format!(
            "description is longer than {MAX_DESCRIPTION_LEN} characters"
        ))),
        other => Ok(other),
    }
}

/// Create a webhook endpoint
///
/// Every persisted event created after this call whose kind matches `events` and whose ticket has
/// one of `labels` is POSTed to `url` as a signed Standard Webhook, at least once, in order.
#[utoipa::path(post, path = "/webhooks", tag = "webhooks", request_body = CreateWebhook,
    responses((status = 201, body = CreatedWebhook), (status = 422, body = ErrorBody),
        (status = 400, body = ErrorBody), (status = 413, body = ErrorBody)))]
pub async fn create_webhook(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(req): ApiJson<CreateWebhook>,
) -> ApiResult<(StatusCode, Json<CreatedWebhook>)> {
    let url = check_url(&req.url)?;
    let events = check_events(req.events)?;
    let labels = transitions::normalize_labels(req.labels).map_err(invalid)?;
    let description = check_description(req.description)?;
    let secret = match req.secret {
        Some(secret) => {
            secret_key(&secret).map_err(invalid)?;
            secret
        }
        None => generate_secret(),
    };
    let new = NewWebhook {
        url,
        events,
        labels,
        description,
        secret,
        disabled: req.disabled,
    };
    let webhook = db::webhooks::insert(&state.pool, caller.project_id(), &new).await?;
    Ok((
        StatusCode::CREATED,
        Json(CreatedWebhook {
            webhook,
            secret: new.secret,
        }),
    ))
}

/// List webhook endpoints, oldest first
#[utoipa::path(get, path = "/webhooks", tag = "webhooks", params(IdPageQuery),
    responses((status = 200, body = WebhookList), (status = 400, body = ErrorBody)))]
pub async fn list_webhooks(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<IdPageQuery>,
) -> ApiResult<Json<WebhookList>> {
    let page = Page::parse(q.limit.as_deref(), q.cursor.as_deref())?;
    let after = page.after_id()?;
    let (items, more) = db::webhooks::list(&state.pool, caller.project_id(), after, page.limit).await?;
    let next_cursor = next_cursor(more, &items, |w| Cursor::Name(w.id.to_string()));
    Ok(Json(WebhookList { items, next_cursor }))
}

/// Get a webhook endpoint (without its secret)
#[utoipa::path(get, path = "/webhooks/{id}", tag = "webhooks", params(("id" = String, Path)),
    responses((status = 200, body = Webhook), (status = 404, body = ErrorBody)))]
pub async fn get_webhook(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<Webhook>> {
    db::webhooks::get(&state.pool, caller.project_id(), parse_id(&id)?)
        .await?
        .map(Json)
        .ok_or_else(|| not_found(&id))
}

/// Change a webhook endpoint
///
/// Sets what the body names. `disabled: true` stops deliveries; `false` starts them again with the
/// events from then on (those in between are not sent).
#[utoipa::path(patch, path = "/webhooks/{id}", tag = "webhooks", request_body = PatchWebhook,
    params(("id" = String, Path)),
    responses((status = 200, body = Webhook), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody),
        (status = 400, body = ErrorBody), (status = 413, body = ErrorBody)))]
pub async fn patch_webhook(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(req): ApiJson<PatchWebhook>,
) -> ApiResult<Json<Webhook>> {
    let webhook_id = parse_id(&id)?;
    let patch = WebhookPatch {
        url: req.url.map(|u| check_url(&u)).transpose()?,
        events: req.events.map(check_events).transpose()?,
        labels: req
            .labels
            .map(transitions::normalize_labels)
            .transpose()
            .map_err(invalid)?,
        description: req.description.map(check_description).transpose()?,
        disabled: req.disabled,
    };
    db::webhooks::update(&state.pool, caller.project_id(), webhook_id, &patch)
        .await?
        .map(Json)
        .ok_or_else(|| not_found(&id))
}

/// Delete a webhook endpoint and its delivery log
#[utoipa::path(delete, path = "/webhooks/{id}", tag = "webhooks", params(("id" = String, Path)),
    responses((status = 204, description = "Deleted"), (status = 404, body = ErrorBody)))]
pub async fn delete_webhook(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<StatusCode> {
    if db::webhooks::delete(&state.pool, caller.project_id(), parse_id(&id)?).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(not_found(&id))
    }
}

/// A webhook endpoint's delivery log, newest first
///
/// Every attempt: the `webhook-id` sent (`event_id`), the attempt's number, the receiver's status
/// and the error (null when answered 2xx). The newest 1000 attempts are kept.
#[utoipa::path(get, path = "/webhooks/{id}/deliveries", tag = "webhooks", params(("id" = String, Path), NumberPageQuery),
    responses((status = 200, body = DeliveryList), (status = 404, body = ErrorBody), (status = 400, body = ErrorBody)))]
pub async fn list_deliveries(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<NumberPageQuery>,
) -> ApiResult<Json<DeliveryList>> {
    let page = Page::parse(q.limit.as_deref(), q.cursor.as_deref())?;
    let webhook_id = parse_id(&id)?;
    let before = match page.cursor {
        None => None,
        Some(c) => Some(c.as_number().ok_or_else(Page::bad_cursor)?),
    };
    if db::webhooks::get(&state.pool, caller.project_id(), webhook_id)
        .await?
        .is_none()
    {
        return Err(not_found(&id));
    }
    let (items, more) = db::webhooks::deliveries(&state.pool, webhook_id, before, page.limit).await?;
    let next_cursor = next_cursor(more, &items, |(entry, _)| Cursor::number(*entry));
    Ok(Json(DeliveryList {
        items: items.into_iter().map(|(_, d)| d).collect(),
        next_cursor,
    }))
}

/// Send a test event to a webhook endpoint
///
/// POSTs a `webhook.test` event now, once (not retried, whether or not the endpoint is
/// disabled), and answers with that attempt, which is also logged.
#[utoipa::path(post, path = "/webhooks/{id}/test", tag = "webhooks", params(("id" = String, Path)),
    responses((status = 200, body = Delivery), (status = 404, body = ErrorBody)))]
pub async fn test_webhook(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<Delivery>> {
    crate::webhooks::send_test(&state.pool, &state.config, caller.project_id(), parse_id(&id)?)
        .await?
        .map(Json)
        .ok_or_else(|| not_found(&id))
}
