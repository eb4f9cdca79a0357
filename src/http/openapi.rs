//! The OpenAPI document: what `ApiDoc` declares (info, schemas, security, tags) and the paths of
//! the routes in `http::documented`, generated from the handlers' annotations.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "agentdesk",
        description = "A ticket desk where AI agents work tickets: a durable queue, an agent runtime and a replayable event log on Postgres.",
        license(name = "Apache-2.0")
    ),
    components(schemas(
        crate::domain::Ticket, crate::domain::Status, crate::domain::TicketUsage, crate::domain::TicketError,
        crate::domain::Comment, crate::domain::ContentBlock, crate::domain::Author,
        crate::domain::Agent, crate::domain::event::TicketEventSchema, crate::domain::ProviderDef,
        crate::domain::provider::ProviderKind,
        crate::db::desk_stats::Stats, crate::db::desk_stats::Figures, crate::db::desk_stats::StatusCounts,
        super::error::ErrorBody, super::error::ErrorDetail,
    )),
    modifiers(&BearerAuth),
    security(("bearer" = [])),
    tags(
        (name = "tickets", description = "Work for agents"),
        (name = "comments", description = "A ticket's transcript: the agent conversation"),
        (name = "events", description = "Server-sent events, replayable"),
        (name = "agents", description = "Roles, models and tools"),
        (name = "tools", description = "HTTP tools: defined once, given to agents by name"),
        (name = "mcp-servers", description = "MCP servers lending their tools to agents as {server}__{tool}"),
        (name = "providers", description = "Model providers by name: the built-in openai and anthropic, and local servers or gateways defined here"),
        (name = "webhooks", description = "Events POSTed to your endpoints as signed Standard Webhooks, with a delivery log"),
        (name = "health", description = "Liveness and readiness (no token)"),
        (name = "stats", description = "Figures"),
    )
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("One of AGENTDESK_API_TOKENS (when set)"))
                    .build(),
            ),
        );
    }
}

/// The document of the routes `http::router` serves.
pub fn document() -> utoipa::openapi::OpenApi {
    super::documented(super::v1_routes())
        .merge(super::metrics_routes())
        .into_openapi()
}

/// The document as committed in `openapi/openapi.json`.
pub fn document_json() -> String {
    to_json(&document())
}

/// The text served at `/openapi.json`.
pub(super) fn to_json(document: &utoipa::openapi::OpenApi) -> String {
    let mut text = document.to_pretty_json().unwrap_or_default();
    text.push('\n');
    text
}
