//! End to end, everything real: the bundled benchmark (`tasksets/mini/`, real PyPI sdists with
//! injected bugs), real sandboxes and Python environments, dojo-agent's real tools driven by the
//! `gold-replay` policy, real grading. Every task must resolve, with no infrastructure error; the
//! records must be complete; a second run of the same command must resume with nothing to do.
//!
//! `DOJO_E2E_INSTANCES=a,b` restricts the run (development only).

use std::path::PathBuf;

use dojo_rollout::agent_runner::DojoAgent;
use dojo_rollout::policy::PolicyConfig;
use dojo_rollout::run_dir::{RolloutOptions, make_backends, run_rollout};
use dojo_rollout::summary::Prediction;

fn repo_root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// uv builds the environments: from `DOJO_UV`, `DOJO_PYTOOLS` or PATH (scripts/setup-tools.sh).
fn have_uv() -> bool {
    if std::env::var_os("DOJO_UV").is_some() || std::env::var_os("DOJO_PYTOOLS").is_some() {
        return true;
    }
    let local = repo_root().join("target/pytools/bin");
    if local.join("uv").is_file() {
        // SAFETY: set before any thread of this test process reads the environment.
        unsafe {
            std::env::set_var("DOJO_PYTOOLS", repo_root().join("target/pytools"));
        }
        return true;
    }
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("uv").is_file()))
}

fn opts(out: PathBuf, instances: Vec<String>) -> RolloutOptions {
    let policy = PolicyConfig::parse("gold-replay").unwrap();
    RolloutOptions {
        shard: None,
        tasks_file: repo_root().join("tasksets/mini/tasks.jsonl"),
        instances,
        label: policy.label(),
        policy,
        samples: 1,
        out,
        workers: 2,
        export_predictions: true,
        envs_dir: None,
        prepare: Default::default(),
        progress: Default::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gold_replay_resolves_the_whole_bundled_benchmark() {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    if !have_uv() {
        assert!(!ci, "uv is required in CI (scripts/setup-tools.sh)");
        println!("SKIPPED: uv not found (run scripts/setup-tools.sh)");
        return;
    }
    let instances: Vec<String> = std::env::var("DOJO_E2E_INSTANCES")
        .map(|s| s.split(',').map(str::to_string).collect())
        .unwrap_or_default();
    let dir = tempfile::tempdir().unwrap();
    let o = opts(dir.path().join("run"), instances);
    let policy = o.policy.clone();
    let out = run_rollout(
        &o,
        DojoAgent::from_policy(&policy).unwrap(),
        make_backends(&policy, None).unwrap(),
    )
    .await
    .unwrap();
    let s = &out.summary;
    for oc in &out.outcomes {
        if !oc.resolved {
            let line = std::fs::read_to_string(&out.store_path)
                .unwrap()
                .lines()
                .find(|l| l.contains(&format!("\"task_id\":\"{}\"", oc.task_id)))
                .map(str::to_string)
                .unwrap_or_default();
            let t = dojo_trajectory::Trajectory::from_json(&line).unwrap();
            panic!(
                "{} not resolved: stop {} ({:?}), infra {}, events {:?}, grading {:?}, last messages {:?}",
                oc.task_id,
                oc.stop_reason,
                t.stop_detail,
                oc.infra_error,
                t.events,
                t.grading,
                t.messages
                    .iter()
                    .rev()
                    .take(3)
                    .map(|m| m.text())
                    .collect::<Vec<_>>()
            );
        }
    }
    let n = out.outcomes.len();
    assert!(n >= 1);
    if o.instances.is_empty() {
        assert!(
            n >= 12,
            "the bundled benchmark has at least 12 tasks, got {n}"
        );
    }
    assert_eq!((s.resolved, s.infra_errors, s.trajectories), (n, 0, n));
    assert!(
        out.outcomes
            .iter()
            .all(|o| o.stop_reason == "submitted" && !o.forced)
    );

    // The records are what SFT bootstrapping reads: native tool calls, answered by the real tools.
    let text = std::fs::read_to_string(&out.store_path).unwrap();
    for line in text.lines() {
        let t = dojo_trajectory::Trajectory::from_json(line).unwrap();
        let tools: Vec<&str> = t
            .steps
            .iter()
            .filter_map(|s| s.action.as_ref().map(|a| a.tool.as_str()))
            .collect();
        assert!(tools.len() >= 4, "{}: {tools:?}", t.task_id);
        assert_eq!(t.format_errors, 0, "{}", t.task_id);
        assert!(
            t.patch.as_deref().is_some_and(|p| p.contains("diff --git")),
            "{}",
            t.task_id
        );
        assert!(t.grading.is_some() && t.resolved == Some(true) && t.reward == Some(1.0));
        let failed: Vec<_> = t
            .steps
            .iter()
            .filter(|s| s.tool.as_ref().is_some_and(|o| o.error))
            .map(|s| {
                let msg = s
                    .observation_messages
                    .first()
                    .and_then(|&i| t.messages.get(i))
                    .map(|m| serde_json::to_string(m).unwrap_or_default())
                    .unwrap_or_default();
                format!("step {} ({:?}): {msg}", s.index, s.action)
            })
            .collect();
        assert!(
            failed.is_empty(),
            "{}: a tool reported an error: {failed:#?}",
            t.task_id
        );
    }

    // Predictions for `dojo eval`.
    let preds = std::fs::read_to_string(&out.predictions[0]).unwrap();
    let preds: Vec<Prediction> = preds
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(preds.len(), n);
    assert!(preds.iter().all(|p| p.model_name_or_path == "gold-replay"
        && p.model_patch.as_deref().is_some_and(|m| !m.is_empty())));

    // The same command again: everything is already stored.
    let again = run_rollout(
        &o,
        DojoAgent::from_policy(&policy).unwrap(),
        make_backends(&policy, None).unwrap(),
    )
    .await
    .unwrap();
    assert_eq!((again.stats.ran, again.stats.skipped), (0, n));
    assert_eq!(std::fs::read_to_string(&out.store_path).unwrap(), text);
}
