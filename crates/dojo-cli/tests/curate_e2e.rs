//! End to end through the real `dojo` binary: `dojo rollout` (the `gold-replay` policy on two of
//! the bundled benchmark's fastest tasks, and — built with the `engine` feature — the embedded
//! default model on one task, 2 steps, a few tokens per turn) → `dojo curate` in every export
//! format → the Python `datasets` library loads every file with the expected columns and row
//! counts; the token export's `input_ids`/`labels`/`assistant_masks` agree in length, and the
//! messages Parquet's tool-call arguments are the JSONL's objects.
//!
//! Needs the sandbox's kernel features, the tasks' sources and environments (PyPI, cached in
//! `$DOJO_HOME`), `target/pytools` with `datasets` (`source scripts/setup-tools.sh`) and the
//! default model (fetched on first use). Without them it prints `SKIPPED: <reason>`; under
//! `CI=true` a missing piece fails instead.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

mod common;
use common::{BUNDLED, ci, dojo, pytools};

/// Two of the fastest bundled suites (~0.1 s of pytest each).
const GOLD_TASKS: [&str; 2] = ["gweis__isodate-1", "tkem__cachetools-2"];
/// The embedded model's task: shares its tree and environment with a gold one.
const MODEL_TASK: &str = "gweis__isodate-1";

fn ok(args: &[&str]) -> String {
    let o = dojo(args);
    assert_eq!(o.status.code(), Some(0), "dojo {}", args.join(" "));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn skip(reason: &str) {
    assert!(!ci(), "CI=true: {reason}");
    println!("SKIPPED: {reason}");
}

/// Sandboxes work and the tasks' trees and environments can be prepared; `Err` = why not.
fn sandbox_ready() -> Result<(), String> {
    if !dojo_sandbox::doctor::namespaces_usable() {
        return Err("user/mount/pid/net namespaces unavailable".into());
    }
    let tasks = dojo_task::load_tasks(Path::new(BUNDLED)).map_err(|e| e.to_string())?;
    let reg = dojo_task::EnvRegistry::embedded().map_err(|e| e.to_string())?;
    for id in GOLD_TASKS {
        let t = tasks
            .iter()
            .find(|t| t.instance_id == id)
            .ok_or_else(|| format!("{id} not in the bundled benchmark"))?;
        let env = reg.resolve(t).map_err(|e| e.to_string())?;
        dojo_task::prepare(t, &env, &Default::default()).map_err(|e| {
            format!("cannot prepare {id} (offline, or uv missing: scripts/setup-tools.sh): {e}")
        })?;
    }
    Ok(())
}

/// Python with `datasets`; `Err` = why not.
fn python() -> Result<PathBuf, String> {
    let py = pytools().join("bin/python");
    let has = Command::new(&py)
        .args(["-c", "import datasets, pyarrow"])
        .status()
        .is_ok_and(|s| s.success());
    if has {
        Ok(py)
    } else {
        Err(format!(
            "{} with `datasets` not found (scripts/setup-tools.sh)",
            py.display()
        ))
    }
}

/// A fresh scratch directory under cargo's per-target temp dir.
fn scratch(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("curate_e2e-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn trajectories(run: &Path) -> Vec<Value> {
    std::fs::read_to_string(run.join("trajectories.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// The embedded default model on one task: 2 steps of at most 24 tokens. `None` when this binary
/// has no engine or the model cannot be fetched (outside CI).
fn embedded_rollout(dir: &Path) -> Option<PathBuf> {
    if !cfg!(feature = "engine") {
        println!("SKIPPED (embedded part): built without the `engine` feature");
        return None;
    }
    if let Err(e) = dojo_tokenizer::default_model_path() {
        skip(&format!("default model unavailable: {e}"));
        return None;
    }
    let policy = dir.join("embedded.toml");
    std::fs::write(
        &policy,
        "kind = \"embedded\"\nname = \"embedded:smollm2-135m\"\nllm_concurrency = 1\n\
         [sampling]\ntemperature = 0.0\nmax_tokens = 24\n\
         [agent]\naction_format = \"native\"\ntool_set = \"r2e\"\n",
    )
    .unwrap();
    let run = dir.join("embedded");
    ok(&[
        "rollout",
        "--tasks",
        BUNDLED,
        "--policy",
        p(&policy),
        "--out",
        p(&run),
        "--instance",
        MODEL_TASK,
        "--max-steps",
        "2",
        "--workers",
        "1",
    ]);
    let t = trajectories(&run);
    assert_eq!(t.len(), 1);
    assert_eq!(
        t[0]["infra_failure"], false,
        "the embedded rollout hit an infrastructure error: {}",
        t[0]["stop_reason"]
    );
    assert!(
        t[0]["messages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["role"] == "assistant"),
        "no assistant turn recorded"
    );
    Some(run)
}

/// Loads every export in each directory with `datasets`: rows, columns, and the checks the
/// trainers rely on.
const LOAD: &str = r#"
import json, sys, os, datasets
import pyarrow.parquet as pq
def args_of(rows):
    return [c["function"]["arguments"] for r in rows for m in r["messages"] for c in (m.get("tool_calls") or [])]
def drop_none(d):
    return {k: v for k, v in d.items() if v is not None}
res = {}
for out in sys.argv[1:]:
    r = {}
    for path, kind in [("tokens.parquet", "parquet"), ("messages.parquet", "parquet"),
                       ("messages.jsonl", "json"), ("sharegpt.jsonl", "json")]:
        f = os.path.join(out, path)
        if not os.path.exists(f):
            continue
        ds = datasets.load_dataset(kind, data_files=f, split="train")
        e = {"rows": ds.num_rows, "columns": sorted(ds.column_names)}
        if path == "tokens.parquet":
            e["aligned"] = all(len(x["input_ids"]) == len(x["labels"]) == len(x["assistant_masks"]) == x["n_tokens"] for x in ds)
            e["labels_ok"] = all(l == (i if m else -100) for x in ds for i, l, m in zip(x["input_ids"], x["labels"], x["assistant_masks"]))
            e["trained"] = all(x["n_trained"] > 0 for x in ds)
            e["schema_version"] = pq.read_metadata(f).metadata[b"dojo.schema_version"].decode()
        if path == "messages.parquet":
            args = args_of(ds)
            raw = args_of([json.loads(l) for l in open(os.path.join(out, "messages.jsonl"))]) if os.path.exists(os.path.join(out, "messages.jsonl")) else None
            e["n_calls"] = len(args)
            e["dict_args"] = all(isinstance(a, dict) for a in args)
            e["args_match_jsonl"] = raw is not None and [drop_none(a) for a in args] == raw
        r[path] = e
    res[out] = r
print(json.dumps(res))
"#;

#[test]
fn rollouts_to_curated_exports_that_datasets_loads() {
    if let Err(reason) = sandbox_ready() {
        return skip(&reason);
    }
    let py = match python() {
        Ok(p) => p,
        Err(reason) => return skip(&reason),
    };
    let dir = scratch("run");
    let gold = dir.join("gold");
    let mut args = vec![
        "rollout",
        "--tasks",
        BUNDLED,
        "--policy",
        "gold-replay",
        "--out",
        p(&gold),
    ];
    for id in GOLD_TASKS {
        args.extend(["--instance", id]);
    }
    ok(&args);
    let t = trajectories(&gold);
    assert_eq!(t.len(), 2);
    assert!(
        t.iter().all(|t| t["resolved"] == true),
        "gold-replay must resolve"
    );
    let embedded = embedded_rollout(&dir);
    let n_model = usize::from(embedded.is_some());
    let mut inputs = vec![p(&gold)];
    if let Some(e) = &embedded {
        inputs.push(p(e));
    }

    // Default filters: every gold task always passes, so the difficulty filter drops it; with the
    // model's (unresolved) rollout its task is mixed, and the format filter drops the model's.
    let out = dir.join("default-filters");
    let mut args = vec!["curate", "--rollouts"];
    args.extend(&inputs);
    args.extend(["--out", p(&out), "--format", "messages"]);
    let s = ok(&args);
    let expect = if n_model == 1 {
        "tasks: 0 always fail, 1 always pass, 1 mixed"
    } else {
        "tasks: 0 always fail, 2 always pass, 0 mixed"
    };
    assert!(s.contains(expect), "{s}");
    assert!(s.contains(&format!("kept {n_model} trajectories")), "{s}");
    // SmolLM2's template has no tool support: `auto` writes the calls into the text.
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["messages_style"], "inline", "{manifest}");

    // Each export format on its own; dedup and cap only, so the model's rollout is kept too.
    let mut outs = Vec::new();
    for format in ["parquet", "messages", "sharegpt"] {
        let out = dir.join(format!("out-{format}"));
        let mut args = vec!["curate", "--rollouts"];
        args.extend(&inputs);
        args.extend([
            "--out",
            p(&out),
            "--filters",
            "dedup,cap",
            "--format",
            format,
            // The OpenAI shape, whose tool-call arguments the checks below read.
            "--messages-style",
            "native",
        ]);
        let s = ok(&args);
        assert!(
            s.contains(&format!("kept {} trajectories", 2 + n_model)),
            "{format}: {s}"
        );
        let manifest: Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("manifest.json")).unwrap())
                .unwrap();
        // Nothing dropped silently: the model's rollout is not refused for its tokens.
        assert_eq!(manifest["samples"], 2 + n_model, "{format}: {manifest}");
        assert!(
            manifest["problem_counts"]
                .as_object()
                .is_none_or(|c| !c.contains_key("tokenizer_mismatch")),
            "{manifest}"
        );
        // The report opens standalone: its three charts inline, nothing fetched; its only links
        // are to the kept trajectories' pages written beside it.
        let html = std::fs::read_to_string(out.join("report.html")).unwrap();
        assert_eq!(html.matches("<svg").count(), 3, "{html}");
        for external in ["src=", "<link", "<script", "@import", "url("] {
            assert!(!html.contains(external), "report.html has {external:?}");
        }
        let links: Vec<&str> = html
            .split("href=\"")
            .skip(1)
            .filter_map(|rest| rest.split('"').next())
            .collect();
        assert_eq!(links.len(), 2 + n_model, "{format}: {links:?}");
        for link in links {
            assert!(link.starts_with("trajectories/"), "{link}");
            assert!(out.join(link).exists(), "{link}");
        }
        outs.push((format, out, manifest));
    }

    let mut cmd = Command::new(&py);
    cmd.args(["-c", &common::py_exit_after(LOAD)]);
    for (_, out, _) in &outs {
        cmd.arg(out);
    }
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    let meta = [
        "task_id",
        "traj_id",
        "sample",
        "part",
        "source",
        "reward",
        "num_turns",
    ];
    let cols = |extra: &[&str]| -> Value {
        let mut c: Vec<&str> = meta.iter().chain(extra).copied().collect();
        c.sort_unstable();
        json!(c)
    };
    let rows = 2 + n_model;
    for (format, out, manifest) in &outs {
        let got = &r[p(out)];
        match *format {
            "parquet" => {
                let files: Vec<&String> = got.as_object().unwrap().keys().collect();
                assert_eq!(files, ["tokens.parquet"], "{got}");
                let tk = &got["tokens.parquet"];
                assert_eq!(tk["rows"], rows, "{got}");
                assert_eq!(
                    tk["columns"],
                    cols(&[
                        "input_ids",
                        "labels",
                        "assistant_masks",
                        "n_tokens",
                        "n_trained",
                        "tokenizer_sha",
                        "template_sha"
                    ])
                );
                for k in ["aligned", "labels_ok", "trained"] {
                    assert_eq!(tk[k], true, "tokens.parquet {k}: {got}");
                }
                assert_eq!(tk["schema_version"], "3");
            }
            "messages" => {
                for f in ["messages.parquet", "messages.jsonl"] {
                    assert_eq!(got[f]["rows"], rows, "{f}: {got}");
                    assert_eq!(got[f]["columns"], cols(&["messages", "tools"]), "{f}");
                }
                let mp = &got["messages.parquet"];
                assert!(mp["n_calls"].as_u64().unwrap() >= 8, "{got}");
                assert_eq!(mp["dict_args"], true, "{got}");
                assert_eq!(mp["args_match_jsonl"], true, "{got}");
            }
            "sharegpt" => {
                // A conversation LLaMA-Factory's alternation cannot hold is counted, not lost.
                let bad = manifest["problem_counts"]["sharegpt_unconvertible"]
                    .as_u64()
                    .unwrap_or(0);
                let sg = &got["sharegpt.jsonl"];
                assert_eq!(sg["rows"], rows as u64 - bad, "{got}");
                assert!(sg["rows"].as_u64().unwrap() >= 2);
                assert_eq!(sg["columns"], cols(&["conversations", "system", "tools"]));
            }
            _ => unreachable!(),
        }
    }
}
