//! Selection over run directories with known answers: what each selector picks, the curves,
//! the files written, and the refusals (partial runs, mixed task sets, nothing to select).

use std::path::{Path, PathBuf};

use dojo_select::candidates::load_runs;
use dojo_select::{LoadOptions, SelectOptions, SelectorKind, select};
use dojo_trajectory::{StopReason, Trajectory};
use serde_json::Value;

fn patch(v: &str) -> String {
    format!("diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-x = 0\n+x = {v}\n")
}

/// (task, patch, resolved, infrastructure failure)
type Row<'a> = (&'a str, String, bool, bool);

fn write_run(dir: &Path, tasks_file: &str, rows: &[Row]) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("run.json"),
        format!(
            r#"{{"schema_version":1,"policy":{{}},"tasks_file":"{tasks_file}","samples":8,"dojo_version":"test"}}"#
        ),
    )
    .unwrap();
    let mut per_task = std::collections::HashMap::<&str, u32>::new();
    let mut lines = String::new();
    for (task, patch, resolved, infra) in rows {
        let i = per_task.entry(task).or_default();
        let mut t = Trajectory::new(*task, *i);
        *i += 1;
        if *infra {
            t.stop_reason = StopReason::EnvError;
            t.infra_failure = true;
        } else {
            t.stop_reason = StopReason::Submitted;
            t.patch = Some(patch.clone());
            t.set_grade(*resolved);
        }
        lines.push_str(&t.to_json_line());
        lines.push('\n');
    }
    std::fs::write(dir.join("trajectories.jsonl"), lines).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(5));
    std::fs::write(dir.join("summary.json"), "{}").unwrap();
}

/// Task `a`: the right fix (x = 2) is the majority, one wrong fix, one empty, one infra failure.
/// Task `b`: the majority (x = 1, three times, spelled differently) is wrong; one right fix.
/// Task `<b>&c`: nothing resolves; the name checks escaping in the report.
fn rows() -> Vec<Row<'static>> {
    vec![
        ("a", patch("2"), true, false),
        ("a", patch("1"), false, false),
        ("a", patch("2  # fixed"), true, false),
        ("a", String::new(), false, false),
        ("a", String::new(), false, true),
        ("b", patch("1"), false, false),
        ("b", patch("2"), true, false),
        ("b", patch("  1"), false, false),
        ("b", patch("1 # same"), false, false),
        ("<b>&c", patch("3"), false, false),
        ("<b>&c", patch("4"), false, false),
        ("<b>&c", patch("5"), false, false),
        ("<b>&c", patch("6"), false, false),
    ]
}

fn options(out: PathBuf, selectors: &str) -> SelectOptions {
    SelectOptions {
        selectors: SelectorKind::parse_list(selectors)
            .unwrap()
            .into_iter()
            .filter_map(SelectorKind::build)
            .collect(),
        notes: Vec::new(),
        precompute_seconds: Default::default(),
        k: None,
        seed: 1,
        out,
    }
}

#[test]
fn selectors_pick_what_their_rule_says_and_curves_follow() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    write_run(&run, "tasks.jsonl", &rows());
    let set = load_runs(&[run], LoadOptions::default()).unwrap();
    assert_eq!(set.tasks.len(), 3);
    assert_eq!(set.infra_left_out, 1);
    assert_eq!(set.candidates(), 12);

    let out = select(&set, &options(tmp.path().join("sel"), "all")).unwrap();
    assert_eq!(out.k, 4);
    assert!(out.tasks_short.is_empty());
    let by = |name: &str| out.selectors.iter().find(|s| s.name == name).unwrap();
    let choice = |name: &str, task: &str| {
        by(name)
            .choices
            .iter()
            .find(|c| c.task_id == task)
            .unwrap()
            .clone()
    };
    // Majority: task a's two right fixes agree (the comment does not matter); task b's three
    // spellings of the wrong fix outvote the right one.
    assert!(choice("majority", "a").resolved);
    assert_eq!(choice("majority", "a").ties, 2);
    assert!(!choice("majority", "b").resolved);
    assert_eq!(by("majority").resolved, 1);
    assert_eq!(by("oracle").resolved, 2);

    // pass@1 = mean(2/4, 1/4, 0) = 0.25; pass@4 = 2/3.
    let pass = &out.pass_at_k;
    assert!((pass[0].estimate.mean - 0.25).abs() < 1e-12);
    assert!((pass[3].estimate.mean - 2.0 / 3.0).abs() < 1e-12);
    // Random is pass@1 at every k; the oracle is pass@k.
    for (k, p) in pass.iter().enumerate() {
        assert!((by("random").best_at_k[k].estimate.mean - 0.25).abs() < 1e-12);
        assert!((by("oracle").best_at_k[k].estimate.mean - p.estimate.mean).abs() < 1e-12);
    }
    // Majority at k = 4: task a resolves, b and c do not: 1/3; gap closed (1/3 − 1/4)/(2/3 − 1/4).
    let m4 = by("majority").best_at_k[3].estimate.mean;
    assert!((m4 - 1.0 / 3.0).abs() < 1e-12, "{m4}");
    let gap = by("majority").gap_closed.unwrap();
    assert!((gap - (1.0 / 3.0 - 0.25) / (2.0 / 3.0 - 0.25)).abs() < 1e-12);

    // Files: one predictions file per selector, the json and an escaped report.
    let dir = tmp.path().join("sel");
    let preds = std::fs::read_to_string(dir.join("predictions.majority.jsonl")).unwrap();
    assert_eq!(preds.lines().count(), 3);
    assert!(preds.contains("dojo-select:majority") && preds.contains("x = 2"));
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("selection.json")).unwrap())
            .unwrap();
    assert_eq!(json["schema_version"], 2);
    // No steps recorded in these fixtures: the turn-budget curve leaves them out and says so.
    assert_eq!(json["sequential"]["without_steps"], 12);
    assert_eq!(json["infra_left_out"], 1);
    // Every candidate has its page, linked from the report.
    let page = json["selectors"][0]["choices"][0]["candidates"][0]["page"]
        .as_str()
        .unwrap();
    let page_html = std::fs::read_to_string(dir.join(page)).unwrap();
    assert!(page_html.contains("Final diff"), "{page}");
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.contains(&format!("href=\"{page}\"")));
    assert!(html.contains("&lt;b&gt;&amp;c") && !html.contains("<b>&c"));
}

#[test]
fn one_selector_writes_predictions_jsonl_and_k_limits_the_candidates() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    write_run(&run, "tasks.jsonl", &rows());
    let set = load_runs(&[run], LoadOptions::default()).unwrap();
    let mut opts = options(tmp.path().join("sel"), "majority");
    opts.k = Some(2);
    let out = select(&set, &opts).unwrap();
    assert_eq!(out.k, 2);
    assert_eq!(out.selectors[0].best_at_k.len(), 2);
    // Task b's first two candidates: wrong (x = 1) vs right (x = 2), a tie.
    let b = out.selectors[0]
        .choices
        .iter()
        .find(|c| c.task_id == "b")
        .unwrap();
    assert_eq!((b.k, b.ties), (2, 2));
    assert!(tmp.path().join("sel/predictions.jsonl").exists());
}

#[test]
fn runs_pool_over_one_task_file_only() {
    let tmp = tempfile::tempdir().unwrap();
    let (r1, r2, r3) = (
        tmp.path().join("r1"),
        tmp.path().join("r2"),
        tmp.path().join("r3"),
    );
    write_run(&r1, "tasks.jsonl", &rows()[..5]);
    write_run(&r2, "tasks.jsonl", &rows()[5..9]);
    write_run(&r3, "other.jsonl", &rows()[..2]);
    let pooled = load_runs(&[r1.clone(), r2], LoadOptions::default()).unwrap();
    assert_eq!(pooled.tasks.len(), 2);
    let err = load_runs(&[r1, r3.clone()], LoadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("other.jsonl") && err.contains("different task sets"),
        "{err}"
    );
    assert!(
        err.contains(&r3.join("run.json").display().to_string()),
        "{err}"
    );
}

#[test]
fn partial_runs_and_empty_runs_are_refused_with_a_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    write_run(&run, "tasks.jsonl", &rows());
    std::fs::remove_file(run.join("summary.json")).unwrap();
    let err = load_runs(std::slice::from_ref(&run), LoadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("still being written") && err.contains("--partial"),
        "{err}"
    );
    let set = load_runs(
        std::slice::from_ref(&run),
        LoadOptions {
            allow_partial: true,
        },
    )
    .unwrap();
    assert!(set.partial);

    let infra_only = tmp.path().join("infra");
    write_run(
        &infra_only,
        "tasks.jsonl",
        &[("a", String::new(), false, true)],
    );
    let err = load_runs(&[infra_only], LoadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no candidate") && err.contains("1 infrastructure"),
        "{err}"
    );

    let err = load_runs(&[tmp.path().join("missing")], LoadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("run.json") && err.contains("not a `dojo rollout` run"),
        "{err}"
    );
}
