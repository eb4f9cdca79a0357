//! `agentdesk project create|list|show|delete` and `agentdesk token create|list|revoke`: the
//! desk's projects, and the tokens of the project `--project` names (`default` without it).

use reqwest::Method;
use serde_json::{json, Value};

use super::client::{encode, CliError, Client};
use super::tickets::table;
use super::watch::short;
use super::{exit, ProjectCommand, TokenCommand};

pub async fn run_project(client: &Client, command: ProjectCommand) -> Result<u8, CliError> {
    match command {
        ProjectCommand::Create {
            name,
            key_prefix,
            description,
            weight,
        } => {
            let mut body = json!({"name": name, "key_prefix": key_prefix});
            if let Some(d) = description {
                body["description"] = json!(d);
            }
            if let Some(w) = weight {
                body["weight"] = json!(w);
            }
            let project = client.post("/v1/projects", &body).await?;
            println!(
                "{} (tickets {}-1, {}-2, …)",
                short(&project["name"], 40),
                key_prefix,
                key_prefix
            );
            Ok(exit::OK)
        }
        ProjectCommand::List => {
            let page = client.get("/v1/projects?limit=200").await?;
            let rows: Vec<[String; 3]> = page["items"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| {
                    [
                        short(&p["name"], 40),
                        short(&p["key_prefix"], 12),
                        p["weight"].to_string(),
                    ]
                })
                .collect();
            print!("{}", table(["PROJECT", "KEYS", "WEIGHT"], &rows));
            Ok(exit::OK)
        }
        ProjectCommand::Show { project } => {
            let path = format!("/v1/projects/{}", encode(&project));
            let mut shown = client.get(&path).await?;
            shown["usage"] = client.get(&format!("{path}/usage")).await?;
            println!("{}", serde_json::to_string_pretty(&shown).unwrap_or_default());
            Ok(exit::OK)
        }
        ProjectCommand::Delete { project } => {
            client
                .call(Method::DELETE, &format!("/v1/projects/{}", encode(&project)), None)
                .await?;
            println!("deleted {project}");
            Ok(exit::OK)
        }
    }
}

pub async fn run_token(client: &Client, project: &str, command: TokenCommand) -> Result<u8, CliError> {
    let tokens = format!("/v1/projects/{}/tokens", encode(project));
    match command {
        TokenCommand::Create { name, scopes } => {
            let created = client.post(&tokens, &json!({"name": name, "scopes": scopes})).await?;
            // The secret is shown once, here: only its hash is kept.
            println!("{}", short(&created["token"], 200));
            eprintln!(
                "token {} of project {project}: keep it now, it is not shown again",
                short(&created["id"], 40)
            );
            Ok(exit::OK)
        }
        TokenCommand::List => {
            let page = client.get(&format!("{tokens}?limit=200")).await?;
            let rows: Vec<[String; 4]> = page["items"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| {
                    [
                        short(&t["id"], 40),
                        short(&t["name"], 40),
                        scopes(&t["scopes"]),
                        short(&t["last_used_at"], 30),
                    ]
                })
                .collect();
            print!("{}", table(["ID", "NAME", "SCOPES", "LAST USED"], &rows));
            Ok(exit::OK)
        }
        TokenCommand::Revoke { id } => {
            client
                .call(Method::DELETE, &format!("{tokens}/{}", encode(&id)), None)
                .await?;
            println!("revoked {id}");
            Ok(exit::OK)
        }
    }
}

fn scopes(value: &Value) -> String {
    let names: Vec<&str> = value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    names.join(",")
}
