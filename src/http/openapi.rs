//! The OpenAPI document: what `ApiDoc` declares (info, schemas, security, tags) and the paths of
//! the routes in `http::documented`, generated from the handlers' annotations.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::agent_protocols::document as protocols;

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
        crate::db::desk_stats::Stats, crate::db::desk_stats::Figures, crate::db::desk_stats::ModelFigures, crate::db::desk_stats::StatusCounts,
        crate::db::retention::Storage, crate::domain::price::PriceSource, crate::domain::ticket::WaitingFor,
        super::error::ErrorBody, super::error::ErrorDetail,
        protocols::A2aTaskState, protocols::McpAccept, protocols::McpStreamAccept, protocols::McpProtocolVersion,
        protocols::McpSessionProtocolVersion,
    )),
    paths(
        super::agent_protocols::document::mcp, super::agent_protocols::document::mcp_stream, super::agent_protocols::document::mcp_end,
        super::agent_protocols::document::agent_card, super::agent_protocols::document::send_message,
        super::agent_protocols::document::stream_message, super::agent_protocols::document::list_tasks,
        super::agent_protocols::document::get_task, super::agent_protocols::document::task_action, super::agent_protocols::document::jsonrpc,
    ),
    modifiers(&BearerAuth),
    tags(
        (name = "tickets", description = "Work for agents"),
        (name = "comments", description = "A ticket's transcript: the agent conversation"),
        (name = "events", description = "Server-sent events, replayable"),
        (name = "agents", description = "Roles, models and tools"),
        (name = "tools", description = "HTTP tools: defined once, given to agents by name"),
        (name = "mcp-servers", description = "MCP servers lending their tools to agents as {server}__{tool}"),
        (name = "providers", description = "Model providers by name: the built-in openai and anthropic, and local servers or gateways defined here"),
        (name = "webhooks", description = "Events POSTed to your endpoints as signed Standard Webhooks, with a delivery log"),
        (name = "schedules", description = "Recurring tickets: a cron expression in a time zone, one ticket per fire time"),
        (name = "agent-protocols", description = "The desk for other agents: an MCP server at /mcp and an A2A v1.0 agent (card, HTTP+JSON under /a2a, JSON-RPC at /a2a/jsonrpc; an `A2A-Version` header or query parameter, if sent, must be 1.x). JSON-RPC errors come with HTTP 200."),
        (name = "health", description = "Liveness and readiness (no token)"),
        (name = "prices", description = "What models cost, in US dollars per million tokens: the desk's own prices and a built-in table"),
        (name = "stats", description = "Figures"),
        (name = "experiments", description = "Tickets replayed by several arms (agents, versions, providers, models) and compared, optionally by a blind judge"),
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

/// The document of the routes `http::router` serves, as served with tokens configured.
pub fn document() -> utoipa::openapi::OpenApi {
    let mut document = super::documented(super::v1_routes())
        .merge(super::metrics_routes())
        .into_openapi();
    declare_common_responses(&mut document, true);
    document
}

/// The 403 of a desk without tokens (`http::cross_site`).
const CROSS_SITE: &str = "A desk without tokens: the Host header does not name this machine (see \
     AGENTDESK_ALLOWED_HOSTS), or a web page of another origin asks for a change";
/// The 415 of every body (`http::cross_site`).
const NOT_JSON: &str = "The body is declared as something other than JSON (send Content-Type: application/json)";

/// What every `/v1` operation may answer besides what its handler declares, declared once here
/// so that every route, present and future, has it: with tokens, the bearer security and 401
/// (403 too where a read-only token is refused: anything but GET); 400, 413 and 422 where a
/// body is read; 400 where a query is; 503 when the database is unavailable or a request runs
/// out of time; 415 where a body is declared as something other than JSON. Without tokens no
/// security is declared and no 401, and 403 is the refusal of a foreign Host or a cross-site change.
pub fn declare_common_responses(document: &mut utoipa::openapi::OpenApi, with_tokens: bool) {
    use utoipa::openapi::path::{HttpMethod, ParameterIn};
    use utoipa::openapi::security::SecurityRequirement;
    for (path, item) in document.paths.paths.iter_mut() {
        if path == "/mcp" || path.starts_with("/a2a/") {
            // The agent protocols: the same tokens, their own error bodies otherwise.
            for operation in [&mut item.get, &mut item.post, &mut item.delete].into_iter().flatten() {
                let responses = &mut operation.responses.responses;
                add_error(responses, "431", "The request's headers are larger than 32 KiB");
                add_error(
                    responses,
                    "503",
                    "The database is unavailable, or the request ran out of time",
                );
                for parameter in operation.parameters.iter_mut().flatten() {
                    if parameter.parameter_in == ParameterIn::Header {
                        never_null(&mut parameter.schema);
                    }
                }
                if with_tokens {
                    operation.security = Some(vec![SecurityRequirement::new("bearer", Vec::<String>::new())]);
                } else {
                    operation.security = None;
                    operation.responses.responses.remove("401");
                    add_error(&mut operation.responses.responses, "403", CROSS_SITE);
                }
                if operation.request_body.is_some() {
                    add_error(&mut operation.responses.responses, "415", NOT_JSON);
                }
            }
            continue;
        }
        if !path.starts_with("/v1/") {
            continue;
        }
        let operations = [
            (HttpMethod::Get, &mut item.get),
            (HttpMethod::Put, &mut item.put),
            (HttpMethod::Post, &mut item.post),
            (HttpMethod::Delete, &mut item.delete),
            (HttpMethod::Patch, &mut item.patch),
        ];
        for (method, operation) in operations {
            let Some(operation) = operation else { continue };
            let responses = &mut operation.responses.responses;
            if with_tokens {
                operation.security = Some(vec![SecurityRequirement::new("bearer", Vec::<String>::new())]);
                add_error(responses, "401", "No valid bearer token");
                if method != HttpMethod::Get {
                    add_error(responses, "403", "A read-only token (read:…) may only GET");
                }
            } else {
                operation.security = None;
                responses.remove("401");
                responses.remove("403");
                add_error(responses, "403", CROSS_SITE);
            }
            if operation.request_body.is_some() {
                add_error(responses, "400", "Malformed JSON or an unreadable body");
                add_error(responses, "413", "The body is larger than 1 MiB");
                add_error(responses, "415", NOT_JSON);
                add_error(responses, "422", "A body of the wrong shape or with invalid values");
            }
            let has_query = operation
                .parameters
                .iter()
                .flatten()
                .any(|p| p.parameter_in == ParameterIn::Query);
            if has_query {
                add_error(responses, "400", "An invalid query parameter");
            }
            for parameter in operation.parameters.iter_mut().flatten() {
                if parameter.parameter_in == ParameterIn::Header {
                    never_null(&mut parameter.schema);
                }
            }
            add_error(responses, "431", "The request's headers are larger than 32 KiB");
            add_error(
                responses,
                "503",
                "The database is unavailable, or the request ran out of time",
            );
            describe_event_streams(responses);
        }
    }
}

/// A header is sent or not; it is never null (an optional one is declared `Option<String>`,
/// which would otherwise add null to its type, and a client would send the text "null").
fn never_null(schema: &mut Option<utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>>) {
    let Some(current) = schema.as_ref() else { return };
    let Ok(mut value) = serde_json::to_value(current) else {
        return;
    };
    // An optional header of a named schema: `oneOf` null or it.
    if let Some(choices) = value.get("oneOf").and_then(|c| c.as_array()) {
        let not_null: Vec<&serde_json::Value> = choices.iter().filter(|c| c["type"] != "null").collect();
        if let [only] = not_null.as_slice() {
            value = (*only).clone();
        }
    }
    if let Some(types) = value.get_mut("type").and_then(|t| t.as_array_mut()) {
        types.retain(|t| t != "null");
        if let [only] = types.as_slice() {
            let only = only.clone();
            value["type"] = only;
        }
    }
    if let Ok(fixed) = serde_json::from_value(value) {
        *schema = Some(fixed);
    }
}

/// An event stream's response is a sequence of SSE frames, not one JSON value: its schema says
/// what one frame holds (as schema-based clients and fuzzers read `text/event-stream`), its
/// `data` being the JSON text of the schema the handler named.
fn describe_event_streams(
    responses: &mut std::collections::BTreeMap<String, utoipa::openapi::RefOr<utoipa::openapi::Response>>,
) {
    use utoipa::openapi::RefOr;
    for response in responses.values_mut() {
        let RefOr::T(response) = response else { continue };
        let Some(content) = response.content.get_mut("text/event-stream") else {
            continue;
        };
        let Some(RefOr::Ref(reference)) = &content.schema else {
            continue;
        };
        let location = reference.ref_location.clone();
        let name = location.rsplit('/').next().unwrap_or_default().to_owned();
        let frame = serde_json::json!({
            "type": "object",
            "description": format!("One server-sent event: `data` is the JSON text of a {name} ({location}); \
                `id` its cursor (absent on live-only deltas); `: ping` comments carry nothing."),
            "properties": {
                "data": {"type": "string", "contentMediaType": "application/json",
                         "contentSchema": {"$ref": location}},
                "id": {"type": "string"},
                "event": {"type": "string"},
                "retry": {"type": "integer", "minimum": 0}
            }
        });
        content.schema = serde_json::from_value(frame).ok();
    }
}

fn add_error(
    responses: &mut std::collections::BTreeMap<String, utoipa::openapi::RefOr<utoipa::openapi::Response>>,
    status: &str,
    description: &str,
) {
    use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
    responses.entry(status.to_owned()).or_insert_with(|| {
        ResponseBuilder::new()
            .description(description)
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name("ErrorBody")))
                    .build(),
            )
            .build()
            .into()
    });
}

/// The document as committed in `openapi/openapi.json`.
pub fn document_json() -> String {
    to_json(&document())
}

/// The text served at `/openapi.json`: the document with the agent protocols' schemas.
pub(super) fn to_json(document: &utoipa::openapi::OpenApi) -> String {
    let mut value = serde_json::to_value(document).unwrap_or_default();
    protocols::add_schemas(&mut value);
    let mut text = serde_json::to_string_pretty(&value).unwrap_or_default();
    text.push('\n');
    text
}
