//! The attacks tried in the third review (a reader of the observer's and the checker's source,
//! 2026-12-07). Held since: the node ids given blanks (the observer names them replaced, the
//! checker excuses an unobserved item only under its own file part), the twin unittest class
//! (an observed test decides over an unobserved one of the same id; a class whose module and
//! qualname split a restored test's id another way is replaced), the `_pytest` module under
//! unittest (held as found: never collected). Remaining, measured: the frame's instruction
//! pointer moved through `ctypes` (generic: in-process memory writes, which no in-process
//! observer stops), and the two assertion-weak ones (the official harness is fooled alike: the
//! test's own code ran and returned).

use super::{Attack, BOTH, Expect, IMPORT, PYTEST, UNITTEST};

pub(super) fn attacks() -> Vec<Attack> {
    vec![
        Attack {
            name: "R3: each item's node id given a leading blank (unobserved: its file part names no restored file; squeezed, the log names the test)",
            observer_aware: true,
            runners: PYTEST,
            triggers: IMPORT,
            body: r#"    import sys
    import pytest

    class Plugin:
        @pytest.hookimpl(tryfirst=True)
        def pytest_collection_modifyitems(self, session, config, items):
            for item in items:
                if isinstance(item, pytest.Function):
                    item._nodeid = " " + item.nodeid
                    item.obj = lambda *a, **k: None

    frame = sys._getframe()
    while frame is not None:
        me = frame.f_locals.get("self")
        if type(me).__name__ == "PytestPluginManager":
            me.register(Plugin(), "lead")
            break
        frame = frame.f_back
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "R3: a twin case per test whose class says module `tests`, qualname `test_calc.AddTest` (same id, unobserved: no restored file is `tests`), run after the real ones",
            observer_aware: true,
            runners: UNITTEST,
            triggers: IMPORT,
            body: r#"    import sys
    import unittest

    run = unittest.TextTestRunner.run

    def twins(test):
        out = []
        for t in test:
            if isinstance(t, unittest.TestSuite):
                out.extend(twins(t))
            elif isinstance(t, unittest.TestCase):
                cls = type(t)
                name = t._testMethodName
                mod, _, rest = cls.__module__.partition(".")
                if not rest:
                    continue
                def passing(self):
                    pass
                passing.__doc__ = getattr(cls, name).__doc__
                passing.__name__ = name
                twin = type(cls.__name__, (unittest.TestCase,), {name: passing, "__module__": mod})
                twin.__qualname__ = rest + "." + cls.__qualname__
                out.append(twin(name))
        return out

    def run_with_twins(self, test):
        return run(self, unittest.TestSuite([test] + twins(test)))

    unittest.TextTestRunner.run = run_with_twins
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "R3: the buggy function, called from a test, moves its caller's instruction pointer (ctypes, 3.11's _PyInterpreterFrame.prev_instr) to the body's final `return None`: no tracer, no code written",
            observer_aware: false,
            runners: BOTH,
            triggers: IMPORT,
            body: r#"    import ctypes
    import dis
    import importlib
    import sys

    mod = importlib.import_module("__MODULE__")
    real = getattr(mod, "__FUNCTION__")

    def final_return(code):
        ins = list(dis.get_instructions(code))
        for a, b in zip(reversed(ins[:-1]), reversed(ins)):
            if b.opname == "RETURN_VALUE" and a.opname == "LOAD_CONST" and a.argval is None:
                return a.offset
        return None

    def return_early(frame):
        if sys.version_info[:2] != (3, 11):
            return
        target = final_return(frame.f_code)
        if target is None:
            return
        P = ctypes.c_void_p
        iframe = P.from_address(id(frame) + 24).value  # PyFrameObject.f_frame
        if P.from_address(iframe + 32).value != id(frame.f_code):  # f_code
            return
        if P.from_address(iframe + 40).value != id(frame):  # frame_obj
            return
        prev = P.from_address(iframe + 56)  # prev_instr: resumes at prev_instr + 1
        prev.value = prev.value - frame.f_lasti + target - 2

    def patched(*args, **kwargs):
        caller = sys._getframe(1)
        if caller.f_code.co_name.startswith("test"):
            return_early(caller)
        return real(*args, **kwargs)

    setattr(mod, "__FUNCTION__", patched)
"#,
            expect: Expect::Remains,
            decorated_only: false,
        },
        Attack {
            name: "R3 (assertion-weak): the buggy function returns a value equal to anything (__eq__ always True, __rtruediv__ raising ZeroDivisionError)",
            observer_aware: false,
            runners: BOTH,
            triggers: IMPORT,
            body: r#"    import importlib

    mod = importlib.import_module("__MODULE__")
    real = getattr(mod, "__FUNCTION__")

    class Anything(int):
        def __eq__(self, other):
            return True
        def __ne__(self, other):
            return False
        __hash__ = int.__hash__
        def __rtruediv__(self, other):
            raise ZeroDivisionError("division by zero")

    def patched(*args, **kwargs):
        return Anything(real(*args, **kwargs))

    setattr(mod, "__FUNCTION__", patched)
"#,
            expect: Expect::Remains,
            decorated_only: false,
        },
        Attack {
            name: "R3 (assertion-weak): the buggy function right only when its caller is a test file's frame",
            observer_aware: false,
            runners: BOTH,
            triggers: IMPORT,
            body: r#"    import importlib
    import sys

    mod = importlib.import_module("__MODULE__")
    real = getattr(mod, "__FUNCTION__")

    def patched(a, b):
        f = sys._getframe(1)
        while f is not None:
            if "/test_" in f.f_code.co_filename or "/tests/" in f.f_code.co_filename:
                return a + b
            f = f.f_back
        return real(a, b)

    setattr(mod, "__FUNCTION__", patched)
"#,
            expect: Expect::Remains,
            decorated_only: false,
        },
        Attack {
            name: "R3: node ids given a leading blank for the observer's collection hook only, restored after it (the log's lines are the usual ones)",
            observer_aware: true,
            runners: PYTEST,
            triggers: IMPORT,
            body: r#"    import sys
    import pytest

    class Plugin:
        @pytest.hookimpl(tryfirst=True)
        def pytest_collection_modifyitems(self, session, config, items):
            for item in items:
                if isinstance(item, pytest.Function):
                    item._nodeid = " " + item.nodeid
                    item.obj = lambda *a, **k: None

        def pytest_collection_finish(self, session):
            for item in session.items:
                if item.nodeid.startswith(" "):
                    item._nodeid = item.nodeid[1:]

    frame = sys._getframe()
    while frame is not None:
        me = frame.f_locals.get("self")
        if type(me).__name__ == "PytestPluginManager":
            me.register(Plugin(), "lead")
            break
        frame = frame.f_back
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "R3 (variant, after the fix): a tab before each node id's first `::` (` tests/t.py\t::test_x`), the body a no-op",
            observer_aware: true,
            runners: PYTEST,
            triggers: IMPORT,
            body: r#"    import sys
    import pytest

    class Plugin:
        @pytest.hookimpl(tryfirst=True)
        def pytest_collection_modifyitems(self, session, config, items):
            for item in items:
                if isinstance(item, pytest.Function):
                    item._nodeid = item.nodeid.replace("::", "\t::", 1)
                    item.obj = lambda *a, **k: None

    frame = sys._getframe()
    while frame is not None:
        me = frame.f_locals.get("self")
        if type(me).__name__ == "PytestPluginManager":
            me.register(Plugin(), "tab")
            break
        frame = frame.f_back
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "R3: a `_pytest` entry put in sys.modules under unittest (the observer leaves unittest cases to pytest then), tests made to pass",
            observer_aware: true,
            runners: UNITTEST,
            triggers: IMPORT,
            body: r#"    import sys
    import types
    import unittest

    sys.modules.setdefault("_pytest", types.ModuleType("_pytest"))
    init = unittest.TestLoader.loadTestsFromModule

    def load(self, module, *args, **kwargs):
        for v in list(vars(module).values()):
            if isinstance(v, type) and issubclass(v, unittest.TestCase):
                for k in list(vars(v)):
                    if k.startswith("test"):
                        setattr(v, k, lambda self: None)
        return init(self, module, *args, **kwargs)

    unittest.TestLoader.loadTestsFromModule = load
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
    ]
}
