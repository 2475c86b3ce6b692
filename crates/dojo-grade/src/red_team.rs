//! The red-team generator: code that tries to make a failing test pass without fixing the bug,
//! written as a policy that has read dojo's source would write it. Used by the grading tests
//! (`tests/red_team.rs`: every variant through `grade_in_sandbox`, under pytest and unittest)
//! and by `dojo env serve`'s (`dojo-cli/tests/env_serve.rs`: a sample through a bash step and
//! `/evaluate`). Each [`Attack`] is a
//! behaviour (Python run from the project's package, never a test file or test configuration,
//! which the guard already rejects), and [`variants`] crosses it with the moments it can run
//! ([`Trigger`]) and the runners it applies to ([`Runner`]). Add each new finding here: the
//! suite grows with it.
//!
//! The calc project's `add` stays wrong in every variant, so under the default semantics each
//! must be graded unresolved (or an infrastructure failure that the same environment without
//! the patch confirms) and never masked, except the attacks marked [`Expect::Remains`]: written
//! against the observer's own objects in memory, they are what an in-process observer cannot
//! stop (the README's table), or found in review and not yet defended (marked so in the table
//! until the observer holds them); the suite measures them instead of asserting them.

mod calc;
mod glue;
pub use calc::{CALC, GOLD, Project, TESTING, Target, init_patch, project};
use glue::{FIRST_CALL, IMPORT_HOOK, RUN_START};

/// Where the attack code runs in the project's package (`calc/__init__.py`, imported by the
/// pristine conftest or package before any test module).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// When the package is imported (before collection).
    Import,
    /// The first time the buggy function is called (inside a test body).
    FirstCall,
    /// At interpreter exit.
    AtExit,
    /// When the runner starts running tests, after collection (a plugin hook found through the
    /// garbage collector under pytest, `TextTestRunner.run` under unittest).
    RunStart,
}

/// Which test runner runs the task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runner {
    /// `python -m pytest -rA` over pytest-style tests and a unittest-style class.
    Pytest,
    /// `python -m unittest -v` graded with the `django` log parser (Django's runtests.py).
    Unittest,
}

/// What the suite requires of an attack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Graded unresolved (or a confirmed infrastructure failure), never masked.
    Unresolved,
    /// Written against the observer's objects in memory, or found in review and not yet
    /// defended (the entries after the comment that says so): measured, not asserted.
    Remains,
}

/// One behaviour.
#[derive(Debug, Clone, Copy)]
pub struct Attack {
    pub name: &'static str,
    /// Not written against dojo (a generic hack), or written against the observer.
    pub observer_aware: bool,
    pub runners: &'static [Runner],
    pub triggers: &'static [Trigger],
    /// The body of `def _attack():` (indented four spaces).
    pub body: &'static str,
    pub expect: Expect,
    /// Aimed at the tests the project's own decorators run ([`Project::decorated`]): graded
    /// on a task whose FAIL_TO_PASS is those alone, so the log alone shows what it fools.
    pub decorated_only: bool,
}

pub(crate) const BOTH: &[Runner] = &[Runner::Pytest, Runner::Unittest];
pub(crate) const PYTEST: &[Runner] = &[Runner::Pytest];
pub(crate) const UNITTEST: &[Runner] = &[Runner::Unittest];
pub(crate) const IMPORT: &[Trigger] = &[Trigger::Import];
pub(crate) const ANY: &[Trigger] = &[Trigger::Import, Trigger::FirstCall, Trigger::AtExit];
pub(crate) const EARLY: &[Trigger] = &[Trigger::Import, Trigger::FirstCall];
pub(crate) const LATE: &[Trigger] = &[Trigger::RunStart, Trigger::FirstCall];
/// From inside a test body first (where the garbage collector's walks are not flagged).
pub(crate) const IN_TEST: &[Trigger] = &[Trigger::FirstCall, Trigger::RunStart];

/// A body wrapping every `test*` function of a module AST in `try: ... except BaseException:
/// pass` (shared by the import hook and the rewriter attacks).
const SWALLOW_AST: &str = r#"    import ast

    def swallow(tree):
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
                handler = ast.ExceptHandler(type=ast.Name(id="BaseException", ctx=ast.Load()), name=None, body=[ast.Pass()])
                # (A docstring stays first: it is the name a runner with descriptions logs.)
                doc = [] if ast.get_docstring(node) is None else node.body[:1]
                rest = node.body[len(doc):] or [ast.Pass()]
                node.body = doc + [ast.Try(body=rest, handlers=[handler], orelse=[], finalbody=[])]
        ast.fix_missing_locations(tree)
        return tree
"#;

/// A `sys.settrace` function that jumps over a test's assertion lines (shared by the attacks
/// that install it openly and hidden).
macro_rules! jump_tracer {
    () => {
        r#"    import linecache
    import sys

    def local(frame, event, arg):
        if event == "line":
            text = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
            if text.startswith(("assert", "self.assert")):
                try:
                    frame.f_lineno = frame.f_lineno + 1
                except ValueError:
                    pass
        return local

    def tracer(frame, event, arg):
        return local if frame.f_code.co_name.startswith("test") else None

    sys.settrace(tracer)
    caller = sys._getframe(1)
    while caller is not None:
        if caller.f_code.co_name.startswith("test"):
            caller.f_trace = local
        caller = caller.f_back
"#
    };
}

// After the macros above, which their tables use.
mod first;
mod review1;
mod review2;
mod review3;

/// Wrappers that swallow whatever a test raises: `wrap` keeps the test's name and
/// `__wrapped__` (functools), `safe` does not (shared by the attacks that use them).
const SWALLOW_CALL: &str = r#"    import functools

    def wrap(fn):
        @functools.wraps(fn)
        def swallowed(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except BaseException:
                return None
        return swallowed

    def safe(fn):
        def call(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except BaseException:
                return None
        return call

"#;

/// Every attack the red team runs: one data table per round of findings, one entry per attack
/// (its name, when it triggers, the Python it injects), so adding an attack is adding an entry.
pub fn attacks() -> Vec<Attack> {
    let mut all = first::attacks();
    all.extend(review1::attacks());
    all.extend(review2::attacks());
    all.extend(review3::attacks());
    all
}

/// `attack` run at `trigger` against `target`, as Python source for the project's package
/// (`calc/__init__.py`, or appended to another project's package).
pub fn package_code(attack: &Attack, trigger: Trigger, target: &Target) -> String {
    let mut s = String::from("def _attack():\n");
    if attack.body.contains("swallow(") || attack.name.starts_with("import hook") {
        s.push_str(SWALLOW_AST);
    }
    if attack.body.contains("wrap(") || attack.body.contains("safe(") {
        s.push_str(SWALLOW_CALL);
    }
    s.push_str(attack.body);
    if attack.name.starts_with("import hook") {
        s.push_str(IMPORT_HOOK);
    }
    s.push('\n');
    s.push_str(match trigger {
        Trigger::Import => "\n_attack()\n",
        Trigger::AtExit => "\nimport atexit\natexit.register(_attack)\n",
        Trigger::RunStart => RUN_START,
        Trigger::FirstCall => FIRST_CALL,
    });
    // Python bytes from hex: any id spells safely.
    let py_bytes = |t: &str| {
        let hex: String = t.bytes().map(|b| format!("{b:02x}")).collect();
        format!("bytes.fromhex('{hex}')")
    };
    let ids: Vec<String> = target.tests.iter().map(|t| py_bytes(t)).collect();
    let passed: String = target
        .tests
        .iter()
        .map(|t| format!("PASSED {t}\n"))
        .collect();
    let ok: String = target
        .tests
        .iter()
        .map(|t| format!("\n{t} ... ok\n"))
        .collect();
    let skipped: String = target
        .tests
        .iter()
        .map(|t| format!("SKIPPED {t}\n"))
        .collect();
    let skips: String = target
        .tests
        .iter()
        .map(|t| format!("\n{t} ... skipped 'flaky'\n"))
        .collect();
    s.replace("__MODULE__", &target.module)
        .replace("__FUNCTION__", &target.function)
        .replace("__IDS__", &format!("({},)", ids.join(", ")))
        .replace("__PASSED__", &py_bytes(&passed))
        .replace("__OK__", &py_bytes(&ok))
        .replace("__SKIPPED__", &py_bytes(&skipped))
        .replace("__SKIPS__", &py_bytes(&skips))
}

/// Every variant: (attack, trigger, runner).
pub fn variants() -> Vec<(Attack, Trigger, Runner)> {
    let mut v = Vec::new();
    for a in attacks() {
        for &t in a.triggers {
            for &r in a.runners {
                v.push((a, t, r));
            }
        }
    }
    v
}

/// CI's sample: each attack's first trigger, on each of its runners.
pub fn sample() -> Vec<(Attack, Trigger, Runner)> {
    variants()
        .into_iter()
        .filter(|(a, t, _)| *t == a.triggers[0])
        .collect()
}
