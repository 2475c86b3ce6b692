#!/usr/bin/env python3
"""Write the measured validation table (envs/VALIDATION.md) from `dojo validate --out` runs.

Usage:
  python scripts/validation-table.py [--title T] [--note TEXT] [--jsonl envs/measured.jsonl --dataset verified] TASKS.jsonl:OUT_DIR [...] > VALIDATION.md

Each TASKS.jsonl is a SWE-bench task file (FAIL_TO_PASS / PASS_TO_PASS as the dataset has them)
and OUT_DIR the `--out` directory of `dojo validate --workers 1 --tasks TASKS.jsonl` (one
`<instance>/` per task: `validation.json`, `gold/` and `test_patch_only/` with `report.json`
and `test_output.txt`).

Per instance it reports dojo's verdict (test patch alone fails every FAIL_TO_PASS, the gold
patch passes FAIL_TO_PASS and PASS_TO_PASS), the interpreter the tests ran under (pytest's
`platform` line), and the wall times dojo recorded. Where `swebench` is importable (the tools
venv of scripts/setup-tools.sh has 5.0.2), the official parser named by the task's `log_parser`
and `get_eval_tests_report` / `get_resolution_status` are run on dojo's own logs, and the table
says whether the official grading gives the same resolved/unresolved verdict for both runs: a
check of dojo's grading on these logs, not of the environment (the environment is checked by
the dataset's lists passing at all).

With `--workers 1`, *prepare* (`total_s - runs_s`) is what a task waited for before its first
test run: the checkout of its base commit, its environment (built once per environment key:
specs that install the project, as the harness's do, key it on the checkout, so every
instance builds its own) and the sandbox. *runs* is both test runs and the reset between.
"""

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

try:
    from swebench.harness import grading
    from swebench.harness.log_parsers import PARSER_REGISTRY

    OFFICIAL = True
except ImportError:
    OFFICIAL = False


def lists(task):
    def get(k):
        v = task.get(k) or []
        return json.loads(v) if isinstance(v, str) else v

    return get("FAIL_TO_PASS"), get("PASS_TO_PASS")


def report(run_dir, iid):
    p = run_dir / "report.json"
    if not p.is_file():
        return None
    r = json.loads(p.read_text())
    return r.get(iid, r)


def official(task, log_path, f2p, p2p):
    """The official verdict on one of dojo's logs: True (resolved) / False, None if unavailable."""
    if not OFFICIAL or not log_path.is_file():
        return None
    name = task.get("log_parser") or "parse_log_pytest"
    parser = PARSER_REGISTRY.get(name if name.startswith("parse_log_") else "parse_log_" + name)
    if parser is None:
        return None
    status = parser(log_path.read_text(errors="replace"), None)
    rep = grading.get_eval_tests_report(status, {"FAIL_TO_PASS": f2p, "PASS_TO_PASS": p2p})
    return grading.get_resolution_status(rep) == "RESOLVED_FULL"


def count(r, key):
    ts = (r or {}).get("tests_status") or {}
    s = ts.get(key) or {}
    return len(s.get("success", [])), len(s.get("success", [])) + len(s.get("failure", []))


def python_of(log_path):
    if not log_path.is_file():
        return "?"
    text = log_path.read_text(errors="replace")
    # pytest's header, or sympy's own runner (`executable: /venv/bin/python  (3.9.18-final-0)`).
    m = re.search(r"platform \S+ -- Python (\d+\.\d+)", text) or re.search(
        r"executable: +\S+ +\((\d+\.\d+)\.", text
    )
    return m.group(1) if m else "?"


def first_problem(d):
    p = d / "problems.txt"
    if not p.is_file():
        return ""
    text = p.read_text().strip()
    m = re.search(r"invalid object \S+ \S+ for '([^']+)'", text)
    if m:
        # A repository copy without every blob (a shallow or size-capped snapshot).
        return f"checkout: the repository copy lacks the blob of `{m.group(1)}`"
    return text.splitlines()[0][:160] if text else ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+", help="TASKS.jsonl:OUT_DIR")
    ap.add_argument("--title", default="Validation on this machine (measured)")
    ap.add_argument("--note", action="append", default=[])
    ap.add_argument(
        "--jsonl",
        help="also merge the rows into this measurements file (envs/measured.jsonl: one row per "
        "instance, a row of the same instance replaced), which envs/COVERAGE.md is generated from",
    )
    ap.add_argument(
        "--dataset",
        default="verified",
        help="the dataset the instances of these runs are counted in (--jsonl): verified, lite, dev",
    )
    a = ap.parse_args()
    rows, per_repo = [], {}
    for spec in a.runs:
        tasks_path, out = spec.split(":", 1)
        out = Path(out)
        for line in open(tasks_path):
            if not line.strip():
                continue
            t = json.loads(line)
            iid, repo = t["instance_id"], t["repo"]
            d = out / iid
            f2p, p2p = lists(t)
            v = json.loads((d / "validation.json").read_text()) if (d / "validation.json").is_file() else None
            gold, before = report(d / "gold", iid), report(d / "test_patch_only", iid)
            o_gold = official(t, d / "gold" / "test_output.txt", f2p, p2p)
            o_before = official(t, d / "test_patch_only" / "test_output.txt", f2p, p2p)
            agree = None
            if o_gold is not None and o_before is not None and gold and before:
                agree = o_gold == bool(gold.get("resolved")) and o_before == bool(before.get("resolved"))
            row = {
                "id": iid,
                "repo": repo,
                "version": t.get("version", ""),
                "python": python_of(d / "gold" / "test_output.txt"),
                "ok": bool(v and v["ok"]),
                "f2p_gold": count(gold, "FAIL_TO_PASS"),
                "p2p_gold": count(gold, "PASS_TO_PASS"),
                "f2p_before": count(before, "FAIL_TO_PASS"),
                "agree": agree,
                "total_s": (v or {}).get("total_s"),
                "runs_s": (v or {}).get("runs_s"),
                "problem": "" if v and v["ok"] else first_problem(d) or "not run",
            }
            rows.append(row)
            per_repo.setdefault(repo, []).append(row)

    out = [f"# {a.title}", ""]
    out += a.note
    if a.note:
        out.append("")
    out += [
        "| repository | instances | validate | do not | versions | prepare s (median) | runs s (median) | official grading on dojo's logs agrees |",
        "|---|---|---|---|---|---|---|---|",
    ]
    tot = [0, 0, 0, 0]
    for repo, rs in per_repo.items():
        ok = sum(r["ok"] for r in rs)
        first = [
            r["total_s"] - r["runs_s"]
            for r in rs
            if r["total_s"] is not None and r["runs_s"] is not None
        ]
        runs = [r["runs_s"] for r in rs if r["runs_s"] is not None]
        ag = [r["agree"] for r in rs if r["agree"] is not None]
        tot[0] += len(rs)
        tot[1] += ok
        tot[2] += sum(ag)
        tot[3] += len(ag)
        out.append(
            f"| {repo} | {len(rs)} | {ok} | {len(rs) - ok} | {len({r['version'] for r in rs})} "
            f"| {statistics.median(first):.1f} | {statistics.median(runs) if runs else 0:.1f} "
            f"| {sum(ag)}/{len(ag) if ag else 0} |"
            if first
            else f"| {repo} | {len(rs)} | {ok} | {len(rs) - ok} | {len({r['version'] for r in rs})} | – | – | – |"
        )
    out.append(f"| **all** | {tot[0]} | {tot[1]} | {tot[0] - tot[1]} | | | | {tot[2]}/{tot[3]} |")
    out.append("")
    why = {}
    for r in rows:
        if not r["ok"]:
            key = re.sub(r"instance \S+: ", "", r["problem"])
            if key.startswith("checkout:"):
                key = re.sub(r"`[^`]+`", "`…`", key)
            else:
                # The category, not the test ids: up to the first count or parenthesis.
                key = re.split(r": \d| \(|;", key)[0][:110]
            why[(r["repo"], key)] = why.get((r["repo"], key), 0) + 1
    if why:
        out += ["Why the others do not, by repository:", ""]
        out += [f"- {repo}: {n} × {key}" for (repo, key), n in sorted(why.items())]
        out.append("")
    for repo, rs in per_repo.items():
        out += [
            f"## {repo}",
            "",
            "| instance | version | python | validates | gold: F2P / P2P passing | test patch alone: F2P passing | official agrees | prepare + runs s | why not |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in rs:
            fmt = lambda c: f"{c[0]}/{c[1]}"
            t = (
                f"{r['total_s'] - r['runs_s']:.1f} + {r['runs_s']:.1f}"
                if r["total_s"] is not None and r["runs_s"] is not None
                else "–"
            )
            ag = {None: "–", True: "yes", False: "**no**"}[r["agree"]]
            why = r["problem"].replace("|", "\\|")
            out.append(
                f"| {r['id']} | {r['version']} | {r['python']} | {'yes' if r['ok'] else '**no**'} "
                f"| {fmt(r['f2p_gold'])} / {fmt(r['p2p_gold'])} | {fmt(r['f2p_before'])} | {ag} | {t} | {why or '-'} |"
            )
        out.append("")
    sys.stdout.write("\n".join(out))
    if a.jsonl:
        merge_jsonl(Path(a.jsonl), [measured_row(r, a.dataset) for r in rows if r["problem"] != "not run"])


MEASURED_SCHEMA = 1


def measured_row(r, dataset):
    """One instance's line of envs/measured.jsonl (schema 1)."""
    prepare = r["total_s"] - r["runs_s"] if r["total_s"] is not None and r["runs_s"] is not None else None
    return {
        "schema_version": MEASURED_SCHEMA,
        "instance_id": r["id"],
        "repo": r["repo"],
        "version": r["version"],
        "dataset": dataset,
        "python": r["python"],
        "validates": r["ok"],
        "official_agrees": r["agree"],
        "prepare_s": round(prepare, 1) if prepare is not None else None,
        "runs_s": round(r["runs_s"], 1) if r["runs_s"] is not None else None,
        "why_not": None if r["ok"] else r["problem"],
    }


def merge_jsonl(path, new_rows):
    """Rows of `path` kept in order, an instance's row replaced by its new one, new ones appended."""
    rows = {}
    if path.is_file():
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            row = json.loads(line)
            if row.get("schema_version") != MEASURED_SCHEMA:
                sys.exit(f"{path}:{n}: schema_version {row.get('schema_version')!r}, this script writes {MEASURED_SCHEMA}")
            rows[row["instance_id"]] = row
    for row in new_rows:
        rows[row["instance_id"]] = row
    path.write_text("".join(json.dumps(r) + "\n" for r in rows.values()))
    print(f"{path}: {len(rows)} rows ({len(new_rows)} from these runs)", file=sys.stderr)


if __name__ == "__main__":
    main()
