# dojo's test observer: a pytest plugin that grading loads ahead of the project's code
# (PYTEST_PLUGINS, from a directory the model patch cannot write), recording for every collected
# test whether its own function body ran and how it ended. Records go to the file named by
# DOJO_OBSERVER_FILE, one line each, appended by every pytest process of the run (xdist
# workers included): KIND <tab> hex(nodeid) <tab> EXTRA.
#
# It only uses modules the interpreter and pytest have already imported (a project module
# named like a standard one cannot replace them), and works from Python 3.5 and pytest 3 on.
import functools
import os
import types

_path = os.environ.get("DOJO_OBSERVER_FILE")

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


def _wrap(nodeids, fn):
    """`fn` recording its calls for the tests `nodeids` (a set: a method on a class serves every
    parametrization of it; the running one is `_current`, set at each test's setup)."""

    @functools.wraps(fn)
    def dojo_observed(*args, **kwargs):
        nodeid = _current[0]
        if nodeid not in nodeids:
            return fn(*args, **kwargs)
        _emit("enter", nodeid)
        try:
            result = fn(*args, **kwargs)
        except BaseException as e:
            _emit("raise", nodeid, type(e).__name__)
            raise
        _emit("return", nodeid)
        return result

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


_emit("start", "", str(os.getpid()))


# The run's own pytest session. Tests of pytest plugins start inner sessions in the same
# process (pytester); their items are not the run's tests and are left alone.
_config = [None]


def pytest_configure(config):
    if _config[0] is None:
        _config[0] = config


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
