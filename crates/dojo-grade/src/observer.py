# dojo's test observer. Grading installs this file in the environment's site-packages beside
# `00-dojo-observer.pth`, whose one line runs it at interpreter startup: before any code of the
# project, whatever the test command does to PYTHONPATH, PYTEST_PLUGINS or the working
# directory (only `python -S` skips site-packages). It does nothing unless grading set
# DOJO_OBSERVER_RUN ("RECORDS_FD KEY_FD TESTS", TESTS the task's test files, absolute paths one
# a line):
#
# - the first interpreter of the test command to start reads the run's key from KEY_FD, a pipe
#   (so only one process gets it: the test runner, before any project code; the key is never in
#   an environment variable or a file), and takes the records fd for itself;
# - it reads the task's test files from disk now, while they are pristine, and compiles them:
#   the code each test's body must run (plain, and as pytest's assertion rewriter compiles it,
#   done before the first conftest is imported);
# - pytest: its plugin manager gets this plugin registered as it is created (no PYTEST_PLUGINS
#   import by name); unittest: every TestCase instance gets its test method wrapped as it is
#   created, and the TextTestRunner run is recorded;
# - every test function is wrapped, after checking that its code is the test file's own; the
#   wrapper records whether its body ran and how it ended.
#
# Records go to RECORDS_FD, a pipe the grading side reads (nothing can truncate or rewrite what
# was written), one line each: PID <tab> SEQ <tab> KIND <tab> hex(id) <tab> EXTRA <tab> MAC,
# numbered from 0 in each process, MAC = HMAC-SHA256(key, the line before it) in hex, first 32
# digits. A process that holds the key but runs no tests (`tox`) hands it to the Python
# processes it starts, so its child pytest is observed too. unittest's kinds
# start with "u.", its ids are `module.Class.method`.
#
# It runs in the same interpreter as the code under test, so code written against it can still
# find the key in its memory; see observer.rs for what that leaves open. It only uses modules
# imported before the project's code, and works from Python 3.5 and pytest 3 on.
import _ast as ast  # the node types; the `ast` module (and `re` behind it) costs 7 ms to import
import builtins as _builtins
import marshal as _marshal
import math as _math
import operator as _operator
import os
import sys
import types

try:  # SHA-256 without hashlib, whose OpenSSL import costs 3 ms at every interpreter start
    from _sha2 import sha256 as _sha256  # Python 3.12 on
except ImportError:
    try:
        from _sha256 import sha256 as _sha256
    except ImportError:
        from hashlib import sha256 as _sha256

# unittest (and pytest's unittest support) leave the frames of modules with this global out of
# the tracebacks they print: the wrappers below are not the tests' code.
__unittest = True

# What the observer calls after the project's code may have run, taken now, at startup, before
# any of it: a patched `sys.gettrace` would hide a tracer, a patched `os.write` would drop
# records. (The observer's own functions resolve builtins through a copy of the builtins taken
# now too: see the .pth line's loader; the MAC is computed here, not by a module.)
_getpid, _write = os.getpid, os.write
_gettrace = sys.gettrace
# Python 3.12's sys.monitoring: a LINE or JUMP callback may set a frame's `f_lineno` (jump over
# a test's assertions) as a trace function may, and a PY_START callback can turn those on for a
# test's code after its entry was checked: any event of any tool counts (coverage's `sysmon`
# core included). Bound now, before project code can replace them.
_monitoring = getattr(sys, "monitoring", None)
_mon_events = getattr(_monitoring, "get_events", None)
_mon_local = getattr(_monitoring, "get_local_events", None)
# No audit hook (Python < 3.8): `_State.tampered` compares everything at every test.
_audit_missing = True
_itemgetter = _operator.itemgetter  # (bound now: project code may rebind it later)


def _hmac_sha256(key):
    """HMAC-SHA256 (RFC 2104) under `key` (at most 64 bytes): a function of the message giving
    its MAC in hex, the padded key's hash states prepared once."""
    k = key + b"\0" * (64 - len(key))
    inner0 = _sha256(bytes(b ^ 0x36 for b in k))
    outer0 = _sha256(bytes(b ^ 0x5C for b in k))

    def mac(msg):
        inner, outer = inner0.copy(), outer0.copy()
        inner.update(msg)
        outer.update(inner.digest())
        return outer.hexdigest()

    return mac

# The standard library's unittest package (its wrappers only skip or mark, never swallow).
_UNITTEST_DIR = os.path.join(os.path.dirname(os.__file__), "unittest") + os.sep

# Where the repository is: modules loaded from it are the project's code.
_WORKSPACE = "/testbed/"

# co_flags of functions that are not wrapped: generators, async generators and generator-based
# coroutines (a wrapper would change what calling them returns).
_NOT_WRAPPED = 0x20 | 0x100 | 0x200
# A coroutine function's (`async def`): wrapped by a coroutine function of the observer's.
_CO_COROUTINE = 0x80
# What a unittest case calls on itself around and inside a test, besides its assertions: the
# first three only unittest defines; `run` and `debug` test frameworks override (Django's
# SimpleTestCase), so they are guarded on the instance only.
_CASE_METHODS = ("_getAssertEqualityFunc", "_baseAssertEqual", "_formatMessage", "run", "debug")


def _boot():
    spec = os.environ.pop("DOJO_OBSERVER_RUN", None)
    if not spec:
        return
    try:
        rec_fd, key_fd, tests = spec.split(" ", 2)
        rec_fd, key_fd = int(rec_fd), int(key_fd)
    except ValueError:
        return
    key = b""
    try:
        while len(key) < 64:
            chunk = os.read(key_fd, 64 - len(key))
            if not chunk:
                break
            key += chunk
        os.close(key_fd)
    except OSError:
        return
    if len(key) < 64:
        # Another interpreter of the test command took the key first: this one is not observed.
        return
    try:
        out = os.dup(rec_fd)  # not inheritable: subprocesses cannot write records
        os.close(rec_fd)
    except OSError:
        return
    state = _State(key, out)
    state.tests = tests
    state.emit("start", "", "%d.%d" % sys.version_info[:2])
    state.pristine = _Pristine([p for p in tests.split("\n") if p])
    for path in sorted(state.pristine.files):
        state.emit("file", path)
        for doc in sorted(state.pristine.files[path].docs):
            state.emit("u.filedoc", "", doc)
    state.helpers = _Helpers()
    _audit(state)
    _hook_imports(state)


def _project_loaded():
    """Whether any module of the repository (the workspace) is loaded in this process."""
    for m in list(sys.modules.values()):
        f = getattr(m, "__file__", None)
        if isinstance(f, str) and f.startswith(_WORKSPACE):
            return True
    return False


def _hook_subprocess(state, subprocess):
    """Hand the key down to the Python processes a wrapper starts (`tox --current-env` runs
    pytest as its child; `subprocess` closes other descriptors): while this process has not
    become a test runner and has loaded nothing of the repository, each child it starts gets the
    records descriptor and a one-shot pipe holding the key. A runner never hands it down: the
    code under test runs in it and in its children."""
    popen_init = subprocess.Popen.__init__
    pipe, write, close = os.pipe, _write, os.close

    def __init__(self, args, *rest, **kwargs):
        if state.runner or _project_loaded():
            return popen_init(self, args, *rest, **kwargs)
        r, w = pipe()
        try:
            write(w, state.key)
        finally:
            close(w)
        try:
            kwargs["pass_fds"] = tuple(set(kwargs.get("pass_fds", ())) | set([r, state.fd]))
            env = kwargs.get("env")
            env = dict(os.environ if env is None else env)
            env["DOJO_OBSERVER_RUN"] = "%d %d %s" % (state.fd, r, state.tests)
            kwargs["env"] = env
            return popen_init(self, args, *rest, **kwargs)
        finally:
            close(r)

    subprocess.Popen.__init__ = __init__


def _audit(state):
    """An audit hook (Python 3.8+; it cannot be removed once added) flagging what only code that
    reaches into the test machinery does: a trace function set while a test body runs (a
    Python tracer can jump over a test's lines; doctest sets and restores one outside the
    bodies this observer wraps; a profile function cannot jump, and is not flagged), a
    function's code replaced, and the garbage collector's object walks outside test bodies
    (the way to the observer's own objects; leak tests walk them inside test bodies)."""
    add = getattr(sys, "addaudithook", None)
    if add is None:
        return
    walks = ("gc.get_objects", "gc.get_referrers", "gc.get_referents")
    global _audit_missing
    _audit_missing = False

    def hook(event, args):
        if event == "sys.settrace":
            # (A profile function is not flagged: it sees calls and returns but cannot move a
            # frame's line, and `cProfile` sets one in the tests of tools with a profiler
            # option: sqlfluff's `--profiler`, 7 of its dev-split gold patches graded unresolved.)
            if state.in_test:
                state.flag(event + " in a test body")
        elif event == "object.__setattr__":
            # (`types.coroutine` sets the code of library functions: only the test files'
            # functions are the observer's business.)
            if len(args) >= 3 and args[1] == "__code__":
                state.dirty = True
                files = state.pristine.files
                old = getattr(getattr(args[0], "__code__", None), "co_filename", None)
                if old in files or getattr(args[2], "co_filename", None) in files:
                    state.flag("the __code__ of a test file's function replaced")
        elif event in walks:
            state.dirty = state.walked = True
            if not state.in_test:
                state.flag(event + " outside a test body")

    add(hook)


class _State(object):
    """One observed process: its key, records fd and sequence number (only the process that read
    the key writes; a child forked from it records nothing)."""

    def __init__(self, key, fd):
        self.key = key
        self.mac = _hmac_sha256(key)
        self.fd = fd
        self.pid = _getpid()
        self.seq = 0
        self.pending = []  # records not written yet (`emit`'s `later`)
        self.pristine = None
        self.tests = ""  # DOJO_OBSERVER_RUN's test files, handed down with the key
        self.runner = False  # a test runner started here: the key stays in this process
        self.current = None  # the node id of the pytest item being run
        self.config = None  # the run's own pytest config (not a pytester session's)
        self.xfailed = None  # pytest's XFailed class and outcomes module's file, taken early
        self.outcomes_file = None
        self.ours = {}  # id -> (wrapper, the function it wraps, its test ids) of those made here
        self.recorders = {}  # id -> (recorder, test function) of the recorders made here
        self.inner = []  # [recorder, outcomes] of each running wrapped call (_Watch)
        self.in_test = 0  # test bodies running now (the wrappers count them)
        self.sympy = False  # sympy's own runner runs here
        self.helpers = None  # the repository's assertion helpers (_Helpers), read at startup
        self.flagged = set()
        # (namespace, name, object, function, code, where) of the runners' assertion helpers:
        # module-level functions and their classes' functions.
        self.trusted = []
        # (class __dict__, its items then) of the runners' classes: an attribute added
        # (`TestCase.__getattribute__`) or rebound (`failureException`) shows.
        self.classes = []
        # (namespace, its items then, name) of what assertion helpers call (`abs`, `round`,
        # `math.isclose`, `operator.eq`): a name rebound shows; names added do not (`site` adds
        # `exit` and `help` after this, gettext `_`).
        self.namespaces = [
            (m.__dict__, dict(m.__dict__), m.__name__) for m in (_builtins, _math, _operator)
        ]
        self._fast = None  # what `tampered` compares first (`_comparisons`)
        # A function's code set since `tampered` last ran `_where`, or objects ever walked
        # through `gc` (`walked`), or no audit hooks (Python < 3.8): `_where` runs.
        self.dirty = True
        self.walked = False
        self.misses = 0  # times the fast path found a change that `_where` did not

    def flag(self, what):
        """Record, once, an action only code reaching into the test machinery takes."""
        if what not in self.flagged:
            self.flagged.add(what)
            self.emit("audit", "", what)

    def snapshot(self, module):
        """Remember the functions of `module` and of its classes (pytest's and unittest's
        assertion helpers): a test body that returned counts only while they are unchanged
        (the same objects, with the same code)."""
        ns = getattr(module, "__dict__", {})
        spaces = [(ns, module.__name__)]
        for obj in list(ns.values()):
            if isinstance(obj, type) and obj.__module__ == module.__name__:
                where = module.__name__ + "." + obj.__name__
                d = obj.__dict__  # (one proxy: `tampered` compares a class's whole once)
                spaces.append((d, where))
                self.classes.append((d, dict(d), where))
        for space, where in spaces:
            for name, obj in list(space.items()):
                fn = _func(obj)
                if fn is not None:
                    self.trusted.append((space, name, obj, fn, fn.__code__, where))
        self._fast = None

    def _comparisons(self):
        """What `tampered` compares before it runs `_where`, taken now: each namespace and class
        `_where` reads whole, with its keys and its values in order; in other modules'
        namespaces, the names `_where` reads, with their objects (a module's other globals
        change at run time: pytest sets `_reprcompare` around every test)."""
        whole = {}
        for t in self.namespaces + self.classes:
            whole[id(t[0])] = t[0]
        named = {}
        for space, name, obj, fn, code, where in self.trusted:
            if id(space) not in whole:
                named.setdefault(id(space), (space, []))[1].append(name)
        whole = [(m, list(m)) for m in whole.values()]
        # (An itemgetter of two names or more gives a tuple.)
        named = [
            (m, _itemgetter(*(names * 2 if len(names) == 1 else names)))
            for m, names in named.values()
        ]
        return whole, named, self._values(whole, named)

    def _values(self, whole, named):
        """The values of `whole`'s mappings and of `named`'s names, as one list (C loops)."""
        now = []
        for m, keys in whole:
            now.extend(m.values())
        for m, get in named:
            now.extend(get(m))
        return now

    def tampered(self):
        """The first runner helper, namespace entry or class attribute no longer the object it
        was at startup (its name), or None.

        Run at every test's return. The full comparison by name (`_where`, some 1,300 lookups,
        about 0.1-0.3 ms) runs only when what it reads may have changed since it last found
        nothing:
        - a namespace's or class's keys in order (`==` of the key lists, lengths included);
        - any value, compared by identity (`is` in a plain loop: `==` would call a
          replacement's `__eq__`);
        - a helper's code: only after an audit event set a function's `__code__`;
        - everything, at every test, once objects were walked through `gc` (the way to a
          class's own dict), where there are no audit hooks (Python < 3.8), or after the fast
          path missed 9 times on harmless changes.
        The one difference from `_where`: a key whose `__eq__` lies, put in a module's dict
        (`builtins`) in place of its last key, with the same value. A lookup of the real name
        then finds it only with that value; else the name is gone (a NameError), which no
        assertion passes by. Classes take attribute names as plain `str`. A benign change (a
        name added to `builtins`) costs one `_where`."""
        fast = self._fast
        tried = fast is not None and not self.dirty
        if tried:
            whole, named, then = fast
            for m, keys in whole:
                if list(m) != keys:  # (its length too)
                    break
            else:
                try:
                    now = self._values(whole, named)
                except KeyError:  # a name gone: `_where` says which
                    now = ()
                if len(now) == len(then):
                    for x, y in zip(now, then):
                        if x is not y:
                            break
                    else:
                        return None
        where = self._where()
        if where is None:
            # A run whose compared objects keep changing harmlessly gets `_where` alone (what
            # a miss costs more: `_comparisons`, about as much again).
            self.misses += tried
            self.dirty = _audit_missing or self.walked or self.misses > 8
            self._fast = None if self.dirty else self._comparisons()
        return where

    def _where(self):
        for space, name, obj, fn, code, where in self.trusted:
            if space.get(name) is not obj or fn.__code__ is not code:
                return "%s.%s" % (where, name)
        for space, then, where in self.namespaces:
            for k, v in then.items():
                if space.get(k, then) is not v and k != "_":
                    return "%s.%s" % (where, k)
        for space, then, where in self.classes:
            if len(space) != len(then):
                added = [k for k in space.keys() if k not in then]
                return "%s.%s" % (where, added[0] if added else "?")
            for k, v in then.items():
                if space.get(k, then) is not v:
                    return "%s.%s" % (where, k)
        return None

    def emit(self, kind, tid="", extra="", later=False):
        """Record `kind` for test `tid`. `later`: the record may wait in memory for the next one
        written now (at most 32 wait), a test's wrapping and its body's start: each write to
        the pipe wakes the grading side's reader, about 20-40 us on a 2-core VM, three times a
        test. What waits is lost if the process dies first; the test then reads as never
        collected or never run, which no test passes by."""
        # Never lets an error of its own reach the test run.
        if _getpid() != self.pid:
            return
        try:
            body = "%d\t%d\t%s\t%s\t%s" % (
                self.pid,
                self.seq,
                kind,
                tid.encode("utf-8", "replace").hex(),
                extra.replace("\t", " ").replace("\n", " "),
            )
            self.seq += 1
            mac = self.mac(body.encode("utf-8"))[:32]
            pending = self.pending
            pending.append((body + "\t" + mac + "\n").encode("utf-8"))
            if later and len(pending) < 32:
                return
            data = b"".join(pending)
            del pending[:]
            while data:
                data = data[_write(self.fd, data) :]
        except Exception:
            pass


# ---------------------------------------------------------------------------------------------
# The pristine test files


class _File(object):
    """One test file as it was on disk at startup: its code objects (plain compile, and
    pytest's rewrite when it runs) and what its source says of each function."""

    def __init__(self, path, source):
        self.path = path
        self.source = source
        self.codes = []  # module code objects: plain, then rewritten
        self.defs = {}  # name path (tuple) -> (wrapping decorators?, xfail marked?)
        # name path -> the exceptions a `@raises(E, ...)` decorator of it names (dotted names;
        # "" for an argument that is not one): such a test passes when its code raises them.
        self.expects = {}
        self.module_xfail = False
        self.rebound = set()  # module-level names also bound by an import or assignment
        self.imported = {}  # module-level `from M import N as L`: L -> (M, N)
        self.docs = set()  # first docstring lines of its test functions (unittest's names)
        self.doc_of = {}  # name path -> its test function's first docstring line ("": none)
        # Lines holding a call to something named `*xfail*`: where the file's own code may
        # raise pytest's XFailed.
        self.xfail_lines = set()
        # id(code) -> (code, an independent copy made now): code objects handed to pytest are
        # this file's own, so instructions written into them in place (ctypes) must show.
        # Code equality compares the instructions themselves (3.11+ past the cached
        # `co_code`), and the copy shares no memory with the original.
        self.refs = {}
        self._index = {}
        self._matched = {}
        try:
            self.codes.append(compile(source, path, "exec", dont_inherit=True))
            self._read_defs(compile(source, path, "exec", 0x400, True))  # PyCF_ONLY_AST
        except Exception:
            pass
        self.flat = []
        self._flatten()
        self._build_index()
        for co in self.codes:
            self._keep(co)

    def _keep(self, code):
        """Remember an independent copy of `code` and of each code object in it."""
        try:
            todo = [(code, _marshal.loads(_marshal.dumps(code)))]
        except Exception:
            return
        while todo:
            co, copy = todo.pop()
            self.refs[id(co)] = (co, copy)
            inner = [c for c in co.co_consts if isinstance(c, types.CodeType)]
            copies = [c for c in copy.co_consts if isinstance(c, types.CodeType)]
            todo.extend(zip(inner, copies))

    def unchanged(self, code):
        """`code`, if compiled here, still equals the copy made when it was (its
        instructions, constants and the code objects in it): True for code not compiled
        here."""
        kept = self.refs.get(id(code))
        return kept is None or kept[0] is not code or code == kept[1]

    def _flatten(self):
        seen, todo = [], list(self.codes)
        while todo:
            co = todo.pop()
            seen.append(co)
            todo.extend(c for c in co.co_consts if isinstance(c, types.CodeType))
        self.flat = seen

    def add(self, code):
        if isinstance(code, types.CodeType) and code not in self.codes:
            self.codes.append(code)
            self._flatten()
            self._build_index()
            self._keep(code)

    def _read_defs(self, tree):
        # A class decorator other than a marker may wrap every test method of the class
        # (`@mock.patch(...)` on a Django TestCase): its methods are reached through
        # `__wrapped__` as if decorated themselves.
        def walk(body, prefix, xfail, cls_wraps=False):
            for node in body:
                if isinstance(node, ast.ClassDef):
                    marks = [_dotted(d) for d in node.decorator_list]
                    walk(
                        node.body,
                        prefix + (node.name,),
                        xfail or _any_xfail(marks),
                        cls_wraps or any(not _marker(m) for m in marks),
                    )
                elif isinstance(node, (ast.FunctionDef, getattr(ast, "AsyncFunctionDef", ()))):
                    marks = [_dotted(d) for d in node.decorator_list]
                    wraps = cls_wraps or any(not _marker(m) for m in marks)
                    key = prefix + (node.name,)
                    for d in node.decorator_list:
                        if isinstance(d, ast.Call) and _dotted(d.func).split(".")[-1] == "raises":
                            named = [_dotted(a) for a in d.args if not isinstance(a, ast.Call)]
                            ok = named and len(named) == len(d.args)
                            self.expects[key] = named if ok else [""]
                    if node.name.startswith("test"):
                        doc = _first_doc_line(node)
                        self.doc_of[key] = doc
                        if doc:
                            self.docs.add(doc)
                    old = self.defs.get(key, (False, False))
                    self.defs[key] = (old[0] or wraps, old[1] or xfail or _any_xfail(marks))
                elif prefix:
                    continue
                elif isinstance(node, (ast.Import, ast.ImportFrom)):
                    self.rebound.update((a.asname or a.name).split(".")[0] for a in node.names)
                    if isinstance(node, ast.ImportFrom) and not node.level and node.module:
                        for a in node.names:
                            self.imported[a.asname or a.name] = (node.module, a.name)
                elif isinstance(node, ast.Assign):
                    names = [t.id for t in node.targets if isinstance(t, ast.Name)]
                    self.rebound.update(names)
                    if "pytestmark" in names and _mentions_xfail(node.value):
                        self.module_xfail = True

        walk(tree.body, (), False)
        todo = [tree]
        while todo:
            n = todo.pop()
            if isinstance(n, ast.Call) and "xfail" in _dotted(n.func).split(".")[-1].lower():
                last = getattr(n, "end_lineno", None) or n.lineno
                self.xfail_lines.update(range(n.lineno, last + 1))
            for field in getattr(n, "_fields", ()):
                v = getattr(n, field, None)
                todo.extend(v if isinstance(v, list) else [v] if isinstance(v, ast.AST) else [])

    def candidates(self, names):
        """The code objects a function at `names` (classes, then the function) may have."""
        return self._index.get(tuple(names), ())

    def _build_index(self):
        """Every code object of the module codes under its name path (class bodies and
        functions alike), in one walk: looked up per test, never searched."""
        index, todo = {}, [((), co) for co in self.codes]
        while todo:
            prefix, code = todo.pop()
            for c in code.co_consts:
                if isinstance(c, types.CodeType):
                    key = prefix + (c.co_name,)
                    index.setdefault(key, []).append(c)
                    todo.append((key, c))
        self._index = index

    def matches(self, names, code):
        """`code` equals one of the code objects the function at `names` may have. Equality
        compares bytecode and constants deeply: each code object that matched is remembered
        (kept alive, so its id stays its own) and found again by identity."""
        hit = self._matched.get(id(code))
        if hit is not None and hit[0] is code and hit[1] == tuple(names):
            return True
        if code in self.candidates(names):
            self._matched[id(code)] = (code, tuple(names))
            return True
        return False

    def info(self, names):
        wraps, xfail = self.defs.get(tuple(names), (False, False))
        return wraps, xfail or self.module_xfail


def _first_doc_line(node):
    """The first line of a function's docstring, as unittest's `shortDescription` gives it."""
    body = getattr(node, "body", None) or [None]
    value = getattr(body[0], "value", None) if isinstance(body[0], ast.Expr) else None
    text = getattr(value, "value", getattr(value, "s", None))  # Constant (3.8+), Str before
    return text.strip().split("\n")[0].strip() if isinstance(text, str) else ""


def _dotted(node):
    """`pytest.mark.xfail(...)` -> "pytest.mark.xfail" (calls stripped); "" when not a name."""
    while isinstance(node, ast.Call):
        node = node.func
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _mentions_xfail(node):
    """Whether an expression names anything `xfail` (`pytestmark = [pytest.mark.xfail, ...]`)."""
    todo = [node]
    while todo:
        n = todo.pop()
        if isinstance(n, ast.Name) and "xfail" in n.id.lower():
            return True
        if isinstance(n, ast.Attribute) and "xfail" in n.attr.lower():
            return True
        for field in getattr(n, "_fields", ()):
            v = getattr(n, field, None)
            todo.extend(v if isinstance(v, list) else [v] if isinstance(v, ast.AST) else [])
    return False


def _marker(dotted):
    """A decorator that returns the test function itself (pytest marks, unittest's skips and
    expectedFailure): anything else may wrap it."""
    last = dotted.split(".")[-1]
    return (
        ".mark." in "." + dotted + "."
        or dotted.startswith("mark.")
        or last in ("skip", "skipIf", "skipUnless", "expectedFailure", "usefixtures")
    )


def _any_xfail(marks):
    return any("xfail" in m.lower() or "expectedfailure" in m.lower() for m in marks)


class _Pristine(object):
    def __init__(self, paths):
        self.files = {}
        for p in paths:
            try:
                with open(p, "rb") as f:
                    self.files[p] = _File(p, f.read())
            except OSError:
                pass

    def file_of_nodeid(self, filepart):
        for p, f in self.files.items():
            if p == filepart or p.endswith("/" + filepart):
                return f
        return None

    def file_of_module(self, module):
        rel = module.replace(".", "/")
        for p, f in self.files.items():
            if p.endswith("/" + rel + ".py") or p.endswith("/" + rel + "/__init__.py"):
                return f
        return None

    def is_pristine_code(self, code):
        return any(code in f.flat for f in self.files.values())

    def xfail_call_at(self, code, line):
        """`code` is a restored file's and its line `line` calls something `*xfail*`."""
        return any(code in f.flat and line in f.xfail_lines for f in self.files.values())

    def rewrite_all(self, config):
        """Add each file's code as pytest's assertion rewriter compiles it (called before the
        first conftest, so before the project's code could change the rewriter), and let pytest
        import those very code objects instead of rewriting the files a second time: its
        `_rewrite_test` answers a restored test file, unchanged on disk since startup, with the
        code made here (any other file, and any changed one, goes to pytest's own)."""
        rw = sys.modules.get("_pytest.assertion.rewrite")
        fn = getattr(rw, "_rewrite_test", None)
        if fn is None:
            return
        made = {}
        for path, f in self.files.items():
            r = _rewritten(fn, path, config)
            if r is not None:
                f.add(r[0])
                made[path] = r
        if made:
            rw._rewrite_test = _reuse(fn, made, self.files)


def _rewritten(fn, path, config):
    """`path` compiled by pytest's `_rewrite_test`, called as the running pytest calls it: a str
    (pytest 5, which embeds `repr(path)` in its assert-None warnings), a `Path` (pytest 6 on), a
    `py.path.local` with the config first (pytest 3 and 4). A wrong form fails, or is never
    reached. Returns the code and whether pytest's answer was a `(stat, code)` pair."""
    tries = [(path, config)]
    try:
        import pathlib

        tries.append((pathlib.Path(path), config))
    except ImportError:
        pass
    py = sys.modules.get("py")
    if py is not None:
        tries.append((config, py.path.local(path)))
    for args in tries:
        try:
            r = fn(*args)
        except Exception:
            continue
        pair = isinstance(r, tuple) and len(r) == 2
        co = r[1] if pair else r
        if isinstance(co, types.CodeType):
            return co, pair
    return None


def _reuse(rewrite, made, files):
    """pytest's `_rewrite_test`, answering the files in `made` with the code made at startup."""
    stat = os.stat

    def _rewrite_test(*args, **kwargs):
        for a in args:
            path = str(a) if a.__class__.__name__ in ("str", "PosixPath", "local") else None
            hit = made.get(path) if path is not None else None
            if hit is None:
                continue
            try:
                with open(path, "rb") as fh:
                    unchanged = fh.read() == files[path].source
                if unchanged:
                    code, pair = hit
                    return (stat(path), code) if pair else code
            except OSError:
                pass
        return rewrite(*args, **kwargs)

    return _rewrite_test


# ---------------------------------------------------------------------------------------------
# Assertion helpers that live in the repository (sympy's `raises`, `XFAIL`, `warns`: its own
# runner imports them from the project). They are read and compiled at startup, like the test
# files, while pristine (the guard refuses a patch that changes them on disk).

_HELPER_MODULES = (
    ("sympy.testing.pytest", "sympy/testing/pytest.py"),
    ("sympy.utilities.pytest", "sympy/utilities/pytest.py"),
)


def _module_names(tree):
    """The names a module's own statements define (`def`, `class`, at module level or under
    its `if`/`try` blocks) and the aliases it assigns among them (`raises = _raises`)."""
    defined, aliases, todo = set(), {}, list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.ClassDef, getattr(ast, "AsyncFunctionDef", ()))):
            defined.add(node.name)
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Name):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    defined.add(t.id)
                    aliases[t.id] = node.value.id
        else:
            for field in ("body", "orelse", "finalbody", "handlers"):
                todo.extend(getattr(node, field, None) or ())
    return defined, aliases


class _Helpers(object):
    """The repository's assertion-helper modules as they were on disk at startup. A loaded one
    must hold, under each name its source defines, its own code: a function of those files
    under its own name (or an alias the source assigns), or a context manager made from one by
    `contextlib`; and each class of it only functions of those files."""

    def __init__(self):
        self.files = {}  # module name -> (_File, defined names, aliases)
        self.codes = []  # every code object of those files
        self._ok = {}  # id(function) -> (function, code): found pristine before
        self._contextlib = os.path.join(os.path.dirname(os.__file__), "contextlib.py")
        for mod, rel in _HELPER_MODULES:
            path = _WORKSPACE + rel
            try:
                with open(path, "rb") as fh:
                    f = _File(path, fh.read())
                tree = compile(f.source, path, "exec", 0x400, True)  # PyCF_ONLY_AST
            except Exception:
                continue
            defined, aliases = _module_names(tree)
            self.files[mod] = (f, defined, aliases)
            self.codes.extend(f.flat)

    def _pristine(self, fn, name, aliases):
        code = fn.__code__
        hit = self._ok.get(id(fn))
        if hit is not None and hit[0] is fn and hit[1] is code:
            return True
        if code.co_filename == self._contextlib:
            inner = _func(getattr(fn, "__wrapped__", None))
            return inner is not None and self._pristine(inner, name, aliases)
        named = code.co_name == name or aliases.get(name) == code.co_name
        if named and code in self.codes:
            self._ok[id(fn)] = (fn, code)
            return True
        return False

    def changed(self):
        """The first helper found replaced (`module.name`), or None."""
        for mod, (f, defined, aliases) in self.files.items():
            ns = getattr(sys.modules.get(mod), "__dict__", None)
            if not isinstance(ns, dict):
                continue
            for name in defined:
                if name not in ns:
                    continue  # a branch its source did not take
                obj = ns[name]
                if isinstance(obj, type):
                    for attr, val in list(vars(obj).items()):
                        fn = _func(val)
                        if fn is not None and not self._pristine(fn, attr, {}):
                            return "%s.%s.%s" % (mod, name, attr)
                    continue
                fn = _func(obj)
                if fn is None or not self._pristine(fn, name, aliases):
                    return "%s.%s" % (mod, name)
        return None

    def rebound(self, f, g):
        """The first name pristine test file `f` imports from a helper module that its module
        namespace `g` no longer binds to that module's object, or None."""
        for local, (mod, orig) in f.imported.items():
            if mod in self.files and isinstance(g, dict) and local in g:
                m = sys.modules.get(mod)
                if m is not None and g[local] is not getattr(m, orig, g[local]):
                    return local
        return None


# ---------------------------------------------------------------------------------------------
# Checking and wrapping one test function


def _func(obj):
    f = getattr(obj, "__func__", obj)
    return f if isinstance(f, types.FunctionType) else None


def _verify(state, f, names, fn):
    """Why `fn`, the function a runner will call for the test at `names` of pristine file `f`,
    is not that test's own code (None: it is), and, where `fn` is a wrapper that keeps that
    code, what [`_reach`] found of it (for [`_watch`]; None where `fn` is the test's own
    function). A test whose source wraps it in a decorator other than a marker may be such a
    wrapper."""
    cands = f.candidates(names)
    if not cands:
        return "no function %s in the test file" % ".".join(names), None
    wraps, _ = f.info(names)
    raw = _func(fn)
    if raw is None:
        return "a %s, not a function" % type(fn).__name__, None
    if f.matches(names, raw.__code__):
        return None, None
    reached = _reach(state, f, names, fn) if wraps else None
    if reached is not None and reached[0] is not None:
        return None, reached
    return "its code is not the test file's (%s)" % getattr(raw.__code__, "co_name", "?"), None


def _reach(state, f, names, fn):
    """Where the wrapper `fn` keeps the test at `names` of pristine file `f`: through
    `__wrapped__`, the closures of wrapper functions (matplotlib's `check_figures_equal` keeps
    the test there and sets no `__wrapped__`) and the attributes of a callable object (a
    decorator class). Returns (the test's function or None, the places holding it: ("cell",
    cell) or ("dict", dict, key), the recorder [`_watch`] put there for an earlier item, or
    None). Bounded, and a hostile `__getattr__` is caught."""
    found, holders, rec = None, [], None
    todo, seen = [(fn, 0, None)], set()
    while todo:
        obj, depth, via = todo.pop()
        if depth > 16 or id(obj) in seen or len(seen) > 256:
            continue
        seen.add(id(obj))
        g = _func(obj)
        if depth and g is not None:
            mine = state.recorders.get(id(g))
            if mine is not None and mine[0] is g:
                found, rec = mine[1], g
                continue
            if f.matches(names, g.__code__):
                if found is None or found is g:
                    found = g
                    if via is not None:
                        holders.append(via)
                continue
        nxt = []
        try:  # (an object's own __getattr__ may raise anything)
            w = getattr(obj, "__wrapped__", None)
        except Exception:
            w = None
        if w is not None:
            # (Followed, never replaced: `__wrapped__` is what introspection reads, the
            # signature pytest takes fixtures from; a wrapper calls what it keeps elsewhere.)
            nxt.append((w, None))
        if g is not None:
            for cell in g.__closure__ or ():
                try:
                    c = cell.cell_contents
                except ValueError:  # an empty cell
                    continue
                # Functions, and objects of a class (a decorator's instance): closures
                # hold any data; a module's or a class's namespace is not a wrapper's.
                if _func(c) is not None or not isinstance(c, (type, types.ModuleType)):
                    nxt.append((c, ("cell", cell)))
        else:
            try:
                d = vars(obj)
            except Exception:  # (no __dict__, or a hostile one)
                d = None
            for k, v in list(d.items()) if type(d) is dict else ():
                if _func(v) is not None:
                    nxt.append((v, ("dict", d, k)))
        todo.extend((n, depth + 1, v) for n, v in nxt)
    return found, holders, rec


def _set_cell(cell, value):
    """Put `value` in a closure cell: writable from Python 3.7, through the C API before."""
    try:
        cell.cell_contents = value
        return
    except (AttributeError, TypeError):
        pass
    try:
        import ctypes  # (3.5 and 3.6 only; a module the project replaced can only fail here)

        put = ctypes.pythonapi.PyCell_Set
        put.argtypes = (ctypes.py_object, ctypes.py_object)
        put.restype = ctypes.c_int
        put(cell, value)
    except Exception:
        pass


class _Watch(object):
    """The test's own function inside a library wrapper, and how the wrapper's call of it must
    end for the test to pass: a wrapper is the project's code, which a patch can change to
    swallow what the test raises. Its outcomes are collected per call of the outer wrapper
    (`state.inner`, a stack: the recorder records only the call its own outer call made)."""

    def __init__(self, f, names, t, recorder):
        self.t, self.recorder = t, recorder
        self.expects = f.expects.get(tuple(names))

    def verdict(self, outcomes):
        """None when the wrapper returned as the test's code allows, else why not."""
        if not outcomes:
            return "its decorator returned without running its code"
        returned = [o for o in outcomes if o is None]
        raised = [o for o in outcomes if o is not None]
        if self.expects is None:
            if returned:
                return None
            return "its decorator returned where its code raised %s" % raised[-1][0].__name__
        classes = self._expected()
        if classes is None:
            return "its @raises decorator names what is not an exception class"
        if returned:
            return "its code returned where its @raises decorator expects an exception"
        for cls, from_body in raised:
            mro = getattr(cls, "__mro__", ())
            if from_body and any(c in mro for c in classes):
                return None
        return "its code raised %s, not what its @raises decorator names" % raised[-1][0].__name__

    def _expected(self):
        """The classes the pristine `@raises(...)` names, looked up in the test's module."""
        out, g = [], getattr(self.t, "__globals__", {})
        try:  # (the names reach the project's objects, whose __getattr__ may raise anything)
            b = g.get("__builtins__", {})
            b = b if isinstance(b, dict) else getattr(b, "__dict__", {})
            for dotted in self.expects:
                if not dotted:
                    return None
                parts = dotted.split(".")
                obj = g[parts[0]] if parts[0] in g else b.get(parts[0])
                for p in parts[1:]:
                    obj = getattr(obj, p, None)
                if not (isinstance(obj, type) and BaseException in obj.__mro__):
                    return None
                out.append(obj)
        except Exception:
            return None
        return out


def _watch(state, f, names, reached):
    """For a test that a wrapper runs (`reached`: what [`_verify`] found of it; None when the
    runner calls the test's own function): the test's function is replaced, where the wrapper
    keeps it, by a recorder of how each call of it ended, and a `_Watch` of it returned. A
    reference this does not find (a `functools.partial`) is never called through the recorder,
    so the test cannot pass: fail closed. A coroutine or generator test is left to the outer
    wrapper (its call returns at once)."""
    if reached is None:
        return None
    t, holders, rec = reached
    if t.__code__.co_flags & (_NOT_WRAPPED | _CO_COROUTINE):
        return None
    if rec is None:
        rec = _make_recorder(state, t)
        for h in holders:
            try:
                if h[0] == "cell":
                    _set_cell(h[1], rec)
                else:
                    h[1][h[2]] = rec
            except Exception:
                pass
    return _Watch(f, names, t, rec)


def _located(code, like):
    """`code` as if it were at `like`'s file and first line: what `inspect.getfile` answers for
    a function of it. (Python 3.8 on: `replace`; before, the 3.5-3.7 constructor.)"""
    try:
        if hasattr(code, "replace"):
            return code.replace(co_filename=like.co_filename, co_firstlineno=like.co_firstlineno)
        return types.CodeType(
            code.co_argcount,
            code.co_kwonlyargcount,
            code.co_nlocals,
            code.co_stacksize,
            code.co_flags,
            code.co_code,
            code.co_consts,
            code.co_names,
            code.co_varnames,
            like.co_filename,
            code.co_name,
            like.co_firstlineno,
            code.co_lnotab,
            code.co_freevars,
            code.co_cellvars,
        )
    except Exception:
        return code


def _dressed(f, code, g, like):
    """`f` made again with `code` and globals `g` (None: its own), and named and documented
    as `like`: what reports, `skipif` strings and directory lookups read of a test function."""
    f = types.FunctionType(
        code, f.__globals__ if g is None else g, f.__name__, f.__defaults__, f.__closure__
    )
    for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
        try:
            setattr(f, attr, getattr(like, attr))
        except (AttributeError, TypeError):
            pass
    return f


def _make_recorder(state, t):
    """`t`, recording how each call ends into the outcomes of the outer call that is running
    it (None: returned; (exception class, whether raised from `t`'s own code, not from the
    call itself)). Outside such a call it is `t`."""
    caught = BaseException
    code = t.__code__

    def dojo_inner(*args, **kwargs):
        __tracebackhide__ = True  # pytest leaves this frame out of failure reports
        top = state.inner[-1] if state.inner else None
        if top is None or top[0] is not dojo_inner:
            return t(*args, **kwargs)
        try:
            result = t(*args, **kwargs)
        except caught as e:
            tb, ran = getattr(e, "__traceback__", None), False
            tb = tb.tb_next if tb is not None else None
            while tb is not None and not ran:
                ran = tb.tb_frame.f_code is code
                tb = tb.tb_next
            top[1].append((type(e), ran))
            raise
        top[1].append(None)
        return result

    # At the test's file and line: matplotlib names an image test's baseline and result
    # directories after `inspect.getfile` of the function its wrapper keeps. (Rebinding the
    # name updates the cell the body reads itself through.)
    dojo_inner = _dressed(dojo_inner, _located(dojo_inner.__code__, code), None, t)
    # The test's own attributes, shared: what the wrapper or a fixture sets on the test
    # function (matplotlib 3.0's `func.parameters`) it reads back through the recorder. (So no
    # `__wrapped__` of its own: introspection reaches the test through the wrapper's.)
    if type(getattr(t, "__dict__", None)) is dict:
        dojo_inner.__dict__ = t.__dict__
    state.recorders[id(dojo_inner)] = (dojo_inner, t)
    return dojo_inner


def _helpers_used(f, names):
    """The module-level functions of pristine file `f` that the test at `names` can call: the
    global names its code loads, and theirs in turn (from the pristine code, so a swap cannot
    hide itself). Plain functions only: a decorated or rebound name is not the file's `def`."""
    found, todo = set(), list(f.candidates(names))
    while todo:
        code = todo.pop()
        for n in code.co_names:
            wraps = f.defs.get((n,), (True,))[0]
            if n not in found and not wraps and n not in f.rebound:
                found.add(n)
                todo.extend(f.candidates((n,)))
        todo.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return sorted(found)


def _helpers_changed(f, g, helpers, ours=()):
    """Which of `helpers` (module-level functions of pristine file `f`) the module namespace `g`
    now holds with other code: a helper the test calls, swapped at run time. A test function
    the observer wrapped in place (sympy's runner) is judged by the function it wraps."""
    bad = []
    for name in helpers:
        val = g.get(name) if isinstance(g, dict) else None
        raw = _func(val) if val is not None else None
        if raw is not None and id(raw) in ours:
            raw = _func(ours[id(raw)][1])
        # unittest's own skip wrapper around the file's function (Django's
        # `mark_expected_failures_and_skips`, run by a test, skips functions that way).
        while raw is not None and raw.__code__.co_filename.startswith(_UNITTEST_DIR):
            raw = _func(getattr(raw, "__wrapped__", None))
        if raw is not None and not f.matches((name,), raw.__code__):
            bad.append(name)
    return bad


def _expected_xfail(state, e, xfail_marked):
    """An exception pytest reports as XFAIL counts as expected only under an xfail marker in the
    test's own file, or when it is pytest's XFailed raised by `pytest.xfail()` called from the
    test file's own code."""
    if xfail_marked:
        return True
    if state.xfailed is None or not isinstance(e, state.xfailed):
        return False
    frames, tb = [], getattr(e, "__traceback__", None)
    while tb is not None:
        frames.append((tb.tb_frame.f_code, tb.tb_lineno))
        tb = tb.tb_next
    if len(frames) < 2 or frames[-1][0].co_filename != state.outcomes_file:
        return False
    i = len(frames) - 1
    while i > 0 and frames[i][0].co_filename == state.outcomes_file:
        i -= 1
    # The call into pytest's outcomes must be the file's own `xfail(...)` line: anything the
    # test calls can be made `pytest.xfail` itself (a library function, the assertion
    # rewriter's `_format_explanation`), reached from a pristine frame too.
    return state.pristine.xfail_call_at(frames[i][0], frames[i][1])


def _type_name(e):
    return type(e).__name__


def _make_wrapper(state, prefix, tids, fn, check, located=False, watch=None):
    """`fn` recording its calls for the tests `tids` (a set: a method on a class serves every
    parametrization of it; the running one is `state.current`; unittest passes one id and no
    current). `check()` is re-run at entry and return: None, or why the code is not pristine.

    The wrapper runs with `fn`'s module globals: pytest evaluates string conditions
    (`skipif("not HAS_BS4")`) in the test function's `__globals__`. So it names nothing of this
    module's but through its closure.

    `watch` (a `_Watch`): `fn` is a library wrapper of the test, and returning counts only
    when the test's own code, run inside it, ended as the watch allows."""
    # The wrapper runs with the test module's globals (below), whose builtins the project's code
    # can replace: it names none, only its closure.
    emit, expected, name_of = state.emit, _expected_xfail, _type_name
    caught, only = BaseException, (sorted(tids)[0] if prefix else None)

    def observing():
        """The test id this call runs, or None: another test's run (pytest), or a test body
        calling a test function of its file, which sympy's runner wraps in place."""
        tid = state.current if prefix == "" else only
        if tid not in tids or (prefix == "s." and state.in_test):
            return None
        return tid

    def entered(tid):
        bad = check(tid)
        if bad:
            emit(prefix + "replaced", tid, bad)
        emit(prefix + "enter", tid, "", True)
        state.in_test += 1
        if watch is not None:
            state.inner.append([watch.recorder, []])

    def raised(tid, e):
        state.in_test -= 1
        if watch is not None:
            state.inner.pop()
        emit(
            prefix + "raise",
            tid,
            name_of(e) + (" expected" if expected(state, e, check.xfail(tid)) else ""),
        )

    def returned(tid):
        state.in_test -= 1
        outcomes = state.inner.pop()[1] if watch is not None else None
        bad = check(tid, True) or (watch.verdict(outcomes) if watch is not None else None)
        if bad:
            emit(prefix + "replaced", tid, bad)
        else:
            emit(prefix + "return", tid)

    def dojo_observed(*args, **kwargs):
        __tracebackhide__ = True  # pytest leaves this frame out of failure reports
        tid = observing()
        if tid is None:
            return fn(*args, **kwargs)
        entered(tid)
        try:
            result = fn(*args, **kwargs)
        except caught as e:
            raised(tid, e)
            raise
        returned(tid)
        return result

    async def dojo_observed_async(*args, **kwargs):
        # A coroutine test (`async def`: IsolatedAsyncioTestCase, Django's async tests,
        # pytest-asyncio) wrapped by a coroutine function, which those runners recognise as
        # they would the test: its body ends when the coroutine does.
        __tracebackhide__ = True
        tid = observing()
        if tid is None:
            return await fn(*args, **kwargs)
        entered(tid)
        try:
            result = await fn(*args, **kwargs)
        except caught as e:
            raised(tid, e)
            raise
        returned(tid)
        return result

    raw = _func(fn)
    if raw is not None and raw.__code__.co_flags & _CO_COROUTINE:
        dojo_observed = dojo_observed_async
    g = getattr(fn, "__globals__", None)
    code = dojo_observed.__code__
    inner = getattr(fn, "__code__", None)
    if located and inner is not None:
        # Where `fn` is (sympy 1.0-1.4 keep a test only if `inspect.getsourcefile` of what
        # they call is its file).
        code = _located(code, inner)
    dojo_observed = _dressed(dojo_observed, code, g if isinstance(g, dict) else None, fn)
    d = getattr(fn, "__dict__", None)
    if type(d) is dict and "__wrapped__" in d:
        # `fn` is a wrapper itself (functools.wraps): this one shares its attributes, so that
        # what code reads or sets through the function pytest hands out is `fn`'s, one
        # `__wrapped__` away from the test as without the observer (matplotlib 3.0's image
        # comparison fixture sets `request.function.__wrapped__.parameters`).
        dojo_observed.__dict__ = d
    else:
        if type(d) is dict:
            dojo_observed.__dict__.update(d)
        dojo_observed.__wrapped__ = fn
    state.ours[id(dojo_observed)] = (dojo_observed, fn, tids)
    return dojo_observed


def _plain_ctracer(tracer, code):
    """`tracer` is coverage's C tracer (a static C type, not a class Python code can make),
    tracing `code`'s file without a plugin: a file tracer plugin's Python code runs inside its
    line events (`line_number_range(frame)`), where it could set `f_lineno`."""
    t = type(tracer)
    if t.__name__ != "CTracer" or t.__flags__ & (1 << 9):
        return False
    name = getattr(code, "co_filename", None)
    cache = getattr(tracer, "should_trace_cache", None)
    disposition = cache.get(name) if type(cache) is dict else None
    if getattr(disposition, "file_tracer", None) is not None:
        return False
    tracers = getattr(tracer, "file_tracers", None)
    return not (type(tracers) is dict and name in tracers)


class _Check(object):
    """The checks of one test function: its code is the pristine one it was when wrapped, and the
    module-level helpers of its file still are."""

    def __init__(self, state, f, names, fn):
        self.state, self.f, self.names, self.fn = state, f, names, fn
        raw = _func(fn)
        self.code = raw.__code__ if raw is not None else None
        self.marked = f.info(names)[1]
        self.helpers = _helpers_used(f, names)

    def __call__(self, tid, returned=False):
        # A trace function written in Python can jump over a test's lines (`f_lineno`);
        # coverage's C tracer without a file tracer plugin cannot.
        tracer = _gettrace()
        if tracer is not None and not _plain_ctracer(tracer, self.code):
            return "a trace function was active (%s)" % getattr(
                tracer, "__qualname__", type(tracer).__name__
            )
        if _mon_events is not None:
            for tool in range(6):
                if _mon_events(tool) or (self.code is not None and _mon_local(tool, self.code)):
                    return "a sys.monitoring tool had events on (tool %d)" % tool
        raw = _func(self.fn)
        if raw is None or raw.__code__ is not self.code:
            return "its code was replaced after collection"
        if not self.f.unchanged(self.code):
            return "its bytecode was written over"
        g = getattr(raw, "__globals__", None)
        changed = _helpers_changed(self.f, g, self.helpers, self.state.ours)
        if changed:
            return "functions of its test file replaced: " + ", ".join(changed)
        st = self.state
        if st.sympy:
            name = st.helpers.rebound(self.f, g)
            if name:
                return "its file's %s is no longer the assertion helper it imported" % name
        # The runners' assertion helpers: once the body returned (a swap before or during it
        # is still in place then; checking at entry too would double the cost for nothing).
        helper = None
        if returned:
            helper = st.tampered() or (st.helpers.changed() if st.sympy else None)
        if helper:
            return "the test runner's %s was replaced" % helper
        return None

    def xfail(self, tid):
        return self.marked


class _CaseCheck(_Check):
    """A unittest case's checks: the function's, and the instance's own state through which
    its assertions run. `assertEqual` picks a comparer from the instance's
    `_type_equality_funcs`, and `self.assertX` finds the instance's attributes first, so a
    comparer or an assertion method put on the instance (a no-op) would pass any assertion.
    Each must be unittest's own (as `TestCase.__init__` left it) or the test files' code."""

    def __init__(self, state, f, names, fn, case, own):
        _Check.__init__(self, state, f, names, fn)
        self.case, self.own = case, own
        funcs = case.__dict__.get("_type_equality_funcs")
        self.funcs_obj = funcs
        self.funcs = dict(funcs) if type(funcs) is dict else {}
        self.attrs = set(case.__dict__)  # what `__init__` set: unittest's own state
        self.cls = type(case)
        self.mro = self.cls.__mro__
        base = sys.modules.get("unittest.case")
        base = getattr(base, "TestCase", None)
        # unittest's own assertion names (and what they run through): wherever the case's class
        # chain defines one, it must be unittest's or the test files' code (a no-op put on the
        # test's class, a mixin first in its bases, a subclass it is moved to all come first).
        self.guarded = [
            n
            for n in getattr(base, "__dict__", {})
            if n.startswith(("assert", "fail")) or n in _CASE_METHODS[:3]
        ] + ["__getattribute__", "__getattr__"]

    def _pristine(self, v):
        raw = _func(v)
        return raw is not None and self.state.pristine.is_pristine_code(raw.__code__)

    def __call__(self, tid, returned=False):
        bad = _Check.__call__(self, tid, returned)
        if bad:
            return bad
        cls = type(self.case)
        if cls is not self.cls or len(cls.__mro__) != len(self.mro):
            return "its case's class was changed"
        for a, b in zip(cls.__mro__, self.mro):
            if a is not b:
                return "its case's class was changed"
        for name in self.guarded:
            for c in self.mro:
                v = c.__dict__.get(name, self)
                if v is self:
                    continue
                if c.__module__.split(".")[0] != "unittest" and c is not object:
                    if not self._pristine(v) and not self._pristine(getattr(v, "fget", None)):
                        return "its case's %s comes from %s" % (name, c.__name__)
                break
        d = self.case.__dict__
        funcs = d.get("_type_equality_funcs")
        if funcs is not self.funcs_obj or (funcs is not None and type(funcs) is not dict):
            return "its case's comparers were replaced"
        for k, v in (funcs.items() if funcs is not None else ()):
            if self.funcs.get(k, self) is v:
                continue
            # unittest looks a comparer named by a string up on the instance.
            named = getattr(self.case, v, None) if isinstance(v, str) else v
            if not self._pristine(named):
                return "its case's comparer for %s was replaced" % getattr(k, "__name__", "?")
        for k, v in list(d.items()):
            if k in self.attrs or k == self.own or not callable(v) or self._pristine(v):
                continue
            if k.startswith(("assert", "fail")) or k in _CASE_METHODS:
                return "its case's %s was replaced on the instance" % k
        return None


# ---------------------------------------------------------------------------------------------
# pytest


def _node_names(nodeid):
    """`tests/t.py::T::()::test_x[1]` -> ("tests/t.py", ["T", "test_x"]). The parameters are
    cut off first: they may hold `::` themselves (sphinx's `test_inline[verify-.. glossary::`)."""
    filepart, _, rest = nodeid.partition("::")
    names = [p for p in rest.split("[", 1)[0].split("::") if p and p != "()"]
    return filepart, names


def _wrap_method(state, item, cls, name, make):
    """A test method: wrapped on its class, keeping what it is (a function, a staticmethod, a
    classmethod: old pytest and unittest fetch it from a fresh instance at setup), and in the
    item's cached `obj` where pytest has one (pytest 8). Returns why it could not be wrapped."""
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
        return "a %s, not a function" % type(raw).__name__
    if id(func) in state.ours and owner is cls:
        state.ours[id(func)][2].add(item.nodeid)
        wrapped = func
    else:
        if id(func) in state.ours:
            # A base class's method, wrapped for the base's own tests: wrap the original.
            func = state.ours[id(func)][1]
        wrapped = make(func, set([item.nodeid]))
        setattr(cls, name, rewrap(wrapped))
    cached = getattr(item, "__dict__", {}).get("_obj")
    if isinstance(cached, types.MethodType):
        item._obj = types.MethodType(wrapped, cached.__self__)
    elif cached is not None:
        item._obj = wrapped
    return None


def _owner(cls, name):
    """The class of `cls`'s MRO that defines `name`, and what it holds there."""
    for klass in getattr(cls, "__mro__", (cls,)):
        if name in vars(klass):
            return klass, vars(klass)[name]
    return None, None


def _defined_at(state, f, names, cls, name):
    """The pristine file and name path of the function a test runs: where the test's own class
    defines it, else (inherited) where the class that defines it does, if that is a restored
    file too."""
    if f is not None and f.candidates(names):
        return f, names
    owner, _ = _owner(cls, name) if cls is not None else (None, None)
    if owner is None:
        return None, names
    g = state.pristine.file_of_module(getattr(owner, "__module__", "") or "")
    path = getattr(owner, "__qualname__", owner.__name__).split(".") + [name]
    if g is not None and g.candidates(path):
        return g, path
    return None, names


def _observe_item(state, item):
    nodeid = item.nodeid
    filepart, names = _node_names(nodeid)
    f = state.pristine.file_of_nodeid(filepart)
    cls = getattr(item, "cls", None)
    kind = type(item).__name__
    if f is None and state.pristine.file_of_nodeid(" ".join(filepart.split())) is not None:
        # A file part with blanks pytest does not put there (` tests/t.py`): no restored file
        # has it, but the logs squeeze it into one that has (a third review).
        return state.emit("replaced", nodeid, "a node id pytest does not make")
    if f is not None and any(c.isspace() for n in names for c in n):
        # pytest makes no such name outside the parameters: an item made up at run time
        # (`test_x `, which logs cut or squeezed as `test_x`) must not pass for the test.
        return state.emit("replaced", nodeid, "a node name pytest does not make")
    if names:
        f, names = _defined_at(state, f, names, cls, names[-1])
    if f is None or not names:
        # Not a function of a test file grading restored (doctests, other plugins' items, tests
        # outside the task's files or inherited from outside them): the log decides.
        return state.emit("unobserved", nodeid, kind)
    name = names[-1]
    if cls is not None:
        _, raw = _owner(cls, name)
        fn = raw
        inner = _func(raw)
        if inner is not None and id(inner) in state.ours:
            # Wrapped already, for another parametrization of the same method.
            fn = state.ours[id(inner)][1]
    else:
        fn = getattr(item, "obj", None)
    why, reached = _verify(state, f, names, fn)
    if why:
        return state.emit("replaced", nodeid, why)
    raw = _func(fn)
    if raw.__code__.co_flags & _NOT_WRAPPED:
        return state.emit("unobserved", nodeid, "generator")
    check = _Check(state, f, names, raw)
    watch = _watch(state, f, names, reached)
    make = lambda func, tids: _make_wrapper(state, "", tids, func, check, watch=watch)  # noqa: E731
    if cls is not None:
        why = _wrap_method(state, item, cls, name, make)
        if why:
            return state.emit("replaced", nodeid, why)
    else:
        wrapped = make(fn, set([nodeid]))
        try:
            item.obj = wrapped
        except AttributeError:
            item._obj = wrapped
    state.emit("item", nodeid, "xfail" if check.marked else "", True)


# pytest's modules whose functions and classes `_State.snapshot` keeps (its assertion helpers).
_PYTEST_HELPERS = (
    "pytest",
    "_pytest.python_api",
    "_pytest.outcomes",
    "_pytest.raises",
    "_pytest.recwarn",
    "_pytest.assertion.rewrite",
    "_pytest.assertion.util",
)


class _PytestPlugin(object):
    """The hooks, as a plugin object registered by the run's own plugin manager."""

    def __init__(self, state, hookimpl):
        self.state = state
        me = self

        # Before the initial conftests (the first project code pytest imports): the rewritten
        # code of the test files, while pytest's rewriter is its own.
        def pytest_load_initial_conftests(early_config, parser, args):
            me._initial(early_config)

        # After every other plugin's collection hook: the items as they will run.
        def pytest_collection_modifyitems(session, config, items):
            me._collected(config, items)

        # (Plain functions: a hookimpl marker cannot be set on a bound method.)
        self.pytest_load_initial_conftests = hookimpl(tryfirst=True)(
            pytest_load_initial_conftests
        )
        self.pytest_collection_modifyitems = hookimpl(trylast=True)(
            pytest_collection_modifyitems
        )

    def _initial(self, early_config):
        st = self.state
        if st.config is None:
            st.config = early_config
            st.pristine.rewrite_all(early_config)
            for name in _PYTEST_HELPERS:
                if name in sys.modules:
                    st.snapshot(sys.modules[name])
            outcomes = sys.modules.get("_pytest.outcomes")
            xf = getattr(outcomes, "XFailed", None)
            if isinstance(xf, type):
                st.xfailed = xf
                st.outcomes_file = getattr(outcomes, "__file__", None)

    def pytest_configure(self, config):
        if self.state.config is None:
            # pytest before 3.? without the early hook: this is still before any test module.
            self._initial(config)

    def _collected(self, config, items):
        st = self.state
        if config is not st.config:
            return
        for item in items:
            try:
                _observe_item(st, item)
            except Exception as e:
                st.emit("replaced", item.nodeid, "observer: " + type(e).__name__)
        st.emit("collected", "", str(len(items)))

    def pytest_runtest_setup(self, item):
        if item.config is self.state.config:
            self.state.current = item.nodeid

    def pytest_sessionfinish(self, session, exitstatus):
        if session.config is self.state.config:
            self.state.emit("finish", "", str(exitstatus))


def _hook_pytest_config(state, module):
    """Register the plugin with the first PytestPluginManager (the run's own; pytester's inner
    sessions create more)."""
    manager = getattr(module, "PytestPluginManager", None)
    hookimpl = getattr(module, "hookimpl", None)
    if manager is None or hookimpl is None:
        return state.emit("unobserved", "?", "pytest without PytestPluginManager")
    init = manager.__init__
    plugin = _PytestPlugin(state, hookimpl)
    done = []

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if not done:
            done.append(self)
            state.runner = True
            self.register(plugin, "dojo_observer")

    manager.__init__ = __init__


# ---------------------------------------------------------------------------------------------
# unittest-style runners


def _observe_case(state, case, name):
    """Wrap `case`'s test method `name` on the instance (the method the runner fetches with
    `getattr(self, name)`), recording under the test's id."""
    if "_pytest" in sys.modules:
        # Under pytest the plugin observes its unittest items (pytest fetches and rebinds their
        # methods itself: a wrapper here would come to it unbound).
        return
    cls = type(case)
    if cls.__module__.split(".")[0] == "unittest":
        # unittest's own cases (`_SubTest`, `FunctionTestCase`) are not tests of the project.
        return
    qual = getattr(cls, "__qualname__", cls.__name__)
    tid = "%s.%s.%s" % (cls.__module__, qual, name)
    f = state.pristine.file_of_module(cls.__module__)
    if f is None:
        # The id read another way (module `tests`, qualname `test_calc.AddTest`): a class
        # made at run time to carry a restored test's id (a third review).
        parts = tid.split(".")
        for k in range(1, len(parts) - 1):
            g = state.pristine.file_of_module(".".join(parts[:k]))
            if g is not None and g.candidates(parts[k:]):
                return state.emit("u.replaced", tid, "its module and qualname are not its id's")
    f, names = _defined_at(state, f, qual.split(".") + [name], cls, name)
    if f is None:
        return state.emit("u.unobserved", tid, "not in a restored file")
    _, raw = _owner(cls, name)
    why, reached = _verify(state, f, names, raw)
    if why:
        return state.emit("u.replaced", tid, why)
    if _func(raw).__code__.co_flags & _NOT_WRAPPED:
        # A generator (a coroutine is wrapped by a coroutine function).
        return state.emit("u.unobserved", tid, "generator")
    state.runner = True
    bound = getattr(case, name)
    check = _CaseCheck(state, f, names, raw, case, name)
    watch = _watch(state, f, names, reached)
    wrapped = _make_wrapper(state, "u.", set([tid]), bound, check, watch=watch)
    setattr(case, name, wrapped)
    state.emit("u.item", tid, "xfail" if check.marked else "", True)
    # A runner with descriptions on (Django's at verbosity 2) logs a test that has a docstring
    # under its first line: the grading side matches such a log name through this record.
    # (unittest's own `shortDescription`, computed here: the method could be replaced.)
    doc = getattr(case, "_testMethodDoc", None)
    doc = doc.strip().split("\n")[0].strip() if isinstance(doc, str) else ""
    # The name is the pristine file's: a case made while the method's `__doc__` was borrowed
    # from another test would be logged (and matched) under that test's name.
    pristine_doc = f.doc_of.get(tuple(names), doc)
    if doc and doc != pristine_doc:
        state.emit("u.replaced", tid, "its docstring is not its test file's")
    if pristine_doc:
        state.emit("u.doc", tid, pristine_doc)


def _hook_unittest(state, unittest):
    case_init = unittest.TestCase.__init__

    def __init__(self, *args, **kwargs):
        case_init(self, *args, **kwargs)
        try:
            name = getattr(self, "_testMethodName", None)
            if name and hasattr(type(self), name):
                _observe_case(state, self, name)
        except Exception as e:
            state.emit("u.replaced", "?", "observer: " + type(e).__name__)

    unittest.TestCase.__init__ = __init__
    runner_run = unittest.TextTestRunner.run

    def run(self, test):
        state.runner = True
        try:
            state.emit("u.collected", "", str(test.countTestCases()))
        except Exception:
            state.emit("u.collected", "", "?")
        result = runner_run(self, test)
        state.emit("u.finish", "", "")
        return result

    unittest.TextTestRunner.run = run
    # The assertion helpers as they are now, the hooks above included.
    case = sys.modules.get("unittest.case")
    if case is not None:
        state.snapshot(case)


# ---------------------------------------------------------------------------------------------
# sympy's own runner (`bin/test`: `SymPyTests` of `sympy/testing/runtests.py`, formerly
# `sympy/utilities/runtests.py`). It compiles each test file itself and `exec`s it into a fresh
# namespace, then calls the `test_*` functions it finds there: the namespace's test functions
# are wrapped as soon as that `exec` returns. Grading sets PYTHONHASHSEED for these runs, so
# the runner runs in this process (it re-runs itself in a subprocess only to randomise hashes).

# The compiler flags of `from __future__` imports (Python 3's CO_FUTURE_* bits): sympy 1.0-1.5
# compile the test files with their own module's future imports inherited.
_FUTURE_FLAGS = 0x1FE0000


def _observe_sympy_file(state, code, gl):
    path = gl.get("__file__")
    f = state.pristine.files.get(os.path.abspath(path)) if isinstance(path, str) else None
    if f is None:
        return  # not a restored test file: the log decides
    flags = getattr(code, "co_flags", 0) & _FUTURE_FLAGS
    if flags:
        try:
            f.add(compile(f.source, f.path, "exec", flags, True))
        except Exception:
            pass
    rel = f.path[len(_WORKSPACE) :] if f.path.startswith(_WORKSPACE) else f.path
    for name in list(gl):
        fn = gl[name]
        if not (name.startswith("test_") and isinstance(fn, types.FunctionType)):
            continue
        tid = "%s::%s" % (rel, name)
        why, reached = _verify(state, f, [name], fn)
        if why:
            state.emit("s.replaced", tid, why)
            continue
        if fn.__code__.co_flags & _NOT_WRAPPED:
            # A generator yields the test functions the runner calls.
            state.emit("s.unobserved", tid, "generator")
            continue
        check = _Check(state, f, [name], fn)
        watch = _watch(state, f, [name], reached)
        gl[name] = _make_wrapper(state, "s.", set([tid]), fn, check, located=True, watch=watch)
        state.emit("s.item", tid, "xfail" if check.marked else "", True)


def _hook_sympy(state, module):
    cls = getattr(module, "SymPyTests", None)
    if not isinstance(cls, type) or cls.__module__ != module.__name__:
        return  # a module re-exporting the runner of another (hooked there)
    state.runner = state.sympy = True
    # The namespace the runner `exec`s a test file into gets the runner's own builtins, not
    # the observer's private copy (which `exec` would insert from this frame).
    builtins = module.__dict__.get("__builtins__")

    def exec_and_observe(code, gl=None, *rest):
        if isinstance(gl, dict) and "__builtins__" not in gl and builtins is not None:
            gl["__builtins__"] = builtins
        exec(code, gl, *rest)
        if isinstance(gl, dict):
            try:
                _observe_sympy_file(state, code, gl)
            except Exception as e:
                state.emit("s.replaced", "?", "observer: " + type(e).__name__)

    # The runner calls `exec` (sympy 1.6 on) or `exec_` from sympy's compatibility module: a
    # module global of that name comes before the builtin.
    module.exec = exec_and_observe
    if "exec_" in module.__dict__:
        module.exec_ = exec_and_observe
    run = cls.test

    def test(self, *args, **kwargs):
        state.emit("s.collected", "", str(len(getattr(self, "_testfiles", ()) or ())))
        result = run(self, *args, **kwargs)
        state.emit("s.finish", "", "")
        return result

    cls.test = test


# ---------------------------------------------------------------------------------------------
# Import hooks: act on a module once it has executed


def _hook_imports(state):
    hooks = {
        "_pytest.config": _hook_pytest_config,
        "unittest": _hook_unittest,
        "subprocess": _hook_subprocess,
        "sympy.testing.runtests": _hook_sympy,
        "sympy.utilities.runtests": _hook_sympy,
    }
    for name in list(hooks):
        if name in sys.modules:
            hooks.pop(name)(state, sys.modules[name])
    if hooks:
        sys.meta_path.insert(0, _AfterImport(state, hooks))


class _AfterImport(object):
    """Finds the hooked modules as the path finder does, and runs each hook once its module has
    executed. (`runpy` finds a spec before it imports: the finder stays until all have run.)"""

    def __init__(self, state, hooks):
        self.state = state
        self.hooks = hooks

    def find_spec(self, name, path=None, target=None):
        if name not in self.hooks:
            return None
        import importlib.machinery

        spec = importlib.machinery.PathFinder.find_spec(name, path)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module, hooks, me = loader.exec_module, self.hooks, self

        def exec_and_hook(module):
            exec_module(module)
            hook = hooks.pop(name, None)
            if not hooks:
                try:
                    sys.meta_path.remove(me)
                except ValueError:
                    pass
            if hook is not None:
                try:
                    hook(me.state, module)
                except Exception as e:
                    me.state.emit("replaced", "?", "observer: " + type(e).__name__)

        loader.exec_module = exec_and_hook
        return spec


try:
    _boot()
except Exception:
    pass
