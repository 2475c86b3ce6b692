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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ty_in_a_sandbox_follows_the_rollouts_files() {
    if !dojo_sandbox::doctor::namespaces_usable() {
        skip("user/mount/pid/net namespaces or overlayfs unavailable");
        return;
    }
    // The sandbox hides $DOJO_HOME and has a private /tmp: the tools must live elsewhere,
    // world-readable (as the environment layer arranges in production).
    // SAFETY: set before any thread of this test binary reads the environment.
    unsafe { std::env::set_var("DOJO_TOOLS", "/var/tmp/dojo-lsp-test-tools") };
    let Some((_g, root)) = unpack(&FLASK) else {
        return;
    };
    let pristine = PristineStore::open()
        .unwrap()
        .build(&Source::Dir { path: root.clone() })
        .unwrap();
    let sb = Arc::new(
        Sandbox::create(&pristine, None, &SandboxOptions::default())
            .await
            .unwrap(),
    );
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
