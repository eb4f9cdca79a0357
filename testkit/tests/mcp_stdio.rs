//! An MCP server run as a child process over stdio (from the `AGENTDESK_MCP_CONFIG` file): its
//! tools are lent like any server's, a changed tool list is listed again, a server that dies is
//! restarted, and shutdown stops it.

use std::time::Duration;

use agentdesk::db;
use agentdesk::db::tickets::NewTicket;
use agentdesk::domain::{ProjectId, Ticket};
use agentdesk::mcp_client::{McpHub, McpOptions};
use agentdesk::tools::{ToolContext, ToolOutcome};
use serde_json::{json, Value};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

async fn pool() -> PgPool {
    let url = testkit::testing::fresh_database().await.expect("a fresh test database");
    let pool = db::connect(&url, 4).await.expect("connect");
    db::migrate(&pool).await.expect("migrate");
    pool
}

async fn ticket(pool: &PgPool) -> Ticket {
    let mut tx = pool.begin().await.unwrap();
    let ticket = agentdesk::transitions::create_ticket(
        &mut tx,
        NewTicket {
            project: agentdesk::domain::ProjectId::DEFAULT,
            task: json!("use the tools"),
            labels: vec![],
            priority: 0,
            schema: None,
            parent_id: None,
            metadata: json!({}),
            max_attempts: 3,
            reporter: "user".into(),
            idempotency: None,
            trace_context: None,
            deadline_secs: None,
        },
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    ticket
}

async fn call(hub: &McpHub, pool: &PgPool, ticket: &Ticket, name: &str, input: Value) -> Option<ToolOutcome> {
    let tool = hub.resolve(ProjectId::DEFAULT, name).await.into_iter().next()?;
    let ctx = ToolContext {
        pool,
        fence: db::claims::Fence {
            ticket_id: ticket.id,
            generation: 0,
        },
        ticket,
        agent: "default",
        call_id: "call_test",
        cancel: CancellationToken::new(),
    };
    Some(tool.call(&ctx, &input).await)
}

fn alive(pid: i32) -> bool {
    // A zombie no longer counts: it has exited.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| !stat.contains(") Z "))
        .unwrap_or(false)
}

#[tokio::test]
async fn a_stdio_server_is_started_restarted_after_dying_and_stopped_on_shutdown() {
    let pool = pool().await;
    let ticket = ticket(&pool).await;
    let dir = std::env::temp_dir().join(format!("agentdesk-mcp-stdio-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("mcp.json");
    std::fs::write(
        &file,
        json!({"mcpServers": {"local": {"command": env!("CARGO_BIN_EXE_mcp-stdio-server"), "args": [], "env": {}}}})
            .to_string(),
    )
    .unwrap();
    let hub = McpHub::start(
        pool.clone(),
        McpOptions {
            guard: agentdesk::net::AddressGuard { allow_private: false },
            config_file: Some(file),
        },
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert!(hub.knows(ProjectId::DEFAULT, "mcp:local"));
    assert!(hub.knows(ProjectId::DEFAULT, "local__echo"));

    let echoed = call(&hub, &pool, &ticket, "local__echo", json!({"text": "over stdio"})).await;
    assert_eq!(echoed, Some(ToolOutcome::Output("over stdio".into())));
    let Some(ToolOutcome::Output(first)) = call(&hub, &pool, &ticket, "local__pid", json!({})).await else {
        panic!("pid");
    };
    let first: i32 = first.parse().unwrap();
    assert!(alive(first));

    // The server tells of a new tool; it is listed again.
    call(&hub, &pool, &ticket, "local__add_tool", json!({})).await;
    let mut listed = false;
    for _ in 0..50 {
        if !hub.resolve(ProjectId::DEFAULT, "local__extra").await.is_empty() {
            listed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(listed, "the added tool is listed");

    // It dies; the hub starts it again.
    let died = call(&hub, &pool, &ticket, "local__exit", json!({})).await;
    assert!(matches!(died, Some(ToolOutcome::Failed { .. })), "{died:?}");
    let mut second = None;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if let Some(ToolOutcome::Output(pid)) = call(&hub, &pool, &ticket, "local__pid", json!({})).await {
            second = pid.parse::<i32>().ok().filter(|p| *p != first);
            if second.is_some() {
                break;
            }
        }
    }
    let second = second.expect("a restarted server");
    assert!(!alive(first));
    assert!(alive(second));
    let views = hub.list(ProjectId::DEFAULT).await.unwrap();
    assert_eq!(views.len(), 1);
    assert_eq!(views[0].source, "config");
    assert_eq!(
        views[0].command.as_deref(),
        Some(env!("CARGO_BIN_EXE_mcp-stdio-server"))
    );

    hub.shutdown().await;
    let mut stopped = false;
    for _ in 0..50 {
        if !alive(second) {
            stopped = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(stopped, "shutdown stops the child process");
    let _ = std::fs::remove_dir_all(&dir);
}
