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
            "mcp_client",
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
            "maintenance",
            "agent",
            "app",
            "config",
            "events",
            "http",
            "llm",
            "mcp_client",
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
            "maintenance",
            "agent",
            "app",
            "db",
            "events",
            "http",
            "mcp_client",
            "tools",
            "transitions",
            "webhooks",
            "worker",
        ],
    ),
    (
        "schema",
        &[
            "maintenance",
            "agent",
            "app",
            "db",
            "events",
            "http",
            "llm",
            "mcp_client",
            "tools",
            "transitions",
            "webhooks",
            "worker",
        ],
    ),
    (
        "net",
        &[
            "maintenance",
            "agent",
            "app",
            "db",
            "domain",
            "events",
            "http",
            "llm",
            "mcp_client",
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
            "maintenance",
            "agent",
            "app",
            "cli",
            "config",
            "db",
            "domain",
            "events",
            "http",
            "llm",
            "mcp_client",
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
        &[
            "maintenance",
            "agent",
            "app",
            "http",
            "llm",
            "mcp_client",
            "scheduler",
            "tools",
            "worker",
        ],
    ),
    (
        "tools",
        &["maintenance", "agent", "app", "http", "mcp_client", "worker"],
    ),
    // MCP servers lend tools: the hub builds on the store, the tools and the address guard.
    (
        "mcp_client",
        &[
            "maintenance",
            "agent",
            "app",
            "events",
            "http",
            "transitions",
            "webhooks",
            "worker",
        ],
    ),
    (
        "events",
        &[
            "maintenance",
            "agent",
            "app",
            "http",
            "mcp_client",
            "tools",
            "transitions",
            "webhooks",
            "worker",
        ],
    ),
    // Deliveries read the log and the hub; they change no ticket and call no model.
    (
        "webhooks",
        &[
            "maintenance",
            "agent",
            "app",
            "http",
            "llm",
            "mcp_client",
            "tools",
            "transitions",
            "worker",
        ],
    ),
    (
        "scheduler",
        &[
            "maintenance",
            "agent",
            "app",
            "http",
            "llm",
            "mcp_client",
            "tools",
            "webhooks",
            "worker",
        ],
    ),
    ("agent", &["maintenance", "app", "http", "worker"]),
    ("worker", &["app", "http"]),
    ("http", &["maintenance", "app", "agent", "worker"]),
    // The client talks to the service over HTTP only, as any other client would.
    (
        "cli",
        &[
            "maintenance",
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
    // The periodic background services: they say when; transitions and db say what.
    (
        "maintenance",
        &[
            "agent",
            "app",
            "cli",
            "http",
            "llm",
            "mcp_client",
            "scheduler",
            "tools",
            "webhooks",
            "worker",
        ],
    ),
];

/// The top-level modules that the Rust files of `src/<module>` (a folder or `<module>.rs`) name
/// as `crate::<name>`.
fn used_modules(module: &str) -> BTreeSet<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = rust_files(&src.join(module));
    let file = src.join(format!("{module}.rs"));
    if file.exists() {
        files.push(file);
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

/// Folders whose files may still import each other in a circle. Each entry is a debt, not a rule.
const CIRCLES_ALLOWED: &[&str] = &[];

/// One module of a folder: a file `<name>.rs`, or a subfolder `<name>/` (with all its files).
struct Node {
    name: String,
    files: Vec<std::path::PathBuf>,
}

/// The Rust files under `dir`, at any depth.
fn rust_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = vec![];
    let mut dirs = vec![dir.to_path_buf()];
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
    files.sort();
    files
}

/// The modules of folder `dir` besides its `mod.rs`, which is the folder itself (its children
/// may use what it defines, and it uses them).
fn nodes(dir: &Path) -> Vec<Node> {
    let mut nodes: Vec<Node> = vec![];
    for entry in std::fs::read_dir(dir).expect("read a source folder").flatten() {
        let path = entry.path();
        let (name, files) = if path.is_dir() {
            (
                path.file_name().unwrap().to_string_lossy().into_owned(),
                rust_files(&path),
            )
        } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("mod.rs") {
            (path.file_stem().unwrap().to_string_lossy().into_owned(), vec![path])
        } else {
            continue;
        };
        match nodes.iter_mut().find(|n| n.name == name) {
            Some(node) => node.files.extend(files),
            None => nodes.push(Node { name, files }),
        }
    }
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    nodes
}

/// The source without its comment lines: a doc comment naming a sibling is no import.
fn code(file: &Path) -> String {
    let text = std::fs::read_to_string(file).expect("read a source file");
    text.lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first name of each path that follows `prefix` in `text` (`prefix::a::…` gives `a`,
/// `prefix::{a, b::c}` gives `a` and `b`), where `prefix` is not itself the tail of a longer path.
fn names_after(text: &str, prefix: &str) -> Vec<String> {
    let ident = |s: &str| -> String { s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect() };
    let mut names = vec![];
    for (i, _) in text.match_indices(prefix) {
        if text[..i].ends_with(':') || text[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &text[i + prefix.len()..];
        // A longer chain (`super::super::…`) reaches past this folder.
        if rest.starts_with("super::") {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let end = group
                .char_indices()
                .find(|&(_, c)| {
                    depth += match c {
                        '{' => 1,
                        '}' => -1,
                        _ => 0,
                    };
                    depth < 0
                })
                .map_or(group.len(), |(at, _)| at);
            // The first segment of each item at the group's top level.
            let mut depth = 0;
            let mut start = 0;
            for (at, c) in group[..end].char_indices().chain([(end, ',')]) {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        names.push(ident(group[start..at].trim_start()));
                        start = at + 1;
                    }
                    _ => {}
                }
            }
        } else {
            names.push(ident(rest));
        }
    }
    names.retain(|n| !n.is_empty() && n != "self");
    names
}

/// The folder's own `use child::item` lines (in `mod.rs`, or `<folder>.rs` beside the folder):
/// which child each item it brings in comes from. Its children reach those items through it;
/// the dependency is on the child that defines them.
fn reexports(dir: &Path, nodes: &[Node]) -> Vec<(String, String)> {
    let root = [dir.join("mod.rs"), dir.with_extension("rs")]
        .into_iter()
        .find(|f| f.exists());
    let Some(root) = root else { return vec![] };
    let text = code(&root);
    let mut items = vec![];
    for statement in text.split(';') {
        let Some(at) = statement.find("use ") else { continue };
        let path = statement[at + "use ".len()..].trim().trim_start_matches("self::");
        let Some(child) = nodes.iter().find(|n| path.starts_with(&format!("{}::", n.name))) else {
            continue;
        };
        // Each item's name as it is brought in: the last segment, or its alias.
        let list = path[child.name.len() + 2..]
            .trim_start_matches('{')
            .trim_end_matches('}');
        for item in list.split(',') {
            let name = item.rsplit([' ', ':']).find(|s| !s.is_empty()).unwrap_or_default();
            items.push((name.trim().to_owned(), child.name.clone()));
        }
    }
    items
}

/// Which of its sibling modules each module of `src/<folder>` uses, through `super::…` or
/// `crate::<folder>::…`.
fn sibling_imports(folder: &str) -> Vec<(String, Vec<String>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(folder);
    let nodes = nodes(&dir);
    let reexported = reexports(&dir, &nodes);
    let absolute = format!("crate::{}::", folder.replace('/', "::"));
    let mut graph = vec![];
    for node in &nodes {
        let mut uses = BTreeSet::new();
        for file in &node.files {
            // `super::` from a file of the folder, `super::super::` from one a folder deeper…
            let inner = file.strip_prefix(&dir).expect("a file of the folder");
            let depth = inner.components().count() - usize::from(inner.ends_with("mod.rs"));
            let text = code(file);
            let names = names_after(&text, &"super::".repeat(depth))
                .into_iter()
                .chain(names_after(&text, &absolute));
            for name in names {
                let target = match nodes.iter().find(|n| n.name == name) {
                    Some(n) => Some(n.name.clone()),
                    None => reexported
                        .iter()
                        .find(|(item, _)| *item == name)
                        .map(|(_, c)| c.clone()),
                };
                uses.extend(target.filter(|t| *t != node.name));
            }
        }
        graph.push((node.name.clone(), uses.into_iter().collect()));
    }
    graph
}

/// A circle in `graph`, if there is one (depth-first search for an edge back to the path).
fn find_circle(graph: &[(String, Vec<String>)]) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &[(String, Vec<String>)],
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut circle = path[at..].to_vec();
            circle.push(node.to_owned());
            return Some(circle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        let uses = graph
            .iter()
            .find(|(n, _)| n == node)
            .map(|(_, u)| u.as_slice())
            .unwrap_or_default();
        for next in uses {
            if let Some(circle) = visit(next, graph, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .iter()
        .find_map(|(node, _)| visit(node, graph, &mut vec![], &mut done))
}

/// Every folder under src/, as `a` or `a/b`.
fn folders() -> Vec<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut folders = vec![];
    let mut dirs = vec![src.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read a source folder").flatten() {
            let path = entry.path();
            if path.is_dir() {
                let name = path.strip_prefix(&src).unwrap().to_string_lossy().replace('\\', "/");
                folders.push(name);
                dirs.push(path);
            }
        }
    }
    folders.sort();
    folders
}

/// Within a folder, files import each other one way: a file's siblings never lead back to it.
#[test]
fn files_of_a_folder_import_each_other_without_circles() {
    let mut circles = vec![];
    for folder in folders() {
        let allowed = CIRCLES_ALLOWED
            .iter()
            .any(|a| folder == *a || folder.starts_with(&format!("{a}/")));
        match find_circle(&sibling_imports(&folder)) {
            Some(circle) if !allowed => circles.push(format!("src/{folder}: {}", circle.join(" -> "))),
            _ => {}
        }
    }
    assert!(circles.is_empty(), "files import each other in a circle: {circles:#?}");
}

#[test]
fn the_circle_finder_sees_a_circle_through_a_group_and_a_reexport() {
    assert_eq!(
        names_after(
            "use super::{a, b::{c, d}, self}; super::super::x; crate::db::y",
            "super::"
        ),
        ["a", "b"]
    );
    let graph = vec![
        ("a".to_owned(), vec!["b".to_owned()]),
        ("b".to_owned(), vec!["c".to_owned()]),
        ("c".to_owned(), vec!["a".to_owned()]),
    ];
    assert_eq!(find_circle(&graph).unwrap(), ["a", "b", "c", "a"]);
    assert_eq!(find_circle(&graph[..2]), None);
}
