//! The optional `lsp_tool` (feature `lsp`) through the registry, with a real language server
//! (ty): over a host directory, and as a rollout gets it from its tool-set name
//! (`swe-master+lsp`): started on the first call inside the rollout's real sandbox.
#![cfg(feature = "lsp")]

use std::sync::Arc;
use std::time::Duration;

use dojo_agent::tools::LspToolAdapter;
use dojo_agent::{LocalWorkspace, ToolContext, ToolRegistry};
use serde_json::json;

/// Sandboxes hide $DOJO_HOME and /tmp: the tools directory must be elsewhere (as in production,
/// where the environment layer sets DOJO_TOOLS). Set once, before any test reads it.
fn tools_env() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    // SAFETY: every test calls this first; the Once orders the write before any read.
    ONCE.call_once(|| unsafe { std::env::set_var("DOJO_TOOLS", "/var/tmp/dojo-lsp-test-tools") });
}

fn skip(reason: &str) {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{reason} (CI=true: this must work in CI)");
    }
    eprintln!("SKIPPED: {reason}");
}

#[test]
fn tool_sets_take_the_lsp_option() {
    for (set, base) in [
        ("swe-master+lsp", "swe-master"),
        ("r2e+lsp:pyrefly", "r2e"),
        ("swe-master+lsp:basedpyright", "swe-master"),
        ("r2e+lsp:pyright", "r2e"),
    ] {
        let mut want = ToolRegistry::named(base).unwrap().names();
        want.push("lsp_tool".into());
        assert_eq!(ToolRegistry::named(set).unwrap().names(), want, "{set}");
    }
    assert!(ToolRegistry::named("r2e+lsp:jedi").is_none());
    assert!(ToolRegistry::named("nope+lsp").is_none());
}

/// The per-rollout tool needs the rollout's sandbox; a plain directory workspace gets a clear
/// infrastructure observation, and the agent goes on.
#[tokio::test]
async fn per_rollout_lsp_tool_without_a_sandbox_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let reg = ToolRegistry::named("swe-master+lsp:pyrefly").unwrap();
    let ws = LocalWorkspace::new(dir.path());
    let mut ctx = ToolContext::new(&ws, Duration::from_secs(60));
    let args = json!({"command": "get_workspace_symbols", "query": "x"});
    let out = reg
        .call(&mut ctx, "lsp_tool", args.as_object().unwrap())
        .await
        .unwrap();
    assert!(out.error, "{}", out.text);
    assert!(
        out.text
            .contains("inside the rollout's sandbox, and this workspace has none")
            && out.text.contains("use other tools meanwhile"),
        "{}",
        out.text
    );
    let note = out.infra_note.unwrap_or_default();
    assert!(note.starts_with("Workspace (pyrefly):"), "{note}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lsp_tool_from_the_tool_set_runs_in_the_rollouts_sandbox() {
    tools_env();
    if !dojo_sandbox::doctor::namespaces_usable() {
        return skip("user/mount/pid/net namespaces or overlayfs unavailable");
    }
    let src = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(src.path().join("calc")).unwrap();
    std::fs::write(src.path().join("calc/__init__.py"), "").unwrap();
    std::fs::write(
        src.path().join("calc/stats.py"),
        "def mean(xs):\n    return sum(xs) / len(xs)\n",
    )
    .unwrap();
    std::fs::write(
        src.path().join("main.py"),
        "from calc.stats import mean\n\nprint(mean([1, 2]))\n",
    )
    .unwrap();
    let pristine = dojo_sandbox::PristineStore::open()
        .unwrap()
        .build(&dojo_sandbox::Source::Dir {
            path: src.path().to_path_buf(),
        })
        .unwrap();
    let sb = dojo_sandbox::Sandbox::create(&pristine, None, &Default::default())
        .await
        .unwrap();
    let reg = ToolRegistry::named("swe-master+lsp").unwrap();
    let mut ctx = ToolContext::new(&sb, Duration::from_secs(60));
    let def = json!({"command": "get_definition", "file_path": "/testbed/main.py", "symbol": "mean", "line": 3});
    let out = reg
        .call(&mut ctx, "lsp_tool", def.as_object().unwrap())
        .await
        .unwrap();
    if out
        .infra_note
        .as_deref()
        .is_some_and(|n| n.contains("installing"))
    {
        return skip(&format!("cannot install ty: {}", out.text));
    }
    assert!(!out.error, "{}", out.text);
    assert!(
        out.text.contains("calc/stats.py:1:5 (function `mean`)"),
        "{}",
        out.text
    );

    // An edit by the agent's shell inside the sandbox; the same server sees it.
    let edit = json!({"command": "sed -i '1i # header' calc/stats.py"});
    let o = reg
        .call(&mut ctx, "execute_bash", edit.as_object().unwrap())
        .await
        .unwrap();
    assert!(!o.error, "{}", o.text);
    let out = reg
        .call(&mut ctx, "lsp_tool", def.as_object().unwrap())
        .await
        .unwrap();
    assert!(
        out.text.contains("calc/stats.py:2:5 (function `mean`)"),
        "{}",
        out.text
    );
    drop(ctx);
    sb.teardown().await.unwrap();
}

#[tokio::test]
async fn lsp_tool_answers_through_the_registry() {
    tools_env();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("calc.py"),
        "def mean(xs):\n    return sum(xs) / len(xs)\n\n\nprint(mean([1, 2]))\n",
    )
    .unwrap();
    let tool = match dojo_lsp::LspTool::host(dir.path(), dojo_lsp::ServerKind::Ty).await {
        Ok(t) => t,
        Err(e) if std::env::var("CI").as_deref() != Ok("true") => {
            eprintln!("SKIPPED: language server unavailable: {e}");
            return;
        }
        Err(e) => panic!("language server unavailable in CI: {e}"),
    };
    let mut reg = ToolRegistry::named("swe-master").unwrap();
    reg.register(Arc::new(LspToolAdapter::new(tool)));
    assert_eq!(
        reg.names(),
        ["str_replace_editor", "execute_bash", "submit", "lsp_tool"]
    );
    let ws = LocalWorkspace::new(dir.path());
    let mut ctx = ToolContext::new(&ws, Duration::from_secs(60));
    let args =
        json!({"command": "get_references", "file_path": "calc.py", "symbol": "mean", "line": 1});
    let out = reg
        .call(&mut ctx, "lsp_tool", args.as_object().unwrap())
        .await
        .unwrap();
    assert!(
        out.text
            .starts_with("Execution output of [lsp_tool]:\n[status_code]: success"),
        "{}",
        out.text
    );
    assert!(!out.error && out.infra_note.is_none(), "{out:?}");
    let args = json!({"command": "get_hover", "file_path": "nope.py", "symbol": "x", "line": 1});
    let out = reg
        .call(&mut ctx, "lsp_tool", args.as_object().unwrap())
        .await
        .unwrap();
    assert!(out.error, "{}", out.text);
}
