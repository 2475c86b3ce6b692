# dojo's test observer, loaded ahead of the project's code from a directory the model patch
# cannot write, recording for every test whether its own function body ran and how it ended:
# - for pytest, a plugin (PYTEST_PLUGINS) wrapping every collected test function;
# - for unittest-style runners (Django's runtests.py), `install_unittest`, which the
#   `sitecustomize` beside this file calls at interpreter startup: every TestCase instance
#   gets its test method wrapped as it is created, and the runner's start is recorded.
# Records go to the file named by DOJO_OBSERVER_FILE, one line each, appended by every process
# of the run (xdist workers included): KIND <tab> hex(test id) <tab> EXTRA; unittest's kinds
# start with "u.", its ids are `module.Class.method` (what `TestCase.id()` says).
#
# It only uses modules the interpreter and pytest have already imported (a project module
# named like a standard one cannot replace them), and works from Python 3.5 and pytest 3 on.
import functools
import os
import sys
import types

_path = os.environ.get("DOJO_OBSERVER_FILE")

# unittest (and pytest's unittest support) leave the frames of modules with this global out of
# the tracebacks they print: the wrappers below are not the tests' code.
__unittest = True

# co_flags of functions that must not be wrapped: generators and coroutines (plugins such as
# pytest-asyncio test them by their type).
_NOT_WRAPPED = 0x20 | 0x80 | 0x100 | 0x200


# The records file, opened once per process (a forked child opens its own): pid, fd, and the
# file's identity, checked before each write (a test that closes every descriptor may have
# reused the number for a file of its own).
_out = [None, None, None]


def _records_fd():
    pid = os.getpid()
    if _out[0] == pid:
        try:
            st = os.fstat(_out[1])
            if (st.st_dev, st.st_ino) == _out[2]:
                return _out[1]
        except OSError:
            pass
    fd = os.open(_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    st = os.fstat(fd)
    _out[0], _out[1], _out[2] = pid, fd, (st.st_dev, st.st_ino)
    return fd


def _emit(kind, nodeid, extra=""):
    # Never lets an error of its own reach the test run.
    if not _path:
        return
    try:
        line = "%s\t%s\t%s\n" % (kind, nodeid.encode("utf-8", "replace").hex(), extra)
        # O_APPEND: each record is one write, whole, whichever process writes it.
        os.write(_records_fd(), line.encode("ascii", "replace"))
    except Exception:
        pass


# The node id of the test being run (set at its setup), for wrappers shared by several tests.
_current = [None]


def _call_observed(prefix, tid, fn, args, kwargs):
    """Call a test function, recording that its body was entered and how it ended."""
    __tracebackhide__ = True  # pytest leaves this frame out of failure reports
    _emit(prefix + "enter", tid)
    try:
        result = fn(*args, **kwargs)
    except BaseException as e:
        _emit(prefix + "raise", tid, type(e).__name__)
        raise
    _emit(prefix + "return", tid)
    return result


def _wrap(nodeids, fn):
    """`fn` recording its calls for the tests `nodeids` (a set: a method on a class serves every
    parametrization of it; the running one is `_current`, set at each test's setup).

    The wrapper runs with `fn`'s module globals: pytest evaluates string conditions
    (`skipif("not HAS_BS4")`) in the test function's `__globals__`. So it names nothing of this
    module's but through its closure (`call`, `current`)."""
    call, current = _call_observed, _current

    def dojo_observed(*args, **kwargs):
        __tracebackhide__ = True
        nodeid = current[0]
        if nodeid not in nodeids:
            return fn(*args, **kwargs)
        return call("", nodeid, fn, args, kwargs)

    g = getattr(fn, "__globals__", None)
    if isinstance(g, dict):
        dojo_observed = types.FunctionType(
            dojo_observed.__code__,
            g,
            dojo_observed.__name__,
            dojo_observed.__defaults__,
            dojo_observed.__closure__,
        )
    functools.update_wrapper(dojo_observed, fn)
    dojo_observed._dojo_nodeids = nodeids
    return dojo_observed


def _wrap_method(item, cls, name):
    """A test method: wrapped on its class, keeping what it is (a function, a staticmethod, a
    classmethod: old pytest and unittest fetch it from a fresh instance at setup), and in the
    item's cached `obj` where pytest has one (pytest 8). False where it cannot be wrapped."""
    raw, owner = None, None
    for klass in getattr(cls, "__mro__", (cls,)):
        if name in vars(klass):
            raw, owner = vars(klass)[name], klass
            break
    if isinstance(raw, staticmethod):
        rewrap, func = staticmethod, raw.__func__
    elif isinstance(raw, classmethod):
        rewrap, func = classmethod, raw.__func__
    elif isinstance(raw, types.FunctionType):
        rewrap, func = (lambda f: f), raw
    else:
        return False
    if not _wrappable(func):
        return False
    if hasattr(func, "_dojo_nodeids") and owner is cls:
        func._dojo_nodeids.add(item.nodeid)
        wrapped = func
    else:
        # A base class's method, possibly wrapped for the base's own tests: wrap the original.
        if hasattr(func, "_dojo_nodeids"):
            func = func.__wrapped__
        wrapped = _wrap(set([item.nodeid]), func)
        setattr(cls, name, rewrap(wrapped))
    cached = getattr(item, "__dict__", {}).get("_obj")
    if isinstance(cached, types.MethodType):
        item._obj = types.MethodType(wrapped, cached.__self__)
    elif cached is not None:
        item._obj = wrapped
    return True


def _wrappable(fn):
    code = getattr(fn, "__code__", None) or getattr(
        getattr(fn, "__func__", None), "__code__", None
    )
    return code is not None and not (code.co_flags & _NOT_WRAPPED)


def _xfail_marked(item):
    try:
        return item.get_closest_marker("xfail") is not None
    except AttributeError:
        return item.get_marker("xfail") is not None


def _observe(item):
    nodeid = item.nodeid
    kind = type(item).__name__
    if kind not in ("Function", "TestCaseFunction"):
        # Doctests and other plugins' items: their log lines cannot be checked here.
        return _emit("unobserved", nodeid, kind)
    cls = getattr(item, "cls", None)
    name = getattr(item, "originalname", None) or item.name
    if cls is not None:
        if not _wrap_method(item, cls, name):
            return _emit("unobserved", nodeid, kind)
    else:
        fn = item.obj
        if not _wrappable(fn):
            return _emit("unobserved", nodeid, kind)
        wrapped = _wrap(set([nodeid]), fn)
        try:
            item.obj = wrapped
        except AttributeError:
            item._obj = wrapped
    _emit("item", nodeid, "xfail" if _xfail_marked(item) else "")


# The run's own pytest session. Tests of pytest plugins start inner sessions in the same
# process (pytester); their items are not the run's tests and are left alone.
_config = [None]


def pytest_configure(config):
    if _config[0] is None:
        _config[0] = config
        _emit("start", "", str(os.getpid()))


def pytest_collection_modifyitems(session, config, items):
    if config is not _config[0]:
        return
    for item in items:
        try:
            _observe(item)
        except Exception as e:
            _emit("unobserved", item.nodeid, type(e).__name__)
    _emit("collected", "", str(len(items)))


def pytest_runtest_setup(item):
    if item.config is _config[0]:
        _current[0] = item.nodeid


def pytest_sessionfinish(session, exitstatus):
    _emit("finish", "", str(exitstatus))


# ---------------------------------------------------------------------------------------------
# unittest-style runners


def _observe_case(case, name):
    """Wrap `case`'s test method `name` on the instance (the method the runner fetches with
    `getattr(self, name)`), recording under the test's id."""
    if "_pytest" in sys.modules:
        # Under pytest the plugin above observes its unittest items (pytest fetches and
        # rebinds their methods itself: a wrapper here would come to it unbound).
        return
    cls = type(case)
    if cls.__module__.split(".")[0] == "unittest":
        # unittest's own cases (`_SubTest`, `FunctionTestCase`) are not tests of the project.
        return
    tid = "%s.%s.%s" % (cls.__module__, getattr(cls, "__qualname__", cls.__name__), name)
    raw = None
    for klass in getattr(cls, "__mro__", (cls,)):
        if name in vars(klass):
            raw = vars(klass)[name]
            break
    if not isinstance(raw, types.FunctionType) or not _wrappable(raw):
        # A staticmethod, a callable object, a coroutine (Django wraps those itself).
        return _emit("u.unobserved", tid)
    bound = getattr(case, name)

    @functools.wraps(bound)
    def dojo_observed(*args, **kwargs):
        return _call_observed("u.", tid, bound, args, kwargs)

    setattr(case, name, dojo_observed)
    xfail = getattr(raw, "__unittest_expecting_failure__", False) or getattr(
        cls, "__unittest_expecting_failure__", False
    )
    _emit("u.item", tid, "xfail" if xfail else "")


def install_unittest():
    """Hook unittest when it is imported (most processes never import it: no cost there), or
    now if it already is: every TestCase instance observed as it is created, and the start of a
    TextTestRunner run recorded as the end of collection. Only where grading set
    DOJO_OBSERVER_FILE."""
    if not _path:
        return
    _emit("u.start", "", str(os.getpid()))
    if "unittest" in sys.modules:
        return _hook_unittest(sys.modules["unittest"])
    sys.meta_path.insert(0, _UnittestImport())


class _UnittestImport(object):
    """Finds `unittest` as the path finder does, and hooks it once it has executed."""

    def find_spec(self, name, path=None, target=None):
        if name != "unittest":
            return None
        import importlib.machinery

        spec = importlib.machinery.PathFinder.find_spec(name, path)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        # (`runpy` finds a spec before it imports: the finder stays until one executes.)
        def exec_and_hook(module):
            exec_module(module)
            try:
                sys.meta_path.remove(self)
            except ValueError:
                pass
            try:
                _hook_unittest(module)
            except Exception as e:
                _emit("u.unobserved", "?", type(e).__name__)

        loader.exec_module = exec_and_hook
        return spec


def _hook_unittest(unittest):
    case_init = unittest.TestCase.__init__

    @functools.wraps(case_init)
    def __init__(self, *args, **kwargs):
        case_init(self, *args, **kwargs)
        try:
            name = getattr(self, "_testMethodName", None)
            if name and hasattr(type(self), name):
                _observe_case(self, name)
        except Exception as e:
            _emit("u.unobserved", "?", type(e).__name__)

    unittest.TestCase.__init__ = __init__

    runner_run = unittest.TextTestRunner.run

    @functools.wraps(runner_run)
    def run(self, test):
        try:
            _emit("u.collected", "", str(test.countTestCases()))
        except Exception:
            _emit("u.collected", "", "?")
        return runner_run(self, test)

    unittest.TextTestRunner.run = run
