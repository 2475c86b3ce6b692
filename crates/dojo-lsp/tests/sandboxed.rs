//! The server inside a rollout's sandbox: it sees the sandbox's copy-on-write workspace at
//! /testbed, an edit made inside the sandbox is seen by the next query, and a killed server is
//! restarted there.
#![cfg(feature = "sandbox")]

mod support;

use std::sync::Arc;

use dojo_lsp::{LspTool, ServerKind};
use dojo_sandbox::{ExecRequest, PristineStore, Sandbox, SandboxOptions, Source};
use serde_json::json;
use support::{FLASK, call, skip, unpack};

/// Probed once per test binary: two concurrent probes in one process share a scratch directory
/// name in dojo-sandbox's doctor and fail each other.
fn namespaces_usable() -> bool {
    static USABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *USABLE.get_or_init(dojo_sandbox::doctor::namespaces_usable)
}

/// A fresh sandbox over flask 3.0.0 (None → skipped), with its temp-dir guard and host tree.
async fn flask_sandbox() -> Option<(tempfile::TempDir, std::path::PathBuf, Sandbox)> {
    if !namespaces_usable() {
        skip("user/mount/pid/net namespaces or overlayfs unavailable");
        return None;
    }
    // The sandbox hides $DOJO_HOME and has a private /tmp: the tools must live elsewhere,
    // world-readable (as the environment layer arranges in production).
    static TOOLS: std::sync::Once = std::sync::Once::new();
    // SAFETY: the Once orders this write before any read of the environment by these tests.
    TOOLS.call_once(|| unsafe { std::env::set_var("DOJO_TOOLS", "/var/tmp/dojo-lsp-test-tools") });
    let (guard, root) = unpack(&FLASK)?;
    let pristine = PristineStore::open()
        .unwrap()
        .build(&Source::Dir { path: root.clone() })
        .unwrap();
    let sb = Sandbox::create(&pristine, None, &SandboxOptions::default())
        .await
        .unwrap();
    Some((guard, root, sb))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ty_in_a_sandbox_follows_the_rollouts_files() {
    let Some((_g, root, sb)) = flask_sandbox().await else {
        return;
    };
    let sb = Arc::new(sb);
    let tool = match LspTool::sandboxed(sb.clone(), ServerKind::Ty).await {
        Ok(t) => t,
        Err(e) => {
            skip(&format!("cannot install ty: {e}"));
            return;
        }
    };
    let args = json!({"command": "get_definition", "file_path": "/testbed/src/flask/wrappers.py", "symbol": "_split_blueprint_path", "line": 111});
    let o = call(&tool, args.clone()).await;
    assert!(o.success, "{}", o.text);
    assert!(
        o.text
            .contains("src/flask/helpers.py:617:5 (function `_split_blueprint_path`)"),
        "{}",
        o.text
    );

    // An edit made by a shell command inside the sandbox (the host tree is untouched).
    let out = sb
        .exec(&ExecRequest::shell("sed -i 's/^def _split_blueprint_path(/# moved\\n# moved\\ndef _split_blueprint_path(/' src/flask/helpers.py"))
        .await
        .unwrap();
    assert!(out.success(), "{out:?}");
    let o = call(&tool, args.clone()).await;
    assert!(
        o.text.contains("src/flask/helpers.py:619:5"),
        "edit not seen: {}",
        o.text
    );
    let host = std::fs::read_to_string(root.join("src/flask/helpers.py")).unwrap();
    assert!(
        !host.contains("# moved"),
        "the sandbox wrote through to the host tree"
    );

    // Killed (its supervisor takes the sandbox pid namespace down with it): restarted.
    let pid = tool.session().server_pid().await;
    if let Some(pid) = pid {
        // SAFETY: kill(2) of the process this test spawned (the sandbox's launcher).
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
    let o = call(&tool, args).await;
    assert!(
        o.success && o.text.contains("helpers.py:619:5"),
        "after kill: {}",
        o.text
    );
    assert_eq!(tool.session().stats().await.restarts, 1);
    tool.session().shutdown().await;
}

/// The agent's way: the tool does not own the sandbox; each call lends it (`call_in`), so the
/// server starts inside the borrowed sandbox on the first call and follows its edits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lent_sandbox_calls_run_the_server_inside_it() {
    let Some((_g, _root, sb)) = flask_sandbox().await else {
        return;
    };
    let tool = match LspTool::for_lent_sandbox(ServerKind::Ty).await {
        Ok(t) => t,
        Err(e) => {
            skip(&format!("cannot install ty: {e}"));
            return;
        }
    };
    // Without a lent workspace the session refuses clearly (a bug in the caller, not the agent's).
    let o = call(
        &tool,
        json!({"command": "get_document_symbols", "file_path": "src/flask/helpers.py"}),
    )
    .await;
    assert!(
        !o.success && o.text.contains("no workspace lent for this call"),
        "{}",
        o.text
    );
    let args = json!({"command": "get_definition", "file_path": "src/flask/wrappers.py", "symbol": "_split_blueprint_path", "line": 111});
    let o = tool.call_in(&sb, &args).await;
    assert!(
        o.success && o.text.contains("src/flask/helpers.py:617:5"),
        "{}",
        o.text
    );
    let out = sb
        .exec(&ExecRequest::shell("sed -i 's/^def _split_blueprint_path(/# moved\\ndef _split_blueprint_path(/' src/flask/helpers.py"))
        .await
        .unwrap();
    assert!(out.success(), "{out:?}");
    let o = tool.call_in(&sb, &args).await;
    assert!(
        o.text.contains("src/flask/helpers.py:618:5"),
        "edit not seen: {}",
        o.text
    );
    tool.session().shutdown().await;
    sb.teardown().await.unwrap();
}
