//! `dojo rl` through the real binary: bad input fails before the first step with a message
//! naming what is wrong, and a real run (the tiny random Llama of dojo-train's fixtures on a
//! bundled task, in sandboxes, graded) goes through rollouts, shaping, metrics, checkpoints
//! and resume.

#![cfg(feature = "engine")]

use std::process::Output;

mod common;
use common::{BUNDLED, bundled_ready, chat_server, dojo, scratch, world_reply};

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const TINY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../dojo-train/tests/fixtures/llama"
);

fn rl(out: &std::path::Path, tasks: &str, extra: &[&str]) -> Output {
    let mut args = vec!["rl", "--tasks", tasks, "--out", out.to_str().unwrap()];
    if !extra.contains(&"--model") {
        args.extend(["--model", TINY]);
    }
    args.extend_from_slice(extra);
    dojo(&args)
}

/// A bundled task moved to a repository no environment spec covers (its sources still build).
fn envless_task(dir: &std::path::Path) -> std::path::PathBuf {
    let text = std::fs::read_to_string(BUNDLED).unwrap();
    let mut row: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(text.lines().next().unwrap()).unwrap();
    row.insert("repo".into(), "nobody/nothing".into());
    row.insert("instance_id".into(), "nobody__nothing-1".into());
    let tasks = dir.join("tasks.jsonl");
    std::fs::write(&tasks, serde_json::to_string(&row).unwrap() + "\n").unwrap();
    tasks
}

#[test]
fn bad_input_fails_before_the_first_step() {
    let dir = scratch("rl-bad");
    let out = dir.path().join("out");
    let o = rl(&out, BUNDLED, &["--group", "1"]);
    assert_ne!(o.status.code(), Some(0));
    assert!(
        stderr(&o).contains("group: must be at least 2"),
        "{}",
        stderr(&o)
    );

    let o = rl(&out, BUNDLED, &["--advantage", "ppo"]);
    assert!(
        stderr(&o).contains("expected loo, grpo or drgrpo"),
        "{}",
        stderr(&o)
    );

    let cfg = dir.path().join("rl.toml");
    std::fs::write(&cfg, "[loss]\nclip_hi = 0.3\n").unwrap();
    let o = rl(&out, BUNDLED, &["--config", cfg.to_str().unwrap()]);
    let e = stderr(&o);
    assert!(e.contains("rl.toml") && e.contains("clip_hi"), "{e}");

    // A task whose repository has no environment spec.
    let tasks = envless_task(dir.path());
    let o = rl(&out, tasks.to_str().unwrap(), &[]);
    let e = stderr(&o);
    assert!(
        e.contains("nobody__nothing-1") && e.contains("has no environment"),
        "{e}"
    );
    assert!(e.contains("--execution sim"), "{e}");
    // Simulated training needs a world model, and world options need a simulated mode.
    let o = rl(&out, tasks.to_str().unwrap(), &["--execution", "sim"]);
    let e = stderr(&o);
    assert!(e.contains("needs a world model"), "{e}");
    let o = rl(&out, BUNDLED, &["--world-model", "openai:w"]);
    let e = stderr(&o);
    assert!(e.contains("need --execution sim"), "{e}");
    let o = rl(&out, BUNDLED, &["--execution", "dream"]);
    assert!(stderr(&o).contains("dream"), "{}", stderr(&o));
    assert!(!out.join("metrics.jsonl").exists());
}

/// A task without an environment trains in `sim` mode: no environment is built, SWR (a scripted
/// loopback server here) gives the rewards, and the step completes.
#[test]
fn a_task_without_an_environment_trains_in_sim_mode() {
    let (url, _seen, _rt) = chat_server(world_reply);
    let dir = scratch("rl-sim");
    let out = dir.path().join("out");
    let tasks = envless_task(dir.path());
    if !dojo_sandbox::doctor::namespaces_usable() {
        assert!(
            !common::ci(),
            "CI=true: user/mount/pid/net namespaces unavailable"
        );
        eprintln!("SKIPPED: user/mount/pid/net namespaces unavailable");
        return;
    }
    let o = rl(
        &out,
        tasks.to_str().unwrap(),
        &[
            "--execution",
            "sim",
            "--world-model",
            "openai:world",
            "--world-base-url",
            &url,
            "--swr-samples",
            "2",
            // The current spellings (`--group` / `--max-steps` are aliases, used below).
            "--samples",
            "2",
            "--steps",
            "1",
            "--max-turns",
            "1",
            "--max-new-tokens",
            "4",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let metrics = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    let m: serde_json::Value = serde_json::from_str(metrics.lines().next().unwrap()).unwrap();
    assert_eq!(
        (m["step"].as_u64(), m["episodes"].as_u64()),
        (Some(1), Some(2))
    );
    // The rollouts ran simulated: no Python environment, the simulation log in each.
    let store =
        std::fs::read_to_string(out.join("rollouts/step-00000001/trajectories.jsonl")).unwrap();
    let trajs: Vec<serde_json::Value> = store
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(trajs.len(), 2, "{store}");
    for t in &trajs {
        assert!(t["environment"]["python_env"].is_null(), "{t}");
        assert_eq!(t["metadata"]["world"]["mode"], "sim", "{t}");
    }
}

#[test]
fn a_real_run_steps_checkpoints_and_resumes() {
    let id = "andialbrecht__sqlparse-1";
    if let Err(why) = bundled_ready(&[id]) {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let dir = scratch("rl-run");
    let out = dir.path().join("out");
    // The tiny model with room for the agent's prompt (its RoPE tables follow the config).
    let model = dir.path().join("model");
    std::fs::create_dir_all(&model).unwrap();
    for f in std::fs::read_dir(TINY).unwrap().flatten() {
        if f.path().is_file() {
            std::fs::copy(f.path(), model.join(f.file_name())).unwrap();
        }
    }
    let cfg = std::fs::read_to_string(model.join("config.json")).unwrap();
    std::fs::write(
        model.join("config.json"),
        cfg.replace(
            "\"max_position_embeddings\": 64",
            "\"max_position_embeddings\": 4096",
        ),
    )
    .unwrap();
    let args = [
        "--model",
        model.to_str().unwrap(),
        "--instance",
        id,
        "--group",
        "2",
        "--max-steps",
        "2",
        "--max-new-tokens",
        "8",
    ];
    let mut a = args.to_vec();
    a.extend(["--steps", "1"]);
    let o = rl(&out, BUNDLED, &a);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let metrics = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    let m: serde_json::Value = serde_json::from_str(metrics.lines().next().unwrap()).unwrap();
    assert_eq!(m["step"], 1);
    assert_eq!(m["episodes"], 2);
    // Two graded rollouts of the tiny model: nothing resolved, nothing masked, and both
    // episodes reached the update; every advantage is 0, so neither is run (its gradient is
    // exactly 0: `dojo_rl::update::policy_grads`) and the update says so.
    assert_eq!(m["masked_share"], 0.0, "{m}");
    assert_eq!(m["resolved_rate"], 0.0, "{m}");
    assert!(m["response_len_mean"].as_f64().unwrap() > 0.0, "{m}");
    let updates = m["updates"].as_array().unwrap();
    let sum = |k: &str| updates.iter().map(|u| u[k].as_u64().unwrap()).sum::<u64>();
    assert_eq!(
        (sum("samples"), sum("skipped_zero_advantage"), sum("tokens")),
        (2, 2, 0),
        "{m}"
    );
    // By default the group's episodes run at once and share the engine; its counters account
    // for every model call and every prompt token (prefilled, or taken from a cached or shared
    // prefix); the time split covers both episodes.
    let r = &m["rollout_report"];
    assert_eq!(r["workers"], 2, "{m}");
    let e = &r["engine"];
    let llm_calls: u64 =
        std::fs::read_to_string(out.join("rollouts/step-00000001/trajectories.jsonl"))
            .unwrap()
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["llm_calls"]
                    .as_u64()
                    .unwrap()
            })
            .sum();
    assert_eq!(e["requests"].as_u64(), Some(llm_calls), "{m}");
    assert_eq!(
        e["prefilled_tokens"].as_u64().unwrap() + e["reused_tokens"].as_u64().unwrap(),
        e["prompt_tokens"].as_u64().unwrap(),
        "{m}"
    );
    assert!(e["max_decode_batch"].as_u64().unwrap() >= 1, "{m}");
    let t = &m["rollout_time"];
    assert!(t["llm_s"].as_f64().unwrap() > 0.0, "{m}");
    assert!(
        t["episodes_s"].as_f64().unwrap() >= t["llm_s"].as_f64().unwrap(),
        "{m}"
    );
    assert!(out.join("checkpoint-00000001/model.safetensors").is_file());
    let report = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(report.contains("Time per step (s)"), "{report}");
    assert!(
        out.join("rollouts/step-00000001/trajectories.jsonl")
            .is_file()
    );
    // Resume and extend by one step.
    let mut a = args.to_vec();
    a.extend(["--steps", "2"]);
    let o = rl(&out, BUNDLED, &a);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("resumed from step 1"), "{}", stderr(&o));
    let metrics = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    assert_eq!(metrics.lines().count(), 2);
    // LoRA: the engine samples from the adapters folded into the weights; the checkpoint is
    // the adapter.
    let lora_out = dir.path().join("lora");
    let mut a = args.to_vec();
    a.extend(["--steps", "1", "--lora-rank", "2"]);
    let o = rl(&lora_out, BUNDLED, &a);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        lora_out
            .join("checkpoint-00000001/adapter_model.safetensors")
            .is_file()
    );
    // Another configuration in the same directory is refused.
    let mut a = args.to_vec();
    a.extend(["--steps", "3", "--advantage", "grpo"]);
    let o = rl(&out, BUNDLED, &a);
    let e = stderr(&o);
    assert!(
        e.contains("another configuration (config.advantage.estimator: \"loo\" -> \"grpo\")"),
        "{e}"
    );
}
