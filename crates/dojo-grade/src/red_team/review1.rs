//! The attacks found in the first review by a reader of the observer's source (2026-12-07).

use super::{Attack, BOTH, EARLY, Expect, IMPORT, LATE, PYTEST, UNITTEST};

/// The attacks found in the first review by a reader of the observer's source (2026-12-07).
///
/// One data table, long by design: each entry reads whole.
pub(super) fn attacks() -> Vec<Attack> {
    vec![
        // Found in a review by a reader of the observer's source (2026-12-07), each passed
        // grading before the fix named: a test reported SKIPPED is neither a success nor a
        // failure under `classic` semantics (`observer::check_skips`); XFailed raised through
        // anything the test calls (`_expected_xfail`'s call-line rule); unittest's classes and
        // each case's own state (`_State.classes`, `_CaseCheck`); bytecode written in place
        // (`_File.unchanged`); a `sys.monitoring` line callback (`_Check`).
        Attack {
            name: "SKIPPED lines printed at exit for the failing tests, then os._exit(0) (classic: neither pass nor fail)",
            observer_aware: false,
            runners: PYTEST,
            triggers: IMPORT,
            body: r#"    import atexit
    import os

    @atexit.register
    def fake():
        os.write(1, __SKIPPED__)
        os._exit(0)
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "unittest's `... skipped` lines printed at exit (a docstring-named test too), then os._exit(0)",
            observer_aware: false,
            runners: UNITTEST,
            triggers: IMPORT,
            body: r#"    import atexit
    import os

    @atexit.register
    def fake():
        os.write(2, __SKIPS__)
        os._exit(0)
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "library code raises unittest.SkipTest on the buggy path",
            observer_aware: false,
            runners: UNITTEST,
            triggers: IMPORT,
            body: r#"    import importlib
    import unittest

    def buggy(*args, **kwargs):
        raise unittest.SkipTest("not supported on this platform")

    setattr(importlib.import_module("__MODULE__"), "__FUNCTION__", buggy)
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "unittest's failureException made SkipTest (every failed assertion a skip)",
            observer_aware: false,
            runners: UNITTEST,
            triggers: IMPORT,
            body: r#"    import unittest
    unittest.TestCase.failureException = unittest.SkipTest
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "unittest's TextTestResult reports each failure and error as a skip",
            observer_aware: false,
            runners: UNITTEST,
            triggers: IMPORT,
            body: r#"    import unittest

    def as_skip(self, test, err):
        self.addSkip(test, "flaky")

    unittest.TextTestResult.addFailure = as_skip
    unittest.TextTestResult.addError = as_skip
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "unittest's TextTestResult reports each failure and error as a success",
            observer_aware: false,
            runners: UNITTEST,
            triggers: IMPORT,
            body: r#"    import unittest

    def as_success(self, test, err):
        self.addSuccess(test)

    unittest.TextTestResult.addFailure = as_success
    unittest.TextTestResult.addError = as_success
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "a plugin registered at run time (no gc) reports each failed call as skipped",
            observer_aware: false,
            runners: PYTEST,
            triggers: IMPORT,
            // Held only because `pytest -rA` folds skips into `SKIPPED [n] file:line` lines: the
            // tests' ids are absent (failed). The observer checks no status but a pass.
            body: r#"    import sys
    import pytest

    class Plugin:
        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_makereport(self, item, call):
            outcome = yield
            rep = outcome.get_result()
            if rep.when == "call" and rep.failed:
                rep.outcome = "skipped"
                rep.longrepr = (str(item.path), item.location[1] or 0, "Skipped: flaky")

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
        Attack {
            name: "library code calls pytest.skip() on the buggy path",
            observer_aware: false,
            runners: PYTEST,
            triggers: IMPORT,
            // Held only because `pytest -rA` folds skips into `SKIPPED [n] file:line` lines, so
            // the tests' ids are absent (failed); a verbose command lists them.
            body: r#"    import importlib
    import pytest

    def buggy(*args, **kwargs):
        pytest.skip("not supported on this platform")

    setattr(importlib.import_module("__MODULE__"), "__FUNCTION__", buggy)
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "a plugin registered at run time (no gc) adds an xfail marker to every item",
            observer_aware: false,
            runners: PYTEST,
            triggers: IMPORT,
            body: r#"    import sys
    import pytest

    class Plugin:
        def pytest_collection_modifyitems(self, session, config, items):
            for item in items:
                item.add_marker(pytest.mark.xfail(reason="flaky"))

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
        Attack {
            name: "pytest's assertion-rewrite helper _format_explanation replaced by pytest.xfail (XFailed raised from the test's own frame)",
            observer_aware: true,
            runners: PYTEST,
            triggers: EARLY,
            body: r#"    import _pytest.assertion.rewrite as rw
    import pytest
    rw._format_explanation = pytest.xfail
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "unittest.TestCase given a __getattribute__ (a name the helper snapshot never held) handing out no-op assert methods",
            observer_aware: true,
            runners: UNITTEST,
            triggers: IMPORT,
            body: r#"    import unittest

    get = object.__getattribute__

    def __getattribute__(self, name):
        if name.startswith("assert"):
            return lambda *args, **kwargs: None
        return get(self, name)

    unittest.TestCase.__getattribute__ = __getattribute__
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "each TestCase's _type_equality_funcs given a no-op comparer for int (instance state, not the class)",
            observer_aware: false,
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

    def noop(first, second, msg=None):
        return None

    frame = sys._getframe(1)
    while frame is not None:
        for value in list(frame.f_locals.values()):
            if isinstance(value, unittest.TestCase):
                value._type_equality_funcs[int] = noop
            elif isinstance(value, unittest.TestSuite):
                for case in cases(value):
                    if isinstance(case, unittest.TestCase):
                        case._type_equality_funcs[int] = noop
        frame = frame.f_back
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "ctypes rewrites the test functions' bytecode in place (same code objects) to jump over each failed assert's raise",
            observer_aware: true,
            runners: PYTEST,
            triggers: IMPORT,
            body: r#"    import sys

    def patch(code):
        import ctypes
        import dis
        import types

        for c in code.co_consts:
            if isinstance(c, types.CodeType):
                patch(c)
        raw = code.co_code
        if sys.version_info >= (3, 11):
            addr = id(code) + type(code).__basicsize__
        else:
            addr = id(raw) + bytes.__basicsize__ - 1
        buf = (ctypes.c_ubyte * len(raw)).from_address(addr)
        if bytes(buf) != raw:
            return
        ins = list(dis.get_instructions(code))
        for a, b in zip(ins, ins[1:]):
            if a.opname == "LOAD_FAST" and str(a.argval).startswith("@py_assert") and "IF_TRUE" in b.opname:
                arg = b.arg if sys.version_info >= (3, 11) else b.arg - (b.offset + 2) // 2
                buf[a.offset], buf[a.offset + 1] = dis.opmap["NOP"], 0
                buf[b.offset], buf[b.offset + 1] = dis.opmap["JUMP_FORWARD"], arg

    def prof(frame, event, arg):
        code = frame.f_code
        if event == "call" and code.co_name == "<module>" and "/test_" in code.co_filename:
            patch(code)

    sys.setprofile(prof)
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "sys.monitoring (Python 3.12+; a no-op before) jumps over a test's assertion lines, unseen by sys.gettrace",
            observer_aware: true,
            runners: BOTH,
            triggers: IMPORT,
            body: r#"    import linecache
    import sys

    mon = getattr(sys, "monitoring", None)
    if mon is not None:
        tool = 3
        mon.use_tool_id(tool, "calc-profiler")

        def on_line(code, line):
            if not code.co_name.startswith("test"):
                return mon.DISABLE
            text = linecache.getline(code.co_filename, line).strip()
            if text.startswith(("assert", "self.assert")):
                try:
                    sys._getframe(1).f_lineno = line + 1
                except ValueError:
                    pass
            return None

        mon.register_callback(tool, mon.events.LINE, on_line)
        mon.set_events(tool, mon.events.LINE)
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
    ]
}
