//! End to end through the real `dojo` binary, real sandboxes and grading: `dojo rollout` twice on
//! two of the bundled benchmark's fastest tasks, 2 samples each — gold-replay (resolves) and a
//! replay of only its final `submit` (an empty patch: unresolved) — pooled by `dojo select` with
//! every selector (majority must beat random: empty patches lose), `dojo eval` grades the chosen
//! predictions as resolved, and `dojo curate --verifier` turns the pool into balanced YES/NO
//! judgement samples. Then a third run whose agents also write a reproduction script (the task's
//! upstream test, run on a copy of the workspace): the `tests` selector runs those scripts on
//! every candidate in sandboxes and the `hybrid` selector fits, saves and reloads its weights;
//! and the same candidates as SWE-bench predictions files, graded by `dojo select --predictions`.
//! Also the refusals: a run still being written, an unknown selector.
//!
//! Needs the sandbox's kernel features and the tasks' sources and environments (PyPI, cached in
//! `$DOJO_HOME`); without them it prints `SKIPPED: <reason>` (under `CI=true` a missing kernel
//! feature fails).

use std::path::Path;

use serde_json::Value;

mod common;
use common::{BUNDLED, bundled_ready, dojo, scratch};

const TASKS: [&str; 2] = ["gweis__isodate-1", "tkem__cachetools-2"];

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn rollouts_to_selected_predictions_that_eval_resolves() {
    if let Err(reason) = bundled_ready(&TASKS) {
        println!("SKIPPED: {reason}");
        return;
    }
    let dir = scratch("select");
    let run = dir.path().join("run");
    let mut args = vec!["rollout", "--tasks", BUNDLED, "--policy", "gold-replay"];
    args.extend(["-n", "2", "--out", p(&run)]);
    for id in TASKS {
        args.extend(["--instance", id]);
    }
    assert_eq!(dojo(&args).status.code(), Some(0));

    // The same agents, replayed up to their first turn and then straight to `submit`.
    let submit_only = dir.path().join("submit-only.jsonl");
    let mut lines = String::new();
    for line in std::fs::read_to_string(run.join("trajectories.jsonl"))
        .unwrap()
        .lines()
    {
        let mut t: Value = serde_json::from_str(line).unwrap();
        let msgs = t["messages"].as_array().unwrap().clone();
        let submit = msgs
            .iter()
            .rfind(|m| m["role"] == "assistant")
            .unwrap()
            .clone();
        t["messages"] = Value::Array(vec![msgs[0].clone(), msgs[1].clone(), submit]);
        lines.push_str(&t.to_string());
        lines.push('\n');
    }
    std::fs::write(&submit_only, lines).unwrap();
    let empty = dir.path().join("empty");
    let policy = format!("replay:{}", p(&submit_only));
    let mut args = vec!["rollout", "--tasks", BUNDLED, "--policy", &policy];
    args.extend(["-n", "2", "--out", p(&empty)]);
    for id in TASKS {
        args.extend(["--instance", id]);
    }
    assert_eq!(dojo(&args).status.code(), Some(0));

    let out = dir.path().join("sel");
    let o = dojo(&[
        "select",
        "--rollouts",
        p(&run),
        p(&empty),
        "--selector",
        "all",
        "--out",
        p(&out),
    ]);
    assert_eq!(o.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("2 tasks, 8 candidates (k = 4"), "{stdout}");
    let sel: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("selection.json")).unwrap())
            .unwrap();
    assert_eq!(sel["schema_version"], 2);
    assert_eq!(sel["tasks"], 2);
    assert_eq!(sel["pass_at_k"][0]["mean"], 0.5);
    assert_eq!(sel["notes"][0], "verifier: not run (no --verifier given)");
    let best_at = |name: &str, k: usize| {
        let s = sel["selectors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .unwrap();
        s["best_at_k"][k - 1]["mean"].as_f64().unwrap()
    };
    assert_eq!(best_at("random", 4), 0.5);
    assert_eq!(best_at("oracle", 4), 1.0);
    // The empty patches lose to any change: majority picks a gold patch whenever it sees one.
    assert_eq!(best_at("majority", 4), 1.0);

    // Verifier data from the same pool: 2 successes and 2 failures per task, balanced.
    let cur = dir.path().join("verifier-data");
    let o = dojo(&[
        "curate",
        "--rollouts",
        p(&run),
        p(&empty),
        "--verifier",
        "--format",
        "parquet,messages",
        "--out",
        p(&cur),
    ]);
    assert_eq!(o.status.code(), Some(0));
    let rows: Vec<Value> = std::fs::read_to_string(cur.join("messages.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 8);
    let answers: Vec<&str> = rows
        .iter()
        .map(|r| {
            r["messages"].as_array().unwrap().last().unwrap()["content"]
                .as_str()
                .unwrap()
        })
        .collect();
    let yes = answers.iter().filter(|a| a.contains("YES")).count();
    assert_eq!((yes, answers.len() - yes), (4, 4));
    assert!(cur.join("tokens.parquet").exists());
    let report = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(report.contains("Choices of majority") && report.contains("gweis__isodate-1"));

    // The chosen patches are real predictions: `dojo eval` resolves both.
    let graded = dir.path().join("eval");
    let o = dojo(&[
        "eval",
        "--tasks",
        BUNDLED,
        "--predictions",
        p(&out.join("predictions.majority.jsonl")),
        "--out",
        p(&graded),
        "--quiet",
    ]);
    assert_eq!(o.status.code(), Some(0));
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(graded.join("report.json")).unwrap())
            .unwrap();
    assert_eq!(report["resolved_instances"], 2, "{report}");

    // Agents that also write a reproduction script: the task's upstream test patch applied to a
    // copy of the workspace, its FAIL_TO_PASS tests run there.
    let tasks: Vec<Value> = std::fs::read_to_string(BUNDLED)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let repro_src = dir.path().join("repro.jsonl");
    let mut lines = String::new();
    for line in std::fs::read_to_string(run.join("trajectories.jsonl"))
        .unwrap()
        .lines()
    {
        let mut t: Value = serde_json::from_str(line).unwrap();
        let task = tasks
            .iter()
            .find(|x| x["instance_id"] == t["task_id"])
            .unwrap();
        let script = format!(
            "import os, shutil, subprocess, sys, tempfile\nTEST_PATCH = {}\nTESTS = {}\n\
             repo = os.path.join(tempfile.mkdtemp(), 'repo')\n\
             shutil.copytree('/testbed', repo, symlinks=True, ignore=shutil.ignore_patterns('.git'))\n\
             if subprocess.run(['git', 'apply', '-'], input=TEST_PATCH.encode(), cwd=repo).returncode:\n    sys.exit(3)\n\
             sys.exit(subprocess.call([sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', *TESTS], cwd=repo))\n",
            task["test_patch"], task["FAIL_TO_PASS"]
        );
        let create = serde_json::json!({
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "repro", "type": "function", "function": {
                "name": "str_replace_editor",
                "arguments": serde_json::json!({
                    "command": "create",
                    "path": "/testbed/reproduce_issue.py",
                    "file_text": script,
                }).to_string(),
            }}],
        });
        let msgs = t["messages"].as_array_mut().unwrap();
        let last = msgs.iter().rposition(|m| m["role"] == "assistant").unwrap();
        msgs.insert(last, create);
        lines.push_str(&t.to_string());
        lines.push('\n');
    }
    std::fs::write(&repro_src, lines).unwrap();
    let repro = dir.path().join("repro");
    let policy = format!("replay:{}", p(&repro_src));
    let mut args = vec!["rollout", "--tasks", BUNDLED, "--policy", &policy];
    args.extend(["-n", "2", "--out", p(&repro)]);
    for id in TASKS {
        args.extend(["--instance", id]);
    }
    assert_eq!(dojo(&args).status.code(), Some(0));
    let sel_tests = dir.path().join("sel-tests");
    let o = dojo(&[
        "select",
        "--rollouts",
        p(&empty),
        p(&repro),
        "--selector",
        "random,tests,hybrid",
        "--out",
        p(&sel_tests),
    ]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    // 2 scripts per task, each run on 4 candidates.
    assert!(
        stderr.contains(
            "tests: 4 agent-written test(s) in 2 of 2 tasks, 16 runs (8 passed), 0 infrastructure"
        ),
        "{stderr}"
    );
    let sel: Value =
        serde_json::from_str(&std::fs::read_to_string(sel_tests.join("selection.json")).unwrap())
            .unwrap();
    let best = |sel: &Value, name: &str| {
        let s = sel["selectors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .unwrap()
            .clone();
        s["best_at_k"][3]["mean"].as_f64().unwrap()
    };
    assert_eq!(best(&sel, "random"), 0.5);
    // The scripts fail on the empty patches and pass on the fixes that wrote them.
    assert_eq!(best(&sel, "tests"), 1.0);
    assert_eq!(best(&sel, "hybrid"), 1.0);
    let choice = &sel["selectors"][1]["choices"][0];
    assert_eq!(
        choice["candidates"].as_array().unwrap().len(),
        4,
        "{choice}"
    );
    assert!(sel["sequential"]["points"].as_array().unwrap().len() >= 5);
    let weights = sel_tests.join("hybrid.json");
    let w: Value = serde_json::from_str(&std::fs::read_to_string(&weights).unwrap()).unwrap();
    assert_eq!(w["features"], serde_json::json!(["majority", "tests"]));
    // Reloaded weights give the same choices.
    let again = dir.path().join("sel-again");
    let o = dojo(&[
        "select",
        "--rollouts",
        p(&empty),
        p(&repro),
        "--selector",
        "hybrid",
        "--hybrid-weights",
        p(&weights),
        "--out",
        p(&again),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let sel2: Value =
        serde_json::from_str(&std::fs::read_to_string(again.join("selection.json")).unwrap())
            .unwrap();
    assert_eq!(best(&sel2, "hybrid"), 1.0);

    // The same candidates as predictions files, one per sample, graded by dojo select.
    let mut files = Vec::new();
    for (i, src) in [&run, &empty].iter().enumerate() {
        let mut preds = String::new();
        for line in std::fs::read_to_string(src.join("trajectories.jsonl"))
            .unwrap()
            .lines()
        {
            let t: Value = serde_json::from_str(line).unwrap();
            if t["sample_index"] == 0 {
                let pred = serde_json::json!({
                    "instance_id": t["task_id"],
                    "model_name_or_path": format!("m{i}"),
                    "model_patch": t["patch"].as_str().unwrap_or(""),
                });
                preds.push_str(&format!("{pred}\n"));
            }
        }
        let f = dir.path().join(format!("preds{i}.jsonl"));
        std::fs::write(&f, preds).unwrap();
        files.push(f);
    }
    let sel_preds = dir.path().join("sel-preds");
    let o = dojo(&[
        "select",
        "--predictions",
        p(&files[0]),
        p(&files[1]),
        "--tasks",
        BUNDLED,
        "--selector",
        "oracle,random,majority",
        "--out",
        p(&sel_preds),
    ]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(stdout.contains("2 tasks, 4 candidates (k = 2"), "{stdout}");
    let sel: Value =
        serde_json::from_str(&std::fs::read_to_string(sel_preds.join("selection.json")).unwrap())
            .unwrap();
    let at2 = |name: &str| {
        sel["selectors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .unwrap()["best_at_k"][1]["mean"]
            .as_f64()
            .unwrap()
    };
    assert_eq!(
        (at2("oracle"), at2("random"), at2("majority")),
        (1.0, 0.5, 1.0)
    );
    assert_eq!(sel["sequential"]["without_steps"], 4);
    assert!(
        sel_preds
            .join("graded/p0/gweis__isodate-1/report.json")
            .exists()
    );

    // A run whose store is newer than its summary is still being written: refused by default.
    let store = run.join("trajectories.jsonl");
    let text = std::fs::read_to_string(&store).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(&store, text).unwrap();
    let o = dojo(&["select", "--rollouts", p(&run), "--out", p(&out)]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("still being written") && err.contains("--partial"),
        "{err}"
    );
    let o = dojo(&[
        "select",
        "--rollouts",
        p(&run),
        "--partial",
        "--out",
        p(&out),
    ]);
    assert_eq!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stderr).contains("partial view"));

    let o = dojo(&[
        "select",
        "--rollouts",
        p(&run),
        "--selector",
        "verifer",
        "--out",
        p(&out),
    ]);
    assert_ne!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown selector `verifer`"));
}
