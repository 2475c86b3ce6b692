#!/usr/bin/env python3
"""Transcribe SWE-Gym's fork of the SWE-bench harness (SWE-Gym/SWE-Bench-Fork,
swebench/harness/constants.py) into dojo env specs, one file per repository, for SWE-Gym's 11
repositories (pandas, MONAI, moto, mypy, dask, conan, pydantic, hydra, dvc, bokeh, modin).
Follows scripts/gen-envs-from-harness.py's mapping, with the SWE-Gym specifics noted per
repository in each file's header.

Usage: python3 scripts/gen-envs-from-swegym.py CONSTANTS_PY envs/swe-gym

CONSTANTS_PY is the fork's swebench/harness/constants.py at SRC_COMMIT (not in this
repository: get it from a clone of SWE-Gym/SWE-Bench-Fork). Needs Python >= 3.11 (tomllib)."""
import importlib.util, re, shlex, sys, tomllib, os

# The TOML writing and the key order are the harness generator's (one writer for envs/).
_spec = importlib.util.spec_from_file_location(
    "gen_envs_from_harness", os.path.join(os.path.dirname(os.path.abspath(__file__)), "gen-envs-from-harness.py"))
_harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_harness)
KEY_ORDER, toml_value, table_text, version_key = (
    _harness.KEY_ORDER, _harness.toml_value, _harness.table_text, _harness.version_key)

SRC_REPO = "SWE-Gym/SWE-Bench-Fork"
SRC_PATH = "swebench/harness/constants.py"
SRC_COMMIT = "242429c188fcfd06aad13fce9a54d450470bf0ac"  # HEAD (2025-01-28); the file is unchanged since e79f44cf (Init, 2024-12-08)

# harness key (lower-cased, as the fork's MAP_REPO_VERSION_TO_SPECS is) -> (repo as GitHub spells it, file name, dojo parser)
REPOS = {
    "pandas-dev/pandas": ("pandas-dev/pandas", "pandas", "pytest"),
    "project-monai/monai": ("Project-MONAI/MONAI", "monai", "pytest"),
    "getmoto/moto": ("getmoto/moto", "moto", "pytest"),
    "python/mypy": ("python/mypy", "mypy", "pytest"),
    "dask/dask": ("dask/dask", "dask", "pytest"),
    "conan-io/conan": ("conan-io/conan", "conan", "pytest"),
    "pydantic/pydantic": ("pydantic/pydantic", "pydantic", "pytest_v2"),
    "facebookresearch/hydra": ("facebookresearch/hydra", "hydra", "pytest"),
    "iterative/dvc": ("iterative/dvc", "dvc", "pytest"),
    "bokeh/bokeh": ("bokeh/bokeh", "bokeh", "pytest"),
    "modin-project/modin": ("modin-project/modin", "modin", "pytest"),
}
TIMEOUT_S = 1800

# Specs without "python" (dask, pandas): the harness's `conda env create` takes the interpreter
# from the repository's environment.yml. dask: read here from the first MAP_REPO_TO_ENV_YML_PATHS
# file present at each version's release tag X.Y.0 (dask/dask mirror): travis-37.yaml
# (python=3.7) for 2.11-2.12, environment-3.8.yaml for 2.13-2021.02, environment-3.9.yaml for
# 2021.03-2022.03, environment-3.10.yaml from 2022.04.
def dask_python(v):
    order = ['2.11', '2.12', '2.13', '2.14', '2.15', '2.16', '2.17', '2.18', '2.19', '2.21', '2.22', '2.23', '2.25', '2.26', '2.27', '2.28', '2.29', '2.30', '2020.12', '2021.01', '2021.02', '2021.03', '2021.04', '2021.05', '2021.06', '2021.07', '2021.08', '2021.09', '2021.10', '2021.11', '2021.12', '2022.01', '2022.02', '2022.03', '2022.04', '2022.05', '2022.6', '2022.7', '2022.8', '2022.9', '2022.10', '2022.11', '2022.12', '2023.1', '2023.2', '2023.3', '2023.4', '2023.5', '2023.6', '2023.7', '2023.8', '2023.9', '2023.10', '2023.11', '2023.12', '2024.1', '2024.2', '2024.3', '2024.4', '2024.5']
    i = order.index(v)
    if i <= order.index('2.12'):
        return "3.7"
    if i <= order.index('2021.02'):
        return "3.8"
    if i <= order.index('2022.03'):
        return "3.9"
    return "3.10"

# pandas: environment.yml's `python=` pin. NOT checked per version (no pandas mirror here, the
# snapshot is too large to fetch): a stored environment.yml of the 1.5 development line says
# python=3.8; 2.0 and later say python=3.10 (from memory, unchecked); before 1.0 unknown (3.8
# kept: the oldest interpreter the 1.x files name).
def pandas_python(v):
    return "3.10" if [int(x) for x in v.split(".")] >= [2, 0] else "3.8"

PYTHON_FROM_YML = {"dask/dask": dask_python, "pandas-dev/pandas": pandas_python}

SYSTEM_CMD = re.compile(r"apt-get|locale-gen|/etc/|pipx|npm install --location=global")

BUILTIN = {"pre_install": [], "requirements": [], "install": [], "editable": True,
           "installer": "uv", "network": False, "env": {}}

def expand_export(val):
    """The harness's `export X=...` is shell; dojo's env values are literal. At /testbed with X
    unset: ${X:-} -> "", $(pwd) -> /testbed."""
    out = re.sub(r"\$\{\w+:-\}", "", val)
    out = out.replace("$(pwd)", "/testbed").replace("$PWD", "/testbed")
    if "$" in out:
        raise ValueError(f"cannot expand {val!r}")
    return out


def transcribe(key, version, spec):
    t, notes = {}, []
    if "python" in spec:
        t["python"] = spec["python"]
    else:
        t["python"] = PYTHON_FROM_YML[key](version)
        notes.append("no `python` key: the harness's conda takes it from environment.yml; "
                     "python here is read from that file (see the header)")
    pre = []
    for cmd in spec.get("pre_install", []):
        if SYSTEM_CMD.search(cmd):
            notes.append(f"pre_install (system, left out): {cmd}")
        else:
            pre.append(cmd)
    if pre and "&&" in pre[-1]:
        # The harness runs pre_install and install as one `set -e` script, where a failing
        # non-final member of an && list is ignored. dojo runs pre_install as a script of its own:
        # its last line's status would be the script's, so a last `[ -f x ] && ...` whose test
        # fails would end the build. `true` restores the harness's semantics.
        pre.append("true")
    t["pre_install"] = pre
    pkgs = spec.get("packages", "")
    if pkgs == "environment.yml":
        notes.append("conda environment.yml (packages = environment.yml): not installed")
    elif pkgs == "requirements.txt":
        raise ValueError("requirements.txt: not used by these repositories")
    elif pkgs:
        raise ValueError(f"conda list {pkgs!r}: not used by these repositories")
    for p in spec.get("env_patches", []):
        notes.append(f"env_patches (conda environment file, left out): {p}")
    t["requirements"] = list(spec.get("pip_packages", []))
    install = spec.get("install", "")
    if install.strip().rstrip(";").strip() == "python -m pip install -e .":
        t["editable"], t["install"] = True, []
    else:
        t["editable"], t["install"] = False, [install] if install else []
    t["installer"] = "uv" if t["editable"] else "pip"
    env = {}
    for cmd in spec.get("eval_commands", []):
        m = re.fullmatch(r"export (\w+)=(.*)", cmd.strip())
        if m:
            env[m.group(1)] = expand_export(m.group(2))
        else:
            notes.append(f"eval_commands (left out): {cmd}")
    t["env"] = env
    t["test_cmd"] = spec["test_cmd"]
    for k in spec:
        if k not in ("python", "pre_install", "packages", "env_patches", "pip_packages",
                     "install", "eval_commands", "test_cmd"):
            raise ValueError(f"{key} {version}: unhandled key {k}")
    return t, notes


HEADER_EXTRA = {
    "python/mypy": [
        "The harness's test command for mypy is `test_cmd` + \" \" + '\"<case names>\"': the names of",
        "the `[case NAME]` blocks in the task's test_patch, joined with \" or \" (test_spec.py,",
        "make_test_command), i.e. `pytest -n0 -rA -k \"testFoo or testBar\"`. dojo's test_directives",
        "has no such kind (files | django | none): NOT EXPRESSIBLE. test_directives = \"none\" here, so",
        "a task must carry the whole command itself (its `env.test_cmd`, or an `eval_script`);",
        "without that `-k` gets no expression and pytest fails.",
    ],
    "pydantic/pydantic": [
        "Log parser: the fork's parse_log_pytest_pydantic is not one of dojo's parsers. It is",
        "parse_log_pytest_v2 plus `re.sub(r\"FAILED\\s*\\[.*?\\]\", \"FAILED\", line)` (drops a progress",
        "suffix after FAILED; the test command's `-o console_output_style=classic` prints none):",
        "log_parser = \"pytest_v2\" here, the nearest.",
        "pdm comes from `pipx` (apt's pipx) in the harness; both are left out, so the install's",
        "`pdm add pre-commit; make install;` finds no pdm: every version fails to build as is",
        "(measured for 2.4: `pdm: command not found`). With `python -m pip install pdm` added first",
        "(tried for 2.4), `pdm add pre-commit` re-locks the project (edits pyproject.toml and",
        "pdm.lock) and fetches a git dependency (mike, docs group) from github.com: it needs GitHub",
        "at build time.",
    ],
    "conan-io/conan": [
        "The project is not installed (the harness installs only its requirements files); the",
        "tests import it through PYTHONPATH. The harness's eval command",
        "`export PYTHONPATH=${PYTHONPATH:-}:$(pwd)` (at /testbed, PYTHONPATH unset) is the literal",
        "env value \":/testbed\" here (dojo's env values are not shell-expanded).",
        "Measured: 2.0 (tag 2.0.0) and 1.59 (tag 1.59.0) build (13-17 s for build and two test",
        "runs) and run conans/test/unittests/util/test_encrypt.py (4 passed), without cmake.",
    ],
    "iterative/dvc": [
        "pre_install: the harness's list lacks two commas, so Python joins its last two sed",
        "commands into one string (transcribed as the harness runs it): `sed -i '...pyarrow...'",
        "setup.py[ -f setup.py ] && sed -i '...boto3...' setup.py`, where sed reads setup.py as",
        "its script (-f) and fails, so neither the pyarrow nor the boto3 fix is ever applied, and",
        "under the harness's `set -e` the failure (not the last member of the && list) is ignored.",
        "The `true` after it keeps that (dojo runs pre_install as a script of its own).",
    ],
    "pandas-dev/pandas": [
        "pre_install `git remote add upstream https://github.com/pandas-dev/pandas.git; git fetch",
        "upstream --tags` is kept (builds have the network): it fetches pandas' whole history",
        "(versioneer needs a tag for the version) into /testbed/.git at every environment build.",
        "python: environment.yml's pin, not the harness's key; NOT checked per version (see",
        "pandas_python in the transcription script: 3.8 before 2.0, 3.10 from 2.0).",
    ],
    "dask/dask": [
        "python: environment.yml's pin at the version's release tag (not the harness's key): 3.7",
        "(continuous_integration/travis/travis-37.yaml) for 2.11-2.12, 3.8 for 2.13-2021.02, 3.9 for",
        "2021.03-2022.03, 3.10 from 2022.04 (continuous_integration/environment-3.X.yaml).",
        "The test dependencies (pytest, pytest-xdist for `-n0`, numpy, pandas...) all come from",
        "that conda file, so without it the environment has none of them.",
    ],
    "bokeh/bokeh": [
        "bokehjs: the harness's pre_install `cd bokehjs && npm install --location=global npm && npm",
        "ci && cd ../` uses the Node.js of the conda environment (the base image has none) and",
        "writes npm's global prefix: left out. Bokeh 3's",
        "`pip install -e .` builds bokehjs (node_modules from `npm ci`), so it cannot build here.",
        "The test dependencies come from the conda file (MAP_REPO_TO_ENV_YML_PATHS:",
        "conda/environment-test-3.10.yml, else environment.yml).",
    ],
    "modin-project/modin": [
        "Dependencies (pandas, numpy, ray, dask, pytest, pytest-xdist for `-n0`, ...) come from the",
        "conda file environment-dev.yml (MAP_REPO_TO_ENV_YML_PATHS), not installed here.",
    ],
    "project-monai/monai": [
        "The install's `sed -i` on requirements-dev.txt (a tracked file) runs in `install`, whose",
        "edits of tracked files dojo does not keep in the tree (the harness's image keeps them,",
        "so there `git diff` shows requirements-dev.txt changed); the build itself sees the edit.",
    ],
    "facebookresearch/hydra": [
        "openjdk-17 (apt) is left out: hydra's setup.py runs ANTLR (java) to generate its parsers,",
        "so the host must have `java` on PATH (this machine has /usr/bin/java).",
        "For 0.1-1.2 the install edits requirements/requirements.txt and requirements/dev.txt",
        "(tracked) before installing; dojo keeps no install edits of tracked files in the tree.",
        "Measured (1.3 at v1.3.2): the environment builds (about 25 s) and tests pass, but",
        "requirements/dev.txt's pytest-snail 0.1.0 calls `pluginmanager.unregister(\"snail_plugin\")`,",
        "which pluggy >= 1.1 rejects at pytest's exit (AssertionError): the test command exits 1 after",
        "the PASSED lines, which the harness's parser reads but dojo does not trust. A task `env`",
        "with `requirements = [\"pytest<8\", \"pluggy<1.1\"]` ran clean (not part of this spec).",
    ],
    "getmoto/moto": [
        "`make init` (the Makefile's `pip install -e .` + `pip install -r requirements-dev.txt`)",
        "needs `make` on the host.",
    ],
}


def header(key, repo, versions, notes):
    lines = [
        f"# SWE-Gym repository {repo}: transcribed from SWE-Gym's fork of the harness",
        f"# ({SRC_REPO}, {SRC_PATH} at commit {SRC_COMMIT},",
        f"# SPECS_* / MAP_REPO_VERSION_TO_SPECS) by scripts/gen-envs-from-swegym.py, which follows the mapping of",
        "# scripts/gen-envs-from-harness.py. One table per harness version; a version the harness",
        "# does not list gets only [default].",
        "#",
        "# Installer: \"pip\" wherever the install is not a plain `python -m pip install -e .` (the",
        "# command runs as written in the venv and needs pip), else uv. The fork's eval script also",
        "# re-runs the spec's `install` before the test patch (test_spec.py, make_eval_script_list);",
        "# dojo does that only for tasks that carry an eval_script (SWE-Gym rows carry none).",
    ]
    for l in HEADER_EXTRA.get(key, []):
        lines.append("# " + l if l else "#")
    all_notes = []
    for v in versions:
        for n in notes[v]:
            if n not in all_notes:
                all_notes.append(n)
    if all_notes:
        lines += ["#", "# NOT EXPRESSIBLE in the spec format (the harness's image has it, dojo does not):"]
        for n in all_notes:
            vs = [v for v in versions if n in notes[v]]
            lines.append(f"#   - {n}")
            lines.append(f"#     versions: {', '.join(vs) if len(vs) < len(versions) else 'all'}")
    lines.append("")
    return "\n".join(lines) + "\n"


def render(key, specs):
    repo, name, parser = REPOS[key]
    versions = sorted(specs, key=version_key)
    tables, notes = {}, {}
    for v in versions:
        tables[v], notes[v] = transcribe(key, v, specs[v])
    keys = sorted(set().union(*tables.values()), key=KEY_ORDER.index)
    default = {}
    for k in keys:
        vals = [repr(tables[v][k]) for v in versions if k in tables[v]]
        if k not in BUILTIN and len(vals) < len(versions):
            continue
        best = max(vals, key=vals.count)
        default[k] = next(tables[v][k] for v in versions if repr(tables[v].get(k)) == best)
    default = {k: x for k, x in default.items() if BUILTIN.get(k, object()) != x}
    default["log_parser"] = parser
    default["timeout_s"] = TIMEOUT_S
    if key == "python/mypy":
        default["test_directives"] = "none"
    inherited = lambda k: default.get(k, BUILTIN.get(k))
    per_version = {v: {k: x for k, x in tables[v].items() if inherited(k) != x} for v in versions}
    out = [header(key, repo, versions, notes), "schema_version = 3\n", f'repo = "{repo}"\n\n[default]\n',
           table_text(default)]
    for v in versions:
        out.append(f'\n[versions."{v}"]\n')
        out.append(table_text(per_version[v]))
    text = "".join(out)
    doc = tomllib.loads(text)
    assert doc["repo"] == repo and doc["default"] == default
    for v, t in per_version.items():
        assert doc["versions"][v] == t, (repo, v)
        # resolved == transcribed
        full = dict(BUILTIN); full.update(default); full.update(doc["versions"][v])
        for k, x in tables[v].items():
            assert full.get(k, BUILTIN.get(k)) == x, (repo, v, k)
    return name, text, tables, notes


def main():
    src, outdir = sys.argv[1], sys.argv[2]
    s = importlib.util.spec_from_file_location("swegym_constants", src)
    m = importlib.util.module_from_spec(s)
    s.loader.exec_module(m)
    os.makedirs(outdir, exist_ok=True)
    for key in REPOS:
        name, text, tables, notes = render(key, m.MAP_REPO_VERSION_TO_SPECS[key])
        with open(os.path.join(outdir, f"{name}.toml"), "w") as f:
            f.write(text)
        print(f"wrote {name}.toml: {len(tables)} versions; pythons "
              f"{sorted({t['python'] for t in tables.values()}, key=version_key)}")


if __name__ == "__main__":
    main()
