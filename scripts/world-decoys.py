#!/usr/bin/env python3
"""Decoy trajectories: gold-replay trajectories whose edits fix nothing.

    python3 scripts/world-decoys.py GOLD_TRAJECTORIES.jsonl OUT.jsonl [SAMPLE_INDEX]

Every `str_replace` edit of a gold-replay trajectory (tool calls or XML function-call text)
keeps the buggy text and only appends a comment line after it. Replayed with `dojo rollout
--policy replay:OUT.jsonl`, the agent touches the files the fix touches, runs the same tests
(which now fail for real) and submits a non-empty patch that does not resolve the task. These
are the real negatives the world-model benchmark needs (scripts/bench-world-trained.sh): SWT
records of failing test runs and SWR records with reward 0, produced by the real tools and real
grading, on tasks where gold-replay gives only positives. With SAMPLE_INDEX the decoys get that
sample index, so one replay file can hold a task's gold trajectory (sample 0) and its decoy
(`--samples 2`). Python standard library only.
"""
import json
import re
import sys

COMMENT = "# reviewed: left as it is"


def decoy(old: str) -> str:
    """`old` with a comment line after it, at the indentation of its last non-blank line."""
    lines = [l for l in old.split("\n") if l.strip()]
    last = lines[-1] if lines else ""
    indent = last[: len(last) - len(last.lstrip())]
    if old.endswith("\n"):
        return f"{old}{indent}{COMMENT}\n"
    return f"{old}\n{indent}{COMMENT}"


def edit_args(args: dict) -> bool:
    if "old_str" in args and "new_str" in args:
        args["new_str"] = decoy(args["old_str"])
        return True
    return False


XML_PARAM = re.compile(r"(<parameter=(old_str|new_str)>\n?)(.*?)(\n?</parameter>)", re.S)


def edit_text(text: str) -> tuple[str, bool]:
    params = {m.group(2): m.group(3) for m in XML_PARAM.finditer(text)}
    if "old_str" not in params or "new_str" not in params:
        return text, False
    new = decoy(params["old_str"])

    def sub(m):
        return m.group(1) + (new if m.group(2) == "new_str" else m.group(3)) + m.group(4)

    return XML_PARAM.sub(sub, text), True


def main(src: str, dst: str, sample: int | None) -> None:
    n_traj = n_edits = 0
    with open(src) as f, open(dst, "w") as out:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            t = json.loads(line)
            edits = 0
            for m in t.get("messages", []):
                if m.get("role") != "assistant":
                    continue
                for call in m.get("tool_calls") or []:
                    fn = call.get("function", {})
                    args = json.loads(fn.get("arguments") or "{}")
                    if edit_args(args):
                        fn["arguments"] = json.dumps(args)
                        edits += 1
                if isinstance(m.get("content"), str):
                    m["content"], changed = edit_text(m["content"])
                    edits += changed
            if edits == 0:
                sys.exit(f"{src}:{lineno}: task {t.get('task_id')}: no str_replace edit to turn into a decoy")
            if sample is not None:
                t["sample_index"] = sample
            n_traj += 1
            n_edits += edits
            out.write(json.dumps(t) + "\n")
    print(f"{dst}: {n_traj} decoy trajectories, {n_edits} edits", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) == 4 else None)
