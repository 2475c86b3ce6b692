#!/usr/bin/env python3
"""The test observer's per-test check of the runners (`_State.tampered`, run when each test's
body returns), timed in this interpreter for one or more observer sources side by side.

Each source is loaded as grading loads it (no run named, so nothing is observed), given the
pytest and unittest modules the observer snapshots under pytest, and its check timed: the
minimum over 200 repeats of 20 calls (the minimum, because a busy machine only adds). Needs
pytest importable (`target/pytools/bin/python` has it). Writes nothing.

    python scripts/bench-observer-checks.py [OBSERVER.py ...]
    git show 7bd4298:crates/dojo-grade/src/observer.py > /tmp/observer-7bd4298.py
    target/pytools/bin/python scripts/bench-observer-checks.py /tmp/observer-7bd4298.py crates/dojo-grade/src/observer.py
"""
import importlib
import os
import sys
import timeit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT = os.path.join(ROOT, "crates", "dojo-grade", "src", "observer.py")


def source_globals(path):
    g = {"__name__": "_dojo_observer", "__file__": path}
    exec(compile(open(path, "rb").read(), path, "exec"), g)
    return g


# What `_PytestPlugin._initial` and the unittest hook snapshot, as this checkout names them
# (the same for the observers compared).
MODULES = list(source_globals(DEFAULT)["_PYTEST_HELPERS"]) + ["unittest.case"]


def load(path):
    g = source_globals(path)
    state = g["_State"](b"k" * 64, 2)
    for name in MODULES:
        try:
            state.snapshot(importlib.import_module(name))
        except ImportError:
            pass
    # As under grading from Python 3.8 on: the audit hook is there (not added here, it
    # cannot be removed).
    g["_audit_missing"] = sys.version_info < (3, 8)
    if state.tampered() is not None:
        raise SystemExit("%s: the check fails on an untouched interpreter" % path)
    return state


def main():
    paths = sys.argv[1:] or [DEFAULT]
    states = [(p, load(p)) for p in paths]
    s = states[0][1]
    print(
        "Python %d.%d, %d helper functions, %d classes (%d attributes), %d namespace names"
        % (
            sys.version_info[0],
            sys.version_info[1],
            len(s.trusted),
            len(s.classes),
            sum(len(c[1]) for c in s.classes),
            sum(len(n[1]) for n in s.namespaces),
        )
    )
    for _ in range(3):  # alternated rounds
        for path, state in states:
            t = min(timeit.repeat(state.tampered, number=20, repeat=200)) / 20
            print("%-60s %7.1f us a test" % (path, t * 1e6))


if __name__ == "__main__":
    main()
