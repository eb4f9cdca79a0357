//! The service's modules depend on each other in one direction (see the README's Architecture):
//! each rule below lists the top-level modules a folder may not name through `crate::…`.

use std::collections::BTreeSet;
use std::path::Path;

/// (module, modules it must not use).
const RULES: &[(&str, &[&str])] = &[
    (
        "domain",
        &[
            "agent",
            "app",
            "config",
            "db",
            "events",
            "http",
            "llm",
            "mcp",
            "scheduler",
            "schema",
            "tools",
            "transitions",
            "webhooks",
            "worker",
        ],
    ),
    (
        "db",
        &[
            "agent",
            "app",
            "config",
            "events",
            "http",
            "llm",
            "mcp",
            "scheduler",
            "tools",
            "transitions",
            "webhooks",
            "worker",
        ],
    ),
    (
        "llm",
        &[
            "agent",
            "app",
            "db",
            "events",
            "http",
            "mcp",
            "tools",
            "transitions",
            "webhooks",
            "worker",
        ],
    ),
    (
        "schema",
        &[
            "agent",
            "app",
            "db",
            "events",
            "http",
            "llm",
            "mcp",
            "tools",
            "transitions",
            "webhooks",
            "worker",
        ],
    ),
    (
        "net",
        &[
            "agent",
            "app",
            "db",
            "domain",
            "events",
            "http",
            "llm",
            "mcp",
            "tools",
            "transitions",
            "webhooks",
            "worker",
        ],
    ),
    // Metrics and traces: anything may report through them, they use nothing.
    (
        "telemetry",
        &[
            "agent",
            "app",
            "cli",
            "config",
            "db",
            "domain",
            "events",
            "http",
            "llm",
            "mcp",
            "net",
            "schema",
            "tools",
            "transitions",
            "webhooks",
            "worker",
        ],
    ),
    (
        "transitions",
        &["agent", "app", "http", "llm", "mcp", "scheduler", "tools", "worker"],
    ),
    ("tools", &["agent", "app", "http", "mcp", "worker"]),
    // MCP servers lend tools: the hub builds on the store, the tools and the address guard.
    (
        "mcp",
        &["agent", "app", "events", "http", "transitions", "webhooks", "worker"],
    ),
    (
        "events",
        &[
            "agent",
            "app",
            "http",
            "mcp",
            "tools",
            "transitions",
            "webhooks",
            "worker",
        ],
    ),
    // Deliveries read the log and the hub; they change no ticket and call no model.
    (
        "webhooks",
        &["agent", "app", "http", "llm", "mcp", "tools", "transitions", "worker"],
    ),
    (
        "scheduler",
        &["agent", "app", "http", "llm", "mcp", "tools", "webhooks", "worker"],
    ),
    ("agent", &["app", "http", "worker"]),
    ("worker", &["app", "http"]),
    ("http", &["app", "agent", "worker"]),
    // The client talks to the service over HTTP only, as any other client would.
    (
        "cli",
        &[
            "agent",
            "app",
            "config",
            "db",
            "domain",
            "events",
            "http",
            "llm",
            "schema",
            "telemetry",
            "tools",
            "transitions",
            "webhooks",
            "worker",
        ],
    ),
];

/// The top-level modules that the Rust files of `src/<module>` (a folder or `<module>.rs`) name
/// as `crate::<name>`.
fn used_modules(module: &str) -> BTreeSet<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![];
    let file = src.join(format!("{module}.rs"));
    if file.exists() {
        files.push(file);
    }
    let mut dirs = vec![src.join(module)];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    assert!(!files.is_empty(), "no sources for module {module}");
    let mut used = BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read a source file");
        for (i, _) in text.match_indices("crate::") {
            let rest = &text[i + "crate::".len()..];
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            assert!(
                !name.is_empty(),
                "{}: write `crate::<module>::…`, not a group",
                file.display()
            );
            used.insert(name);
        }
    }
    used.remove(module);
    used
}

#[test]
fn dependencies_point_one_way() {
    let mut broken = vec![];
    for (module, forbidden) in RULES {
        for name in used_modules(module) {
            if forbidden.contains(&name.as_str()) {
                broken.push(format!("{module} uses crate::{name}"));
            }
        }
    }
    assert!(broken.is_empty(), "layering broken: {broken:#?}");
}
