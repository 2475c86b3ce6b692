//! The opt-in servers (pyrefly, basedpyright, pyright) on flask 3.0.0, each from its pinned
//! PyPI wheel: definition, whole-project references, call hierarchy, an edit seen by the next
//! query, and the readiness guarantee that the *first* `references` on a cold server is the
//! complete answer a warm server gives (pyright and basedpyright answer 2 of 6 here when asked
//! before their program has loaded, pyrefly when asked before its configuration arrived).
//!
//! A server whose wheel cannot be fetched or started prints `SKIPPED: <reason>` and fails under
//! `CI=true`, where PyPI is reachable. The pyright family also needs the host's node, which CI
//! does not install: without it those tests print `SKIPPED` even in CI.

mod support;

use dojo_lsp::{LspTool, ServerKind};
use serde_json::json;
use support::{FLASK, call, tool, unpack};

const HELPERS: &str = "src/flask/helpers.py";

fn references_args() -> serde_json::Value {
    json!({"command": "get_references", "file_path": HELPERS, "symbol": "_split_blueprint_path", "line": 617})
}

fn definition_args() -> serde_json::Value {
    json!({"command": "get_definition", "file_path": "src/flask/wrappers.py", "symbol": "_split_blueprint_path", "line": 111})
}

/// The pyright family runs on the host's node (`$DOJO_NODE` or /usr/bin/node); CI does not
/// install one, so its absence is a skip even with `CI=true`.
fn node_missing(kind: ServerKind) -> bool {
    if !matches!(kind, ServerKind::Pyright | ServerKind::Basedpyright) {
        return false;
    }
    let node = std::env::var("DOJO_NODE").unwrap_or_else(|_| "/usr/bin/node".into());
    let runs = std::process::Command::new(&node)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !runs {
        println!(
            "SKIPPED: {} needs node, and {node} does not run",
            kind.name()
        );
    }
    !runs
}

/// The checks every server must pass, on a fresh flask tree and a cold server.
async fn navigate_flask(kind: ServerKind) {
    if node_missing(kind) {
        return;
    }
    let Some((_g, root)) = unpack(&FLASK) else {
        return;
    };
    let Some(tool) = tool(&root, kind).await else {
        return;
    };
    let name = kind.name();

    // The very first query of a cold server: whole-project references.
    let cold = call(&tool, references_args()).await;
    assert!(cold.success, "{name}: {}", cold.text);
    let warm = call(&tool, references_args()).await;
    assert_eq!(
        cold.text, warm.text,
        "{name}: the first references on a cold server differ from the warm answer"
    );
    for (file, at) in [
        ("src/flask/helpers.py", "  - 621:20"),
        ("src/flask/sansio/app.py", "  - 924:33"),
        ("src/flask/wrappers.py", "  - 111:16"),
    ] {
        assert!(
            cold.text.contains(&format!("{file} (")) && cold.text.contains(at),
            "{name}: reference {file} {at} missing: {}",
            cold.text
        );
    }

    let o = call(&tool, definition_args()).await;
    assert!(o.success, "{name}: {}", o.text);
    assert!(
        o.text
            .contains("src/flask/helpers.py:617:5 (function `_split_blueprint_path`)")
            && o.text
                .contains(" 617 | def _split_blueprint_path(name: str)"),
        "{name}: {}",
        o.text
    );

    let o = call(
        &tool,
        json!({"command": "get_call_hierarchy", "file_path": HELPERS, "symbol": "_split_blueprint_path", "line": 617}),
    )
    .await;
    assert!(o.success, "{name}: {}", o.text);
    // (The pyright family calls methods `function`s here; the names and lines are what count.)
    for (file, caller) in [
        (
            "src/flask/sansio/app.py: ",
            "`inject_url_defaults` (line 911), call sites at 924:33",
        ),
        (
            "src/flask/wrappers.py: ",
            "`blueprints` (line 97), call sites at 111:16",
        ),
    ] {
        assert!(
            o.text
                .lines()
                .any(|l| l.contains(file) && l.contains(caller)),
            "{name}: caller {file}{caller} missing: {}",
            o.text
        );
    }

    // A shell-style edit: ten lines inserted above the definition; the next query sees it.
    let helpers = root.join(HELPERS);
    let text = std::fs::read_to_string(&helpers).unwrap();
    std::fs::write(
        &helpers,
        text.replacen(
            "def _split_blueprint_path(",
            &format!("{}def _split_blueprint_path(", "# pad\n".repeat(10)),
            1,
        ),
    )
    .unwrap();
    let o = call(&tool, definition_args()).await;
    assert!(
        o.text.contains("src/flask/helpers.py:627:5"),
        "{name}: definition not moved by the edit: {}",
        o.text
    );
    let o = call(
        &tool,
        json!({"command": "get_references", "file_path": HELPERS, "symbol": "_split_blueprint_path", "line": 627}),
    )
    .await;
    assert!(
        o.text.contains("  - 627:5") && o.text.contains("  - 631:20"),
        "{name}: references after the edit: {}",
        o.text
    );
    tool.session().shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pyrefly_navigates_flask() {
    navigate_flask(ServerKind::Pyrefly).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basedpyright_navigates_flask() {
    navigate_flask(ServerKind::Basedpyright).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pyright_navigates_flask() {
    navigate_flask(ServerKind::Pyright).await;
}

/// pyright's first `references` used to be answered before its program had loaded (1 of 379
/// on sympy, 2 of 6 here). A cold server's first answer now equals a second, independent warm
/// server's answer, also for the call hierarchy's incoming calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_pyright_first_references_match_warm() {
    if node_missing(ServerKind::Pyright) {
        return;
    }
    let Some((_g, root)) = unpack(&FLASK) else {
        return;
    };
    let Some(cold_tool) = tool(&root, ServerKind::Pyright).await else {
        return;
    };
    let cold = call(&cold_tool, references_args()).await;
    cold_tool.session().shutdown().await;

    // Warm: a server that has answered other queries first.
    let warm_tool: LspTool = tool(&root, ServerKind::Pyright)
        .await
        .expect("installed above");
    let _ = call(&warm_tool, definition_args()).await;
    let _ = call(&warm_tool, references_args()).await;
    let warm = call(&warm_tool, references_args()).await;
    warm_tool.session().shutdown().await;
    assert!(
        warm.text
            .contains("References to `_split_blueprint_path`: 6 in 3 files"),
        "{}",
        warm.text
    );
    assert_eq!(cold.text, warm.text, "cold first answer differs from warm");
}
