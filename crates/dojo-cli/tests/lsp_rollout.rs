//! `dojo rollout` with the language-server tool on (`tool_set = "swe-master+lsp"`): the server
//! (ty, installed on first use into the shared tools directory) runs inside the rollout's
//! sandbox and answers the agent; the rollout resolves with no infrastructure event.
//!
//! A gold-replay run records a real trajectory; an `lsp_tool` call is spliced into its assistant
//! turns and the `replay` policy plays it back through the real tools.

use std::path::Path;

use serde_json::{Value, json};

mod common;
use common::{BUNDLED, ci, dojo, scratch};

const TASK: &str = "pytoolz__toolz-1";

/// `dojo rollout` of [`TASK`] with `policy` (a TOML file) into `out`; returns its trajectory.
fn rollout(policy: &Path, out: &Path) -> Value {
    let o = dojo(&[
        "rollout",
        "--tasks",
        BUNDLED,
        "--instance",
        TASK,
        "--policy",
        policy.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(
        o.status.success(),
        "rollout with {} failed",
        policy.display()
    );
    trajectory(out)
}

fn trajectory(dir: &Path) -> Value {
    let text = std::fs::read_to_string(dir.join("trajectories.jsonl")).expect("trajectories");
    serde_json::from_str(text.lines().next().expect("one trajectory")).expect("JSON")
}

#[test]
fn rollout_with_lsp_tool_in_the_sandbox() {
    let doctor = dojo(&["sandbox", "doctor", "--json"]);
    let report: Value = serde_json::from_slice(&doctor.stdout).unwrap_or_default();
    if report["backend"].as_str() != Some("namespace") {
        assert!(!ci(), "namespace sandbox unavailable under CI");
        println!("SKIPPED: the namespace sandbox is unavailable here");
        return;
    }
    let scratch = scratch("lsp-rollout");
    let tmp = scratch.path();
    let gold_policy = tmp.join("gold.toml");
    std::fs::write(
        &gold_policy,
        "kind = \"gold-replay\"\n\n[agent]\ntool_set = \"swe-master+lsp\"\n",
    )
    .unwrap();
    let mut t = rollout(&gold_policy, &tmp.join("gold"));
    let offered: Vec<&str> = t["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["function"]["name"].as_str())
        .collect();
    assert!(offered.contains(&"lsp_tool"), "offered: {offered:?}");

    // Ask the server for the symbol right after the agent's first turn.
    let messages = t["messages"].as_array_mut().unwrap();
    let first = messages
        .iter()
        .position(|m| m["role"] == "assistant")
        .unwrap();
    messages.insert(
        first + 1,
        json!({"role": "assistant", "content": "Ask the language server.", "tool_calls": [{
            "id": "call_lsp_0", "type": "function", "function": {"name": "lsp_tool",
            "arguments": "{\"command\": \"get_workspace_symbols\", \"query\": \"get_in\"}"}}]}),
    );
    let replay_file = tmp.join("replay.jsonl");
    std::fs::write(&replay_file, format!("{t}\n")).unwrap();
    let replay_policy = tmp.join("replay.toml");
    std::fs::write(
        &replay_policy,
        format!(
            "kind = \"replay\"\nfile = {:?}\n\n[agent]\ntool_set = \"swe-master+lsp\"\n",
            replay_file.to_str().unwrap()
        ),
    )
    .unwrap();
    let t = rollout(&replay_policy, &tmp.join("replay"));
    assert_eq!(t["stop_reason"], "submitted", "{}", t["stop_reason"]);
    assert_eq!(t["infra_failure"], false);
    assert_eq!(t["resolved"], true);
    let answer = t["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["tool_call_id"] == "call_lsp_0")
        .and_then(|m| m["content"].as_str())
        .expect("the lsp_tool call's observation");
    assert!(answer.contains("[status_code]: success"), "{answer}");
    assert!(answer.contains("toolz/dicttoolz.py:"), "{answer}");
    assert!(answer.contains("get_in (Function)"), "{answer}");
    assert!(!answer.contains("not visible"), "{answer}");
}
