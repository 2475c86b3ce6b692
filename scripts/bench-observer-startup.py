#!/usr/bin/env python3
"""The start-up cost of the test observer's unittest half: every Python process of a graded run
starts with its `sitecustomize` (crates/dojo-grade/src/observer_site.py beside observer.py).

Alternates N runs each of `python -c pass` and `python -m unittest` of a 7-test module, with and
without the observer's directory on PYTHONPATH, and prints the medians and the median paired
difference. Writes only under a temporary directory.

    python3 scripts/bench-observer-startup.py [N] [PYTHON]
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "crates", "dojo-grade", "src")
TESTS = '''import unittest


class Base(unittest.TestCase):
    def test_inherited(self):
        self.assertEqual(1, 1)


class T(Base):
    def test_ok(self):
        self.assertTrue(True)

    def test_fail(self):
        self.assertEqual(1, 2)

    @unittest.skip("no")
    def test_skip(self):
        pass

    @unittest.expectedFailure
    def test_xf(self):
        self.assertEqual(1, 2)

    def test_sub(self):
        for i in range(2):
            with self.subTest(i=i):
                self.assertLess(i, 5)
'''


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    python = sys.argv[2] if len(sys.argv) > 2 else sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        obs = os.path.join(tmp, "observer")
        os.makedirs(obs)
        shutil.copy(os.path.join(SRC, "observer.py"), os.path.join(obs, "dojo_observer.py"))
        shutil.copy(os.path.join(SRC, "observer_site.py"), os.path.join(obs, "sitecustomize.py"))
        proj = os.path.join(tmp, "proj")
        os.makedirs(os.path.join(proj, "tests"))
        open(os.path.join(proj, "tests", "__init__.py"), "w").close()
        with open(os.path.join(proj, "tests", "test_calc.py"), "w") as f:
            f.write(TESTS)
        on = dict(os.environ, DOJO_OBSERVER_FILE=os.path.join(tmp, "records"), PYTHONPATH=obs)
        off = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DOJO_OBSERVER_FILE")}
        cmds = {
            "python -c pass": [python, "-c", "pass"],
            "python -m unittest (7 tests)": [python, "-m", "unittest", "tests.test_calc"],
        }
        times = {(c, m): [] for c in cmds for m in ("without", "with")}
        for _ in range(n):
            for c, argv in cmds.items():
                for m, env in (("without", off), ("with", on)):
                    t = time.perf_counter()
                    subprocess.run(argv, env=env, cwd=proj, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
                    times[(c, m)].append(time.perf_counter() - t)
    print("| what | without (median) | with (median) | median paired cost |")
    print("|---|---|---|---|")
    for c in cmds:
        a, b = times[(c, "without")], times[(c, "with")]
        d = statistics.median([y - x for x, y in zip(a, b)])
        print("| `%s` | %.1f ms | %.1f ms | %.1f ms |" % (
            c, statistics.median(a) * 1e3, statistics.median(b) * 1e3, d * 1e3))
    print("load average %.1f, %s, %d runs each" % (os.getloadavg()[0], python, n))


if __name__ == "__main__":
    main()
