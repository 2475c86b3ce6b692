#!/usr/bin/env bash
# The whole of SWE-bench Verified (then Lite's other instances) validated from an empty
# $DOJO_HOME, in resumable batches (issue 47): what envs/VALIDATION.md's campaign rows and
# BENCHMARKS.md's whole-Verified hours and GB come from.
#
#   scripts/verified-campaign.sh prepare WORK SWEBENCH_GIT
#       WORK/tasks/NN-<name>.jsonl from the Verified and Lite parquets of SWE-bench's repository
#       (a git directory holding commit 52b72b35): one batch per repository (the five small
#       ones together), instances sorted by version so that a version's builds come together.
#   scripts/verified-campaign.sh run WORK REPOS BATCH...
#       `dojo validate --out WORK/out` of each batch (WORK/tasks/BATCH.jsonl; a stopped run
#       resumes: every instance with a validation.json is kept), 2 workers, $DOJO_HOME =
#       WORK/home and the uv cache WORK/uv-cache (both start empty), with the repositories under
#       REPOS (owner__name); each batch's start, end and the two directories' sizes appended
#       to WORK/log.txt.
#
# DOJO (default: dojo on PATH) is the binary; DOJO_PYTOOLS as for `dojo validate`.
# Rows: `python scripts/validation-table.py WORK/tasks/BATCH.jsonl:WORK/out`.
set -euo pipefail

cmd=${1:?usage: verified-campaign.sh prepare WORK SWEBENCH_GIT | run WORK REPOS BATCH...}
work=${2:?WORK}
dojo=${DOJO:-dojo}
mkdir -p "$work/tasks" "$work/out"

case "$cmd" in
prepare)
    git=${3:?SWEBENCH_GIT}
    for d in Verified Lite; do
        git -C "$git" show "52b72b35:data/SWE-bench_$d/test.parquet" >"$work/$d.parquet"
    done
    "$dojo" tasks fetch swe-bench-verified --from "$work/Verified.parquet" --out "$work/verified.jsonl"
    "$dojo" tasks fetch swe-bench-lite --from "$work/Lite.parquet" --out "$work/lite.jsonl"
    python3 - "$work" <<'EOF'
import json, sys

work = sys.argv[1]
read = lambda f: [json.loads(l) for l in open(f"{work}/{f}")]
verified, lite = read("verified.jsonl"), read("lite.jsonl")
small = ["pytest-dev/pytest", "psf/requests", "pylint-dev/pylint", "pallets/flask", "mwaskom/seaborn"]
big = [
    ("matplotlib", "matplotlib/matplotlib"), ("django", "django/django"),
    ("sklearn", "scikit-learn/scikit-learn"), ("astropy", "astropy/astropy"),
    ("sympy", "sympy/sympy"), ("sphinx", "sphinx-doc/sphinx"), ("xarray", "pydata/xarray"),
]
batches = [(n, [r]) for n, r in big] + [("small", small)]


def version(v):
    return tuple(int(x) if x.isdigit() else 0 for x in v.split("."))


def write(name, rows):
    rows = sorted(rows, key=lambda r: (r["repo"], version(r["version"]), r["instance_id"]))
    with open(f"{work}/tasks/{name}.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    print(f"{name}: {len(rows)}")


for i, (name, repos) in enumerate(batches, 1):
    write(f"{i:02d}-{name}", [r for r in verified if r["repo"] in repos])
ids = {r["instance_id"] for r in verified}
rest = [r for r in lite if r["instance_id"] not in ids]
for i, (name, repos) in enumerate([b for b in batches if b[0] in ("matplotlib", "sklearn", "django")], 11):
    write(f"{i:02d}-lite-{name}", [r for r in rest if r["repo"] in repos])
done = {r for _, rs in batches if _ in ("matplotlib", "sklearn", "django") for r in rs}
write("14-lite-others", [r for r in rest if r["repo"] not in done])
EOF
    ;;
run)
    repos=${3:?REPOS}
    shift 3
    export DOJO_HOME="$work/home" UV_CACHE_DIR="$work/uv-cache"
    mkdir -p "$DOJO_HOME" "$UV_CACHE_DIR"
    size() { du -s --block-size=1M "$1" | cut -f1; }
    for b in "$@"; do
        echo "$(date -u +%FT%TZ) start $b" >>"$work/log.txt"
        rc=0
        "$dojo" validate --tasks "$work/tasks/$b.jsonl" --repos "$repos" --workers 2 --quiet \
            --out "$work/out" >"$work/$b.stdout" 2>&1 || rc=$?
        echo "$(date -u +%FT%TZ) end $b rc=$rc home=$(size "$DOJO_HOME")M uv=$(size "$UV_CACHE_DIR")M" >>"$work/log.txt"
    done
    ;;
*)
    echo "unknown command $cmd" >&2
    exit 2
    ;;
esac
