//! `agentdesk agents apply FILE`: makes the service's providers, tools, MCP servers and agents
//! match a file, one `GET` and at most one `PUT` per entry, so that applying it again changes
//! nothing. Also what the service runs at start-up for `AGENTDESK_AGENTS_FILE`.

use std::path::Path;

use serde_json::{Map, Value};

use super::client::{encode, CliError, Client};
use super::exit;

pub const APPLY_HELP: &str = "The file holds maps keyed by name whose values are the bodies of the matching PUT:

  providers:    PUT /v1/providers/{name}
  tools:        PUT /v1/tools/{name}
  mcp_servers:  PUT /v1/mcp-servers/{name}
  agents:       PUT /v1/agents/{name}
  schedules:    POST /v1/schedules (with the name), then PATCH /v1/schedules/{name}

`project: NAME` at the top applies them in that project (as `--project NAME`; naming another project \
with `--project` is refused).

Each entry is compared with what the service has (only the fields the file sets); it is sent only when \
one differs. Lines: `+` created, `~` updated (the fields), `=` unchanged, `!` refused (the API's message). \
Entries the file does not name are left alone. Providers go first, then tools, MCP servers, agents, and \
schedules last (their tickets go to the agents). A schedule's `ticket` is compared by the keys the file sets.

Exit codes: 0 every entry applied, 4 the API refused an entry (the others are still applied), \
5 the service cannot be reached, 64 a bad file.";

/// The sections of a file, in the order they are applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Section {
    Providers,
    Tools,
    McpServers,
    Agents,
    Schedules,
}

impl Section {
    const ALL: [Section; 5] = [
        Section::Providers,
        Section::Tools,
        Section::McpServers,
        Section::Agents,
        Section::Schedules,
    ];

    pub fn key(self) -> &'static str {
        match self {
            Section::Providers => "providers",
            Section::Tools => "tools",
            Section::McpServers => "mcp_servers",
            Section::Agents => "agents",
            Section::Schedules => "schedules",
        }
    }

    /// One entry's name, as printed.
    pub fn noun(self) -> &'static str {
        match self {
            Section::Providers => "provider",
            Section::Tools => "tool",
            Section::McpServers => "mcp_server",
            Section::Agents => "agent",
            Section::Schedules => "schedule",
        }
    }

    fn path(self, name: &str) -> String {
        let collection = match self {
            Section::Providers => "providers",
            Section::Tools => "tools",
            Section::McpServers => "mcp-servers",
            Section::Agents => "agents",
            Section::Schedules => "schedules",
        };
        format!("/v1/{collection}/{}", encode(name))
    }
}

/// A parsed file: its entries in the order they are applied.
#[derive(Clone, Debug, Default)]
pub struct AgentsFile {
    /// The project the entries belong to (`project:` at the top); None: the client's.
    pub project: Option<String>,
    pub entries: Vec<(Section, String, Map<String, Value>)>,
}

impl AgentsFile {
    pub fn read(path: &Path) -> Result<AgentsFile, CliError> {
        AgentsFile::parse(&read_document(path)?).map_err(|e| CliError::Usage(format!("{}: {e}", path.display())))
    }

    pub fn parse(doc: &Value) -> Result<AgentsFile, String> {
        let Some(top) = doc.as_object() else {
            return Err("expected a map with agents, providers, tools, mcp_servers or schedules".into());
        };
        let is_section = |k: &str| k == "project" || Section::ALL.iter().any(|s| s.key() == k);
        if let Some(unknown) = top.keys().find(|k| !is_section(k)) {
            return Err(format!(
                "unknown section {unknown:?}: the sections are project, agents, providers, tools, mcp_servers and schedules"
            ));
        }
        let project = match top.get("project") {
            None | Some(Value::Null) => None,
            Some(Value::String(name)) if !name.trim().is_empty() => Some(name.trim().to_owned()),
            Some(_) => return Err("project must be a project's name".into()),
        };
        let mut entries = vec![];
        for section in Section::ALL {
            let items = match top.get(section.key()) {
                None | Some(Value::Null) => continue,
                Some(Value::Object(items)) => items,
                Some(_) => return Err(format!("{} must be a map keyed by name", section.key())),
            };
            for (name, body) in items {
                let body = match body {
                    Value::Object(body) => body.clone(),
                    // `name: {}` written as `name:` in YAML.
                    Value::Null => Map::new(),
                    _ => return Err(format!("{}.{name} must be a map (the body of its PUT)", section.key())),
                };
                entries.push((section, name.clone(), body));
            }
        }
        Ok(AgentsFile { project, entries })
    }
}

/// A JSON or YAML file as JSON: by its extension, else JSON first, then YAML.
pub fn read_document(path: &Path) -> Result<Value, CliError> {
    let text = std::fs::read_to_string(path).map_err(|e| CliError::Usage(format!("{}: {e}", path.display())))?;
    let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
    let yaml = |text: &str| yaml_serde::from_str::<Value>(text).map_err(|e| e.to_string());
    let parsed = match ext.as_deref() {
        Some("json") => serde_json::from_str(&text).map_err(|e| e.to_string()),
        Some("yaml" | "yml") => yaml(&text),
        _ => serde_json::from_str(&text).or_else(|_| yaml(&text)),
    };
    parsed.map_err(|e| CliError::Usage(format!("{}: {e}", path.display())))
}

#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    Created,
    /// The fields that differed.
    Updated(Vec<String>),
    Unchanged,
    Failed(String),
}

#[derive(Debug, Clone)]
pub struct Outcome {
    pub section: Section,
    pub name: String,
    pub change: Change,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (noun, name) = (self.section.noun(), &self.name);
        match &self.change {
            Change::Created => write!(f, "+ {noun} {name} created"),
            Change::Updated(fields) => write!(f, "~ {noun} {name} updated ({})", fields.join(", ")),
            Change::Unchanged => write!(f, "= {noun} {name} unchanged"),
            Change::Failed(message) => write!(f, "! {noun} {name}: {message}"),
        }
    }
}

/// Fields the service fills in, never compared.
const SERVER_FIELDS: &[&str] = &["name", "created_at", "updated_at", "builtin", "configured", "status"];

/// The fields `desired` sets that `current` does not hold the same way.
pub fn differing_fields(desired: &Map<String, Value>, current: &Value) -> Vec<String> {
    desired
        .iter()
        .filter(|(k, _)| !SERVER_FIELDS.contains(&k.as_str()))
        .filter(|(k, v)| !same(v, current.get(k.as_str()).unwrap_or(&Value::Null)))
        .map(|(k, _)| k.clone())
        .collect()
}

/// JSON equality where `1` equals `1.0` and a missing field equals null.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x == y || x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y)),
        (Value::Object(x), Value::Object(y)) => {
            let null = Value::Null;
            x.iter().all(|(k, v)| same(v, y.get(k).unwrap_or(&null)))
                && y.iter().all(|(k, v)| x.contains_key(k) || v.is_null())
        }
        _ => a == b,
    }
}

/// Applies every entry in order; an entry the API refuses does not stop the others. A lost
/// connection does: nothing after it could be applied either.
pub async fn apply(client: &Client, file: &AgentsFile) -> Result<Vec<Outcome>, CliError> {
    let in_file_project;
    let client = match (&file.project, client.project()) {
        (Some(file_project), Some(named)) if file_project != named => {
            return Err(CliError::Usage(format!(
                "the file is for project {file_project:?}, and --project names {named:?}"
            )))
        }
        (Some(file_project), _) => {
            in_file_project = client.clone().in_project(Some(file_project));
            &in_file_project
        }
        (None, _) => client,
    };
    let mut outcomes = vec![];
    for (section, name, body) in &file.entries {
        let change = match apply_one(client, *section, name, body).await {
            Ok(change) => change,
            Err(err @ CliError::Connection { .. }) => return Err(err),
            Err(err) => Change::Failed(refusal(*section, &err)),
        };
        outcomes.push(Outcome {
            section: *section,
            name: name.clone(),
            change,
        });
    }
    Ok(outcomes)
}

async fn apply_one(
    client: &Client,
    section: Section,
    name: &str,
    body: &Map<String, Value>,
) -> Result<Change, CliError> {
    let path = section.path(name);
    let current = match client.get(&path).await {
        Ok(current) => Some(current),
        Err(err) if err.is_not_found() => None,
        Err(err) => return Err(err),
    };
    if section == Section::Schedules {
        return apply_schedule(client, name, body, current).await;
    }
    let body_value = Value::Object(body.clone());
    match current {
        None => {
            client.put(&path, &body_value).await?;
            Ok(Change::Created)
        }
        Some(current) => {
            let fields = differing_fields(body, &current);
            if fields.is_empty() {
                return Ok(Change::Unchanged);
            }
            client.put(&path, &body_value).await?;
            Ok(Change::Updated(fields))
        }
    }
}

/// A schedule has no PUT: it is created with its name, and changed with a PATCH of the fields
/// that differ (its `ticket` by the keys the file sets, the rest as for the other sections).
async fn apply_schedule(
    client: &Client,
    name: &str,
    body: &Map<String, Value>,
    current: Option<Value>,
) -> Result<Change, CliError> {
    let Some(current) = current else {
        let mut created = body.clone();
        created.insert("name".into(), Value::String(name.to_owned()));
        client.post("/v1/schedules", &Value::Object(created)).await?;
        return Ok(Change::Created);
    };
    let mut fields = differing_fields(body, &current);
    if let (Some(Value::Object(ticket)), Some(_)) = (body.get("ticket"), current.get("ticket")) {
        let ticket_differs = !differing_fields(ticket, &current["ticket"]).is_empty();
        fields.retain(|f| f != "ticket" || ticket_differs);
    }
    if fields.is_empty() {
        return Ok(Change::Unchanged);
    }
    let patch: Map<String, Value> = fields
        .iter()
        .filter_map(|f| Some((f.clone(), body.get(f)?.clone())))
        .collect();
    client
        .call(
            reqwest::Method::PATCH,
            &Section::Schedules.path(name),
            Some(&Value::Object(patch)),
        )
        .await?;
    Ok(Change::Updated(fields))
}

fn refusal(section: Section, err: &CliError) -> String {
    match err {
        CliError::Api { message, .. } if err.is_not_found() && message == "no such endpoint" => format!(
            "this server has no {} endpoint ({err})",
            section.path("{name}").replace("%7Bname%7D", "{name}")
        ),
        _ => err.to_string(),
    }
}

/// The command: prints one line per entry; exit 4 when the API refused any.
pub async fn run(client: &Client, path: &Path) -> Result<u8, CliError> {
    let file = AgentsFile::read(path)?;
    if file.entries.is_empty() {
        println!("nothing to apply: {} names no entries", path.display());
        return Ok(exit::OK);
    }
    let outcomes = apply(client, &file).await?;
    let mut code = exit::OK;
    for outcome in &outcomes {
        if matches!(outcome.change, Change::Failed(_)) {
            eprintln!("{outcome}");
            code = exit::API;
        } else {
            println!("{outcome}");
        }
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sections_are_applied_providers_first_and_agents_last() {
        let doc = json!({
            "agents": {"a": {"model": "m"}},
            "mcp_servers": {"gh": {"url": "https://x/mcp"}},
            "providers": {"local": {"kind": "openai", "base_url": "http://127.0.0.1:1/v1"}},
            "tools": {"t": null},
            "schedules": {"d": {"cron": "0 9 * * *", "ticket": {"task": "digest"}}}
        });
        let file = AgentsFile::parse(&doc).unwrap();
        let order: Vec<_> = file.entries.iter().map(|(s, n, _)| (s.noun(), n.as_str())).collect();
        assert_eq!(
            order,
            [
                ("provider", "local"),
                ("tool", "t"),
                ("mcp_server", "gh"),
                ("agent", "a"),
                ("schedule", "d")
            ]
        );
        assert!(AgentsFile::parse(&json!({"agent": {}}))
            .unwrap_err()
            .contains("unknown section"));
        assert!(AgentsFile::parse(&json!({"agents": {"a": 1}})).is_err());
        assert!(AgentsFile::parse(&json!([])).is_err());
    }

    #[test]
    fn a_file_may_name_its_project_at_the_top() {
        let file = AgentsFile::parse(&json!({"project": "ops", "agents": {"a": {"model": "m"}}})).unwrap();
        assert_eq!(file.project.as_deref(), Some("ops"));
        assert_eq!(file.entries.len(), 1);
        assert_eq!(AgentsFile::parse(&json!({"agents": {}})).unwrap().project, None);
        let err = AgentsFile::parse(&json!({"project": 3})).unwrap_err();
        assert!(err.contains("project"), "{err}");
    }

    #[tokio::test]
    async fn a_files_project_and_another_named_with_project_are_refused() {
        let client = Client::new("http://127.0.0.1:9", None).unwrap().in_project(Some("dev"));
        let file = AgentsFile::parse(&json!({"project": "ops", "agents": {"a": {"model": "m"}}})).unwrap();
        let err = apply(&client, &file).await.unwrap_err();
        assert!(err.to_string().contains("\"ops\""), "{err}");
    }

    #[test]
    fn only_the_fields_the_file_sets_are_compared() {
        let current = json!({
            "name": "a", "model": "m", "labels": ["x"], "temperature": 1.0, "max_turns": null,
            "headers": {}, "updated_at": "2026-01-01T00:00:00Z"
        });
        let desired = json!({"name": "ignored", "model": "m", "labels": ["x"], "temperature": 1, "max_turns": null,
            "headers": {}, "updated_at": "x"});
        assert!(differing_fields(desired.as_object().unwrap(), &current).is_empty());
        let desired = json!({"model": "n", "labels": ["x", "y"], "context_window": null, "role": "r"});
        assert_eq!(
            differing_fields(desired.as_object().unwrap(), &current),
            ["model", "labels", "role"]
        );
    }

    #[test]
    fn outcome_lines() {
        let line = |change| {
            Outcome {
                section: Section::Agents,
                name: "a".into(),
                change,
            }
            .to_string()
        };
        assert_eq!(line(Change::Created), "+ agent a created");
        assert_eq!(line(Change::Updated(vec!["model".into()])), "~ agent a updated (model)");
        assert_eq!(line(Change::Unchanged), "= agent a unchanged");
    }
}
