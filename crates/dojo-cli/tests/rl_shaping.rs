//! Reward shaping on real graded rollouts: gold-replay on a bundled task, whole and cut by the
//! step budget after and before the fix is written. A budget stop whose workspace holds the fix
//! is graded resolved and earns α; one cut before the fix earns 0; a submitted fix earns 1.

#![cfg(feature = "engine")]

mod common;
use common::{BUNDLED, bundled_ready, dojo, scratch};
use dojo_reward::{RewardConfig, shape_trajectory};
use dojo_trajectory::{StopReason, Trajectory};

fn rollout(out: &std::path::Path, max_steps: Option<&str>) -> Trajectory {
    let mut args = vec![
        "rollout",
        "--tasks",
        BUNDLED,
        "--policy",
        "gold-replay",
        "--instance",
        "andialbrecht__sqlparse-1",
        "--out",
        out.to_str().unwrap(),
    ];
    if let Some(n) = max_steps {
        args.extend(["--max-steps", n]);
    }
    let o = dojo(&args);
    assert_eq!(o.status.code(), Some(0));
    let text = std::fs::read_to_string(out.join("trajectories.jsonl")).unwrap();
    serde_json::from_str(text.lines().next().unwrap()).unwrap()
}

#[test]
fn budget_stops_are_graded_and_scaled() {
    if let Err(why) = bundled_ready(&["andialbrecht__sqlparse-1"]) {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let dir = scratch("rl-shaping");
    let swe_master = RewardConfig::default();
    let swe_world = RewardConfig {
        budget_alpha: 0.0,
        ..RewardConfig::default()
    };

    // Gold-replay: look, edit, edit, run the tests, submit.
    let full = rollout(&dir.path().join("full"), None);
    assert_eq!(full.stop_reason, StopReason::Submitted);
    let s = shape_trajectory(&full, &swe_master).unwrap();
    assert_eq!((s.reward, s.raw_reward, s.masked), (1.0, Some(1.0), false));

    // Cut after the two edits: the workspace holds the fix, graded on the agent's behalf.
    let fixed = rollout(&dir.path().join("fixed"), Some("3"));
    assert_eq!(fixed.stop_reason, StopReason::MaxSteps);
    let s = shape_trajectory(&fixed, &swe_master).unwrap();
    assert_eq!((s.reward, s.raw_reward, s.masked), (0.5, Some(1.0), false));
    assert_eq!(shape_trajectory(&fixed, &swe_world).unwrap().reward, 0.0);

    // Cut before any edit: graded unresolved.
    let early = rollout(&dir.path().join("early"), Some("1"));
    assert_eq!(early.stop_reason, StopReason::MaxSteps);
    let s = shape_trajectory(&early, &swe_master).unwrap();
    assert_eq!((s.reward, s.raw_reward), (0.0, Some(0.0)));
}
