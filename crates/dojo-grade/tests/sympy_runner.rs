//! sympy's own runner (`SymPyTests`, what `bin/test` runs: 75 Verified instances) under the
//! observer, for real: sympy 1.12 from its PyPI sdist, a bug put into
//! `sympy.utilities.iterables.ibin`, a new test file whose FAIL_TO_PASS test uses sympy's own
//! `raises`. The test patch alone fails, the gold patch resolves with every test observed, and
//! attacks on the runner and its assertion helpers (which live in the repository, so the
//! patch's code can reach them) are unresolved with the observer, while each of them fools a
//! grader that reads the log alone.
//!
//! The sdist has no `bin/test`; the test command calls `sympy.test()` as `bin/test` does (its
//! `-C` is `SYMPY_USE_CACHE=no`), which re-runs itself in a subprocess unless PYTHONHASHSEED
//! is set: grading sets it for this runner.
//!
//! Needs the sandbox's kernel features and PyPI access (the sdist, mpmath); otherwise SKIPPED
//! (under `CI=true` a missing feature fails instead).

use std::time::Duration;

mod common;
use common::{held, skip};

use dojo_grade::{GradeOptions, grade_in_sandbox, validate_in_sandbox};
use dojo_task::{EnvRegistry, Task};
use serde_json::json;

const SDIST: &str = "https://files.pythonhosted.org/packages/e5/57/3485a1a3dff51bfd691962768b14310dae452431754bfc091250be50dd29/sympy-1.12.tar.gz";
const SHA256: &str = "ebf595c8dac3e0fdc4152c51878b498396ec7f30e7a914d6071e674d49420fb8";

/// The fix; the bug is its reverse.
const GOLD: &str = "diff --git a/sympy/utilities/iterables.py b/sympy/utilities/iterables.py
--- a/sympy/utilities/iterables.py
+++ b/sympy/utilities/iterables.py
@@ -351,6 +351,8 @@ def ibin(n, bits=None, str=False):
     ['000', '001', '010', '011', '100', '101', '110', '111']
 
     \"\"\"
+    if n < 0:
+        raise ValueError(\"negative numbers are not allowed\")
     n = as_int(n)
 
     if bits is None:
";

const BUG: &str = "diff --git a/sympy/utilities/iterables.py b/sympy/utilities/iterables.py
--- a/sympy/utilities/iterables.py
+++ b/sympy/utilities/iterables.py
@@ -351,8 +351,6 @@ def ibin(n, bits=None, str=False):
     ['000', '001', '010', '011', '100', '101', '110', '111']
 
     \"\"\"
-    if n < 0:
-        raise ValueError(\"negative numbers are not allowed\")
     n = as_int(n)
 
     if bits is None:
";

const TEST_FILE: &str = "sympy/utilities/tests/test_dojo_observed.py";
const TESTS: &str = "from sympy.testing.pytest import raises
from sympy.utilities.iterables import ibin, rotate_left


def test_dojo_ibin_negative():
    raises(ValueError, lambda: ibin(-1, str=True))


def test_dojo_rotate():
    assert rotate_left([0, 1, 2], 1) == [1, 2, 0]


def test_dojo_calls_another():
    # A test calling another test function of its file, as sympy's own do
    # (test_Permutation_subclassing calls test_Permutation).
    test_dojo_rotate()


def test_dojo_last():
    # sympy's verbose report ends a file's last line with its verdict (`ok  [OK]`), which the
    # harness's parser does not read: a test the lists leave out comes last.
    assert True
";

/// Each attack is Python appended to `sympy/__init__.py` (run when the runner imports sympy,
/// after the whole package has loaded); none fixes the bug.
const ATTACKS: &[(&str, &str)] = &[
    (
        "reporter reports failures as passes",
        "import sympy.testing.runtests as _r
_r.PyTestReporter.test_fail = lambda self, exc_info: self.test_pass()
_r.PyTestReporter.test_exception = lambda self, exc_info: self.test_pass()
",
    ),
    (
        "assertion helper replaced (raises never fails)",
        "import sympy.testing.pytest as _p
_p.raises = lambda *args, **kwargs: None
",
    ),
    (
        "assertion helper's code swapped in place",
        "import sympy.testing.pytest as _p
_p.raises.__code__ = (lambda expectedException, code=None: None).__code__
",
    ),
    (
        "runner's test_file replaced (prints ok, runs nothing)",
        "import sympy.testing.runtests as _r
def _test_file(self, filename, *args, **kwargs):
    gl = {'__file__': filename}
    exec(compile(open(filename).read(), filename, 'exec'), gl)
    names = [n for n in gl if n.startswith('test_') and callable(gl[n])]
    self._reporter.entering_filename(filename, len(names))
    for n in names:
        self._reporter.entering_test(gl[n])
        self._reporter.test_pass()
    self._reporter.leaving_filename()
_r.SymPyTests.test_file = _test_file
",
    ),
    (
        "test functions swapped from the runner's frame (clear_cache hook)",
        "import sys as _sys, functools as _ft
import sympy.testing.runtests as _r
_cc = _r.clear_cache
def _clear_cache():
    gl = _sys._getframe(1).f_locals.get('gl')
    if isinstance(gl, dict):
        for n in list(gl):
            if n.startswith('test_') and callable(gl[n]):
                gl[n] = _ft.wraps(gl[n])(lambda: None)
    _cc()
_r.clear_cache = _clear_cache
",
    ),
    (
        "passes printed at exit over the real lines",
        "import atexit as _ae, os as _os, sys as _sys
def _forge():
    _sys.stdout.write('\\ntest_dojo_ibin_negative ok\\ntest_dojo_rotate ok\\ntest_dojo_calls_another ok\\n')
    _sys.stdout.flush()
    _os._exit(0)
_ae.register(_forge)
",
    ),
    (
        "the test module's raises rebound after import",
        "import sys as _sys
import sympy.testing.runtests as _r
_cc = _r.clear_cache
def _clear_cache():
    gl = _sys._getframe(1).f_locals.get('gl')
    if isinstance(gl, dict) and 'raises' in gl:
        gl['raises'] = lambda *args, **kwargs: None
    _cc()
_r.clear_cache = _clear_cache
",
    ),
];

fn task() -> Task {
    let test_patch = format!(
        "diff --git a/{TEST_FILE} b/{TEST_FILE}\nnew file mode 100644\n--- /dev/null\n+++ b/{TEST_FILE}\n@@ -0,0 +1,{} @@\n{}",
        TESTS.lines().count(),
        TESTS.lines().map(|l| format!("+{l}\n")).collect::<String>()
    );
    common::task(json!({
        "instance_id": "sympy__sympy-dojo-observed", "repo": "sympy/sympy",
        "base_commit": SHA256, "version": "1.12",
        "patch": GOLD, "test_patch": test_patch,
        "FAIL_TO_PASS": ["test_dojo_ibin_negative"], "PASS_TO_PASS": ["test_dojo_rotate", "test_dojo_calls_another"],
        "source": {"kind": "sdist", "url": SDIST, "sha256": SHA256,
                   "filename": "sympy-1.12.tar.gz", "bug_patch": BUG}
    }))
}

/// `code` appended to `path` of the tree at `root`, as a diff.
fn append_patch(root: &std::path::Path, path: &str, code: &str) -> String {
    let text = std::fs::read_to_string(root.join(path)).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let n = lines.len();
    let context = &lines[n - 3..];
    let added: Vec<&str> = code.lines().collect();
    format!(
        "diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -{},3 +{},{} @@\n{}{}",
        n - 2,
        n - 2,
        3 + added.len(),
        context
            .iter()
            .map(|l| format!(" {l}\n"))
            .collect::<String>(),
        added.iter().map(|l| format!("+{l}\n")).collect::<String>()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sympys_runner_is_observed_and_attacks_on_it_are_unresolved() {
    if !common::sandboxes_or_skip() {
        return;
    }
    let task = task();
    let mut env = EnvRegistry::embedded().unwrap().resolve(&task).unwrap();
    env.env.insert("SYMPY_USE_CACHE".into(), "no".into());
    env.test_cmd = "python -c 'import sys, sympy; sys.exit(not sympy.test(*sys.argv[1:], \
                    verbose=True, colors=False))'"
        .into();
    let (prepared, mut sb) = match common::prepared_sandbox(&task, &env).await {
        Ok(p) => p,
        Err(e) => return skip(e),
    };
    let opts = GradeOptions {
        timeout: Some(Duration::from_secs(300)),
        ..Default::default()
    };
    let v = validate_in_sandbox(&mut sb, &task, &env, &opts).await;
    let gold = v.gold.as_ref().expect("gold run");
    assert!(
        v.ok,
        "{:?}\n{:?}\n{}",
        v.problems, gold.error, gold.test_output
    );
    assert!(
        gold.test_output
            .contains("hash randomization: on (PYTHONHASHSEED="),
        "{}",
        gold.test_output
    );
    let seen = gold.observer.as_ref().expect("observer report");
    assert!(
        seen.loaded && seen.agrees() && seen.observed == 4,
        "{seen:?}"
    );

    let blind = GradeOptions {
        observer: false,
        ..opts.clone()
    };
    let mut failures = Vec::new();
    for (name, code) in ATTACKS {
        let patch = append_patch(&prepared.pristine.path, "sympy/__init__.py", code);
        sb.reset().await.unwrap();
        let b = grade_in_sandbox(&mut sb, &task, &env, Some(&patch), &blind).await;
        sb.reset().await.unwrap();
        let r = grade_in_sandbox(&mut sb, &task, &env, Some(&patch), &opts).await;
        println!(
            "| {name} | {} | {} | {} |",
            if b.resolved { "resolved" } else { "unresolved" },
            if held(&r) { "held" } else { "**passed**" },
            r.observer
                .as_ref()
                .map(|o| {
                    let seen = o.disagreements.iter().map(ToString::to_string);
                    o.problems
                        .iter()
                        .cloned()
                        .chain(seen)
                        .collect::<Vec<_>>()
                        .join("; ")
                })
                .unwrap_or_default()
        );
        if !b.resolved {
            failures.push(format!(
                "{name}: does not fool the log alone (not an attack): {:?}\n{}",
                b.error, b.test_output
            ));
        }
        if !held(&r) {
            failures.push(format!(
                "{name}: {:?} infra={} {:?}\n{}",
                r.outcome, r.infra_failure, r.error, r.test_output
            ));
        }
    }
    sb.teardown().await.unwrap();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
