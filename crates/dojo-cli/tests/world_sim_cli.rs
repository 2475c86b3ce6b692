//! `dojo rollout --execution ... --world-model ...` through the real binary: a bundled task in
//! `sim` mode against a scripted OpenAI-compatible world model on loopback completes, prints the
//! drift section and writes `drift.json`; bad modes and a missing world model are clear errors.

mod common;

use common::{BUNDLED, chat_server, dojo, scratch, world_reply};

const TASK: &str = "pytest-dev__iniconfig-1";

#[test]
fn bad_env_mode_and_missing_world_model_are_clear_errors() {
    let dir = scratch("world-bad");
    let out_dir = dir.path().join("run");
    let out = dojo(&[
        "rollout",
        "--tasks",
        BUNDLED,
        "--policy",
        "gold-replay",
        "--out",
        out_dir.to_str().unwrap(),
        "--execution",
        "simulated",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("real, sim, hybrid, shadow"), "{err}");
    let out = dojo(&[
        "rollout",
        "--tasks",
        BUNDLED,
        "--instance",
        TASK,
        "--policy",
        "gold-replay",
        "--out",
        out_dir.to_str().unwrap(),
        "--execution",
        "sim",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs a world model"), "{err}");
}

#[test]
fn sim_rollout_through_the_binary_reports_drift() {
    if !dojo_sandbox::doctor::namespaces_usable() {
        assert!(!common::ci(), "CI=true: namespaces unavailable");
        println!("SKIPPED: user/mount/pid/net namespaces unavailable");
        return;
    }
    let (url, seen, _rt) = chat_server(world_reply);
    let dir = scratch("world-sim");
    let run = dir.path().join("run");
    let out = dojo(&[
        "rollout",
        "--tasks",
        BUNDLED,
        "--instance",
        TASK,
        "--policy",
        "gold-replay",
        "--out",
        run.to_str().unwrap(),
        "--execution",
        "sim",
        "--world-model",
        "openai:world",
        "--world-base-url",
        &url,
    ]);
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("## Simulation drift"), "{stdout}");
    assert!(
        stdout.contains("| SWR confusion (TP/FP/TN/FN) | 0/0/0/0 |"),
        "{stdout}"
    );
    assert!(run.join("drift.json").is_file());
    // One SWT call (the replay's test run) and one SWR call.
    assert_eq!(seen.lock().unwrap().len(), 2);
    let manifest = std::fs::read_to_string(run.join("run.json")).unwrap();
    assert!(manifest.contains("\"mode\": \"sim\""), "{manifest}");
}

/// A task without an environment, end to end: rolled out in `sim` mode, then selected by SWR,
/// which needs the task, its sources and the candidates (the test command from the simulation's
/// defaults). SWR is shown the test files as graded, as in its training records, and never the
/// gold patch.
#[test]
fn envless_tasks_roll_out_in_sim_and_are_selected_by_swr() {
    if !dojo_sandbox::doctor::namespaces_usable() {
        assert!(!common::ci(), "CI=true: namespaces unavailable");
        println!("SKIPPED: user/mount/pid/net namespaces unavailable");
        return;
    }
    let (url, seen, _rt) = chat_server(world_reply);
    let dir = scratch("world-envless");
    // A bundled task moved to a repository no environment spec covers (its sources still build).
    let text = std::fs::read_to_string(BUNDLED).unwrap();
    let row = text
        .lines()
        .find(|l| l.contains(TASK))
        .unwrap()
        .replace(TASK, "nobody__nothing-1")
        .replace(
            "\"repo\": \"pytest-dev/iniconfig\"",
            "\"repo\": \"nobody/nothing\"",
        );
    assert!(row.contains("nobody/nothing"), "{row}");
    let tasks = dir.path().join("tasks.jsonl");
    std::fs::write(&tasks, format!("{row}\n")).unwrap();
    let run = dir.path().join("run");
    let out = dojo(&[
        "rollout",
        "--tasks",
        tasks.to_str().unwrap(),
        "--policy",
        "gold-replay",
        "-n",
        "2",
        "--out",
        run.to_str().unwrap(),
        "--env-mode", // the old spelling of --execution, kept as an alias
        "sim",
        "--world-model",
        "openai:world",
        "--world-base-url",
        &url,
    ]);
    assert_eq!(out.status.code(), Some(0));
    let before = seen.lock().unwrap().len();
    let swr = dir.path().join("swr.toml");
    std::fs::write(
        &swr,
        format!("kind = \"openai\"\nmodel = \"swr\"\nbase_url = \"{url}\"\n"),
    )
    .unwrap();
    let sel = dir.path().join("sel");
    let out = dojo(&[
        "select",
        "--rollouts",
        run.to_str().unwrap(),
        "--selector",
        "swr",
        "--swr",
        swr.to_str().unwrap(),
        "--swr-samples",
        "2",
        "--out",
        sel.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let all = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    // Both candidates scored by SWR, two samples each.
    assert!(all.contains("2 candidates scored (2 samples each"), "{all}");
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), before + 4);
    let task: serde_json::Value = serde_json::from_str(&row).unwrap();
    let test_file = task["test_patch"]
        .as_str()
        .and_then(|p| p.strip_prefix("diff --git a/"))
        .and_then(|p| p.split(' ').next())
        .unwrap()
        .to_string();
    for req in &seen[before..] {
        let prompt = req["messages"].to_string();
        assert!(prompt.contains(&test_file), "no {test_file} in {prompt}");
        // The candidates replay the gold patch, so its text is there as the agent's; the
        // reference section must be empty.
        assert!(prompt.contains("No gold patch provided."), "{prompt}");
    }
}
