#!/usr/bin/env python3
"""Generate definition-accuracy cases for the LSP-vs-grep benchmark from sympy 1.12.

Ground truth comes from Python itself, not from any tool under test: each case is a use site
(file, 1-based line, symbol) whose runtime binding is resolved by importing sympy from the
unpacked sdist, and the truth is the `def`/`class` line of the object it names.

Categories (chosen so that a textual search for `def NAME`/`class NAME` is ambiguous):
  self_method     `self.NAME(...)` inside a method of class C; truth = C's MRO lookup.
                  NAME is defined in at least 3 places (same-name methods in other classes).
  imported        a function/class imported into the module (often via a re-export);
                  truth = where the imported object is defined.
  shadowed        a module-level function/class used in its own module whose name is also
                  defined elsewhere in sympy; truth = this module's definition.

Usage: python3 make_cases.py SYMPY_ROOT > sympy_cases.json   (needs mpmath importable)
"""

import ast
import contextlib
import io
import importlib
import inspect
import json
import os
import random
import re
import sys
from collections import defaultdict


_memo = {}


def def_line(fn, name):
    """Line of the `def`/`class NAME` keyword (co_firstlineno points at decorators)."""
    key = (id(fn), name)
    if key not in _memo:
        _memo[key] = _def_line(fn, name)
    return _memo[key]


def _def_line(fn, name):
    try:
        src, start = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return None
    pat = re.compile(r"^\s*(async\s+def|def|class)\s+" + re.escape(name) + r"\b")
    for i, line in enumerate(src):
        if pat.match(line):
            return start + i
    return None


def unwrap(obj):
    if isinstance(obj, (staticmethod, classmethod)):
        return obj.__func__
    if isinstance(obj, property):
        return obj.fget
    return obj


def main():
    root = os.path.abspath(sys.argv[1])
    sys.path.insert(0, root)
    rnd = random.Random(12)

    # Every def/class in the tree, by name (what `grep def NAME` would see).
    defs = defaultdict(list)
    modules = []
    for dirpath, dirnames, files in os.walk(os.path.join(root, "sympy")):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in ("tests", "benchmarks"))
        for f in sorted(files):
            if not f.endswith(".py"):
                continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, root)
            try:
                tree = ast.parse(open(path, encoding="utf-8").read())
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    defs[node.name].append(rel)
            modules.append((rel, tree))

    cands = {"self_method": [], "imported": [], "shadowed": []}
    for rel, tree in modules:
        modname = rel[:-3].replace(os.sep, ".")
        if modname.endswith(".__init__"):
            modname = modname[: -len(".__init__")]
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # sympy.this prints the Zen
                mod = importlib.import_module(modname)
        except Exception:
            continue
        lines = open(os.path.join(root, rel), encoding="utf-8").read().splitlines()
        imported = set()
        for node in tree.body:
            if isinstance(node, ast.ImportFrom):
                imported.update(a.asname or a.name for a in node.names)
        toplevel = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}

        for cls in [n for n in tree.body if isinstance(n, ast.ClassDef)]:
            C = getattr(mod, cls.name, None)
            if not inspect.isclass(C):
                continue
            for fn in [n for n in cls.body if isinstance(n, ast.FunctionDef)]:
                for node in ast.walk(fn):
                    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                        continue
                    a = node.func
                    if not (isinstance(a.value, ast.Name) and a.value.id == "self"):
                        continue
                    name = a.attr
                    if len(defs.get(name, [])) < 3 or name.startswith("__"):
                        continue
                    owner = next((k for k in C.__mro__ if name in vars(k)), None)
                    if owner is None:
                        continue
                    target = unwrap(vars(owner)[name])
                    if not (inspect.isfunction(target)):
                        continue
                    try:
                        tfile = os.path.relpath(inspect.getsourcefile(target), root)
                    except TypeError:
                        continue
                    if tfile.startswith(".."):
                        continue
                    tline = def_line(target, name)
                    if tline is None:
                        continue
                    line = a.end_lineno
                    text = lines[line - 1]
                    if f"self.{name}" not in text:
                        continue
                    cands["self_method"].append(
                        {"file": rel, "line": line, "symbol": name, "truth": [{"file": tfile, "line": tline}]}
                    )

        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            local = {a.arg for a in fn.args.args + fn.args.kwonlyargs}
            for node in ast.walk(fn):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    local.add(node.id)
                elif node is not fn and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    local.add(node.name)  # nested definitions shadow module-level ones
            for node in ast.walk(fn):
                if not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)) or node.id in local:
                    continue
                name = node.id
                if name in imported:
                    cat = "imported"
                elif name in toplevel and len(defs.get(name, [])) >= 2:
                    cat = "shadowed"
                else:
                    continue
                obj = getattr(mod, name, None)
                if not (inspect.isfunction(obj) or inspect.isclass(obj)):
                    continue
                if getattr(obj, "__name__", None) != name:
                    continue  # aliased import: `def NAME` would not exist anywhere
                try:
                    tfile = os.path.relpath(inspect.getsourcefile(obj), root)
                except TypeError:
                    continue
                if tfile.startswith(".."):
                    continue
                tline = def_line(obj, name)
                if tline is None:
                    continue
                cands[cat].append(
                    {"file": rel, "line": node.lineno, "symbol": name, "truth": [{"file": tfile, "line": tline}]}
                )

    want = {"self_method": 25, "imported": 20, "shadowed": 15}
    out = []
    for cat, n in want.items():
        pool = cands[cat]
        # One case per symbol name, ambiguous names first for `imported`.
        seen, uniq = set(), []
        rnd.shuffle(pool)
        pool.sort(key=lambda c: -min(len(defs[c["symbol"]]), 3))
        for c in pool:
            if c["symbol"] in seen:
                continue
            seen.add(c["symbol"])
            uniq.append(c)
        for c in uniq[:n]:
            c["category"] = cat
            c["defined_in"] = len(defs[c["symbol"]])
            out.append(c)
    json.dump({"schema_version": 1, "source": "sympy-1.12", "cases": out}, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
