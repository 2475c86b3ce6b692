#!/usr/bin/env python3
"""Baseline for `dojo validate`'s timings: the harness's steps for each instance, by hand, with
no sandbox and no cache (what a user without dojo or Docker would script).

Usage:
  python scripts/bench-validate-baseline.py TASKS.jsonl REPOS_DIR PYTHON [--exclude-newer DAY] [--install CMD]

Per instance: `git archive` of the base commit into a fresh directory, `PYTHON -m venv`,
`pip install --upgrade pip` (pip 26: the one with --uploaded-prior-to), the spec's install
command (default `python -m pip install -e .`, with PIP_UPLOADED_PRIOR_TO when given), then the
test patch and the test command of the instance's eval_script, once without and once with the
gold patch, each time after the eval script's own install commands (the reinstall the harness
runs after the patch; here with the index, dojo's runs offline). Prints one JSON line per instance: `build_s` (archive + venv + installs) and
`runs_s` (both test runs and the patch steps), and whether each run's exit code was non-zero.
Network: pip reaches the package index (as the harness's image build does).
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def sh(cmd, cwd, env, check=True):
    r = subprocess.run(cmd, cwd=cwd, env=env, shell=True, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{cmd}: exit {r.returncode}: {r.stderr[-2000:]}")
    return r


def reinstalls(eval_script):
    """The eval script's install commands before its test command (the harness re-runs them
    after the patch; dojo does too, offline)."""
    head = eval_script.split(": '>>>>> Start Test Output'")[0]
    return [l.strip() for l in head.splitlines() if "pip install" in l]


def test_cmd(eval_script):
    m = re.search(r": '>>>>> Start Test Output'\n(.*?)\n: '>>>>> End Test Output'", eval_script, re.S)
    return m.group(1).strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tasks")
    ap.add_argument("repos")
    ap.add_argument("python")
    ap.add_argument("--exclude-newer")
    ap.add_argument("--install", default="python -m pip install -e .")
    a = ap.parse_args()
    for line in open(a.tasks):
        t = json.loads(line)
        repo = (Path(a.repos) / t["repo"].replace("/", "__")).resolve()
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            src, venv = d / "testbed", d / "venv"
            src.mkdir()
            env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "VIRTUAL_ENV"))}
            env["PATH"] = f"{venv}/bin:" + env["PATH"]
            start = time.monotonic()
            sh(f"git --git-dir {repo} archive {t['base_commit']} | tar -x -C {src}", d, env)
            sh(f"git init -q && git add -A && git -c user.name=b -c user.email=b@b commit -qm base", src, env)
            sh(f"{a.python} -m venv {venv}", d, env)
            sh("python -m pip install -q --upgrade pip", src, env)
            if a.exclude_newer:
                env["PIP_UPLOADED_PRIOR_TO"] = a.exclude_newer + "T00:00:00Z"
                sh("python -m pip install -q --force-reinstall setuptools wheel", src, env)
            sh(a.install + " -q", src, env)
            sh("python -m pip install -q pytest", src, env)
            build_s = time.monotonic() - start
            (d / "test.patch").write_text(t["test_patch"])
            (d / "gold.patch").write_text(t["patch"])
            cmd = test_cmd(t["eval_script"])
            start = time.monotonic()
            pre = " && ".join(reinstalls(t["eval_script"]) + [cmd])
            sh(f"git apply {d}/test.patch", src, env)
            before = sh(pre, src, env, check=False).returncode
            sh(f"git apply {d}/gold.patch", src, env)
            gold = sh(pre, src, env, check=False).returncode
            runs_s = time.monotonic() - start
        print(json.dumps({"instance_id": t["instance_id"], "build_s": round(build_s, 2),
                          "runs_s": round(runs_s, 2), "before_exit": before, "gold_exit": gold}))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
