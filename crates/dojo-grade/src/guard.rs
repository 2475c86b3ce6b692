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
//! - [`InfraKind::Conftest`], [`InfraKind::PytestConfig`], [`InfraKind::InterpreterStartup`],
//!   [`InfraKind::RunnerShadow`], [`InfraKind::PackageMetadata`]: the patch is graded
//!   unresolved with the reason, without running (these files change how results are produced
//!   or reported, and no gold patch of the SWE-bench sets touches them).
//!
//! Paths are read as git reads them ([`dojo_patch::Patch`]: C-quoted names included), and
//! configuration as its readers read it: `pyproject.toml` by a TOML parser (quoted keys and
//! escapes read as pytest reads them), `setup.cfg` / `tox.ini` by iniconfig's and
//! configparser's rules ([`crate::ini`]); the settings before and after the patch are compared.
//!
//! Either way the report records the touched paths ([`crate::InstanceReport`]'s
//! `touched_test_infrastructure` and `test_infrastructure`).
//!
//! Only the files a patch touches are judged, not what their code does: a patch that makes
//! library code print fake results is caught instead by the exit-status check of the grading
//! flow (a non-zero test exit with no failing test in the parsed output is not trusted).

use std::collections::BTreeSet;

use dojo_patch::{FileDiff, Hunk, LineKind, Patch};
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
    /// pytest's configuration: `pytest.ini` / `.pytest.ini`; a change of what pytest reads in
    /// `setup.cfg` / `tox.ini` / `pyproject.toml` (their pytest sections and `pytest11` plugin
    /// entry points, parsed before and after the patch); in `setup.py`, or where a side does
    /// not parse, a line naming `addopts`, `pytest_plugins` or `pytest11`, or any line of a
    /// pytest section.
    PytestConfig,
    /// `sitecustomize.py`, `usercustomize.py` or a `.pth` file: code Python runs at startup.
    InterpreterStartup,
    /// A module or package at the repository root named like the test runner, its plugins'
    /// machinery or the standard library's test modules (`pytest.py`, `_pytest/`, `pluggy/`,
    /// `unittest.py`, `site.py`, ...): `python -m pytest` and `PYTHONPATH=/testbed` put the
    /// root ahead of the installed ones, so it replaces them. Also a repository's own runner
    /// (sympy's `bin/test`, `sympy/testing/runtests.py`): it writes the log that is graded.
    RunnerShadow,
    /// Package metadata (`*.dist-info/`, `*.egg-info/`, `entry_points.txt`): a `pytest11`
    /// entry point in a `.dist-info` on `sys.path` is a plugin pytest loads.
    PackageMetadata,
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
            InfraKind::RunnerShadow => "runner_shadow",
            InfraKind::PackageMetadata => "package_metadata",
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

/// Top-level modules that, at the repository root, would replace the test runner or what it
/// loads: pytest and its machinery, the standard library's test frameworks, `site`.
const SHADOWABLE: &[&str] = &[
    "pytest",
    "_pytest",
    "py",
    "pluggy",
    "iniconfig",
    "xdist",
    "unittest",
    "doctest",
    "nose",
    "nose2",
    "site",
];

/// Repositories' own test runners, which their test commands run and their log parsers read:
/// sympy's `bin/test`, the `runtests.py` behind it, and the assertion helpers its tests import
/// (`raises`, `XFAIL`: the observer compiles them from disk at startup and holds the tests to
/// them). No gold patch of SWE-bench Verified or Lite touches these.
const OWN_RUNNERS: &[&str] = &[
    "bin/test",
    "sympy/testing/runtests.py",
    "sympy/utilities/runtests.py",
    "sympy/testing/pytest.py",
    "sympy/utilities/pytest.py",
];

/// The kind a path has by its name alone (`None`: not test infrastructure by name; the
/// configuration files that hold more than pytest's settings are judged by their hunks).
fn kind_by_name(path: &str) -> Option<InfraKind> {
    let name = file_name(path);
    let mut parts = path.split('/');
    let top = parts.next().unwrap_or(path);
    let top_module = match parts.next() {
        Some(_) => Some(top),
        None => top.strip_suffix(".py"),
    };
    if top_module.is_some_and(|m| SHADOWABLE.contains(&m)) || OWN_RUNNERS.contains(&path) {
        return Some(InfraKind::RunnerShadow);
    }
    if name == "entry_points.txt"
        || path
            .split('/')
            .any(|c| c.ends_with(".dist-info") || c.ends_with(".egg-info"))
    {
        return Some(InfraKind::PackageMetadata);
    }
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

/// `[pytest]`, `[tool:pytest]`, `[tool.pytest.ini_options]` (and any `[tool.pytest…]`), read
/// loosely, for files a parser could not read: quotes and blanks inside the name are dropped
/// (`[tool."pytest" . ini_options]` is pytest's table to TOML).
fn section_of(line: &str) -> Option<String> {
    let t = line.trim();
    let inner = t.strip_prefix('[')?.trim_start_matches('[');
    let (name, _) = inner.split_once(']')?;
    Some(
        name.chars()
            .filter(|c| !matches!(c, '"' | '\'' | ' ' | '\t'))
            .collect::<String>()
            .to_ascii_lowercase(),
    )
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

/// What a `pyproject.toml` tells pytest: the `tool.pytest` table and the `pytest11` entry
/// points (PEP 621 and Poetry), read by a TOML parser, so quoted keys and escapes
/// (`[tool."pytest".ini_options]`, `"add\u006fpts"`) read as pytest reads them. `None` when
/// the text is not TOML.
fn pyproject_pytest_settings(text: &str) -> Option<Vec<Option<toml::Value>>> {
    let doc: toml::Table = text.parse().ok()?;
    let at = |path: &[&str]| -> Option<toml::Value> {
        let mut v = doc.get(path[0])?;
        for k in &path[1..] {
            v = v.get(k)?;
        }
        Some(v.clone())
    };
    Some(vec![
        at(&["tool", "pytest"]),
        at(&["project", "entry-points", "pytest11"]),
        at(&["tool", "poetry", "plugins", "pytest11"]),
    ])
}

/// Does the patch change what `pyproject.toml` tells pytest? Compares the parsed settings of
/// the file before (`pristine`; empty when new) and after the patch; `None` when either side
/// cannot be had (hunks that do not apply exactly, text that is not TOML), and the caller falls
/// back to reading the hunks.
fn pyproject_changes_pytest(f: &FileDiff, pristine: Option<&str>) -> Option<bool> {
    let before = pristine.unwrap_or("");
    let after = f.apply(before)?;
    Some(pyproject_pytest_settings(before)? != pyproject_pytest_settings(&after)?)
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

/// Does the patch change what `setup.cfg` / `tox.ini` tell pytest, as iniconfig and
/// setuptools read them ([`crate::ini`])? `None` as for [`pyproject_changes_pytest`].
fn ini_changes_pytest(f: &FileDiff, name: &str, pristine: Option<&str>) -> Option<bool> {
    let before = pristine.unwrap_or("");
    let after = f.apply(before)?;
    Some(crate::ini::pytest_settings(name, before)? != crate::ini::pytest_settings(name, &after)?)
}

/// Whether `f`, a diff of the shared configuration file `path`, changes pytest's settings:
/// semantically (the settings pytest and setuptools would read, before and after) for
/// `pyproject.toml`, `setup.cfg` and `tox.ini` where both sides parse, else by the sections
/// and words of its hunks (and always so for `setup.py`, which is code).
fn config_changed(f: &FileDiff, path: &str, pristine: Option<&str>) -> bool {
    let name = file_name(path);
    let semantic = match name {
        "pyproject.toml" => pyproject_changes_pytest(f, pristine),
        "setup.cfg" | "tox.ini" => ini_changes_pytest(f, name, pristine),
        _ => None,
    };
    semantic.unwrap_or_else(|| changes_pytest_config(&f.hunks, pristine))
}

/// The test infrastructure `model_patch` touches, sorted by path. `test_files` are the task's
/// test files ([`task_test_files`]); `pristine(path)` gives a file's content before the patch
/// (asked only for `setup.cfg`, `tox.ini`, `pyproject.toml` and `setup.py`).
pub fn classify(
    model_patch: &Patch,
    test_files: &[String],
    pristine: impl Fn(&str) -> Option<String>,
) -> Vec<InfraTouch> {
    let mut out = BTreeSet::new();
    for f in &model_patch.files {
        for p in &f.named {
            let kind = if test_files.iter().any(|t| t == p) {
                Some(InfraKind::TaskTestFile)
            } else if let Some(k) = kind_by_name(p) {
                Some(k)
            } else if is_shared_config(p) && config_changed(f, p, pristine(p).as_deref()) {
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
pub fn config_paths(model_patch: &Patch) -> Vec<String> {
    let mut v: Vec<String> = model_patch
        .files
        .iter()
        .flat_map(|f| &f.named)
        .filter(|p| is_shared_config(p))
        .cloned()
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
        classify(&Patch::parse(patch), &tests, |_| {
            pristine.map(str::to_string)
        })
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
        // Read as pytest reads it: a comment in [tool:pytest] changes nothing; a plugin entry
        // point in [options.entry_points] (a reinstall loads it) does.
        let comment = "diff --git a/setup.cfg b/setup.cfg\n--- a/setup.cfg\n+++ b/setup.cfg\n@@ -6,2 +6,3 @@\n markers =\n     slow\n+# addopts = -p plug\n";
        assert!(kinds(comment, &[], Some(cfg)).is_empty());
        let entry = "diff --git a/setup.cfg b/setup.cfg\n--- a/setup.cfg\n+++ b/setup.cfg\n@@ -1,3 +1,5 @@\n [metadata]\n name = calc\n version = 1\n+[options.entry_points]\n+PyTest11 = p = plug\n";
        assert_eq!(
            kinds(entry, &[], Some(cfg)),
            [("setup.cfg".into(), InfraKind::PytestConfig)]
        );
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
    fn runner_shadows_and_package_metadata() {
        let p = add_file("pytest.py", "x")
            + &add_file("_pytest/python.py", "x")
            + &add_file("unittest.py", "x")
            + &add_file("fake-1.0.dist-info/entry_points.txt", "[pytest11]")
            + &add_file("src/x.egg-info/PKG-INFO", "x");
        let got: Vec<InfraKind> = kinds(&p, &[], None).into_iter().map(|(_, k)| k).collect();
        assert_eq!(
            got,
            [
                InfraKind::RunnerShadow,    // _pytest/python.py
                InfraKind::PackageMetadata, // fake-1.0.dist-info/entry_points.txt
                InfraKind::RunnerShadow,    // pytest.py
                InfraKind::PackageMetadata, // src/x.egg-info/PKG-INFO
                InfraKind::RunnerShadow,    // unittest.py
            ]
        );
        // pytest's own sources (SWE-bench's pytest tasks edit them) are not at the root.
        let own = add_file("src/_pytest/python.py", "x") + &add_file("src/pytest/__init__.py", "x");
        assert!(kinds(&own, &[], None).is_empty());
        // sympy's own runner writes the log its parser reads, and its tests assert through
        // `sympy.testing.pytest` (the observer holds them to its startup copy); the rest of
        // its library is the project's.
        let sympy = add_file("sympy/testing/runtests.py", "x")
            + &add_file("bin/test", "x")
            + &add_file("sympy/testing/pytest.py", "x")
            + &add_file("sympy/testing/randtest.py", "x");
        let got: Vec<(String, InfraKind)> = kinds(&sympy, &[], None);
        assert_eq!(
            got,
            [
                ("bin/test".to_string(), InfraKind::RunnerShadow),
                (
                    "sympy/testing/pytest.py".to_string(),
                    InfraKind::RunnerShadow
                ),
                (
                    "sympy/testing/runtests.py".to_string(),
                    InfraKind::RunnerShadow
                ),
            ]
        );
    }

    #[test]
    fn pyproject_is_read_as_toml() {
        let cfg = "[project]\nname = \"x\"\n\n[tool.coverage.run]\nbranch = true\n";
        // Quoted table and escaped key: pytest's `addopts` all the same.
        let hidden = "diff --git a/pyproject.toml b/pyproject.toml\n--- a/pyproject.toml\n+++ b/pyproject.toml\n@@ -5 +5,3 @@\n branch = true\n+[tool.\"pytest\".ini_options]\n+\"add\\u006fpts\" = \"-p plug\"\n";
        assert_eq!(
            kinds(hidden, &[], Some(cfg)),
            [("pyproject.toml".into(), InfraKind::PytestConfig)]
        );
        // A plugin entry point in PEP 621's table.
        let ep = "diff --git a/pyproject.toml b/pyproject.toml\n--- a/pyproject.toml\n+++ b/pyproject.toml\n@@ -2 +2,2 @@\n name = \"x\"\n+entry-points.\"pytest11\" = {p = \"plug\"}\n";
        assert_eq!(kinds(ep, &[], Some(cfg)).len(), 1);
        // Another tool's table, even with pytest's words in a comment: not pytest's settings.
        // Where the file does not parse after the patch (a duplicate table), the hunks are read
        // with quotes dropped from section names.
        let pristine = "[tool.pytest.ini_options]\nmarkers = []\n";
        let dup = "diff --git a/pyproject.toml b/pyproject.toml\n--- a/pyproject.toml\n+++ b/pyproject.toml\n@@ -2 +2,3 @@\n markers = []\n+[tool.\"pytest\" . ini_options]\n+\"add\\u006fpts\" = \"-p plug\"\n";
        assert_eq!(
            kinds(dup, &[], Some(pristine)),
            [("pyproject.toml".into(), InfraKind::PytestConfig)]
        );
        let other = "diff --git a/pyproject.toml b/pyproject.toml\n--- a/pyproject.toml\n+++ b/pyproject.toml\n@@ -5 +5,2 @@\n branch = true\n+omit = [\"x\"]  # not addopts\n";
        assert!(kinds(other, &[], Some(cfg)).is_empty());
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
            proptest::prop_assert!(classify(&Patch::parse(&p), &[], |_| None).is_empty());
        }
    }
}
