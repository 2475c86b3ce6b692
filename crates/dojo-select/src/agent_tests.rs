//! The `tests` selector: the tests and reproduction scripts the agents wrote, run against every
//! other candidate in a sandbox (the execution-based half of R2E-Gym's hybrid verifier, with the
//! agents' own tests in place of generated ones).
//!
//! A candidate's tests are the files its patch adds that look like tests or reproduction
//! scripts ([`looks_like_test`]). Each is run on every candidate of its task in a fresh
//! workspace over the task's pristine tree with that candidate's patch applied: pytest for
//! `test_*.py` / `*_test.py`, plain `python` for scripts; exit status 0 passes. A test that
//! fails on its own author's patch is dropped as broken: the agent did not make it pass either.
//! A candidate's score is the share of the kept tests of the candidates being compared that it
//! passes, as R2E-Gym scores against a pool of tests. Its own kept tests count too: it passes
//! them by construction, which rewards a candidate that wrote a test its fix passes, the same
//! evidence a passing foreign test gives. An empty patch scores −1: it is a candidate that loses,
//! as in majority voting, also when no test separates the others. Without any kept test every
//! other score is 0 and the seeded tie-break decides.
//!
//! Infrastructure failures (a sandbox that cannot be created, a patch the sandbox refuses) are
//! not the candidate's: the run is left out of the score (`None`) and counted in the notes.

use dojo_patch::shell_quote;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use dojo_patch::{Change, LineKind, Patch};
use dojo_sandbox::{ExecRequest, Sandbox, SandboxOptions};
use dojo_task::{Preparer, RepoEnv, Task};
use serde::Serialize;

use crate::SelectError;
use crate::candidates::{CandidateSet, TaskCandidates};
use crate::selector::Selector;

/// A file the agent added that looks like a test or a reproduction script.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentTest {
    /// Label of the candidate whose patch added it.
    pub owner: String,
    pub path: String,
    #[serde(skip)]
    pub content: String,
    /// Run by pytest (a test module) rather than as a script.
    pub pytest: bool,
}

/// `test_*.py`, `*_test.py`, or a script named for reproducing (`repro*`, `*reproduce*`),
/// `conftest.py` and `__init__.py` excepted.
pub fn looks_like_test(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path).to_ascii_lowercase();
    if !name.ends_with(".py") || name == "conftest.py" || name == "__init__.py" {
        return false;
    }
    dojo_patch::is_pytest_module(&name) || name.starts_with("repro") || name.contains("reproduce")
}

/// The files `patch` creates with their content, in patch order.
pub fn added_files(patch: &str) -> Vec<(String, String)> {
    Patch::parse(patch)
        .files
        .into_iter()
        .filter(|f| f.change == Change::Create)
        .map(|f| {
            let content: String = f
                .hunks
                .iter()
                .flat_map(|h| &h.lines)
                .filter(|l| l.kind == LineKind::Added)
                .map(|l| format!("{}\n", l.text))
                .collect();
            (f.path().to_string(), content)
        })
        .collect()
}

/// Every agent-written test of a task's candidates.
pub fn tests_of(task: &TaskCandidates) -> Vec<AgentTest> {
    task.candidates
        .iter()
        .flat_map(|c| {
            added_files(&c.patch)
                .into_iter()
                .filter(|(path, _)| looks_like_test(path))
                .map(|(path, content)| AgentTest {
                    owner: c.label(),
                    pytest: dojo_patch::is_pytest_module(
                        &path
                            .rsplit('/')
                            .next()
                            .unwrap_or(&path)
                            .to_ascii_lowercase(),
                    ),
                    path,
                    content,
                })
        })
        .collect()
}

/// A task's tests and, per candidate label, each test's result on it (`None`: not run, an
/// infrastructure failure).
#[derive(Debug, Clone, Default, Serialize)]
pub struct TaskTestRuns {
    pub tests: Vec<AgentTest>,
    pub results: HashMap<String, Vec<Option<bool>>>,
}

impl TaskTestRuns {
    /// Test `j` passes on its owner's candidate (or that was not run): kept.
    fn kept(&self, j: usize) -> bool {
        let t = &self.tests[j];
        self.results
            .get(&t.owner)
            .and_then(|r| r[j])
            .unwrap_or(true)
    }
}

/// The `tests` selector over results computed beforehand ([`run_agent_tests`]).
#[derive(Debug, Clone, Default)]
pub struct TestsSelector {
    pub runs: HashMap<String, TaskTestRuns>,
}

impl Selector for TestsSelector {
    fn name(&self) -> &'static str {
        "tests"
    }
    /// The share of tests passed; an empty patch passes none.
    fn features(&self, task: &TaskCandidates, subset: &[usize]) -> Vec<f64> {
        self.scores(task, subset)
            .into_iter()
            .map(|s| s.max(0.0))
            .collect()
    }
    fn scores(&self, task: &TaskCandidates, subset: &[usize]) -> Vec<f64> {
        let Some(runs) = self.runs.get(&task.task_id) else {
            return subset
                .iter()
                .map(|&i| {
                    if task.candidates[i].is_empty() {
                        -1.0
                    } else {
                        0.0
                    }
                })
                .collect();
        };
        let present: Vec<String> = subset.iter().map(|&i| task.candidates[i].label()).collect();
        let usable: Vec<usize> = (0..runs.tests.len())
            .filter(|&j| present.contains(&runs.tests[j].owner) && runs.kept(j))
            .collect();
        present
            .iter()
            .zip(subset)
            .map(|(label, &i)| {
                if task.candidates[i].is_empty() {
                    return -1.0;
                }
                let Some(results) = runs.results.get(label) else {
                    return 0.0;
                };
                let (mut passed, mut ran) = (0usize, 0usize);
                for &j in &usable {
                    if let Some(ok) = results[j] {
                        ran += 1;
                        passed += usize::from(ok);
                    }
                }
                if ran == 0 {
                    0.0
                } else {
                    passed as f64 / ran as f64
                }
            })
            .collect()
    }
}

/// How the tests ran, for the output's notes.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TestsRunStats {
    pub tasks_with_tests: usize,
    pub tests: usize,
    pub runs: usize,
    pub passed: usize,
    pub infra_failures: usize,
    pub seconds: f64,
    /// The first infrastructure failure, as an example: `task: error`, the error with its
    /// causes ([`dojo_rundir::error_chain`]).
    pub first_failure: Option<String>,
}

/// Per-test time limit.
pub const TEST_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs every task's agent-written tests against each of its candidates (the first `k` of
/// each), one sandbox per task reset between candidates. `tasks` maps task ids to the task and
/// its environment.
pub async fn run_agent_tests(
    set: &CandidateSet,
    k: usize,
    tasks: &HashMap<String, (Task, Result<RepoEnv, SelectError>)>,
    preparer: &Preparer,
    sandbox: &SandboxOptions,
) -> (TestsSelector, TestsRunStats) {
    let started = Instant::now();
    let mut sel = TestsSelector::default();
    let mut stats = TestsRunStats::default();
    for t in &set.tasks {
        let t = TaskCandidates {
            task_id: t.task_id.clone(),
            candidates: t.candidates.iter().take(k).cloned().collect(),
        };
        let tests = tests_of(&t);
        if tests.is_empty() {
            continue;
        }
        stats.tasks_with_tests += 1;
        stats.tests += tests.len();
        let fail = |stats: &mut TestsRunStats, why: String| {
            stats.infra_failures += 1;
            stats.first_failure.get_or_insert(why);
        };
        let runs = match tasks.get(&t.task_id) {
            None => {
                fail(&mut stats, format!("{}: not in the task file", t.task_id));
                None
            }
            Some((_, Err(e))) => {
                let e = dojo_rundir::error_chain(e);
                fail(&mut stats, format!("{}: environment: {e}", t.task_id));
                None
            }
            Some((task, Ok(env))) => match run_task(&t, &tests, task, env, preparer, sandbox).await
            {
                Ok(results) => Some(results),
                Err(e) => {
                    let e = dojo_rundir::error_chain(&e);
                    fail(&mut stats, format!("{}: {e}", t.task_id));
                    None
                }
            },
        };
        let results = runs.unwrap_or_default();
        for r in results.values().flatten() {
            match r {
                Some(ok) => {
                    stats.runs += 1;
                    stats.passed += usize::from(*ok);
                }
                None => stats.infra_failures += 1,
            }
        }
        sel.runs
            .insert(t.task_id.clone(), TaskTestRuns { tests, results });
    }
    stats.seconds = started.elapsed().as_secs_f64();
    (sel, stats)
}

async fn run_task(
    t: &TaskCandidates,
    tests: &[AgentTest],
    task: &Task,
    env: &RepoEnv,
    preparer: &Preparer,
    opts: &SandboxOptions,
) -> Result<HashMap<String, Vec<Option<bool>>>, SelectError> {
    let prepared = preparer
        .prepare(task, env)
        .await
        .map_err(SelectError::Prepare)?;
    let mut sb = Sandbox::create(&prepared.pristine, Some(&prepared.env), opts)
        .await
        .map_err(SelectError::Sandbox)?;
    let mut results = HashMap::new();
    for c in &t.candidates {
        let r = run_candidate(&mut sb, &c.patch, tests, env).await;
        results.insert(c.label(), r);
    }
    if let Err(e) = sb.teardown().await {
        tracing::warn!("sandbox teardown failed: {e}");
    }
    Ok(results)
}

/// Each test's result on one candidate's patch: a fresh workspace, the patch, then the test
/// file written (over the candidate's own file of that name, if any) and run.
async fn run_candidate(
    sb: &mut Sandbox,
    patch: &str,
    tests: &[AgentTest],
    env: &RepoEnv,
) -> Vec<Option<bool>> {
    if sb.reset().await.is_err() {
        return vec![None; tests.len()];
    }
    if !patch.trim().is_empty() {
        match sb.apply_patch(patch).await {
            Ok(a) if a.applied() => {}
            // The candidate's own diff of the same tree not applying is its defect.
            Ok(_) => return vec![Some(false); tests.len()],
            Err(_) => return vec![None; tests.len()],
        }
    }
    let mut out = Vec::with_capacity(tests.len());
    for test in tests {
        if sb
            .write_file(&test.path, test.content.as_bytes())
            .await
            .is_err()
        {
            out.push(None);
            continue;
        }
        let quoted = shell_quote(&test.path);
        let cmd = if test.pytest {
            format!("python -m pytest -q -x -p no:cacheprovider {quoted}")
        } else {
            format!("python {quoted}")
        };
        let mut req = ExecRequest::shell(cmd)
            .cwd(dojo_sandbox::WORKSPACE)
            .timeout(TEST_TIMEOUT);
        req.env = env.env.clone();
        out.push(match sb.exec(&req).await {
            Ok(o) => Some(!o.timed_out && o.exit_code == Some(0)),
            Err(_) => None,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::candidates::tests::cand;
    use crate::selector::expected_resolved;

    fn new_file(path: &str, body: &str) -> String {
        let lines: Vec<String> = body.lines().map(|l| format!("+{l}")).collect();
        format!(
            "diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1,{} @@\n{}\n",
            lines.len(),
            lines.join("\n")
        )
    }

    const FIX: &str =
        "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-x = 0\n+x = 1\n";

    #[test]
    fn added_test_files_are_found() {
        let patch = format!(
            "{FIX}{}{}{}{}",
            new_file("reproduce_issue.py", "import m\nassert m.x == 1"),
            new_file("tests/test_new.py", "def test_x():\n    assert True"),
            new_file("notes.txt", "+not code"),
            new_file("conftest.py", "import pytest"),
        );
        let files = added_files(&patch);
        assert_eq!(files.len(), 4);
        assert_eq!(
            files[0],
            (
                "reproduce_issue.py".into(),
                "import m\nassert m.x == 1\n".into()
            )
        );
        let t = TaskCandidates {
            task_id: "t".into(),
            candidates: vec![cand(0, &patch, true)],
        };
        let tests = tests_of(&t);
        let names: Vec<(&str, bool)> = tests.iter().map(|t| (t.path.as_str(), t.pytest)).collect();
        assert_eq!(
            names,
            vec![("reproduce_issue.py", false), ("tests/test_new.py", true)]
        );
        assert!(looks_like_test("a/b/issue_test.py") && looks_like_test("repro.py"));
        assert!(!looks_like_test("src/m.py") && !looks_like_test("tests/__init__.py"));
        // A modified (not added) file is not the agent's test.
        assert!(added_files(FIX).is_empty());
        assert_eq!(
            dojo_patch::harness_targets(&patch)[..2],
            ["m.py", "reproduce_issue.py"]
        );
    }

    /// Three candidates: 0 and 1 resolve and each wrote a repro script; 2 is wrong and wrote a
    /// test that fails even on its own patch (dropped). Known results: the right fixes pass each
    /// other's scripts, the wrong one fails them.
    #[test]
    fn the_patch_passing_most_of_the_others_tests_wins() {
        let t = TaskCandidates {
            task_id: "t".into(),
            candidates: vec![
                cand(0, "+a", true),
                cand(1, "+a ", true),
                cand(2, "+b", false),
            ],
        };
        let test = |owner: &str| AgentTest {
            owner: owner.into(),
            path: format!("repro_{owner}.py"),
            content: String::new(),
            pytest: false,
        };
        let runs = TaskTestRuns {
            tests: vec![test("r0s0"), test("r0s1"), test("r0s2")],
            results: HashMap::from([
                (
                    "r0s0".to_string(),
                    vec![Some(true), Some(true), Some(false)],
                ),
                ("r0s1".to_string(), vec![Some(true), Some(true), Some(true)]),
                ("r0s2".to_string(), vec![Some(false), None, Some(false)]),
            ]),
        };
        let sel = TestsSelector {
            runs: HashMap::from([("t".to_string(), runs)]),
        };
        // Candidate 2's own test failed on it: dropped, so it counts for nobody.
        assert_eq!(sel.scores(&t, &[0, 1, 2]), vec![1.0, 1.0, 0.0]);
        assert_eq!(expected_resolved(&sel, &t, &[0, 1, 2]), 1.0);
        // Candidate 2 against 0 alone: only 0's script counts, and 2 fails it.
        assert_eq!(sel.scores(&t, &[0, 2]), vec![1.0, 0.0]);
        // 1's script never ran on 2 (infrastructure): not counted against it.
        assert_eq!(sel.scores(&t, &[1, 2]), vec![1.0, 0.0]);
        // A task without runs: every score 0, but an empty patch still loses.
        let other = TaskCandidates {
            task_id: "u".into(),
            candidates: vec![cand(0, "+a", true), cand(1, " \n", false)],
        };
        assert_eq!(sel.scores(&other, &[0, 1]), vec![0.0, -1.0]);
        assert_eq!(sel.features(&other, &[0, 1]), vec![0.0, 0.0]);
    }
}
