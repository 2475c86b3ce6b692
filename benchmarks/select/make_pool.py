#!/usr/bin/env python3
"""A replay file of k = 8 candidates per task with mixed outcomes, for `dojo select`'s benchmark.

Offline there is no policy that resolves some but not all bundled tasks, so the pool is built
from real gold-replay trajectories (one per task, `dojo rollout --policy gold-replay -n 1`),
turned into variants that `dojo rollout --policy replay:FILE -n 8` then runs through the real
tools, sandboxes and grading:

  gold        the gold fix                                             (resolves)
  gold_repro  the gold fix plus reproduce_issue.py: the task's upstream test patch applied to a
              copy of the workspace and its FAIL_TO_PASS tests run     (resolves)
  gold_extra  the gold fix plus a harmless extra line                  (resolves, another key)
  wrong_a     a wrong change to the file the fix is in                 (does not resolve)
  wrong_a_rep wrong_a plus reproduce_bug.py that passes anywhere       (does not resolve)
  wrong_b     another wrong change                                     (does not resolve)
  empty       straight to submit                                       (does not resolve)

Each task draws a resolve probability from {0.1, 0.25, 0.4, 0.6} and each of its 8 samples a
resolving variant with that probability (uniform among the resolving kinds, else among the
others), seeded, so tasks differ in how many candidates resolve.

usage: make_pool.py GOLD_TRAJECTORIES TASKS_JSONL OUT_JSONL [--seed S] [--k K]
"""

import argparse
import copy
import json
import random

RESOLVING = ["gold", "gold_repro", "gold_extra"]
FAILING = ["wrong_a", "wrong_a_rep", "wrong_b", "empty"]


def call(msg_id, name, args):
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": msg_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
        ],
    }


def repro_script(task):
    return "\n".join(
        [
            "# Reproduces the issue: the upstream tests for it, on a copy of the workspace.",
            "import os, shutil, subprocess, sys, tempfile",
            f"TEST_PATCH = {json.dumps(task['test_patch'])}",
            f"TESTS = {json.dumps(task['FAIL_TO_PASS'])}",
            "repo = os.path.join(tempfile.mkdtemp(), 'repo')",
            "shutil.copytree('/testbed', repo, symlinks=True, ignore=shutil.ignore_patterns('.git'))",
            "if subprocess.run(['git', 'apply', '-'], input=TEST_PATCH.encode(), cwd=repo).returncode:",
            "    sys.exit(3)",
            "sys.exit(subprocess.call([sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', *TESTS], cwd=repo))",
            "",
        ]
    )


def variant(kind, gold, task):
    msgs = gold["messages"]
    head = [m for m in msgs[:2] if m["role"] in ("system", "user")]
    turns = [m for m in msgs if m["role"] == "assistant"]
    submit = turns[-1]
    edits = [
        json.loads(c["function"]["arguments"])
        for m in turns
        for c in m.get("tool_calls") or []
        if c["function"]["name"] in ("str_replace_editor", "file_editor")
        and json.loads(c["function"]["arguments"]).get("command") == "str_replace"
    ]
    path = edits[0]["path"] if edits else "/testbed/setup.py"
    append = lambda line: call(  # noqa: E731
        f"x-{kind}", "execute_bash", {"command": f"printf '\\n{line}\\n' >> {path}"}
    )
    is_edit = lambda m: any(  # noqa: E731
        c["function"]["name"] in ("str_replace_editor", "file_editor")
        and json.loads(c["function"]["arguments"]).get("command") == "str_replace"
        for c in m.get("tool_calls") or []
    )
    if kind == "empty":
        return head + [turns[0], submit]
    if kind == "gold":
        return head + turns
    if kind == "gold_repro":
        create = call(
            "x-repro",
            "str_replace_editor",
            {"command": "create", "path": "/testbed/reproduce_issue.py", "file_text": repro_script(task)},
        )
        return head + turns[:-1] + [create, submit]
    if kind == "gold_extra":
        return head + turns[:-1] + [append("_dojo_extra = 0"), submit]
    # Wrong fixes: the edits replaced by a change that leaves the bug in place.
    wrong = [m for m in turns[:-1] if not is_edit(m)]
    value = 2 if kind == "wrong_b" else 1
    wrong.insert(min(2, len(wrong)), append(f"_dojo_fix = {value}"))
    if kind == "wrong_a_rep":
        wrong.append(
            call(
                "x-weak",
                "str_replace_editor",
                {"command": "create", "path": "/testbed/reproduce_bug.py", "file_text": "print('fixed')\n"},
            )
        )
    return head + wrong + [submit]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gold")
    ap.add_argument("tasks")
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--k", type=int, default=8)
    a = ap.parse_args()
    tasks = {}
    with open(a.tasks) as f:
        for line in f:
            if line.strip():
                t = json.loads(line)
                tasks[t["instance_id"]] = t
    rng = random.Random(a.seed)
    golds = sorted(
        (json.loads(l) for l in open(a.gold) if l.strip()), key=lambda t: t["task_id"]
    )
    with open(a.out, "w") as out:
        for gold in golds:
            if gold["sample_index"] != 0 or not gold.get("resolved"):
                continue
            p = rng.choice([0.1, 0.25, 0.4, 0.6])
            kinds = [
                rng.choice(RESOLVING) if rng.random() < p else rng.choice(FAILING)
                for _ in range(a.k)
            ]
            print(gold["task_id"], p, " ".join(kinds))
            for i, kind in enumerate(kinds):
                t = copy.deepcopy(gold)
                t["sample_index"] = i
                t["messages"] = variant(kind, gold, tasks[gold["task_id"]])
                t["metadata"] = {"pool_variant": kind}
                out.write(json.dumps(t) + "\n")


if __name__ == "__main__":
    main()
