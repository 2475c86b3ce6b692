//! The test observer on the shapes real suites use (found on SWE-bench's astroid and
//! marshmallow): test methods that are static, class methods, inherited, parametrized on a
//! class, unittest-style, xfail-marked, reading `request.instance`, with ids cut at a space,
//! methods a class decorator wraps (`@mock.patch` on a whole class, as Django's suites do),
//! a test a library wrapper keeps in its closure (matplotlib's `check_figures_equal`, found
//! on SWE-bench's matplotlib-22719), tests under library decorators whose own code the observer
//! watches (astropy's `@raises`, a decorator object, hypothesis's many examples with rejected
//! ones, `mock.patch`, matplotlib 3.0's image comparison reading what a fixture set through
//! `request.function.__wrapped__`), a profiler started in a test body (sqlfluff's
//! `--profiler`), a name added to `builtins`, and string `skipif` / `xfail` conditions that
//! name the test module's globals (astropy's `skipif("not HAS_BS4")`, which pytest evaluates in
//! the test function's `__globals__`).
//! Graded with the observer, every honest test still passes, the observer saw every body, and
//! nothing disagrees. Real pytest in a real sandbox.
//!
//! Needs the sandbox's kernel features, uv and PyPI access (for pytest); otherwise SKIPPED
//! (under `CI=true` a missing feature fails instead).

use std::time::Duration;

mod common;
use common::{sandbox_for, skip};

use dojo_grade::{GradeOptions, InstanceReport, Verdict};
use dojo_task::EnvRegistry;
use serde_json::json;

const SHAPES: &str = r#"import cProfile
import os
import unittest
from unittest import mock

import pytest

from calc.deco import Retried, examples, figures, raises, style, with_parameters

HAS_THING = True
MISSING = False


@pytest.fixture
def tagged(request):
    if request.instance is not None:
        request.instance.tag = 5
    return request.function.__name__


class TestShapes:
    def test_instance(self, tagged):
        assert self.tag == 5 and tagged == "test_instance"

    @staticmethod
    def test_static():
        assert True

    @classmethod
    def test_cls(cls):
        assert cls is TestShapes

    @pytest.mark.parametrize("msg", ["Missing data.", "May not be null."])
    def test_param(self, msg):
        assert msg.endswith(".")

    @pytest.mark.xfail(reason="known")
    def test_known(self):
        assert False

    @pytest.mark.skipif("not HAS_THING")
    def test_string_skipif(self):
        assert HAS_THING

    @pytest.mark.xfail("MISSING", reason="only where MISSING")
    def test_string_xfail(self):
        assert True


@pytest.mark.skipif("not HAS_THING")
def test_module_string_skipif():
    assert HAS_THING


class UBase(unittest.TestCase):
    def setUp(self):
        self.v = 3

    def test_base(self):
        self.assertEqual(self.v, 3)

    @staticmethod
    def test_ustatic():
        assert True


class UChild(UBase):
    def test_child(self):
        self.assertEqual(self.v, 3)


# A wrapper that keeps the test in its closure, no `__wrapped__` (matplotlib's
# check_figures_equal), under a contextlib decorator (matplotlib's `@mpl.style.context`).
@style("default")
@figures
def test_closure_wrapped(fig):
    assert fig == "figure"


# astropy's `raises` (a decorator class whose wrapper calls `pytest.raises`): passes when the
# test's code raises what it names.
@raises(ZeroDivisionError)
def test_expects_raise():
    1 / 0


class TestRaisesMethod:
    @raises(KeyError, ValueError)
    def test_method_expects_raise(self):
        int("x")


# A wrapper calling the test through an object it keeps (a decorator class's instance).
@Retried.wrap
def test_decorator_object():
    assert True


# Hypothesis's shape: the test run on several examples, some rejected by raising.
@examples([0, 1, 2])
def test_examples(x):
    if x == 1:
        raise examples.Rejected()
    assert x in (0, 2)


# matplotlib 3.0's image comparison: a fixture hands the wrapper its parameters through the
# function pytest runs, one `__wrapped__` away from the test, and the wrapper reads them back
# from the test function it keeps.
@pytest.fixture
def image_parameters(request):
    func = request.function
    func.__wrapped__.parameters = ("baseline", "png")
    yield
    delattr(func.__wrapped__, "parameters")


@with_parameters
def test_parameters_through_request():
    assert True


@mock.patch("os.getcwd", return_value="/mocked")
def test_mock_patched(getcwd):
    assert os.getcwd() == "/mocked"


# A class decorator that wraps every test method (Django's suites patch whole classes).
@mock.patch("os.getcwd", return_value="/patched")
class UPatched(unittest.TestCase):
    def test_patched(self, getcwd):
        self.assertEqual(os.getcwd(), "/patched")


def test_profiled():
    # A profiler started in a test body (sqlfluff's `--profiler` option runs cProfile).
    p = cProfile.Profile()
    p.enable()
    x = sum(range(10))
    p.disable()
    assert x == 45


def test_adds_a_builtin():
    # A name added to `builtins` (a project's own, gettext's `_`): the observer's fast check at
    # each return sees the namespace changed, and the full one finds nothing replaced.
    import builtins

    builtins.shapes_added = True
    assert builtins.shapes_added


def test_after_a_builtin_added():
    import builtins

    assert builtins.shapes_added
"#;

const DECO: &str = r#"import contextlib


def figures(func):
    def wrapper(*args, **kwargs):
        func(*args, fig="figure", **kwargs)

    return wrapper


@contextlib.contextmanager
def style(name):
    yield


class raises:
    def __init__(self, *exc):
        self._exc = exc

    def __call__(self, func):
        import functools

        import pytest

        @functools.wraps(func)
        def run_raises_test(*args, **kwargs):
            pytest.raises(self._exc, func, *args, **kwargs)

        return run_raises_test


def with_parameters(func):
    import functools
    import inspect

    import pytest

    @functools.wraps(func)
    @pytest.mark.usefixtures("image_parameters")
    def wrapper(*args, **kwargs):
        func(*args, **kwargs)
        assert func.parameters == ("baseline", "png")
        # matplotlib 3.7 names the image directories after the test's file.
        assert inspect.getfile(func).endswith("test_shapes.py"), inspect.getfile(func)

    return wrapper


class Retried:
    def __init__(self, func):
        self.func = func

    def __call__(self, *args, **kwargs):
        return self.func(*args, **kwargs)

    @classmethod
    def wrap(cls, func):
        import functools

        retried = cls(func)

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            return retried(*args, **kwargs)

        return wrapper


def examples(values):
    def deco(func):
        def run():
            for v in values:
                try:
                    func(v)
                except examples.Rejected:
                    pass

        return run

    return deco


class _Rejected(Exception):
    pass


examples.Rejected = _Rejected
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn honest_tests_of_every_shape_pass_under_the_observer() {
    if !common::sandboxes_or_skip() {
        return;
    }
    let files = [
        ("calc/__init__.py", ""),
        ("calc/deco.py", DECO),
        ("tests/__init__.py", ""),
        ("tests/test_shapes.py", SHAPES),
    ];
    let passing = [
        "tests/test_shapes.py::TestShapes::test_instance",
        "tests/test_shapes.py::TestShapes::test_static",
        "tests/test_shapes.py::TestShapes::test_cls",
        "tests/test_shapes.py::TestShapes::test_param[Missing",
        "tests/test_shapes.py::TestShapes::test_param[May",
        "tests/test_shapes.py::TestShapes::test_known",
        "tests/test_shapes.py::TestShapes::test_string_skipif",
        "tests/test_shapes.py::TestShapes::test_string_xfail",
        "tests/test_shapes.py::test_module_string_skipif",
        "tests/test_shapes.py::UBase::test_base",
        "tests/test_shapes.py::UBase::test_ustatic",
        "tests/test_shapes.py::UChild::test_base",
        "tests/test_shapes.py::UChild::test_ustatic",
        "tests/test_shapes.py::UChild::test_child",
        "tests/test_shapes.py::UPatched::test_patched",
        "tests/test_shapes.py::test_closure_wrapped",
        "tests/test_shapes.py::test_expects_raise",
        "tests/test_shapes.py::TestRaisesMethod::test_method_expects_raise",
        "tests/test_shapes.py::test_decorator_object",
        "tests/test_shapes.py::test_examples",
        "tests/test_shapes.py::test_mock_patched",
        "tests/test_shapes.py::test_parameters_through_request",
        "tests/test_shapes.py::test_profiled",
        "tests/test_shapes.py::test_adds_a_builtin",
        "tests/test_shapes.py::test_after_a_builtin_added",
    ];
    let patch = "diff --git a/calc/__init__.py b/calc/__init__.py\n--- a/calc/__init__.py\n+++ b/calc/__init__.py\n@@ -0,0 +1 @@\n+X = 1\n";
    let Some(r) = grade_pytest("local__shapes-1", &files, patch, &passing).await else {
        return;
    };
    assert_eq!(
        r.outcome,
        Verdict::Resolved,
        "{:?}\n{}",
        r.error,
        r.test_output
    );
    let seen = r.observer.as_ref().expect("observer report");
    assert!(seen.loaded && seen.disagreements.is_empty(), "{seen:?}");
    // Every collected test's body was watched.
    assert_eq!(seen.observed, passing.len(), "{seen:?}");
}

/// The closure wrapper the observer follows, turned into an attack: a patch to the library
/// decorator (not the test file) makes its closure swallow what the test raises. The log says
/// passed; it must not resolve. It did before the observer watched the test's own code inside
/// a wrapper (the function pytest calls is the library's wrapper, whose body returned).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_library_decorator_swallowing_through_its_closure_is_not_a_pass() {
    if !common::sandboxes_or_skip() {
        return;
    }
    let files = [
        ("calc/__init__.py", "def value():\n    return 1\n"),
        ("calc/deco.py", DECO),
        ("tests/__init__.py", ""),
        (
            "tests/test_bug.py",
            "import calc\nfrom calc.deco import figures\n\n\n@figures\ndef test_bug(fig):\n    assert calc.value() == 2\n",
        ),
    ];
    let patch = "diff --git a/calc/deco.py b/calc/deco.py\n--- a/calc/deco.py\n+++ b/calc/deco.py\n@@ -3,7 +3,10 @@ import contextlib\n \n def figures(func):\n     def wrapper(*args, **kwargs):\n-        func(*args, fig=\"figure\", **kwargs)\n+        try:\n+            func(*args, fig=\"figure\", **kwargs)\n+        except BaseException:\n+            pass\n \n     return wrapper\n \n";
    let f2p = ["tests/test_bug.py::test_bug"];
    let Some(r) = grade_pytest("local__swallow-1", &files, patch, &f2p).await else {
        return;
    };
    assert!(
        r.test_output.contains("PASSED tests/test_bug.py::test_bug"),
        "the swallowing wrapper should make the log say passed:\n{}",
        r.test_output
    );
    assert_ne!(r.outcome, Verdict::Resolved, "{:?}", r.observer);
}

/// A pytest task of `files` (pytest 8.3.3, Python 3.11, `tests/`), graded with `patch` and
/// FAIL_TO_PASS `f2p` in a real sandbox. None (skipped) where sandboxes or the environment
/// cannot be built here.
async fn grade_pytest(
    id: &str,
    files: &[(&str, &str)],
    patch: &str,
    f2p: &[&str],
) -> Option<InstanceReport> {
    let t = common::task(json!({
        "instance_id": id, "repo": "local/shapes", "base_commit": "x",
        "patch": patch, "test_patch": "", "version": "1.0",
        "FAIL_TO_PASS": f2p, "PASS_TO_PASS": [],
        "env": {"python": "3.11", "requirements": ["pytest==8.3.3"], "editable": false,
                "test_cmd": "python -m pytest -rA -p no:cacheprovider tests",
                "test_directives": "none", "timeout_s": 120, "env": {"PYTHONPATH": "/testbed"}}}));
    let env = EnvRegistry::default().resolve(&t).unwrap();
    let (pristine, venv) = match sandbox_for(common::project(files), &env).await {
        Ok(x) => x,
        Err(e) => {
            skip(format!("cannot build the pristine tree or venv: {e}"));
            return None;
        }
    };
    let opts = GradeOptions {
        timeout: Some(Duration::from_secs(60)),
        ..Default::default()
    };
    Some(common::grade_fresh(&pristine, &venv, &t, &env, &t.patch, &opts).await)
}
