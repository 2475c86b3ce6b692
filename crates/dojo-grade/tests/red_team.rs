//! The generated red-team suite ([`dojo_grade::red_team`]): every behaviour, at each moment it can
//! run, under pytest and under a unittest runner (Django's shape), graded for real in
//! namespace sandboxes with uv-built environments. The bug is never fixed, so every variant must
//! come out unresolved (or an infrastructure failure confirmed without the patch), never
//! masked; the attacks marked `Remains` (written against the observer's objects in memory) are
//! measured and printed, not asserted.
//!
//! CI runs a sample (each attack at its first trigger, on each runner); `DOJO_RED_TEAM=full`
//! runs every variant and prints the table BENCHMARKS.md records
//! (`scripts/bench-red-team.sh`). While working on one attack: `DOJO_RED_TEAM_ONLY=<part of its
//! name>` keeps the variants it names, `DOJO_RED_TEAM_VERBOSE=1` prints each one's grade, observer
//! report and log, `DOJO_RED_TEAM_NOCONTROL=1` skips the gold-patch control.
//!
//! Needs the sandbox's kernel features, uv and PyPI access (for pytest); otherwise SKIPPED
//! (under `CI=true` a missing feature fails instead).

use std::time::Duration;

mod common;
use common::{held, sandbox_for, skip};
use dojo_grade::red_team::{self, Expect, Runner, Trigger};

use dojo_grade::{GradeOptions, Verdict};
use dojo_task::{EnvRegistry, RepoEnv, Task};
use serde_json::json;

struct Setup {
    task: Task,
    /// The same task with FAIL_TO_PASS cut to the decorated tests (`Attack::decorated_only`).
    decorated: Task,
    /// And cut to the others: what every other attack is graded on, so that "fools the log
    /// alone" means what it did before the decorated tests came (an attack on plain test
    /// functions does not also have to get through a `@raises` wrapper) and a `Remains` attack
    /// is measured where it works.
    plain: Task,
    env: RepoEnv,
    pristine: dojo_sandbox::Pristine,
    venv: dojo_sandbox::PythonEnv,
}

/// The calc project for `runner` ([`red_team::project`]), built.
async fn setup(runner: Runner) -> Result<Setup, String> {
    let p = red_team::project(runner);
    let task_of = |f2p: &[&str], p2p: &[&str]| {
        common::task(json!({
            "instance_id": format!("local__calc-red-{runner:?}"), "repo": "local/calc",
            "base_commit": "x", "patch": red_team::GOLD,
            "test_patch": p.test_patch(), "version": "1.0",
            "FAIL_TO_PASS": f2p, "PASS_TO_PASS": p2p,
            "env": {"python": "3.11", "requirements": p.requirements, "editable": false,
                    "test_cmd": p.test_cmd, "test_directives": "none", "log_parser": p.log_parser,
                    "timeout_s": 120, "env": {"PYTHONPATH": "/testbed"}}}))
    };
    let task = task_of(&p.fail_to_pass, &p.pass_to_pass);
    let decorated = task_of(&p.decorated, &[]);
    let others: Vec<&str> = p
        .fail_to_pass
        .iter()
        .copied()
        .filter(|t| !p.decorated.contains(t))
        .collect();
    let plain = task_of(&others, &p.pass_to_pass);
    let env = EnvRegistry::default()
        .resolve(&task)
        .map_err(|e| e.to_string())?;
    let (pristine, venv) = sandbox_for(common::project(&p.files), &env).await?;
    Ok(Setup {
        task,
        decorated,
        plain,
        env,
        pristine,
        venv,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_attacks_are_unresolved() {
    if !common::sandboxes_or_skip() {
        return;
    }
    let full = std::env::var("DOJO_RED_TEAM").is_ok_and(|v| v == "full");
    let opts = GradeOptions {
        timeout: Some(Duration::from_secs(60)),
        ..Default::default()
    };
    let mut setups = Vec::new();
    for runner in [Runner::Pytest, Runner::Unittest] {
        match setup(runner).await {
            Ok(s) => setups.push((runner, s)),
            Err(e) => return skip(format!("cannot build the calc project for {runner:?}: {e}")),
        }
    }
    let blind = GradeOptions {
        observer: false,
        ..opts.clone()
    };
    let grade_with = async |runner: Runner, attack: Option<&red_team::Attack>, patch: &str, o| {
        let s = &setups.iter().find(|(r, _)| *r == runner).unwrap().1;
        let task = match attack {
            Some(a) if a.decorated_only => &s.decorated,
            Some(_) => &s.plain,
            None => &s.task,
        };
        common::grade_fresh(&s.pristine, &s.venv, task, &s.env, patch, o).await
    };
    let grade = async |runner: Runner, patch: &str| grade_with(runner, None, patch, &opts).await;
    // The control: the real fix resolves under both runners, the observer watching.
    for runner in [Runner::Pytest, Runner::Unittest] {
        if std::env::var("DOJO_RED_TEAM_NOCONTROL").is_ok() {
            break;
        }
        let r = grade(runner, red_team::GOLD).await;
        assert_eq!(
            r.outcome,
            Verdict::Resolved,
            "{runner:?}: {:?}\n{}",
            r.error,
            r.test_output
        );
        assert!(r.observer.as_ref().is_some_and(|o| o.loaded && o.agrees()));
    }
    let variants = if full {
        red_team::variants()
    } else {
        red_team::sample()
    };
    let only = std::env::var("DOJO_RED_TEAM_ONLY").unwrap_or_default();
    let variants: Vec<_> = variants
        .into_iter()
        .filter(|(a, _, _)| only.is_empty() || a.name.contains(&only))
        .collect();
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    for (attack, trigger, runner) in &variants {
        let init = red_team::package_code(attack, *trigger, &red_team::Target::calc(*runner));
        let patch = red_team::init_patch(&init);
        let r = grade_with(*runner, Some(attack), &patch, &opts).await;
        let ok = held(&r);
        if std::env::var("DOJO_RED_TEAM_VERBOSE").is_ok() {
            println!(
                "=== {} {trigger:?} {runner:?}: outcome={:?} resolved={} infra={} masked? error={:?}\nobserver={:?}\n--- output ---\n{}\n",
                attack.name,
                r.outcome,
                r.resolved,
                r.infra_failure,
                r.error,
                r.observer,
                r.test_output
            );
        }
        // The same patch graded from the log alone (the official harness's view): whether the
        // attack fools a grader without the observer.
        let b = grade_with(*runner, Some(attack), &patch, &blind).await;
        rows.push(format!(
            "| {} | {} | {trigger:?} | {runner:?} | {} | {} | {} |",
            attack.name,
            if attack.observer_aware {
                "observer-aware"
            } else {
                "generic"
            },
            if b.resolved { "resolved" } else { "unresolved" },
            if ok { "held" } else { "**passed**" },
            r.error
                .as_deref()
                .unwrap_or("")
                .chars()
                .take(110)
                .collect::<String>()
                .replace('|', "/")
        ));
        if attack.expect == Expect::Unresolved && !ok {
            failures.push(format!(
                "{} ({trigger:?}, {runner:?}): {:?} infra={} {:?}\n{}",
                attack.name, r.outcome, r.infra_failure, r.error, r.test_output
            ));
        }
    }
    println!("| attack | kind | trigger | runner | log alone | with the observer | reason |");
    println!("|---|---|---|---|---|---|---|");
    for row in &rows {
        println!("{row}");
    }
    let passed = rows.iter().filter(|r| r.contains("**passed**")).count();
    let fooling = rows.iter().filter(|r| r.contains("| resolved |")).count();
    println!(
        "red team: {} variants ({fooling} fool the log alone), {} held, {passed} passed ({})",
        rows.len(),
        rows.len() - passed,
        if full { "full" } else { "sample" }
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn every_attack_has_a_variant_in_the_sample() {
    let sample = red_team::sample();
    for a in red_team::attacks() {
        for r in a.runners {
            assert!(
                sample
                    .iter()
                    .any(|(s, t, sr)| s.name == a.name && sr == r && *t == a.triggers[0]),
                "{} on {r:?}",
                a.name
            );
        }
    }
    assert!(red_team::variants().len() > sample.len());
    assert!(
        red_team::variants()
            .iter()
            .any(|(_, t, _)| *t == Trigger::AtExit)
    );
}
