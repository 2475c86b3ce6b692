//! `lsp_tool` on flask 3.0.0 with ty: observations (snapshotted), bad input, edits seen by the
//! next query, restart after the server is killed, and broken servers classified as
//! infrastructure events.

mod support;

use std::sync::Arc;
use std::time::Duration;

use dojo_lsp::{HostBackend, Launch, LspInfraKind, LspTool, ServerKind, SessionOptions};
use serde_json::json;
use support::{FLASK, call, tool, unpack};

macro_rules! setup {
    () => {{
        let Some((guard, root)) = unpack(&FLASK) else {
            return;
        };
        let Some(tool) = tool(&root, ServerKind::Ty).await else {
            return;
        };
        (guard, root, tool)
    }};
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flask_navigation_observations() {
    let (_g, _root, tool) = setup!();

    // `App` on `class Flask(App):` is defined in sansio/app.py.
    let line = line_of(&_root, "src/flask/app.py", "class Flask(App):");
    let o = call(&tool, json!({"command": "get_definition", "file_path": "src/flask/app.py", "symbol": "App", "line": line})).await;
    assert!(o.success, "{}", o.text);
    assert!(
        o.text
            .contains("src/flask/sansio/app.py:58:7 (class `App`)"),
        "{}",
        o.text
    );
    assert!(
        o.text.contains("--- SOURCE CODE START ---") && o.text.contains("class App(Scaffold):"),
        "{}",
        o.text
    );
    assert!(
        o.text.contains("more lines not shown"),
        "a 900-line class is capped: {}",
        o.text
    );

    // A helper used in three files; references grouped by file.
    let o = call(
        &tool,
        json!({"command": "get_references", "file_path": "src/flask/helpers.py", "symbol": "_split_blueprint_path", "line": 617}),
    )
    .await;
    assert!(o.success, "{}", o.text);
    insta::assert_snapshot!("flask_references", o.text);

    let o = call(
        &tool,
        json!({"command": "get_call_hierarchy", "file_path": "src/flask/helpers.py", "symbol": "_split_blueprint_path", "line": 617}),
    )
    .await;
    assert!(o.success, "{}", o.text);
    insta::assert_snapshot!("flask_call_hierarchy", o.text);

    let o = call(&tool, json!({"command": "get_definition", "file_path": "src/flask/wrappers.py", "symbol": "_split_blueprint_path", "line": 111})).await;
    insta::assert_snapshot!("flask_definition", o.text);

    let o = call(&tool, json!({"command": "get_document_symbols", "file_path": "/src/flask/../flask/config.py".trim_start_matches('/')})).await;
    assert!(o.success, "{}", o.text);
    insta::assert_snapshot!("flask_document_symbols", o.text);

    let o = call(
        &tool,
        json!({"command": "get_workspace_symbols", "query": "Blueprint"}),
    )
    .await;
    assert!(o.success, "{}", o.text);
    assert!(
        o.text.contains("src/flask/blueprints.py:\n  - "),
        "{}",
        o.text
    );

    let o = call(&tool, json!({"command": "get_hover", "file_path": "src/flask/app.py", "symbol": "App", "line": line})).await;
    assert!(o.success && o.text.contains("<class 'App'>"), "{}", o.text);

    let o = call(&tool, json!({"command": "get_document_highlights", "file_path": "src/flask/helpers.py", "symbol": "_split_blueprint_path", "line": 617})).await;
    insta::assert_snapshot!("flask_highlights", o.text);

    tool.session().shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flask_bad_input_gets_clear_messages() {
    let (_g, _root, tool) = setup!();
    let cases = [
        (
            "missing_file",
            json!({"command": "get_definition", "file_path": "src/flask/nope.py", "symbol": "x", "line": 1}),
        ),
        (
            "line_out_of_range",
            json!({"command": "get_definition", "file_path": "src/flask/wrappers.py", "symbol": "x", "line": 100000}),
        ),
        (
            "symbol_not_on_line",
            json!({"command": "get_references", "file_path": "src/flask/wrappers.py", "symbol": "_split_blueprint_path", "line": 110}),
        ),
        (
            "missing_arguments",
            json!({"command": "get_hover", "file_path": "src/flask/wrappers.py"}),
        ),
        ("unknown_command", json!({"command": "get_everything"})),
        (
            "no_answer",
            json!({"command": "get_definition", "file_path": "src/flask/wrappers.py", "symbol": "from", "line": 11}),
        ),
        ("no_query", json!({"command": "get_workspace_symbols"})),
    ];
    for (name, args) in cases {
        let o = call(&tool, args).await;
        assert!(!o.success, "{name}: {}", o.text);
        assert!(
            o.infra.is_none(),
            "{name} is the agent's input, not infrastructure: {:?}",
            o.infra
        );
        insta::assert_snapshot!(format!("flask_bad_{name}"), o.text);
    }
    tool.session().shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edits_are_seen_by_the_next_query() {
    let (_g, root, tool) = setup!();
    let helpers = root.join("src/flask/helpers.py");
    let wrappers = root.join("src/flask/wrappers.py");

    // Warm up: both files open on the server.
    let o = call(&tool, json!({"command": "get_definition", "file_path": "src/flask/wrappers.py", "symbol": "_split_blueprint_path", "line": 111})).await;
    assert!(o.text.contains("src/flask/helpers.py:617:5"), "{}", o.text);

    // A shell-style edit of an open file: ten lines inserted above the definition.
    let text = std::fs::read_to_string(&helpers).unwrap();
    let edited = text.replacen(
        "def _split_blueprint_path(",
        &format!("{}def _split_blueprint_path(", "# pad\n".repeat(10)),
        1,
    );
    std::fs::write(&helpers, edited).unwrap();
    let o = call(&tool, json!({"command": "get_definition", "file_path": "src/flask/wrappers.py", "symbol": "_split_blueprint_path", "line": 111})).await;
    assert!(
        o.text.contains("src/flask/helpers.py:627:5"),
        "definition moved by the edit: {}",
        o.text
    );

    // A new file (never opened) and a new use of it.
    std::fs::write(
        root.join("src/flask/brand_new.py"),
        "def brand_new_helper(x: int) -> int:\n    return x + 1\n",
    )
    .unwrap();
    let w = std::fs::read_to_string(&wrappers).unwrap();
    std::fs::write(
        &wrappers,
        format!("{w}\nfrom .brand_new import brand_new_helper\nVALUE = brand_new_helper(1)\n"),
    )
    .unwrap();
    let line = w.lines().count() + 3;
    let o = call(&tool, json!({"command": "get_definition", "file_path": "src/flask/wrappers.py", "symbol": "brand_new_helper", "line": line})).await;
    assert!(o.text.contains("src/flask/brand_new.py:1:5"), "{}", o.text);

    // Rename inside the new, unopened file: the server must drop the old name.
    std::fs::write(
        root.join("src/flask/brand_new.py"),
        "def renamed_helper(x: int) -> int:\n    return x + 1\n",
    )
    .unwrap();
    let o = call(&tool, json!({"command": "get_definition", "file_path": "src/flask/wrappers.py", "symbol": "brand_new_helper", "line": line})).await;
    assert!(
        !o.text.contains("brand_new.py:1:5"),
        "stale answer after the rename: {}",
        o.text
    );
    tool.session().shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_server_is_restarted_and_answers_again() {
    let (_g, _root, tool) = setup!();
    let args = json!({"command": "get_definition", "file_path": "src/flask/wrappers.py", "symbol": "_split_blueprint_path", "line": 111});
    let o = call(&tool, args.clone()).await;
    assert!(o.success, "{}", o.text);
    let pid = tool.session().server_pid().await.expect("server pid");
    // SAFETY: plain kill(2) of the server process this test started.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
    let o = call(&tool, args).await;
    assert!(o.success, "after kill: {}", o.text);
    assert!(o.text.contains("src/flask/helpers.py:617:5"), "{}", o.text);
    let stats = tool.session().stats().await;
    assert_eq!((stats.starts, stats.restarts), (2, 1));
    assert_ne!(tool.session().server_pid().await, Some(pid));
    tool.session().shutdown().await;
}

/// A tool whose "server" is `argv`, over the flask tree.
fn broken_tool(root: &std::path::Path, argv: &[&str], opts: SessionOptions) -> LspTool {
    let backend = Arc::new(HostBackend::new(root).unwrap());
    let launch = Launch {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        env: Default::default(),
    };
    LspTool::from_launch(backend, ServerKind::Ty, launch, opts).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_servers_are_infrastructure_events() {
    let Some((_g, root)) = unpack(&FLASK) else {
        return;
    };
    let args = json!({"command": "get_definition", "file_path": "src/flask/wrappers.py", "symbol": "_split_blueprint_path", "line": 111});
    let cases = [
        (
            "missing",
            vec!["/nonexistent/ty", "server"],
            LspInfraKind::ServerMissing,
            "language server unavailable: cannot start /nonexistent/ty: No such file or directory",
        ),
        (
            "crashes_at_start",
            vec!["sh", "-c", "echo 'ty: fatal: broken install' >&2; exit 3"],
            LspInfraKind::ServerCrashed,
            "language server crashed: server exited; stderr tail:\nty: fatal: broken install",
        ),
        // Reads its input and never answers: the readiness deadline classifies it.
        (
            "never_ready",
            vec!["sleep", "600"],
            LspInfraKind::NotReady,
            "language server never became ready: ty did not answer initialize within 2s",
        ),
    ];
    for (name, argv, kind, message) in cases {
        let opts = SessionOptions {
            ready_timeout: Duration::from_secs(2),
            ..SessionOptions::default()
        };
        let tool = broken_tool(&root, &argv, opts);
        let o = call(&tool, args.clone()).await;
        assert!(!o.success, "{name}: {}", o.text);
        let ev = o
            .infra
            .as_ref()
            .unwrap_or_else(|| panic!("{name}: no infra event: {}", o.text));
        assert_eq!(ev.kind, kind, "{name}: {}", o.text);
        assert!(
            o.text.contains("infrastructure problem"),
            "{name}: {}",
            o.text
        );
        assert!(o.text.contains(message), "{name}: {}", o.text);
        assert!(
            o.text.contains("use other tools meanwhile"),
            "{name}: the agent is told to go on: {}",
            o.text
        );
        tool.session().shutdown().await;
    }
}

fn line_of(root: &std::path::Path, file: &str, needle: &str) -> usize {
    let text = std::fs::read_to_string(root.join(file)).unwrap();
    text.lines()
        .position(|l| l.contains(needle))
        .map(|i| i + 1)
        .unwrap_or_else(|| panic!("{needle:?} not in {file}"))
}
