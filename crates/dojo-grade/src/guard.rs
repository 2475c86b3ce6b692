//! Grading that a patch cannot fake: which files of a model patch are test infrastructure.
//!
//! A test log is evidence only while the model cannot write it. A patch that adds a
//! `conftest.py` printing `PASSED <id>` lines at exit, a pytest plugin switched on by `addopts`
//! or `-p` in the test configuration, or a `sitecustomize.py` that Python runs at startup, makes
//! a failing suite look green; official `swebench` 2.x–4.x accept such a log. [`classify`]
//! names every path of a model patch that is test infrastructure, so the grading flow
//! ([`crate::run`]) can neutralise or reject it before anything runs:
//!
//! - [`InfraKind::TaskTestFile`]: a file of the task's own tests ([`task_test_files`]: a file
//!   its test patch touches, or a test file a FAIL_TO_PASS / PASS_TO_PASS id names). Restored
//!   to its pristine state before the test patch applies, as the harness does for the test
//!   patch's files, so the edit cannot change the result; the grade goes on.
//! - [`InfraKind::Conftest`], [`InfraKind::PytestConfig`], [`InfraKind::InterpreterStartup`]:
//!   the patch is graded unresolved with the reason, without running (these files change how
//!   results are produced or reported, and no gold patch of the SWE-bench sets touches them).
//!
//! Either way the report records the touched paths ([`crate::InstanceReport`]'s
//! `touched_test_infrastructure` and `test_infrastructure`).
//!
//! Only the files a patch touches are judged, not what their code does: a patch that makes
//! library code print fake results is caught instead by the exit-status check of the grading
//! flow (a non-zero test exit with no failing test in the parsed output is not trusted).

use std::collections::BTreeSet;

use dojo_patch::{Hunk, LineKind, Patch};
use dojo_task::Task;

/// Why a path of a model patch counts as test infrastructure.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum InfraKind {
    /// A file of the task's tests: restored before grading, so the edit has no effect.
    TaskTestFile,
    /// `conftest.py` (any directory): pytest loads it as a plugin.
    Conftest,
    /// pytest's configuration: `pytest.ini` / `.pytest.ini`, a `[pytest]`, `[tool:pytest]` or
    /// `[tool.pytest…]` section of `setup.cfg` / `tox.ini` / `pyproject.toml`, or a line
    /// naming `addopts`, `pytest_plugins` or a `pytest11` plugin entry point there or in
    /// `setup.py`.
    PytestConfig,
    /// `sitecustomize.py`, `usercustomize.py` or a `.pth` file: code Python runs at startup.
    InterpreterStartup,
}

impl InfraKind {
    /// Whether a patch touching such a file is graded unresolved (the others are restored).
    pub fn rejects(self) -> bool {
        self != InfraKind::TaskTestFile
    }

    pub fn as_str(self) -> &'static str {
        match self {
            InfraKind::TaskTestFile => "task_test_file",
            InfraKind::Conftest => "conftest",
            InfraKind::PytestConfig => "pytest_config",
            InfraKind::InterpreterStartup => "interpreter_startup",
        }
    }
}

/// One path of a model patch that is test infrastructure.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct InfraTouch {
    pub path: String,
    pub kind: InfraKind,
}

/// The files of `task`'s tests, each once: the test patch's files (as the harness lists them,
/// and as git reads them), then the files its FAIL_TO_PASS / PASS_TO_PASS ids name that are
/// test files by [`dojo_patch::is_test_file`]. A library module named by a doctest id
/// (`src/pkg/mod.py::pkg.mod.func`) is not one: restoring it would undo the fix. Paths that
/// leave the repository are dropped.
pub fn task_test_files(task: &Task) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let test_patch = Patch::parse(&task.test_patch);
    let from_ids = task
        .f2p()
        .iter()
        .chain(task.p2p())
        .filter_map(|id| dojo_patch::id_file(id))
        .filter(|f| dojo_patch::is_test_file(f))
        .map(str::to_string);
    dojo_patch::harness_targets(&task.test_patch)
        .into_iter()
        .chain(test_patch.paths().into_iter().map(str::to_string))
        .chain(from_ids)
        .filter(|f| dojo_patch::check_path(f).is_ok())
        .filter(|f| seen.insert(f.clone()))
        .collect()
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// The kind a path has by its name alone (`None`: not test infrastructure by name; the
/// configuration files that hold more than pytest's settings are judged by their hunks).
fn kind_by_name(path: &str) -> Option<InfraKind> {
    let name = file_name(path);
    match name {
        "conftest.py" => Some(InfraKind::Conftest),
        "pytest.ini" | ".pytest.ini" => Some(InfraKind::PytestConfig),
        "sitecustomize.py" | "usercustomize.py" => Some(InfraKind::InterpreterStartup),
        _ if name.ends_with(".pth") => Some(InfraKind::InterpreterStartup),
        _ => None,
    }
}

/// Files that may hold pytest's settings among others.
fn is_shared_config(path: &str) -> bool {
    matches!(
        file_name(path),
        "setup.cfg" | "tox.ini" | "pyproject.toml" | "setup.py"
    )
}

/// `[pytest]`, `[tool:pytest]`, `[tool.pytest.ini_options]` (and any `[tool.pytest…]`).
fn section_of(line: &str) -> Option<String> {
    let t = line.trim();
    let inner = t.strip_prefix('[')?.trim_start_matches('[');
    let (name, _) = inner.split_once(']')?;
    Some(name.trim().trim_matches('"').to_ascii_lowercase())
}

fn is_pytest_section(name: &str) -> bool {
    name == "pytest"
        || name == "tool:pytest"
        || name == "tool.pytest"
        || name.starts_with("tool.pytest.")
}

/// Lines that configure pytest wherever they stand: extra options, plugins to load, a plugin
/// entry point (takes effect on the reinstall an eval script runs).
fn configures_pytest(line: &str) -> bool {
    let l = line.to_ascii_lowercase();
    l.contains("addopts") || l.contains("pytest_plugins") || l.contains("pytest11")
}

/// Does one file's diff change pytest's configuration? `pristine` is the file's content
/// before the patch (`None`: new or unreadable), used to know the section a hunk starts in.
fn changes_pytest_config(hunks: &[Hunk], pristine: Option<&str>) -> bool {
    let old: Vec<&str> = pristine.map(|p| p.lines().collect()).unwrap_or_default();
    for h in hunks {
        // The section in effect just before the hunk's first line.
        let before = h.old_start.saturating_sub(1).min(old.len());
        let mut section = old[..before].iter().rev().find_map(|l| section_of(l));
        for l in &h.lines {
            let text = &l.text;
            if let Some(s) = section_of(text) {
                section = Some(s);
            }
            if l.kind == LineKind::Context {
                continue;
            }
            if configures_pytest(text) || section.as_deref().is_some_and(is_pytest_section) {
                return true;
            }
        }
    }
    false
}

/// The test infrastructure `model_patch` touches, sorted by path. `test_files` are the task's
/// test files ([`task_test_files`]); `pristine(path)` gives a file's content before the patch
/// (asked only for `setup.cfg`, `tox.ini`, `pyproject.toml` and `setup.py`).
pub fn classify(
    model_patch: &str,
    test_files: &[String],
    pristine: impl Fn(&str) -> Option<String>,
) -> Vec<InfraTouch> {
    let mut out = BTreeSet::new();
    for f in Patch::parse(model_patch).files {
        for p in &f.named {
            let kind = if test_files.iter().any(|t| t == p) {
                Some(InfraKind::TaskTestFile)
            } else if let Some(k) = kind_by_name(p) {
                Some(k)
            } else if is_shared_config(p) && changes_pytest_config(&f.hunks, pristine(p).as_deref())
            {
                Some(InfraKind::PytestConfig)
            } else {
                None
            };
            if let Some(kind) = kind {
                out.insert(InfraTouch {
                    path: p.clone(),
                    kind,
                });
            }
        }
    }
    out.into_iter().collect()
}

/// The paths of `model_patch` that [`classify`] needs the pristine content of.
pub fn config_paths(model_patch: &str) -> Vec<String> {
    let mut v: Vec<String> = Patch::parse(model_patch)
        .files
        .into_iter()
        .flat_map(|f| f.named)
        .filter(|p| is_shared_config(p))
        .collect();
    v.sort();
    v.dedup();
    v
}

/// A one-line reason naming every rejected path, for the report's `error`.
pub fn rejection_reason(touches: &[InfraTouch]) -> Option<String> {
    let rejected: Vec<String> = touches
        .iter()
        .filter(|t| t.kind.rejects())
        .map(|t| format!("{} ({})", t.path, t.kind.as_str()))
        .collect();
    (!rejected.is_empty()).then(|| {
        format!(
            "the model patch changes test infrastructure, which can fake the test results: {}",
            rejected.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add_file(path: &str, body: &str) -> String {
        let n = body.lines().count();
        let mut s = format!(
            "diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1,{n} @@\n"
        );
        for l in body.lines() {
            s.push_str(&format!("+{l}\n"));
        }
        s
    }

    fn kinds(patch: &str, tests: &[&str], pristine: Option<&str>) -> Vec<(String, InfraKind)> {
        let tests: Vec<String> = tests.iter().map(|s| s.to_string()).collect();
        classify(patch, &tests, |_| pristine.map(str::to_string))
            .into_iter()
            .map(|t| (t.path, t.kind))
            .collect()
    }

    #[test]
    fn files_by_name() {
        let p = add_file("tests/conftest.py", "x = 1")
            + &add_file("sitecustomize.py", "import os")
            + &add_file("src/lib/evil.pth", "import x")
            + &add_file("pytest.ini", "[pytest]\naddopts = -p plug")
            + &add_file("src/pkg/test_conftest.py", "y = 2")
            + &add_file("tests/test_a.py", "def test_a(): pass");
        assert_eq!(
            kinds(&p, &["tests/test_a.py"], None),
            [
                ("pytest.ini".into(), InfraKind::PytestConfig),
                ("sitecustomize.py".into(), InfraKind::InterpreterStartup),
                ("src/lib/evil.pth".into(), InfraKind::InterpreterStartup),
                ("tests/conftest.py".into(), InfraKind::Conftest),
                ("tests/test_a.py".into(), InfraKind::TaskTestFile),
            ]
        );
        // A conftest.py among the task's test files is restored, not rejected.
        assert_eq!(
            kinds(
                &add_file("tests/conftest.py", "x"),
                &["tests/conftest.py"],
                None
            ),
            [("tests/conftest.py".into(), InfraKind::TaskTestFile)]
        );
    }

    #[test]
    fn shared_config_is_judged_by_section() {
        let cfg = "[metadata]\nname = calc\nversion = 1\n\n[tool:pytest]\nmarkers =\n    slow\n";
        // A change in [metadata]: not test infrastructure.
        let meta = "diff --git a/setup.cfg b/setup.cfg\n--- a/setup.cfg\n+++ b/setup.cfg\n@@ -2,2 +2,2 @@\n name = calc\n-version = 1\n+version = 2\n";
        assert!(kinds(meta, &[], Some(cfg)).is_empty());
        // A change deep in [tool:pytest], whose header is outside the hunk: found through the
        // pristine file.
        let deep = "diff --git a/setup.cfg b/setup.cfg\n--- a/setup.cfg\n+++ b/setup.cfg\n@@ -6,2 +6,3 @@\n markers =\n     slow\n+filterwarnings = ignore\n";
        assert_eq!(
            kinds(deep, &[], Some(cfg)),
            [("setup.cfg".into(), InfraKind::PytestConfig)]
        );
        // A new pyproject.toml with a pytest table, and an addopts line anywhere.
        let toml = add_file(
            "pyproject.toml",
            "[project]\nname = \"x\"\n\n[tool.pytest.ini_options]\naddopts = \"-p plug\"",
        );
        assert_eq!(
            kinds(&toml, &[], None),
            [("pyproject.toml".into(), InfraKind::PytestConfig)]
        );
        let entry = add_file("setup.py", "setup(entry_points={'pytest11': ['p = plug']})");
        assert_eq!(
            kinds(&entry, &[], None),
            [("setup.py".into(), InfraKind::PytestConfig)]
        );
        let tox = add_file(
            "tox.ini",
            "[tox]\nenvlist = py3\n[pytest]\nxfail_strict = false",
        );
        assert_eq!(kinds(&tox, &[], None).len(), 1);
        assert!(kinds(&add_file("tox.ini", "[tox]\nenvlist = py3"), &[], None).is_empty());
    }

    #[test]
    fn inflated_hunk_counts_do_not_hide_a_file() {
        // Hunk counts claim 9 lines: without the header-pair rule the conftest.py header and
        // its body would be read as lines of src/a.py's hunk.
        let p = "--- a/src/a.py\n+++ b/src/a.py\n@@ -1,9 +1,9 @@\n-x\n+y\n--- /dev/null\n+++ b/conftest.py\n@@ -0,0 +1 @@\n+import os\n";
        assert_eq!(
            kinds(p, &[], None),
            [("conftest.py".into(), InfraKind::Conftest)]
        );
    }

    #[test]
    fn hunk_bodies_are_not_headers() {
        // A removed line `-- x` (`--- x` in the diff) inside a hunk is not a file header.
        let p = "diff --git a/src/a.py b/src/a.py\n--- a/src/a.py\n+++ b/src/a.py\n@@ -1,2 +1,1 @@\n--- conftest.py\n x\n";
        assert!(kinds(p, &[], None).is_empty());
        // Renames name both sides; plain (non-git) diffs are read too.
        let r = "diff --git a/tests/test_a.py b/src/moved.py\nsimilarity index 100%\nrename from tests/test_a.py\nrename to src/moved.py\n";
        assert_eq!(
            kinds(r, &["tests/test_a.py"], None),
            [("tests/test_a.py".into(), InfraKind::TaskTestFile)]
        );
        let plain = "--- conftest.py\n+++ conftest.py\n@@ -1 +1 @@\n-a\n+b\n";
        assert_eq!(
            kinds(plain, &[], None),
            [("conftest.py".into(), InfraKind::Conftest)]
        );
    }

    #[test]
    fn rejection_names_paths() {
        let t = vec![
            InfraTouch {
                path: "tests/test_a.py".into(),
                kind: InfraKind::TaskTestFile,
            },
            InfraTouch {
                path: "conftest.py".into(),
                kind: InfraKind::Conftest,
            },
        ];
        assert!(
            rejection_reason(&t)
                .unwrap()
                .ends_with("fake the test results: conftest.py (conftest)")
        );
        assert!(rejection_reason(&t[..1]).is_none());
    }

    proptest::proptest! {
        /// Never panics, and never flags a patch that touches only ordinary source files.
        #[test]
        fn arbitrary_patches(body in "[-+ @a-z0-9,\\n\\[\\]]{0,300}") {
            let p = format!("diff --git a/src/m.py b/src/m.py\n--- a/src/m.py\n+++ b/src/m.py\n{body}");
            proptest::prop_assert!(classify(&p, &[], |_| None).is_empty());
        }
    }
}
