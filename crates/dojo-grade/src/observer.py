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


def _emit(kind, nodeid, extra=""):
    # Never lets an error of its own reach the test run.
    if not _path:
        return
    try:
        line = "%s\t%s\t%s\n" % (kind, nodeid.encode("utf-8", "replace").hex(), extra)
        fd = os.open(_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode("ascii", "replace"))
        finally:
            os.close(fd)
    except Exception:
        pass


def _wrap(nodeid, fn):
    @functools.wraps(fn)
    def dojo_observed(*args, **kwargs):
        _emit("enter", nodeid)
        try:
            result = fn(*args, **kwargs)
        except BaseException as e:
            _emit("raise", nodeid, type(e).__name__)
            raise
        _emit("return", nodeid)
        return result

    return dojo_observed


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
    if kind == "TestCaseFunction":
        # unittest-style: TestCase.run calls the method by name on its class.
        cls = getattr(item, "cls", None)
        fn = getattr(cls, item.name, None) if cls is not None else None
        if fn is None or not _wrappable(fn):
            return _emit("unobserved", nodeid, kind)
        setattr(cls, item.name, _wrap(nodeid, fn))
    elif kind == "Function":
        fn = item.obj
        if not _wrappable(fn):
            return _emit("unobserved", nodeid, kind)
        if isinstance(fn, types.MethodType):
            # A test method: the wrapper stays bound to the same instance (`request.instance`).
            wrapped = types.MethodType(_wrap(nodeid, fn.__func__), fn.__self__)
        else:
            wrapped = _wrap(nodeid, fn)
        try:
            item.obj = wrapped
        except AttributeError:
            item._obj = wrapped
    else:
        # Doctests and other plugins' items: their log lines cannot be checked here.
        return _emit("unobserved", nodeid, kind)
    _emit("item", nodeid, "xfail" if _xfail_marked(item) else "")


_emit("start", "", str(os.getpid()))


def pytest_collection_modifyitems(session, config, items):
    for item in items:
        try:
            _observe(item)
        except Exception as e:
            _emit("unobserved", item.nodeid, type(e).__name__)
    _emit("collected", "", str(len(items)))


def pytest_sessionfinish(session, exitstatus):
    _emit("finish", "", str(exitstatus))
