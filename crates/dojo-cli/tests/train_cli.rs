//! `dojo train` through the real binary, on dojo-train's tiny Llama fixture: a LoRA run with
//! `--merge` (adapter in peft's layout, merged weights, the HTML report with its curves),
//! `dojo train merge` giving the same weights, bad flags refused before training, and the
//! evaluation hook (`--eval-tasks`) rolling out base and trained model on one task of the
//! bundled benchmark through `dojo rollout`'s path into `eval.json` and the report.
//!
//! Built with the `engine` feature (the default). The evaluation part needs sandboxes and the
//! task's environment (PyPI, cached in `$DOJO_HOME`); without them it prints `SKIPPED:`, and
//! under `CI=true` fails instead.

#![cfg(feature = "engine")]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{ArrayRef, ListArray, RecordBatch};
use arrow::datatypes::Int32Type;
use parquet::arrow::ArrowWriter;
use serde_json::Value;

mod common;
use common::{BUNDLED, ci, dojo};

/// The fastest bundled task (~0.1 s of pytest).
const EVAL_TASK: &str = "gweis__isodate-1";

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../dojo-train/tests/fixtures/llama")
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn ok(args: &[&str]) -> String {
    let o = dojo(args);
    assert_eq!(o.status.code(), Some(0), "dojo {}", args.join(" "));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

type Row = (Vec<i32>, Vec<i32>);

/// `tokens.parquet` with rows of the fixture's word ids (3..64), the first 3 untrained.
fn write_tokens(path: &Path, n: usize) {
    let rows: Vec<Row> = (0..n as i32)
        .map(|r| {
            let ids: Vec<i32> = (0..12 + r % 5).map(|i| 3 + (i * 13 + r * 7) % 61).collect();
            let labels = ids
                .iter()
                .enumerate()
                .map(|(i, &x)| if i < 3 { -100 } else { x })
                .collect();
            (ids, labels)
        })
        .collect();
    let list = |f: &dyn Fn(&Row) -> Vec<i32>| -> ArrayRef {
        Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(
            rows.iter().map(|r| Some(f(r).into_iter().map(Some))),
        ))
    };
    let batch = RecordBatch::try_from_iter([
        ("input_ids", list(&|r| r.0.clone())),
        ("labels", list(&|r| r.1.clone())),
    ])
    .unwrap();
    let mut w =
        ArrowWriter::try_new(std::fs::File::create(path).unwrap(), batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

fn safetensors_names(path: &Path) -> Vec<String> {
    let bytes = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let mut names: Vec<String> = header
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| *k != "__metadata__")
        .cloned()
        .collect();
    names.sort();
    names
}

/// An absurd LoRA rank is refused with the allowed range, before the adapters are allocated
/// (999,999 used to allocate gigabytes first).
#[test]
fn absurd_lora_rank_is_refused_before_allocation() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("tokens.parquet");
    write_tokens(&data, 2);
    let out = tmp.path().join("run");
    let o = dojo(&[
        "train",
        "sft",
        "--data",
        p(&data),
        "--model",
        p(&fixture()),
        "--out",
        p(&out),
        "--max-steps",
        "1",
        "--lora-rank",
        "999999",
        "--quiet",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_ne!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("LoRA rank 999999 is out of range for this model"),
        "{err}"
    );
    assert!(err.contains("--lora-rank"), "{err}");
}

/// The memory plan runs before training: a budget the step cannot fit in is refused with the
/// figures and the settings to lower, nothing written; one that fits is reported.
#[test]
fn memory_plan_refuses_a_step_over_the_budget_and_reports_one_within() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("tokens.parquet");
    write_tokens(&data, 2);
    let out = tmp.path().join("run");
    let args = |mem: &'static str| {
        vec![
            "train".to_string(),
            "sft".into(),
            "--data".into(),
            p(&data).into(),
            "--model".into(),
            p(&fixture()).into(),
            "--out".into(),
            p(&out).into(),
            "--max-steps".into(),
            "1".into(),
            "--max-len".into(),
            "32".into(),
            "--max-memory".into(),
            mem.into(),
            "--quiet".into(),
        ]
    };
    let refuse = args("100M");
    let o = dojo(&refuse.iter().map(String::as_str).collect::<Vec<_>>());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_ne!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("not enough memory"), "{err}");
    assert!(err.contains("budget of 0.1 GiB (--max-memory)"), "{err}");
    assert!(!out.join("metrics.jsonl").exists(), "nothing trained");
    let bad = args("lots");
    let o = dojo(&bad.iter().map(String::as_str).collect::<Vec<_>>());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--max-memory \"lots\""), "{err}");
    let fits = args("8G");
    let stdout = ok(&fits.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        stdout.contains("memory plan: about 1.0 GiB a step of a 8.0 GiB budget\n"),
        "{stdout}"
    );
}

#[test]
fn lora_run_merges_reports_and_merge_command_agrees() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("tokens.parquet");
    write_tokens(&data, 8);
    let out = tmp.path().join("run");
    let stdout = ok(&[
        "train",
        "sft",
        "--data",
        p(&data),
        "--model",
        p(&fixture()),
        "--out",
        p(&out),
        "--max-steps",
        "4",
        "--lr",
        "0.05",
        "--max-len",
        "32",
        "--lora-rank",
        "2",
        "--lora-alpha",
        "4",
        "--lora-targets",
        "q,v,down",
        "--merge",
        "--quiet",
    ]);
    assert!(stdout.contains("adapter: "), "{stdout}");
    assert!(stdout.contains("merged model: "), "{stdout}");
    let cfg: Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("final/adapter_config.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(cfg["peft_type"], "LORA");
    assert_eq!(cfg["r"], 2);
    assert_eq!(
        cfg["target_modules"],
        serde_json::json!(["q_proj", "v_proj", "down_proj"])
    );
    let names = safetensors_names(&out.join("final/adapter_model.safetensors"));
    assert_eq!(names.len(), 2 * 3 * 2, "{names:?}");
    assert!(
        names.contains(
            &"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight".to_string()
        )
    );
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("LoRA r=2"));
    assert_eq!(html.matches("<svg").count(), 4);

    // `dojo train merge` (base from the adapter's base_model_name_or_path) = `--merge`.
    let merged = tmp.path().join("merged2");
    ok(&[
        "train",
        "merge",
        "--adapter",
        p(&out.join("final")),
        "--out",
        p(&merged),
    ]);
    assert_eq!(
        std::fs::read(merged.join("model.safetensors")).unwrap(),
        std::fs::read(out.join("merged/model.safetensors")).unwrap()
    );
    assert!(merged.join("config.json").is_file() && merged.join("tokenizer.json").is_file());

    // Bad flags fail before training, naming the flag.
    let o = dojo(&[
        "train",
        "sft",
        "--data",
        p(&data),
        "--model",
        p(&fixture()),
        "--out",
        p(&tmp.path().join("bad")),
        "--lora-rank",
        "2",
        "--lora-targets",
        "q,attn",
    ]);
    assert_ne!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown module \"attn\""));
    let o = dojo(&[
        "train",
        "sft",
        "--data",
        p(&data),
        "--model",
        p(&fixture()),
        "--out",
        p(&tmp.path().join("bad2")),
        "--eval-tasks",
        p(&tmp.path().join("missing.jsonl")),
    ]);
    assert_ne!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--eval-tasks"));
    assert!(!tmp.path().join("bad2").exists(), "nothing trained");
}

/// Sandboxes work and the evaluation task's tree and environment can be prepared.
fn sandbox_ready() -> Result<(), String> {
    if !dojo_sandbox::doctor::namespaces_usable() {
        return Err("user/mount/pid/net namespaces unavailable".into());
    }
    let tasks = dojo_task::load_tasks(Path::new(BUNDLED)).map_err(|e| e.to_string())?;
    let reg = dojo_task::EnvRegistry::embedded().map_err(|e| e.to_string())?;
    let t = tasks
        .iter()
        .find(|t| t.instance_id == EVAL_TASK)
        .ok_or_else(|| format!("{EVAL_TASK} not in the bundled benchmark"))?;
    let env = reg.resolve(t).map_err(|e| e.to_string())?;
    dojo_task::prepare(t, &env, &Default::default()).map_err(|e| {
        format!("cannot prepare {EVAL_TASK} (offline, or uv missing: scripts/setup-tools.sh): {e}")
    })?;
    Ok(())
}

#[test]
fn eval_hook_rolls_out_base_and_trained_and_reports_both() {
    if let Err(reason) = sandbox_ready() {
        assert!(!ci(), "CI=true: {reason}");
        println!("SKIPPED: {reason}");
        return;
    }
    // Under the target directory: sandboxes do not see /tmp.
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    // The tiny fixture with room for an agent prompt (its word-level tokenizer maps the prompt
    // to unknown-word ids; it will not fix the bug, which is not what this test is about).
    let model = tmp.path().join("model");
    std::fs::create_dir_all(&model).unwrap();
    for f in std::fs::read_dir(fixture()).unwrap() {
        let f = f.unwrap();
        if f.path().is_file() {
            std::fs::copy(f.path(), model.join(f.file_name())).unwrap();
        }
    }
    let cfg_path = model.join("config.json");
    let mut cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(&cfg_path).unwrap()).unwrap();
    cfg["max_position_embeddings"] = 32768.into();
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();
    let data = tmp.path().join("tokens.parquet");
    write_tokens(&data, 4);
    let out = tmp.path().join("run");
    let o = dojo(&[
        "train",
        "sft",
        "--data",
        p(&data),
        "--model",
        p(&model),
        "--out",
        p(&out),
        "--max-steps",
        "2",
        "--max-len",
        "32",
        "--quiet",
        "--eval-tasks",
        BUNDLED,
        "--eval-instance",
        EVAL_TASK,
        "--eval-max-steps",
        "2",
        "--eval-max-tokens",
        "6",
    ]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("eval base: resolved 0/1"), "{stdout}");
    assert!(stdout.contains("eval trained: resolved 0/1"), "{stdout}");
    let eval: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("eval.json")).unwrap()).unwrap();
    assert_eq!(eval["schema_version"], 1);
    assert_eq!(eval["n_tasks"], 1);
    let models = eval["models"].as_array().unwrap();
    assert_eq!(models.len(), 2);
    for (m, label) in models.iter().zip(["base", "trained"]) {
        assert_eq!(m["label"], label);
        assert_eq!(m["n"], 1, "graded, not an infrastructure failure: {m}");
        assert_eq!(m["infra_errors"], 0);
        assert!(m["turns"].as_u64().unwrap() >= 1, "{m}");
        let (lo, hi) = (
            m["ci95_low"].as_f64().unwrap(),
            m["ci95_high"].as_f64().unwrap(),
        );
        assert!(
            lo == 0.0 && (hi - 0.7935).abs() < 1e-3,
            "Wilson 0/1: {lo} {hi}"
        );
        // The rollout directories are `dojo rollout`'s own.
        let run = out.join("eval").join(label);
        assert!(run.join("trajectories.jsonl").is_file() && run.join("summary.json").is_file());
    }
    assert_eq!(models[1]["model"], p(&out.join("final")));
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("Evaluation: base vs trained"));
    assert!(html.contains("0/1"));
}
