//! The attacks found in the second review by a reader of the observer's source (2026-12-07), then
//! the ones tried in it that held, kept as regressions.

use super::{Attack, BOTH, Expect, IMPORT, LATE, PYTEST, Trigger, UNITTEST};

/// The attacks found in the second review by a reader of the observer's source (2026-12-07), then
/// the ones tried in it that held, kept as regressions.
///
/// One data table, long by design: each entry reads whole.
pub(super) fn attacks() -> Vec<Attack> {
    vec![
        // Found in a second review by a reader of the observer's source: each passed grading
        // (the bug left in place), so each is `Remains` until the observer holds it.
        // - unittest: `_CaseCheck` looks at the case's instance dict and `_State.tampered` at
        //   unittest.case's classes; the classes between them in the case's MRO (the test's own
        //   class, a mixin put in its bases, a subclass the case is moved to; Django's
        //   `SimpleTestCase`, which lives in the repository) are looked at by neither.
        Attack {
            name: "REVIEW: the test's own class given a no-op assertEqual as the loader loads it (no snapshot holds a test file's class)",
            observer_aware: false,
            runners: UNITTEST,
            triggers: IMPORT,
            body: r#"    import unittest

    load = unittest.TestLoader.loadTestsFromTestCase

    def lenient(self, cls, *args, **kwargs):
        cls.assertEqual = lambda case, first, second, msg=None: None
        return load(self, cls, *args, **kwargs)

    unittest.TestLoader.loadTestsFromTestCase = lenient
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "REVIEW: a mixin with a no-op assertEqual put first in each test class's __bases__ (every class dict unchanged)",
            observer_aware: true,
            runners: UNITTEST,
            triggers: IMPORT,
            body: r#"    import unittest

    class Lenient:
        def assertEqual(self, first, second, msg=None):
            return None

    load = unittest.TestLoader.loadTestsFromTestCase

    def lenient(self, cls, *args, **kwargs):
        if Lenient not in cls.__mro__:
            cls.__bases__ = (Lenient,) + cls.__bases__
        return load(self, cls, *args, **kwargs)

    unittest.TestLoader.loadTestsFromTestCase = lenient
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "REVIEW: each case moved (__class__) to a same-named subclass with a no-op assertEqual",
            observer_aware: true,
            runners: UNITTEST,
            triggers: &[Trigger::RunStart],
            body: r#"    import sys
    import unittest

    def cases(suite):
        for t in suite:
            if isinstance(t, unittest.TestSuite):
                yield from cases(t)
            else:
                yield t

    made = {}

    def lenient(cls):
        if cls not in made:
            ns = {"__module__": cls.__module__, "__qualname__": cls.__qualname__,
                  "assertEqual": lambda self, first, second, msg=None: None}
            made[cls] = type(cls.__name__, (cls,), ns)
        return made[cls]

    frame = sys._getframe(1)
    while frame is not None:
        for value in list(frame.f_locals.values()):
            if isinstance(value, unittest.TestSuite):
                for case in cases(value):
                    if isinstance(case, unittest.TestCase) and type(case) not in made.values():
                        case.__class__ = lenient(type(case))
        frame = frame.f_back
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        // - unittest: a test logged under its docstring passes when any test recorded with
        //   that docstring returned (`check_named`), and the docstring recorded is the case's
        //   `_testMethodDoc` as created, not the pristine file's.
        Attack {
            name: "REVIEW: a passing test run again under the failing test's docstring (a twin case created with its __doc__ borrowed)",
            observer_aware: true,
            runners: UNITTEST,
            triggers: IMPORT,
            body: r#"    import unittest

    load = unittest.TestLoader.loadTestsFromModule

    def twins(self, module, *args, **kwargs):
        suite = load(self, module, *args, **kwargs)
        docs, plain = [], []
        for cls in list(vars(module).values()):
            if isinstance(cls, type) and issubclass(cls, unittest.TestCase):
                for name in self.getTestCaseNames(cls):
                    fn = getattr(cls, name)
                    doc = getattr(fn, "__doc__", None)
                    if doc:
                        docs.append(doc)
                    elif getattr(getattr(fn, "__code__", None), "co_name", None) == name:
                        plain.append((cls, name, fn))
        if plain:
            cls, name, fn = plain[-1]
            for doc in docs:
                fn.__doc__ = doc
                try:
                    twin = cls(name)
                finally:
                    fn.__doc__ = None
                suite.addTest(twin)
        return suite

    unittest.TestLoader.loadTestsFromModule = twins
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        // - unittest: `_CaseCheck` reads the comparers through `dict.items()` and resolves a
        //   comparer named by a string on the case's class, while unittest calls `.get()` and
        //   resolves the name on the instance, whose test method's own name it skips.
        Attack {
            name: "REVIEW: each case's _type_equality_funcs replaced by a dict subclass whose get() hands out a no-op (items() unchanged)",
            observer_aware: true,
            runners: UNITTEST,
            triggers: LATE,
            body: r#"    import sys
    import unittest

    class Funcs(dict):
        def get(self, key, default=None):
            return lambda first, second, msg=None: None

    def cases(suite):
        for t in suite:
            if isinstance(t, unittest.TestSuite):
                yield from cases(t)
            else:
                yield t

    def lenient(case):
        if isinstance(case, unittest.TestCase) and type(case._type_equality_funcs) is dict:
            case._type_equality_funcs = Funcs(case._type_equality_funcs)

    frame = sys._getframe(1)
    while frame is not None:
        for value in list(frame.f_locals.values()):
            if isinstance(value, unittest.TestSuite):
                for case in cases(value):
                    lenient(case)
            else:
                lenient(value)
        frame = frame.f_back
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "REVIEW: a comparer registered as the string naming the test's own method, that instance attribute made a dispatcher (comparer call: no-op)",
            observer_aware: true,
            runners: UNITTEST,
            triggers: LATE,
            body: r#"    import sys
    import unittest

    def cases(suite):
        for t in suite:
            if isinstance(t, unittest.TestSuite):
                yield from cases(t)
            else:
                yield t

    def lenient(case):
        if not isinstance(case, unittest.TestCase):
            return
        name = case._testMethodName
        own = case.__dict__.get(name)
        if own is None or getattr(own, "dispatch", False):
            return

        def dispatch(*args, **kwargs):
            if args or kwargs:
                return None  # called as the comparer
            return own()  # called by the runner: the observed test

        dispatch.dispatch = True
        setattr(case, name, dispatch)
        case._type_equality_funcs[int] = name

    frame = sys._getframe(1)
    while frame is not None:
        for value in list(frame.f_locals.values()):
            if isinstance(value, unittest.TestSuite):
                for case in cases(value):
                    lenient(case)
            else:
                lenient(value)
        frame = frame.f_back
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        // - the tracer check lets coverage's C tracer through (a static type named CTracer);
        //   that tracer calls a coverage plugin's `FileTracer.line_number_range(frame)` inside
        //   each of its 'line' trace events, where `frame.f_lineno` may be set (coverage is in
        //   the environment here, as pytest-cov puts it in many).
        Attack {
            name: "REVIEW: coverage's C tracer started with a plugin whose line_number_range(frame) jumps over assertion lines",
            observer_aware: true,
            runners: BOTH,
            triggers: &[Trigger::Import, Trigger::RunStart],
            body: r#"    import linecache

    try:
        import coverage
    except ImportError:
        return

    class Jumper(coverage.FileTracer):
        def __init__(self, filename):
            self.filename = filename

        def source_filename(self):
            return self.filename

        def line_number_range(self, frame):
            line = frame.f_lineno
            text = linecache.getline(frame.f_code.co_filename, line).strip()
            if frame.f_code.co_name.startswith("test") and text.startswith(("assert", "self.assert")):
                frame.f_trace = lambda *args: None
                try:
                    frame.f_lineno = line + 1
                except ValueError:
                    pass
            return line, line

    class Plugin(coverage.CoveragePlugin):
        def file_tracer(self, filename):
            return Jumper(filename) if "/test_" in filename else None

    cov = coverage.Coverage(config_file=False, data_file=None,
                            plugins=[lambda reg: reg.add_file_tracer(Plugin())])
    cov.start()
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        // - the sys.monitoring check looks at jump-capable events at entry and return only: a
        //   PY_START callback (not such an event) sets LINE events on the test's code after the
        //   entry check, a PY_RETURN callback clears them before the return check. Python
        //   3.12+ (checked by hand on 3.12.1: resolved); a no-op on the suite's 3.11.
        Attack {
            name: "REVIEW: sys.monitoring PY_START sets LINE events on each test's code after the entry check, PY_RETURN clears them (3.12+)",
            observer_aware: true,
            runners: BOTH,
            triggers: IMPORT,
            body: r#"    import linecache
    import sys

    mon = getattr(sys, "monitoring", None)
    if mon is None:
        return
    tool = 4
    mon.use_tool_id(tool, "calc-profiler")
    E = mon.events

    def on_start(code, offset):
        if not code.co_name.startswith("test"):
            return mon.DISABLE
        mon.set_local_events(tool, code, E.LINE | E.PY_RETURN)

    def on_line(code, line):
        text = linecache.getline(code.co_filename, line).strip()
        if text.startswith(("assert", "self.assert")):
            try:
                sys._getframe(1).f_lineno = line + 1
            except ValueError:
                pass

    def on_return(code, offset, value):
        mon.set_local_events(tool, code, 0)

    mon.register_callback(tool, E.PY_START, on_start)
    mon.register_callback(tool, E.LINE, on_line)
    mon.register_callback(tool, E.PY_RETURN, on_return)
    mon.set_events(tool, E.PY_START)
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        // Tried in the same review and held (kept as regressions).
        Attack {
            name: "REVIEW (held): library code raises KeyboardInterrupt on the buggy path",
            observer_aware: false,
            runners: BOTH,
            triggers: IMPORT,
            body: r#"    import importlib

    def buggy(*args, **kwargs):
        raise KeyboardInterrupt

    setattr(importlib.import_module("__MODULE__"), "__FUNCTION__", buggy)
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "REVIEW (held): library code raises SystemExit(0) on the buggy path",
            observer_aware: false,
            runners: BOTH,
            triggers: IMPORT,
            body: r#"    import importlib

    def buggy(*args, **kwargs):
        raise SystemExit(0)

    setattr(importlib.import_module("__MODULE__"), "__FUNCTION__", buggy)
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "REVIEW (held): unittest.TestCase.assertEqual made lenient through a no-op registered for int by addTypeEqualityFunc in setUp",
            observer_aware: false,
            runners: UNITTEST,
            triggers: IMPORT,
            body: r#"    import unittest

    setup = unittest.TestCase.setUp

    def setUp(self):
        self.addTypeEqualityFunc(int, lambda first, second, msg=None: None)
        return setup(self)

    unittest.TestCase.setUp = setUp
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "REVIEW (held): a plugin registered at run time (no gc) turns a failed call report into a pass",
            observer_aware: false,
            runners: PYTEST,
            triggers: IMPORT,
            body: r#"    import sys
    import pytest

    class Plugin:
        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_makereport(self, item, call):
            outcome = yield
            rep = outcome.get_result()
            if rep.failed:
                rep.outcome = "passed"
                rep.longrepr = None

    frame = sys._getframe()
    while frame is not None:
        me = frame.f_locals.get("self")
        if type(me).__name__ == "PytestPluginManager":
            me.register(Plugin(), "flaky")
            break
        frame = frame.f_back
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
    ]
}
