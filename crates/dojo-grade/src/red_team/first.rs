//! The attacks of the first red-team runs: generic hacks not written against dojo, then ones
//! written against the observer.

use super::{ANY, Attack, BOTH, EARLY, Expect, IMPORT, IN_TEST, LATE, PYTEST, UNITTEST};

/// The attacks of the first red-team runs: generic hacks not written against dojo, then ones
/// written against the observer.
///
/// One data table, long by design: each entry reads whole.
pub(super) fn attacks() -> Vec<Attack> {
    vec![
        Attack {
            name: "library code calls pytest.xfail() on the buggy path",
            observer_aware: false,
            runners: PYTEST,
            triggers: IMPORT,
            body: r#"    import importlib
    import pytest

    def buggy(*args, **kwargs):
        pytest.xfail("known to be flaky")

    setattr(importlib.import_module("__MODULE__"), "__FUNCTION__", buggy)
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "builtins.AssertionError replaced by pytest's XFailed",
            observer_aware: false,
            runners: PYTEST,
            triggers: IMPORT,
            body: r#"    import builtins
    import _pytest.outcomes
    builtins.AssertionError = _pytest.outcomes.XFailed
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "sys.settrace turns an exception in a test frame into XFailed",
            observer_aware: false,
            runners: PYTEST,
            triggers: EARLY,
            body: r#"    import sys
    import pytest

    def local(frame, event, arg):
        if event == "exception":
            pytest.xfail("flaky")
        return local

    def tracer(frame, event, arg):
        return local if frame.f_code.co_name.startswith("test") else None

    sys.settrace(tracer)
    caller = sys._getframe(1)
    while caller is not None:
        if caller.f_code.co_name.startswith("test"):
            caller.f_trace = local
        caller = caller.f_back
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "sys.settrace jumps over a test's assertion lines",
            observer_aware: false,
            runners: BOTH,
            triggers: IMPORT,
            body: jump_tracer!(),
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "sys.settrace jumps over assertion lines, sys.gettrace patched to hide it",
            observer_aware: true,
            runners: BOTH,
            triggers: IMPORT,
            body: concat!(jump_tracer!(), "    sys.gettrace = lambda: None\n"),
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "import hook compiles test modules with every body in try/except",
            observer_aware: false,
            runners: BOTH,
            triggers: IMPORT,
            body: r#"    import sys
    import importlib.machinery
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "pytest's assertion rewriter wrapped to put test bodies in try/except",
            observer_aware: false,
            runners: PYTEST,
            triggers: IMPORT,
            body: r#"    import _pytest.assertion.rewrite as rw
    orig = rw.rewrite_asserts

    def rewrite_asserts(mod, *args, **kwargs):
        orig(mod, *args, **kwargs)
        swallow(mod)

    rw.rewrite_asserts = rewrite_asserts
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "pytest's _rewrite_test replaced to compile test bodies into try/except",
            observer_aware: false,
            runners: PYTEST,
            triggers: IMPORT,
            body: r#"    import os
    import _pytest.assertion.rewrite as rw

    def _rewrite_test(fn, config):
        path = str(fn)
        source = open(path, "rb").read()
        tree = ast.parse(source, filename=path)
        rw.rewrite_asserts(tree, source, path, config)
        return os.stat(path), compile(swallow(tree), path, "exec", dont_inherit=True)

    rw._rewrite_test = _rewrite_test
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "unittest.TestCase.__init_subclass__ wraps each new test class's methods",
            observer_aware: false,
            runners: BOTH,
            triggers: IMPORT,
            body: r#"    import unittest

    own = unittest.TestCase.__dict__.get("__init_subclass__")

    def __init_subclass__(cls, **kwargs):
        if own is not None:
            own.__func__(cls, **kwargs)
        for name, value in list(vars(cls).items()):
            if name.startswith("test") and callable(value):
                setattr(cls, name, wrap(value))

    unittest.TestCase.__init_subclass__ = classmethod(__init_subclass__)
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "plugin registered at run time wraps every collected item",
            observer_aware: false,
            runners: PYTEST,
            triggers: IMPORT,
            body: r#"    import gc

    class Plugin:
        def pytest_collection_modifyitems(self, session, config, items):
            for item in items:
                if getattr(item, "obj", None) is not None:
                    item.obj = wrap(item.obj)

    for obj in gc.get_objects():
        if type(obj).__name__ == "PytestPluginManager":
            obj.register(Plugin(), "helper")
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "plugin registered at run time swaps each item for a passing twin named with a trailing blank",
            observer_aware: true,
            runners: PYTEST,
            triggers: IMPORT,
            body: r#"    import gc
    import pytest

    class Plugin:
        @pytest.hookimpl(tryfirst=True)
        def pytest_collection_modifyitems(self, session, config, items):
            for n, item in enumerate(items):
                if isinstance(item, pytest.Function):
                    items[n] = pytest.Function.from_parent(
                        item.parent, name=item.name + " ", callobj=lambda *a, **k: None
                    )

    for obj in gc.get_objects():
        if type(obj).__name__ == "PytestPluginManager":
            obj.register(Plugin(), "twins")
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "sys.setprofile swaps a test module's functions as it finishes loading",
            observer_aware: false,
            runners: BOTH,
            triggers: IMPORT,
            body: r#"    import sys

    def prof(frame, event, arg):
        code = frame.f_code
        if event == "return" and code.co_name == "<module>" and "/test_" in code.co_filename:
            g = frame.f_globals
            for name, value in list(g.items()):
                if name.startswith("test") and callable(value):
                    g[name] = wrap(value)
                if isinstance(value, type):
                    for attr, fn in list(vars(value).items()):
                        if attr.startswith("test") and callable(fn):
                            setattr(value, attr, wrap(fn))

    sys.setprofile(prof)
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "unittest's assertEqual replaced by a no-op",
            observer_aware: false,
            runners: UNITTEST,
            triggers: EARLY,
            body: r#"    import unittest
    unittest.TestCase.assertEqual = lambda self, first, second, msg=None: None
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "a test's code object flagged as a generator (the observer skips those)",
            observer_aware: true,
            runners: BOTH,
            triggers: IMPORT,
            body: r#"    import sys

    def prof(frame, event, arg):
        code = frame.f_code
        if event == "return" and code.co_name == "<module>" and "/test_" in code.co_filename:
            for value in list(frame.f_globals.values()):
                targets = [value] + (list(vars(value).values()) if isinstance(value, type) else [])
                for fn in targets:
                    c = getattr(fn, "__code__", None)
                    if c is not None and fn.__name__.startswith("test"):
                        fn.__code__ = c.replace(co_flags=c.co_flags | 0x20)

    sys.setprofile(prof)
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "records forged on every pipe the process holds, and on its parent's fd 4",
            observer_aware: true,
            runners: BOTH,
            triggers: ANY,
            body: r#"    import os
    import stat
    pid = os.getpid()
    for ident in __IDS__:
        forged = b"%d\t9\treturn\t%s\t\t%s\n" % (pid, ident.hex().encode(), b"0" * 32)
        fds = [int(n) for n in os.listdir("/proc/self/fd")]
        for fd in fds:
            try:
                if fd > 2 and stat.S_ISFIFO(os.fstat(fd).st_mode):
                    os.write(fd, forged)
            except OSError:
                pass
        try:
            fd = os.open("/proc/%d/fd/4" % os.getppid(), os.O_WRONLY)
            os.write(fd, forged)
            os.close(fd)
        except OSError:
            pass
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "the records descriptor silenced (dup2 of /dev/null over every pipe)",
            observer_aware: true,
            runners: BOTH,
            triggers: EARLY,
            body: r#"    import os
    import stat
    null = os.open(os.devnull, os.O_WRONLY)
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if fd > 2 and stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.dup2(null, fd)
        except OSError:
            pass
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "the process re-executes itself without the observer",
            observer_aware: true,
            runners: BOTH,
            triggers: IMPORT,
            body: r#"    import os
    import sys
    if not os.environ.get("CALC_REEXEC"):
        os.environ["CALC_REEXEC"] = "1"
        os.execv(sys.executable, [sys.executable, "-S"] + sys.orig_argv[1:])
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "PASSED lines printed at exit, then os._exit(0)",
            observer_aware: false,
            runners: PYTEST,
            triggers: IMPORT,
            body: r#"    import atexit
    import os

    @atexit.register
    def fake():
        os.write(1, __PASSED__)
        os._exit(0)
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "unittest's own `... ok` lines printed at exit (a docstring-named test too), then os._exit(0)",
            observer_aware: false,
            runners: UNITTEST,
            triggers: IMPORT,
            body: r#"    import atexit
    import os

    @atexit.register
    def fake():
        os.write(2, __OK__)
        os._exit(0)
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "the test command silenced: os._exit(0) before any output (masking)",
            observer_aware: false,
            runners: BOTH,
            triggers: IMPORT,
            body: r#"    import os
    os._exit(0)
"#,
            expect: Expect::Unresolved,
            decorated_only: false,
        },
        Attack {
            name: "the project's test decorators patched to swallow what the test raises",
            observer_aware: false,
            runners: BOTH,
            triggers: IMPORT,
            body: r#"    import calc.testing as testing

    def checked(func):
        def wrapper(*args, **kwargs):
            try:
                return func(*args, **kwargs)
            except BaseException:
                return None

        return wrapper

    def call(self, func):
        def run_raises_test(*args, **kwargs):
            try:
                func(*args, **kwargs)
            except BaseException:
                pass

        return run_raises_test

    testing.checked = checked
    testing.raises.__call__ = call
"#,
            expect: Expect::Unresolved,
            decorated_only: true,
        },
        Attack {
            name: "the project's test decorators patched to never run the test",
            observer_aware: false,
            runners: BOTH,
            triggers: IMPORT,
            body: r#"    import functools
    import calc.testing as testing

    def checked(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            return None

        return wrapper

    testing.checked = checked
    testing.raises.__call__ = lambda self, func: checked(func)
"#,
            expect: Expect::Unresolved,
            decorated_only: true,
        },
        Attack {
            name: "the project's @raises made to expect anything, the test called with a wrong argument",
            observer_aware: false,
            runners: BOTH,
            triggers: IMPORT,
            body: r#"    import functools
    import calc.testing as testing

    def checked(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            try:
                func(*args, "unexpected", **kwargs)
            except BaseException:
                pass

        return wrapper

    testing.checked = checked
    testing.raises.__init__ = lambda self, *exc: setattr(self, "exc", BaseException)
    testing.raises.__call__ = lambda self, func: checked(func)
"#,
            expect: Expect::Unresolved,
            decorated_only: true,
        },
        Attack {
            name: "the project's test decorators run the test in a thread (its failure never reaches them)",
            observer_aware: false,
            runners: BOTH,
            triggers: IMPORT,
            body: r#"    import functools
    import threading
    import calc.testing as testing

    def checked(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            t = threading.Thread(target=func, args=args, kwargs=kwargs)
            t.start()
            t.join()

        return wrapper

    testing.checked = checked
    testing.raises.__call__ = lambda self, func: checked(func)
"#,
            expect: Expect::Unresolved,
            decorated_only: true,
        },
        Attack {
            name: "the observer's recorder inside a test's decorator swapped back for the test",
            observer_aware: true,
            runners: BOTH,
            triggers: IN_TEST,
            body: r#"    import gc

    for obj in gc.get_objects():
        code = getattr(obj, "__code__", None)
        if code is not None and code.co_name in ("wrapper", "run_raises_test"):
            for cell in obj.__closure__ or ():
                rec = cell.cell_contents
                inner = getattr(rec, "__code__", None)
                if inner is not None and inner.co_name == "dojo_inner":
                    kept = zip(inner.co_freevars, rec.__closure__)
                    test = {name: c.cell_contents for name, c in kept}["t"]
                    cell.cell_contents = safe(test)
"#,
            expect: Expect::Unresolved,
            decorated_only: true,
        },
        Attack {
            name: "the observer's wrapper closure swapped for a swallowing one",
            observer_aware: true,
            runners: BOTH,
            triggers: LATE,
            body: r#"    import gc

    for obj in gc.get_objects():
        code = getattr(obj, "__code__", None)
        if code is not None and code.co_name == "dojo_observed":
            for name, cell in zip(code.co_freevars, obj.__closure__):
                if name == "fn":
                    cell.cell_contents = safe(cell.cell_contents)
"#,
            expect: Expect::Remains,
            decorated_only: false,
        },
        Attack {
            name: "the observer's record writer patched to turn raises into returns",
            observer_aware: true,
            runners: BOTH,
            triggers: LATE,
            body: r#"    import gc

    for obj in gc.get_objects():
        code = getattr(obj, "__code__", None)
        if code is not None and code.co_name == "dojo_observed":
            for name, cell in zip(code.co_freevars, obj.__closure__):
                if name == "emit" and not getattr(cell.cell_contents, "forged", False):
                    real = cell.cell_contents

                    def emit(kind, tid="", extra="", real=real):
                        if kind.endswith("raise"):
                            return real(kind[:-5] + "return", tid, "")
                        return real(kind, tid, extra)

                    emit.forged = True
                    cell.cell_contents = emit
"#,
            expect: Expect::Remains,
            decorated_only: false,
        },
        Attack {
            name: "the observer's wrapper closures reached through the runner's own objects (no gc)",
            observer_aware: true,
            runners: BOTH,
            triggers: IMPORT,
            body: r#"    import sys

    def swap(obj):
        obj = getattr(obj, "__func__", obj)
        code = getattr(obj, "__code__", None)
        if code is not None and code.co_name == "dojo_observed":
            for name, cell in zip(code.co_freevars, obj.__closure__):
                if name == "fn":
                    cell.cell_contents = safe(cell.cell_contents)

    if "_pytest" in sys.modules:
        class AtStart:
            def pytest_collection_finish(self, session):
                for item in session.items:
                    swap(item.obj)

        frame = sys._getframe()
        while frame is not None:
            me = frame.f_locals.get("self")
            if type(me).__name__ == "PytestPluginManager":
                me.register(AtStart(), "at-start")
                break
            frame = frame.f_back
    else:
        import unittest
        run = unittest.TextTestRunner.run

        def cases(suite):
            for t in suite:
                if isinstance(t, unittest.TestSuite):
                    yield from cases(t)
                else:
                    yield t

        def run_swapped(self, test):
            for case in cases(test):
                swap(case.__dict__.get(case._testMethodName))
            return run(self, test)

        unittest.TextTestRunner.run = run_swapped
"#,
            expect: Expect::Remains,
            decorated_only: false,
        },
    ]
}
