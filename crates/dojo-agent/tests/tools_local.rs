//! Tool semantics and observation formats, on a host directory standing in for `/testbed`
//! (`LocalWorkspace`). The shell-dependent parts (directory views, search) are covered against
//! the real sandbox in `sandbox_e2e.rs`.

use std::time::Duration;

use dojo_agent::{LocalWorkspace, ToolContext, ToolRegistry};
use serde_json::{Map, Value, json};

fn long_python() -> String {
    let mut s = String::from(
        "\"\"\"Statistics helpers.\"\"\"\nimport math\n\n\nclass Stats:\n    def __init__(self, values):\n        self.values = list(values)\n\n",
    );
    for i in 0..20 {
        s.push_str(&format!(
            "    def metric_{i}(self, scale=1):\n        total = 0\n        for v in self.values:\n            total += v * scale\n        return total / max(len(self.values), 1) + {i}\n\n"
        ));
    }
    s.push_str("\ndef mean(xs):\n    return sum(xs) / len(xs)\n");
    s
}

fn workspace() -> (tempfile::TempDir, LocalWorkspace) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("pkg")).unwrap();
    std::fs::write(dir.path().join("pkg/stats.py"), long_python()).unwrap();
    std::fs::write(
        dir.path().join("pkg/small.py"),
        "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("notes.cfg"), "x = 1\n").unwrap();
    let ws = LocalWorkspace::new(dir.path());
    (dir, ws)
}

fn args(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap()
}

async fn call(
    reg: &ToolRegistry,
    ctx: &mut ToolContext<'_>,
    name: &str,
    a: Value,
) -> dojo_agent::ToolOutput {
    reg.call(ctx, name, &args(a)).await.unwrap()
}

#[tokio::test]
async fn editor_view_modes() {
    let (_d, ws) = workspace();
    let reg = ToolRegistry::named("dojo").unwrap();
    let mut ctx = ToolContext::new(&ws, Duration::from_secs(30));
    let e = "str_replace_editor";
    let out = call(
        &reg,
        &mut ctx,
        e,
        json!({"command": "view", "path": "/testbed/pkg/small.py"}),
    )
    .await;
    insta::assert_snapshot!("view_small", out.text);
    let out = call(
        &reg,
        &mut ctx,
        e,
        json!({"command": "view", "path": "/testbed/pkg/stats.py"}),
    )
    .await;
    insta::assert_snapshot!("view_condensed", out.text);
    // A range always shows the real lines; text-format arguments arrive as strings.
    let out = call(
        &reg,
        &mut ctx,
        e,
        json!({"command": "view", "path": "/testbed/pkg/stats.py", "view_range": "[9, 14]"}),
    )
    .await;
    insta::assert_snapshot!("view_range", out.text);
    let out = call(
        &reg,
        &mut ctx,
        e,
        json!({"command": "view", "path": "/testbed/pkg/stats.py", "view_range": [90, 200]}),
    )
    .await;
    assert!(
        out.error && out.text.contains("Invalid view_range"),
        "{}",
        out.text
    );
    let out = call(
        &reg,
        &mut ctx,
        e,
        json!({"command": "view", "path": "/testbed/nope.py"}),
    )
    .await;
    assert!(
        out.error && out.text.contains("does not exist"),
        "{}",
        out.text
    );
    let out = call(
        &reg,
        &mut ctx,
        e,
        json!({"command": "view", "path": "pkg/small.py"}),
    )
    .await;
    assert!(
        out.error && out.text.contains("not an absolute path"),
        "{}",
        out.text
    );
    // SWE-Master's editor views only some file types; R2E's only .py.
    let sm = ToolRegistry::named("swe-master").unwrap();
    let out = call(
        &sm,
        &mut ctx,
        e,
        json!({"command": "view", "path": "/testbed/notes.cfg"}),
    )
    .await;
    assert!(
        out.error && out.text.contains(".py, .rst, .md, .txt"),
        "{}",
        out.text
    );
    let out = call(
        &sm,
        &mut ctx,
        e,
        json!({"command": "undo_edit", "path": "/testbed/notes.cfg"}),
    )
    .await;
    assert!(
        out.error && out.text.contains("Unrecognized command 'undo_edit'"),
        "{}",
        out.text
    );
    let r2e = ToolRegistry::named("r2e").unwrap();
    let out = call(
        &r2e,
        &mut ctx,
        "file_editor",
        json!({"command": "view", "path": "/testbed/pkg/stats.py", "concise": "false"}),
    )
    .await;
    assert!(!out.text.contains("eliding") && out.text.contains("metric_11"));
    let out = call(
        &r2e,
        &mut ctx,
        "file_editor",
        json!({"command": "view", "path": "/testbed/pkg/stats.py"}),
    )
    .await;
    assert!(out.text.contains("eliding"));
}

#[tokio::test]
async fn editor_edits_and_undo() {
    let (dir, ws) = workspace();
    let reg = ToolRegistry::named("dojo").unwrap();
    let mut ctx = ToolContext::new(&ws, Duration::from_secs(30));
    let e = "str_replace_editor";
    let p = "/testbed/pkg/small.py";

    let out = call(&reg, &mut ctx, e, json!({"command": "str_replace", "path": p, "old_str": "    return a", "new_str": "    return b"})).await;
    insta::assert_snapshot!("str_replace_multiple", out.text);
    let out = call(
        &reg,
        &mut ctx,
        e,
        json!({"command": "str_replace", "path": p, "old_str": "return a * b", "new_str": "x"}),
    )
    .await;
    insta::assert_snapshot!("str_replace_none", out.text);
    let out = call(&reg, &mut ctx, e, json!({"command": "str_replace", "path": p, "old_str": "    return a - b", "new_str": "    if b is None:\n        return a\n    return a - b"})).await;
    insta::assert_snapshot!("str_replace_ok", out.text);
    assert!(!out.error);
    let out = call(
        &reg,
        &mut ctx,
        e,
        json!({"command": "insert", "path": p, "insert_line": "0", "new_str": "import math"}),
    )
    .await;
    insta::assert_snapshot!("insert_top", out.text);
    let out = call(
        &reg,
        &mut ctx,
        e,
        json!({"command": "insert", "path": p, "insert_line": 99, "new_str": "x"}),
    )
    .await;
    assert!(out.error && out.text.contains("[0, 9]"), "{}", out.text);
    let out = call(
        &reg,
        &mut ctx,
        e,
        json!({"command": "insert", "path": p, "insert_line": "two", "new_str": "x"}),
    )
    .await;
    assert!(
        out.error && out.text.contains("must be an integer"),
        "{}",
        out.text
    );

    let read = || std::fs::read_to_string(dir.path().join("pkg/small.py")).unwrap();
    assert!(read().starts_with("import math\ndef add"));
    let out = call(
        &reg,
        &mut ctx,
        e,
        json!({"command": "undo_edit", "path": p}),
    )
    .await;
    assert!(out.text.contains("undone successfully"), "{}", out.text);
    assert!(read().starts_with("def add") && read().contains("if b is None"));
    call(
        &reg,
        &mut ctx,
        e,
        json!({"command": "undo_edit", "path": p}),
    )
    .await;
    assert_eq!(
        read(),
        "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
    );
    let out = call(
        &reg,
        &mut ctx,
        e,
        json!({"command": "undo_edit", "path": p}),
    )
    .await;
    assert!(
        out.error && out.text.contains("No edit history"),
        "{}",
        out.text
    );

    let out = call(
        &reg,
        &mut ctx,
        e,
        json!({"command": "create", "path": "/testbed/new/mod.py", "file_text": "X = 1\n"}),
    )
    .await;
    insta::assert_snapshot!("create_ok", out.text);
    let out = call(
        &reg,
        &mut ctx,
        e,
        json!({"command": "create", "path": "/testbed/new/mod.py", "file_text": "X = 2\n"}),
    )
    .await;
    assert!(
        out.error && out.text.contains("already exists"),
        "{}",
        out.text
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("new/mod.py")).unwrap(),
        "X = 1\n"
    );
    let out = call(
        &reg,
        &mut ctx,
        e,
        json!({"command": "create", "path": "/testbed/x.py"}),
    )
    .await;
    assert!(out.error && out.text.contains("file_text"), "{}", out.text);
}

#[tokio::test]
async fn bash_observations() {
    let (_d, ws) = workspace();
    let reg = ToolRegistry::named("dojo").unwrap();
    let mut ctx = ToolContext::new(&ws, Duration::from_secs(30));
    let out = call(
        &reg,
        &mut ctx,
        "execute_bash",
        json!({"command": "echo hello; echo oops >&2"}),
    )
    .await;
    insta::assert_snapshot!("bash_ok", out.text);
    assert_eq!(out.exit_code, Some(0));
    let out = call(
        &reg,
        &mut ctx,
        "execute_bash",
        json!({"command": "printf '\\033[31mred\\033[0m\\n'; exit 3"}),
    )
    .await;
    insta::assert_snapshot!("bash_fail", out.text);
    assert_eq!(out.exit_code, Some(3));
    let out = call(
        &reg,
        &mut ctx,
        "execute_bash",
        json!({"command": "seq 1 200"}),
    )
    .await;
    assert!(out.truncated);
    insta::assert_snapshot!("bash_truncated", out.text);
    let out = call(
        &reg,
        &mut ctx,
        "execute_bash",
        json!({"command": "git log --oneline"}),
    )
    .await;
    assert!(out.blocked);
    insta::assert_snapshot!("bash_blocked", out.text);
    let out = call(&reg, &mut ctx, "execute_bash", json!({"command": ""})).await;
    assert!(out.error);

    let mut short = ToolContext::new(&ws, Duration::from_millis(300));
    let out = call(
        &reg,
        &mut short,
        "execute_bash",
        json!({"command": "sleep 30"}),
    )
    .await;
    assert!(out.timed_out);
    assert!(
        out.text.starts_with("Exit code: -1\n") && out.text.contains("took too long"),
        "{}",
        out.text
    );

    let r2e = ToolRegistry::named("r2e").unwrap();
    let out = call(
        &r2e,
        &mut ctx,
        "execute_bash",
        json!({"cmd": "pwd >/dev/null && echo ok"}),
    )
    .await;
    assert!(out.text.contains("ok"));
    let out = call(
        &r2e,
        &mut ctx,
        "execute_bash",
        json!({"command": "echo wrong-name"}),
    )
    .await;
    assert!(
        out.blocked && out.text.contains("unknown parameter(s) command"),
        "{}",
        out.text
    );
    let out = call(&r2e, &mut ctx, "finish", json!({"command": "submit"})).await;
    assert!(out.submitted);
    let out = call(&r2e, &mut ctx, "no_such_tool", json!({})).await;
    assert!(
        out.blocked && out.text.contains("Unknown function 'no_such_tool'"),
        "{}",
        out.text
    );
}
