#!/usr/bin/env python3
"""Write envs/<name>.toml for the 12 repositories of SWE-bench Verified and Lite, transcribed
from the official harness specs (SWE-bench `swebench/harness/constants/python.py`).

Usage: python3 scripts/gen-envs-from-harness.py [HARNESS_SPECS_PY] [--out DIR] [--check]

HARNESS_SPECS_PY defaults to ../shared/reference/swebench-harness-specs.py (relative to the
repository root); it is imported by path, so a newer copy of the harness file can be dropped in.
`--check` writes nothing and exits 1 when a generated file differs from the one in DIR (so a
stale transcription is caught). Standard library only.

What the transcription does, per harness key (envs/README.md describes the target format):
- `python` -> `python`.
- `packages`: `"requirements.txt"` -> `requirements_file` (the first path of
  MAP_REPO_TO_REQS_PATHS that exists at the versions the harness uses it for, see REQS_PATH);
  `"environment.yml"` -> nothing (conda; said in the file's header), except for xarray,
  whose environment.yml packages with PyPI wheels are a conda list (CONDA_ENV_PIP); any other
  value is a conda package list, installed here from PyPI before `pip_packages`, which override
  it by name (as the harness's pip step runs after `conda create`).
- `pip_packages` -> `requirements`.
- `pre_install` -> `pre_install`, except `apt-get`/locale commands (root, the host's package
  manager): left out and named in the header; the packages of HOST_PROGRAMS an `apt-get
  install` names become `host_programs` (schema 5: preparation fails, as the environment's
  failure, on a machine without them).
- `install`: exactly `python -m pip install -e .` -> `editable = true`; anything else (extras,
  pip flags, a non-editable install, `setup.py`) -> `editable = false` and the command in
  `install`, run as written.
- `eval_commands` -> `env` for its `export`s (other commands are system changes: header).
- `nano_cpus` -> `cpus`.
- `test_cmd` -> `test_cmd`; the log parser is the harness's MAP_REPO_TO_PARSER (log_parsers).
- no harness key -> `exclude_newer` in [default] for the repositories of EXCLUDE_NEWER (the
  day their images' unpinned packages are taken from), in the version tables of
  EXCLUDE_NEWER_VERSIONS; such a file says schema_version = 4.
- a conda list's setuptools pin is also installed on its own first (`pre_install`), as
  `conda create` has it in place before pip's step builds `pip_packages`; astropy < 4's
  astropy_helpers submodule and the harness's pip are `pre_install` steps too (AH_HELPERS).
- what the harness's image has but the registries cannot give is SUBSTITUTED, and each
  generated file says so (its header and the version's table): pins without wheels for the
  version's interpreter (SUBSTITUTE), an older pip for an install command pip 26 refuses
  (INSTALL_PIP), matplotlib's qhull, FreeType and jQuery UI downloads (MPL_QHULL_STEP,
  MPL_FREETYPE_STEP, MPL_JQUERY_STEP).

Installer rule (`installer = "pip"` vs uv's default): pip wherever the harness's pip semantics
matter, i.e. when any of these holds, else uv:
  1. the install is not a plain `pip install -e .` (extras, `--no-use-pep517`,
     `--no-build-isolation`, `setup.py install/develop`, `pip install .`): the command runs
     in the venv and needs pip (and setuptools) there, which only the pip installer seeds;
  2. a pinned setuptools older than 64 (no PEP 660 `build_editable`: uv's editable install
     fails, pip falls back to `setup.py develop`);
  3. the repository is pylint or pytest (issue 14: pylint's `setuptools~=62.6` pins and its
     2.9-2.15 astroid path mapping need a path-entry editable; pytest's setuptools-scm version
     file is written by the build; and their eval scripts re-run `pip install -e .`);
  4. the project compiles extensions against the environment's pinned packages (matplotlib,
     scikit-learn, astropy): pip's legacy `setup.py develop` (projects without a PEP 517
     build-system) builds against the venv's numpy, uv's isolated build against the newest one;
  5. the interpreter is older than Python 3.7 (django 3.0-3.2's 3.6): the newest setuptools
     for it (59.6) has no `build_editable`, so uv's editable install fails where the harness's
     pip ran `setup.py develop`.
uv stays only for pure-Python projects with a plain `pip install -e .` (flask, sympy, xarray,
django >= 4.0, seaborn 0.11), where the PEP 660 editable serves /testbed the same way.
An eval script's reinstall (`pip install -e .` before the tests) runs only in pip-built
environments (envs/README.md): uv-built ones skip it and rely on the editable install.
"""

import argparse
import json
import importlib.util
import os
import re
import shlex
import sys
import tomllib

# repository -> (file name in envs/, log parser): the parser is the harness's MAP_REPO_TO_PARSER
# (swebench/harness/log_parsers) in dojo's names.
REPOS = {
    "astropy/astropy": ("astropy", "astropy"),
    "django/django": ("django", "django"),
    "matplotlib/matplotlib": ("matplotlib", "matplotlib"),
    "mwaskom/seaborn": ("seaborn", "seaborn"),
    "pallets/flask": ("flask", "flask"),
    "psf/requests": ("requests", "requests"),
    "pydata/xarray": ("xarray", "xarray"),
    "pylint-dev/pylint": ("pylint", "pylint"),
    "pytest-dev/pytest": ("pytest", "pytest"),
    "scikit-learn/scikit-learn": ("scikit-learn", "scikit"),
    "sphinx-doc/sphinx": ("sphinx", "sphinx"),
    "sympy/sympy": ("sympy", "sympy"),
}
NAMES = {r: n for r, (n, _) in REPOS.items()}
PARSERS = {r: p for r, (_, p) in REPOS.items()}

# The harness tries MAP_REPO_TO_REQS_PATHS in order and takes the first file that exists at the
# environment_setup_commit; dojo's `requirements_file` names one path, so it is chosen per
# repository (and per version where the harness's first path did not exist yet). Checked in
# the projects' git history at their release tags: pylint's requirements_test.txt (2.8-4.0),
# flask's requirements/dev.txt (2.0-3.1), sympy's requirements-dev.txt (1.13, 1.14); matplotlib's
# requirements/dev/dev-requirements.txt exists from 3.4 on (v3.4.0 and 3.4's Verified setup
# commit f93c0a3; travis_all.txt was renamed testing/all.txt in 0481c01, 2021-01), and not at
# v3.0.0-v3.3.0 nor the 3.0 / 3.1 setup commits (d062859, 42259bb), where the harness falls
# through to requirements/testing/travis_all.txt. Not checked: django's tests/requirements/py3.txt
# (1.7-5.2).
REQS_FALLBACK = {
    "matplotlib/matplotlib": {
        v: "requirements/testing/travis_all.txt" for v in ("3.0", "3.1", "3.2", "3.3")
    },
}


def reqs_path(repo, version, paths):
    return REQS_FALLBACK.get(repo, {}).get(version, paths[0])

TIMEOUT_S = 1800

# Resolution day (`exclude_newer`, schema 4) per repository, where the packages the harness
# leaves unpinned resolve differently today than in its images: sphinx < 4 imports
# `pkg_resources`, which today's setuptools no longer has. The day is after the harness's
# newest pin for the repository (sphinx: tox==4.16.0, 2024-07-02), so every pin resolves.
EXCLUDE_NEWER = {
    "sphinx-doc/sphinx": "2024-08-01",
    # xarray's conda environment.yml (CONDA_ENV_PIP) is unpinned: as of a day before numpy 2.0
    # (2024-06-16) and after the harness's newest xarray pin (scipy==1.11.1, 2023-06-29).
    "pydata/xarray": "2024-06-01",
}

# astropy < 4 has no pyproject.toml: `setup.py` imports ah_bootstrap, which takes astropy_helpers
# from the git submodule of that name. The harness's image cloned without submodules; at install
# time ah_bootstrap ran `git submodule update` (GitHub), and the harness's pip (2023-24) installed
# the project with `setup.py develop` in the venv (its setuptools and numpy, pip importable).
# Here (pre_install steps, in this order):
# - TEST_EXTRAS: the `[test]` extra's unpinned packages (3.1's setup.cfg), installed by pip 26 as
#   of EXCLUDE_NEWER_VERSIONS' day, so that the project's install (pip 23, no date) finds them
#   satisfied. Today's (matplotlib 3.9 with pyparsing 3.3, whose `enablePackrat` deprecation
#   warning astropy's `filterwarnings = error` turns into an error) broke astropy-8872's tests.
# - HARNESS_PIP: for Python >= 3.9 (3.x), pip 23.3.2 (the newest as of that day) with the
#   version's setuptools pin: it still runs `setup.py develop` for a project without
#   pyproject.toml (the install reads no pip.conf, see transcribe). pip 26 builds through PEP 660
#   in an isolated environment with the newest setuptools, which has no `pkg_resources`
#   (ah_bootstrap imports it) and no pip (ah_bootstrap and `setup_requires` fetch with
#   `python -m pip`). Python 3.6's newest pip (21.3, astropy < 3) runs `setup.py develop` anyway.
# - AH_HELPERS: the astropy-helpers release nearest the instances' submodule commits, its sdist
#   unpacked where the submodule would be (no GitHub needed; its metadata is built with the
#   setuptools pin, which has pkg_resources). 1.3: 3.0.2 (submodules 071fd45 = v3.0rc2 ..
#   7f11678, Jan-Jul 2018); 3.1: 3.2.1 (32b440b = v3.2rc2, ba37342; setup.py imports
#   `setup_helpers.setup`, new in 3.2). Versions without a Verified or Lite instance (0.1-1.2,
#   3.0, 3.2) get no helpers: not measured.
AH_HELPERS = {"astropy/astropy": {"1.3": "3.0.2", "3.1": "3.2.1"}}
HARNESS_PIP = {"astropy/astropy": {v: "23.3.2" for v in ("3.0", "3.1", "3.2")}}
TEST_EXTRAS = {"astropy/astropy": {"3.1": "pytest-mpl objgraph ipython coverage skyfield"}}
EXCLUDE_NEWER_VERSIONS = {
    "astropy/astropy": {v: "2024-01-01" for v in ("3.0", "3.1", "3.2")},
    # The versions whose conda lists leave most packages unpinned and whose Python has pip 26
    # (>= 3.9; 3.6-3.8 cannot have a day): as of the day xarray's conda list takes, before
    # numpy 2.0 and after the harness's newest pins of them (scikit-learn: cython==3.0.10,
    # 2024-03-26; matplotlib: setuptools==68.1.2, fonttools==4.42.1, 2023-08).
    "scikit-learn/scikit-learn": {v: "2024-06-01" for v in ("1.3", "1.4", "1.5", "1.6")},
    "matplotlib/matplotlib": {v: "2024-06-01" for v in ("3.5", "3.6", "3.7", "3.8", "3.9")},
}

# The harness's `conda create` puts setuptools (with `pkg_resources`, before setuptools 81) in
# every environment; dojo's uv venvs have none. Where a version's tests need it and its spec
# pins none, the harness's own pin of other versions of the repository is added (measured on
# SWE-bench Lite: pytest 8.0's `test_resources_provider_for_loader` skipped and
# `test_cmdline_python_namespace_package` failed without it, pytest-11143 / -11148).
CONDA_SETUPTOOLS = {"pytest-dev/pytest": {"8.0": "setuptools==68.0.0"}}

# Pins the harness's conda satisfied but PyPI cannot on the version's interpreter (no wheel for
# it: pip builds the sdist, which fails), replaced by the nearest release that has manylinux
# wheels for it; and unpinned names that resolve differently on PyPI than conda did then.
# (repo, version) -> {name: (requirement, why)}; the replacement is said in the version's table.
# Checked with `pip download --only-binary :all: --python-version X.Y --platform
# manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64 --no-deps`.
_SK_NEW = {
    "numpy": (
        "numpy==1.19.3",
        "numpy==1.19.2 has no cp39 wheel on PyPI (conda had a py39 build); 1.19.3 is the "
        "first 1.19.x with one (manylinux2010)",
    ),
    "scipy": (
        "scipy==1.5.4",
        "scipy==1.5.2 has no cp39 wheel on PyPI (nor 1.5.3); 1.5.4 is the first 1.5.x with one "
        "(manylinux1)",
    ),
}
_SK_OLD = {
    "cython": (
        "cython<3",
        "unpinned `cython` resolves to Cython 3 on PyPI, whose compiler rejects these .pyx "
        "files; the harness's conda (Python 3.6) had 0.29.x: the newest 0.29 (0.29.37, cp36 "
        "wheel) is taken",
    ),
    "pytest": (
        "pytest==6.2.4",
        "unpinned `pytest` resolves to 7.0.1 on PyPI (the newest for Python 3.6); the "
        "harness's conda image had 6.2.4 (its logs: `pytest-6.2.4, py-1.11.0, "
        "pluggy-0.13.1`), whose parametrize ids the lists were made with (a complex value is "
        "named by argument and index, `train_size3`, where 7.0 writes `1j`: 14983)",
    ),
}
# Unpinned packages whose release after the harness's images broke a version's tests, where
# the version cannot take an exclude_newer day (its pip installer on Python < 3.9 has no
# --uploaded-prior-to): the release the images had (the newest as of 2024-06-01, the day the
# later versions take) is added to the requirements. (repo, version) -> [(requirement, why)].
_MPL_DATEUTIL = (
    "python-dateutil==2.9.0.post0",
    "python-dateutil 3.0 (2026) returns no UTC offset for pandas 2.0's timezone conversion "
    "(`'NoneType' object has no attribute 'total_seconds'`: test_dates' pandas tests)",
)
ERA_PINS = {
    "matplotlib/matplotlib": {
        **{v: [_MPL_DATEUTIL] for v in ("3.0", "3.1", "3.2", "3.3")},
        "3.4": [
            _MPL_DATEUTIL,
            (
                "setuptools-scm==8.1.0",
                "setuptools-scm 9 renamed the `release-branch-semver` scheme 3.4's "
                "_get_version asks for, and its DeprecationWarning is an error under "
                "matplotlib's filterwarnings (every test_dates test that imports pandas)",
            ),
        ],
    },
}

# An interpreter no registry here offers, replaced by the nearest one that runs the version's
# pins (django 1.7-2.2 and matplotlib 1.0-2.2 ask for 3.5; their releases support 3.6). Results
# under a substituted interpreter are counted apart in envs/VALIDATION.md.
PYTHON_SUBSTITUTE = {
    "3.5": (
        "3.6",
        "CPython 3.5 is in no registry here (pyenv's oldest 3.x is 3.6.15, uv manages none "
        "before 3.7); 3.6 is the nearest",
    ),
}

SUBSTITUTE = {
    "scikit-learn/scikit-learn": {
        **{v: _SK_OLD for v in ("0.20", "0.21", "0.22")},
        **{v: _SK_NEW for v in ("1.3", "1.4", "1.5", "1.6")},
    },
}

# The harness's install command needs an older pip than the venv's: pip 26 (the newest for
# Python >= 3.9) has no `--no-use-pep517` (scikit-learn >= 1.3's `pip install -v
# --no-use-pep517 --no-build-isolation -e .`, also the eval script's reinstall). Installed right
# before the install command (the requirements keep pip 26 and its exclude_newer date); pip
# 23.3.2 (the newest as of the version's day) runs `setup.py develop` with the venv's setuptools
# (the project's pyproject.toml names no build backend), with the venv's pip.conf
# (`editable_mode=compat` is accepted there, measured).
INSTALL_PIP = {"scikit-learn/scikit-learn": {v: "23.3.2" for v in ("1.3", "1.4", "1.5", "1.6")}}

# matplotlib's C libraries. The harness's pre_install downloads qhull 2020.2 from qhull.org
# into build/ (where setupext.py looks before downloading it itself), and setupext.py downloads
# FreeType 2.6.1 (the version its image tests were drawn with) at build time; neither host is
# reachable here (only the package registries). The project is installed at each instance's
# base commit, and what its setupext.py does varies inside one harness version (3.4's base
# commits read setup.cfg, later ones mplsetup.cfg; 3.0-3.3 bundle qhull in extern/libqhull), so
# both steps look at the tree's setupext.py:
# - qhull, where setupext.py would download qhull-2020.2: the same sources (qhull_r 8.0.2,
#   "2020.2.r 2020/08/31") from PyPI's cmeel-qhull 8.0.2.1 sdist (its qhull/ tree; cmeel's patch
#   only touches CMakeLists.txt), unpacked into build/qhull-2020.2. pip download prepares the
#   sdist's metadata, which for cmeel is a CMake build of qhull (a minute or two): CMake 4 needs
#   CMAKE_POLICY_VERSION_MINIMUM for qhull's CMakeLists, and the download ignores the version's
#   exclude_newer day (8.0.2.1 is from 2025).
# - FreeType, where setupext.py has the [libs] system_freetype option (3.3 on; its default,
#   False, downloads 2.6.1 from sourceforge/savannah and links it statically; older trees take
#   the system's by default, as the harness's did, from libfreetype6-dev): no registry has
#   2.6.1's sources (fetched where its hosts answer, below); crates.io's freetype-sys 0.13.1
#   bundles 2.6.5's (checked by its registry checksum), built with FreeType's ANSI makefile
#   (no configure: no autotools in the image) into build/freetype-2.6.1/, where setupext.py
#   looks first: it then neither downloads nor builds, and links it as it would 2.6.1.
#   matplotlib's image comparisons of text are drawn with 2.6.1: with 2.6.5 they differ by an
#   RMS of 0.001-0.15 and fail at tolerance 0 (25287: 75 of 786 PASS_TO_PASS; 2.12.1: 88).
FREETYPE_CRATE = (
    "https://static.crates.io/crates/freetype-sys/freetype-sys-0.13.1.crate",
    "a37d4011c0cc628dfa766fcc195454f4b068d7afdc2adfd28861191d866e731a",
)
# Where FreeType 2.6.1 itself can be had (its release tarball from the hosts setupext.py names,
# with its hash there), it is what the build uses, exactly as the harness's; 2.6.5 only where
# none answers (this project's machines). Which one a build took is printed in its log. (The
# system's CA roots first, as pip's own requests are verified here; certifi's, which pip
# bundles, where those are missing.)
FREETYPE_261 = (
    [
        "https://downloads.sourceforge.net/project/freetype/freetype2/2.6.1/freetype-2.6.1.tar.gz",
        "https://download.savannah.gnu.org/releases/freetype/freetype-2.6.1.tar.gz",
        "https://download.savannah.gnu.org/releases/freetype/freetype-old/freetype-2.6.1.tar.gz",
    ],
    "0a3c7dfbda6da1e8fce29232e8e96d987ababbbf71ebc8c75659e4132c367014",
)
# The same release from a package archive: Ubuntu 16.04's source package of FreeType 2.6.1 keeps
# upstream's freetype-2.6.1.tar.bz2 inside its orig tarball (beside the docs and demos), which
# archive.ubuntu.com serves where the upstream hosts do not answer. Both files are checked:
# the orig tarball by its hash in Ubuntu's Sources index, the inner release by upstream's
# published SHA-256 of freetype-2.6.1.tar.bz2.
FREETYPE_261_UBUNTU = (
    "http://archive.ubuntu.com/ubuntu/pool/main/f/freetype/freetype_2.6.1.orig.tar.gz",
    "ffaef13dc5ccc265e97519115a51a103e88b9d9d3223289bc1a98c0c2094d5b3",
    "freetype-2.6.1/freetype-2.6.1.tar.bz2",
    "2f6e9a7de3ae8e85bdd2fe237e27d868d3ba7a27495e65906455c27722dd1a17",
)
MPL_FREETYPE_FETCH = (
    "import hashlib, io, ssl, sys, tarfile, urllib.request\n"
    # Extracted without changing owners: the build runs as root in a user namespace where the
    # archive's owners do not exist, and tarfile, failing to chown a member, skips its chmod
    # (./configure would come out without its x bit, and setupext.py's build of it fail).
    "def extract(data, dest):\n"
    "    tar = tarfile.open(fileobj=io.BytesIO(data))\n"
    "    tar.chown = lambda *args, **kwargs: None\n"
    "    tar.extractall(dest)\n"
    "def get(url):\n"
    "    try:\n"
    "        return urllib.request.urlopen(url, timeout=60).read()\n"
    "    except Exception:\n"
    "        from pip._vendor import certifi\n"
    "        ctx = ssl.create_default_context(cafile=certifi.where())\n"
    "        return urllib.request.urlopen(url, context=ctx, timeout=300).read()\n"
    f"for url in {FREETYPE_261[0]!r}:\n"
    "    try:\n"
    "        data = get(url)\n"
    "    except Exception:\n"
    "        continue\n"
    f"    if hashlib.sha256(data).hexdigest() == '{FREETYPE_261[1]}':\n"
    "        extract(data, 'build')\n"
    "        print('FreeType 2.6.1 from ' + url)\n"
    "        sys.exit(0)\n"
    "try:\n"
    f"    data = get('{FREETYPE_261_UBUNTU[0]}')\n"
    f"    assert hashlib.sha256(data).hexdigest() == '{FREETYPE_261_UBUNTU[1]}'\n"
    f"    inner = tarfile.open(fileobj=io.BytesIO(data)).extractfile('{FREETYPE_261_UBUNTU[2]}').read()\n"
    f"    assert hashlib.sha256(inner).hexdigest() == '{FREETYPE_261_UBUNTU[3]}'\n"
    "    extract(inner, 'build')\n"
    f"    print('FreeType 2.6.1 from {FREETYPE_261_UBUNTU[0]}')\n"
    "except Exception:\n"
    "    pass\n"
    "else:\n"
    "    sys.exit(0)\n"
    f"data = get('{FREETYPE_CRATE[0]}')\n"
    f"assert hashlib.sha256(data).hexdigest() == '{FREETYPE_CRATE[1]}', 'freetype-sys checksum'\n"
    "top = 'freetype-sys-0.13.1/freetype2/'\n"
    "tar = tarfile.open(fileobj=io.BytesIO(data))\n"
    "keep = [m for m in tar.getmembers() if m.name.startswith(top) and m.name != top]\n"
    "for m in keep:\n"
    "    m.name = m.name[len(top):]\n"
    "tar.extractall('build/freetype-2.6.1', members=keep)\n"
    "print('FreeType 2.6.5 (freetype-sys 0.13.1) for 2.6.1, which no host answered')\n"
    "sys.exit(3)\n"
)
MPL_QHULL_STEP = (
    "if grep -q qhull-2020 setupext.py; then "
    "env -u PIP_UPLOADED_PRIOR_TO CMAKE_POLICY_VERSION_MINIMUM=3.5 python -m pip download "
    "--no-deps --no-binary cmeel-qhull -d /tmp/qhull cmeel-qhull==8.0.2.1 && "
    "mkdir -p build/qhull-2020.2 && tar -xzf /tmp/qhull/cmeel_qhull-8.0.2.1.tar.gz "
    "-C build/qhull-2020.2 --strip-components=2 --no-same-owner cmeel_qhull-8.0.2.1/qhull; fi"
)
MPL_FREETYPE_STEP = (
    "if grep -q \"'libs', 'system_freetype'\" setupext.py && "
    "grep -Eq \"(LOCAL_FREETYPE_VERSION|TESTING_VERSION_OF_FREETYPE) = '2.6.1'\" setupext.py && "
    "[ ! -e build/freetype-2.6.1 ]; then mkdir -p build && "
    # `|| got=$?`: pre_install runs under `bash -e`, where a bare failing command would end the
    # step before its status is read.
    f"got=0; python -c {shlex.quote(MPL_FREETYPE_FETCH)} || got=$?; "
    "if [ $got = 3 ]; then cd build/freetype-2.6.1 && "
    "make setup ansi >/dev/null && make -j2 CFLAGS='-c -O2 -fPIC' >/dev/null && "
    "mkdir -p objs/.libs && cp objs/libfreetype.a objs/.libs/ && cd ../..; "
    "elif [ $got != 0 ]; then exit $got; fi; fi"
)
QHULL_DOWNLOAD = re.compile(r"QHULL")
# matplotlib < 3.2's setup.py (and setupext.py where it moved) downloads jQuery UI 1.12.1's
# release zip from jqueryui.com into lib/matplotlib/backends/web_backend/ at build time, unless
# its jquery-ui-1.12.1/ directory is there. npm's jquery-ui 1.12.1 is the source tree, not that
# release; matplotlib's own 3.1.3 wheel on PyPI ships the release's files (the zip's 24 files:
# jquery-ui.js/.min.js, the CSS, external/jquery, images, index.html), so they are taken from
# it, where the tree's build would download them. The download was in the tree from February
# 2019 to June 2020 (#11246 to "Remove jQuery and jQuery UI"): the versions of those commits.
MPL_JQUERY_VERSIONS = {"3.0", "3.1", "3.2", "3.3"}
MPL_JQUERY_STEP = (
    "if grep -qs jquery-ui-1.12.1.zip setup.py setupext.py && "
    "[ ! -d lib/matplotlib/backends/web_backend/jquery-ui-1.12.1 ]; then "
    "env -u PIP_UPLOADED_PRIOR_TO python -m pip download --no-deps --only-binary=:all: "
    "--python-version 3.7 --platform manylinux1_x86_64 -d /tmp/mplwheel matplotlib==3.1.3 && "
    "python -c \"import glob, zipfile; z = zipfile.ZipFile(glob.glob('/tmp/mplwheel/*.whl')[0]); "
    "p = 'matplotlib/backends/web_backend/jquery-ui-1.12.1/'; "
    "[z.extract(n, '/tmp/mplwheel/x') for n in z.namelist() if n.startswith(p)]\" && "
    "cp -r /tmp/mplwheel/x/matplotlib/backends/web_backend/jquery-ui-1.12.1 "
    "lib/matplotlib/backends/web_backend/; fi"
)


def mpl_lib_steps(repo, version, qhull_download):
    """matplotlib's qhull and FreeType steps (above), where the harness downloads qhull; the
    FreeType step from 3.3, the first version whose setupext.py builds its own by default."""
    if repo != "matplotlib/matplotlib" or not qhull_download:
        return []
    if tuple(int(x) for x in version.split(".")) < (3, 3):
        return [MPL_QHULL_STEP]
    return [MPL_QHULL_STEP, MPL_FREETYPE_STEP]


def helpers_steps(repo, version, reqs):
    """The pre_install steps of astropy < 4 (above), in their order."""
    steps = []
    extras = TEST_EXTRAS.get(repo, {}).get(version)
    if extras:
        steps.append(f"python -m pip install {extras}")
    if version in HARNESS_PIP.get(repo, {}):
        pins = [r for r in reqs if req_name(r) == "setuptools" and "==" in r]
        steps.append(
            " ".join(["python -m pip install", f"pip=={HARNESS_PIP[repo][version]}", *pins])
        )
    h = AH_HELPERS.get(repo, {}).get(version)
    if h:
        steps.append(
            "python -m pip download --no-deps --no-binary :all: --no-build-isolation "
            f"-d /tmp/ah astropy-helpers=={h} && mkdir -p astropy_helpers && "
            f"tar -xzf /tmp/ah/astropy-helpers-{h}.tar.gz "
            "-C astropy_helpers --strip-components=1 --no-same-owner"
        )
    return steps


# The harness's `"packages": "environment.yml"` (conda) for xarray is the repository's
# ci/requirements/environment.yml at the instance's environment_setup_commit, applied before
# `pip_packages`. dojo has no conda: its packages that have PyPI wheels are installed from
# PyPI instead, as a conda list (before `pip_packages`, which override it by name), under
# PyPI's names. One list for every version: the union of the files at the Verified versions'
# setup commits (0.12: 1c198a19, 2022.03: d7931f90, 2022.06: 50ea159b, 2022.09: 087ebbb7);
# their differences (flox, fsspec, typing_extensions, pytest-timeout from 2022.03/2022.09,
# numpy<1.24 in 2022.09) are moot under the harness's numpy==1.23.0 pin or add an
# unused package. Left out (named in the file's header): cdms2 (conda only), cfgrib (needs
# the ecCodes C library), hdf5 (inside h5py's and netCDF4's wheels), pip, pre-commit (not
# used by the tests). Without them most optional-dependency tests are skipped (`requires
# bottleneck`, `requires sparse`), and PASS_TO_PASS lists those as passing.
CONDA_ENV_PIP = {
    "pydata/xarray": [
        "aiobotocore", "boto3", "bottleneck", "cartopy", "cftime", "dask", "distributed",
        "flox", "fsspec!=2021.7.0", "h5netcdf", "h5py", "hypothesis", "scitools-iris", "lxml",
        "matplotlib", "nc-time-axis", "netcdf4", "numba", "numbagg", "numexpr", "numpy",
        "packaging", "pandas", "pint", "pooch", "pseudonetcdf", "pydap", "pytest",
        "pytest-cov", "pytest-env", "pytest-xdist", "pytest-timeout", "rasterio", "scipy",
        "seaborn", "setuptools", "sparse", "toolz", "typing-extensions", "zarr",
    ],
    # matplotlib's environment.yml (3.5 on): the union of the files at the Verified versions'
    # setup commits (3.5: de98877e, 3.6: 73909bcb, 3.7: 0849036f), under PyPI's names; the
    # harness's pip_packages pin most runtime dependencies (numpy==1.25.2 ...) over them.
    # cairocffi is a pure wheel that loads the machine's libcairo.so.2 when the Cairo backend
    # is first used (Debian's libcairo2; pycairo would need cairo's headers to build), so the
    # `[Cairo]` tests (test_savefig_pixel_ratio[Cairo]) run where that library is installed.
    "matplotlib/matplotlib": [
        "contourpy>=1.0.1", "cycler>=0.10.0", "fonttools>=4.22.0", "importlib-resources>=3.2.0",
        "kiwisolver>=1.0.1", "numpy>=1.19", "pillow>=6.2", "pybind11>=2.6.0", "pyparsing",
        "python-dateutil>=2.1", "setuptools", "setuptools-scm", "colorspacious", "ipython",
        "ipywidgets", "numpydoc>=0.8", "packaging", "pydata-sphinx-theme", "pyyaml",
        "sphinx>=1.8.1,!=2.0.0", "sphinx-copybutton", "sphinx-gallery>=0.10", "sphinx-design",
        "mpl-sphinx-theme", "sphinxcontrib-svg2pdfconverter", "pikepdf", "coverage",
        "flake8>=3.8", "flake8-docstrings>=1.4.0", "ipykernel",
        "nbconvert[execute]!=6.0.0,!=6.0.1", "nbformat!=5.0.0,!=5.0.1", "pandas!=0.25.0",
        "psutil", "pydocstyle>=5.1.0", "pytest!=4.6.0,!=5.4.0", "pytest-cov",
        "pytest-rerunfailures", "pytest-timeout", "pytest-xdist", "tornado", "pytz", "black",
        "cairocffi",
    ],
}
CONDA_ENV_LEFT_OUT = {
    "pydata/xarray": "cdms2 (conda only), cfgrib (ecCodes C library), pre-commit",
    "matplotlib/matplotlib": (
        "pygobject, gtk3/gtk4 (GObject and GTK C "
        "libraries), pyqt (Qt), wxpython (no Linux wheels), graphviz (a C program), pre-commit"
    ),
}

# Built-in defaults of the format (envs/README.md): keys equal to these are not written.
BUILTIN = {
    "pre_install": [],
    "requirements": [],
    "install": [],
    "editable": True,
    "installer": "uv",
    "network": False,
    "env": {},
}

KEY_ORDER = [
    "python", "pre_install", "requirements_file", "requirements", "editable", "install",
    "installer", "network", "cpus", "env", "exclude_newer", "host_programs", "test_cmd", "log_parser",
    "timeout_s", "test_directives",
]

# The pre_install steps the generator adds (not the harness's own): see render().
GENERATED_PRE = set()
SYSTEM_CMD = re.compile(r"apt-get|locale-gen|/etc/")
# Debian packages of the harness's `apt-get install` lines that provide a program the tests run,
# and that program: the spec requires it on the host (`host_programs`). Only those measured to
# decide a listed test (sphinx 7.2+'s graphviz: `test_inheritance_diagram_svg_html` of 10614 is
# skipped without `dot`); matplotlib's imagemagick, ffmpeg and texlive are not listed: no
# measured instance needs them, and requiring them would fail every matplotlib preparation here.
HOST_PROGRAMS = {"graphviz": "dot"}


def req_name(req):
    """PEP 503 name of a requirement line."""
    name = re.split(r"[<>=!~;\[ ]", req.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def merge(conda, pip):
    """The conda list then `pip_packages`, one line per name, as the harness's `pip install`
    after `conda create` leaves it: a pinned pip line replaces conda's; an unpinned one does not
    (pip sees the name already satisfied and keeps conda's version)."""
    pinned = {req_name(r) for r in pip if req_name(r) != r.strip().lower()}
    have = {req_name(r) for r in conda}
    kept, seen = [], set()
    for r in conda:  # the harness's lists repeat names (scikit-learn 1.3: pytest twice)
        if req_name(r) not in pinned and req_name(r) not in seen:
            kept.append(r)
        seen.add(req_name(r))
    return kept + [r for r in pip if req_name(r) in pinned or req_name(r) not in have]


def old_setuptools(reqs):
    for r in reqs:
        m = re.fullmatch(r"setuptools\s*(==|~=)\s*(\d+)(\..*)?", r.strip())
        if m and int(m.group(2)) < 64:
            return True
    return False


def transcribe(repo, version, spec, reqs_paths):
    """One harness spec -> (table, notes): the version table and what it cannot express."""
    t, notes = {}, []
    t["python"] = spec["python"]
    if t["python"] in PYTHON_SUBSTITUTE:
        new, why = PYTHON_SUBSTITUTE[t["python"]]
        notes.append(f"substituted: python {t['python']} -> {new}: {why}")
        t["python"] = new
    pre, qhull = [], []
    for cmd in spec.get("pre_install", []):
        if SYSTEM_CMD.search(cmd):
            needed = {
                HOST_PROGRAMS[p]: p
                for p in re.findall(r"[\w.+-]+", cmd.split("install", 1)[-1])
                if "apt-get" in cmd and p in HOST_PROGRAMS
            }
            if needed:
                t["host_programs"] = needed
                notes.append(
                    f"pre_install (system, left out; host_programs requires {', '.join(needed)}): {cmd}"
                )
            else:
                notes.append(f"pre_install (system, left out): {cmd}")
        elif repo == "matplotlib/matplotlib" and QHULL_DOWNLOAD.search(cmd):
            qhull.append(cmd)
        else:
            pre.append(cmd)
    if qhull:
        notes.append(
            "substituted: pre_install's qhull download from qhull.org (unreachable) -> qhull "
            "2020.2 from PyPI's cmeel-qhull sdist where the tree's setupext.py downloads it "
            "(3.0-3.3 bundle extern/libqhull), and, where the tree's setupext.py downloads and "
            "builds FreeType 2.6.1 (3.3 on; older trees take the system's, as the harness's "
            "did), 2.6.1 from its own hosts where they answer, else 2.6.5 (crates.io's "
            "freetype-sys 0.13.1): its text images differ (RMS <= 0.15) "
            "(MPL_QHULL_STEP, MPL_FREETYPE_STEP in the generator)"
        )
    t["pre_install"] = pre
    pkgs = spec.get("packages", "")
    conda = []
    if pkgs == "requirements.txt":
        t["requirements_file"] = reqs_path(repo, version, reqs_paths[repo])
    elif pkgs == "environment.yml" and repo in CONDA_ENV_PIP:
        conda = list(CONDA_ENV_PIP[repo])
        notes.append(
            "conda environment.yml (packages = environment.yml): installed from PyPI "
            f"(CONDA_ENV_PIP in the generator) except {CONDA_ENV_LEFT_OUT[repo]}"
        )
    elif pkgs == "environment.yml":
        notes.append("conda environment.yml (packages = environment.yml): not installed")
    elif pkgs:
        conda = shlex.split(pkgs)
    # `conda create` installs a setuptools pin before pip's step, and pip_packages' sdists build
    # against it (astropy < 3: setuptools==38.2.4; MarkupSafe 1.0's setup.py imports
    # `setuptools.Feature`, gone since setuptools 46). The requirements are one pip run, so the
    # pin gets its own step first, in the venv, before them.
    first = [r for r in conda if req_name(r) == "setuptools" and "==" in r]
    gen = [f"python -m pip install {shlex.quote(r)}" for r in first]
    t["requirements"] = merge(conda, spec.get("pip_packages", []))
    if version in CONDA_SETUPTOOLS.get(repo, {}):
        t["requirements"] = merge(t["requirements"], [CONDA_SETUPTOOLS[repo][version]])
    subst = SUBSTITUTE.get(repo, {}).get(version, {})
    for i, r in enumerate(t["requirements"]):
        if req_name(r) in subst:
            new, why = subst[req_name(r)]
            t["requirements"][i] = new
            notes.append(f"substituted: {r} -> {new}: {why}")
    for req, why in ERA_PINS.get(repo, {}).get(version, []):
        t["requirements"] = merge(t["requirements"], [req])
        notes.append(
            f"substituted: unpinned {req_name(req)} -> {req}: {why} (ERA_PINS in the generator)"
        )
    gen += helpers_steps(repo, version, t["requirements"])
    gen += mpl_lib_steps(repo, version, bool(qhull))
    if repo == "matplotlib/matplotlib" and version in MPL_JQUERY_VERSIONS:
        gen.append(MPL_JQUERY_STEP)
        notes.append(
            "substituted: the build's jQuery UI 1.12.1 download from jqueryui.com "
            "(unreachable) -> the same release's files from matplotlib 3.1.3's wheel on PyPI, "
            "where the tree's setup.py downloads it (MPL_JQUERY_STEP in the generator)"
        )
    GENERATED_PRE.update(gen)
    t["pre_install"] = gen + pre
    install = spec.get("install", "")
    if version in HARNESS_PIP.get(repo, {}):
        # dojo writes `config-settings = editable_mode=compat` into the venv's pip.conf, and a
        # config setting makes pip < 25.3 build through PEP 517 (isolated, newest setuptools)
        # instead of the harness pip's `setup.py develop`: this install reads no config file.
        install = f"PIP_CONFIG_FILE=/dev/null {install}"
    if install.strip() == "python -m pip install -e .":
        t["editable"], t["install"] = True, []
    else:
        t["editable"], t["install"] = False, [install] if install else []
    if version in INSTALL_PIP.get(repo, {}):
        pin = INSTALL_PIP[repo][version]
        t["install"] = [f"python -m pip install pip=={pin}", *t["install"]]
        notes.append(
            f"substituted: pip=={pin} before the install (the venv's pip 26 has no "
            "--no-use-pep517; INSTALL_PIP in the generator)"
        )
    pip = (
        not t["editable"]
        or old_setuptools(t["requirements"])
        or repo in ("pylint-dev/pylint", "pytest-dev/pytest")
        or repo in ("matplotlib/matplotlib", "scikit-learn/scikit-learn", "astropy/astropy")
        or tuple(int(x) for x in str(t["python"]).split(".")[:2]) < (3, 7)
    )
    t["installer"] = "pip" if pip else "uv"
    t["network"] = repo == "psf/requests"
    if "nano_cpus" in spec:
        t["cpus"] = spec["nano_cpus"] // 10**9
    env = {}
    for cmd in spec.get("eval_commands", []):
        m = re.fullmatch(r"export (\w+)=(.*)", cmd.strip())
        if m:
            env[m.group(1)] = m.group(2)
        else:
            notes.append(f"eval_commands (system, left out): {cmd}")
    t["env"] = env
    if spec.get("execute_test_as_nonroot"):
        notes.append("execute_test_as_nonroot (dojo's sandbox uid is not root anyway)")
    if spec.get("no_use_env"):
        notes.append("no_use_env (conda: environment.yml applied to the base env)")
    t["test_cmd"] = spec["test_cmd"]
    if version in EXCLUDE_NEWER_VERSIONS.get(repo, {}):
        t["exclude_newer"] = EXCLUDE_NEWER_VERSIONS[repo][version]
    return t, notes


def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return toml_str(v)
    if isinstance(v, list):
        if not v:
            return "[]"
        if len(v) <= 3 and sum(len(x) for x in v) < 60:
            return "[" + ", ".join(toml_value(x) for x in v) + "]"
        return "[\n" + "".join(f"    {toml_value(x)},\n" for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(v)


def toml_str(s):
    # Literal strings keep shell quoting readable; basic strings where a ' or control char is in.
    if "'" not in s and "\n" not in s:
        return f"'{s}'" if '"' in s or "\\" in s else f'"{s}"'
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def table_text(t):
    keys = sorted(t, key=KEY_ORDER.index)
    return "".join(f"{k} = {toml_value(t[k])}\n" for k in keys)


def version_key(v):
    return [int(x) if x.isdigit() else x for x in re.split(r"[.]", v.lstrip("v"))]


def render(repo, specs, reqs_paths):
    versions = sorted(specs, key=version_key)
    tables, notes = {}, {}
    for v in versions:
        tables[v], notes[v] = transcribe(repo, v, specs[v], reqs_paths)
    # [default]: each key's most common value (first version wins a tie); a version writes a key
    # only where it differs from what it would inherit. Keys without a built-in default that some
    # versions lack (requirements_file, cpus) cannot be unset by a version: [default] gets them
    # only when every version has the same value.
    keys = sorted(set().union(*tables.values()), key=KEY_ORDER.index)
    default = {}
    for k in keys:
        vals = [repr(tables[v][k]) for v in versions if k in tables[v]]
        if k not in BUILTIN and len(vals) < len(versions):
            continue
        if k in ("requirements_file", "cpus") and len(set(vals)) > 1:
            continue
        best = max(vals, key=vals.count)
        if k == "pre_install" and any(
            c in GENERATED_PRE for v in versions for c in tables[v][k]
        ):
            # The install steps the generator adds (astropy < 4) stay in their versions' tables:
            # [default] keeps the harness's default, none.
            default[k] = []
            continue
        default[k] = next(tables[v][k] for v in versions if repr(tables[v].get(k)) == best)
    default = {k: x for k, x in default.items() if BUILTIN.get(k, object()) != x}
    if repo in EXCLUDE_NEWER:
        default["exclude_newer"] = EXCLUDE_NEWER[repo]
    default["log_parser"] = PARSERS[repo]
    default["timeout_s"] = TIMEOUT_S
    if repo == "django/django":
        default["test_directives"] = "django"
    inherited = lambda k: default.get(k, BUILTIN.get(k))  # noqa: E731
    per_version = {
        v: {k: x for k, x in tables[v].items() if inherited(k) != x} for v in versions
    }
    out = [header(repo, versions, tables, notes)]
    schema = schema_version(default, per_version)
    out.append(f"schema_version = {schema}\n")
    out.append(f'repo = "{repo}"\n\n[default]\n')
    out.append(table_text(default))
    for v in versions:
        out.append(f'\n[versions."{v}"]\n')
        for n in notes[v]:
            if n.startswith("substituted: "):
                out.append(f"# {n}\n")
            else:
                out.append(f"# not expressible: {n}\n")
        out.append(table_text(per_version[v]))
    text = "".join(out)
    check_roundtrip(repo, text, schema, default, per_version)
    return text, tables, notes


def schema_version(default, per_version):
    """The lowest schema the file needs: 5 for `host_programs`, 4 for `exclude_newer`, else 3
    (`pre_install` etc.)."""
    tables = [default, *per_version.values()]
    if any("host_programs" in t for t in tables):
        return 5
    return 4 if any("exclude_newer" in t for t in tables) else 3


def header(repo, versions, tables, notes):
    name = NAMES[repo]
    lines = [
        f"# SWE-bench Verified / Lite repository {repo}. GENERATED by",
        "# scripts/gen-envs-from-harness.py from the official harness specs",
        "# (MAP_REPO_VERSION_TO_SPECS_PY in SWE-bench's swebench/harness/constants/python.py):",
        "# edit the generator, not this file. One table per harness version; a version the",
        "# harness does not list gets only [default]. Coverage on this machine: envs/COVERAGE.md.",
    ]
    subst = sorted({n for v in versions for n in notes[v] if n.startswith("substituted: ")})
    all_notes = sorted(
        {n for v in versions for n in notes[v] if not n.startswith("substituted: ")}
    )
    def section(heading, items, prefix=""):
        """A header section: its heading, then each note with the versions that have it."""
        if not items:
            return
        lines.extend(["#", *heading])
        for n in items:
            vs = [v for v in versions if n in notes[v]]
            lines.append(f"#   - {n[len(prefix):]}")
            lines.append(f"#     versions: {', '.join(vs)}")

    section(
        [
            "# SUBSTITUTED (what the harness's image has cannot be had here: no network but the",
            "# package registries, no conda; each version's table repeats its own):",
        ],
        subst,
        "substituted: ",
    )
    section(
        [
            "# NOT EXPRESSIBLE in the spec format (the official image has it, dojo does not;",
            "# the format has no key for it, so only this comment says so):",
        ],
        all_notes,
    )
    if name in ("scikit-learn", "sympy", "requests", "astropy"):
        lines.append("#")
        lines.append("# The harness's conda package list (`packages`) is installed from PyPI here,")
        lines.append("# before `pip_packages` (which override it by name): resolved by pip, not conda.")
    if repo == "psf/requests":
        lines.append("#")
        lines.append("# network = true: requests' timeout tests (test_connect_timeout,")
        lines.append("# test_total_timeout_connect) need a routable address that never answers. WARNING:")
        lines.append("# the sandbox (agent commands and tests) then shares the host's network namespace;")
        lines.append("# never run it on a machine whose reachable addresses matter.")
    lines.append("")
    return "\n".join(lines) + "\n"


def check_roundtrip(repo, text, schema, default, per_version):
    """The file must parse back to what was meant (the hand-written emitter is checked here)."""
    doc = tomllib.loads(text)
    assert doc["repo"] == repo and doc["schema_version"] == schema, repo
    assert doc["default"] == default, (repo, doc["default"], default)
    for v, t in per_version.items():
        assert doc["versions"][v] == t, (repo, v, doc["versions"][v], t)


HOST_PYTHON = "3.11"
# The interpreters a machine of this project's kind has: the system's CPython 3.11 and pyenv's
# CPython 3.6-3.13 under /root/.pyenv/versions (which dojo finds: envs/README.md, Interpreters).
# 2.7 and 3.5 are not there.
HOST_PYTHONS = ["3.6", "3.7", "3.8", "3.9", "3.10", "3.11", "3.12", "3.13"]

# Whether the version's pins would install and run on CPython 3.11 if a task overrode
# `python = "3.11"` (`env` of the task line). A judgement from the pins and the projects'
# supported Pythons, NOT measured; (repo, predicate on the version, text).
def v(x):
    return version_key(x)


OVERRIDE_GUESS = [
    ("astropy/astropy", lambda x: v(x) < [3], "no: numpy==1.16.0, pytest 3.3 (no 3.11 wheels, pre-3.11 code)"),
    ("astropy/astropy", lambda x: v(x) < [5], "unlikely: astropy < 5 C sources against numpy 1.25 on 3.11"),
    ("astropy/astropy", lambda x: True, "likely: pins have 3.11 wheels (numpy 1.25.2, pyerfa 2.0.0.3)"),
    ("django/django", lambda x: v(x) < [3], "no: Django < 3 predates 3.10's removals (collections ABCs, asyncio)"),
    ("django/django", lambda x: v(x) < [4], "unlikely: Django 3.x supports up to 3.9/3.10"),
    ("django/django", lambda x: True, "likely: Django 4.x runs on 3.11 (officially from 4.1.3)"),
    ("matplotlib/matplotlib", lambda x: True, "no: the apt packages and FreeType 2.6.1 stay missing"),
    ("mwaskom/seaborn", lambda x: v(x) < [0, 12], "unlikely: pandas==1.3.5 has no 3.11 wheel (source build)"),
    ("mwaskom/seaborn", lambda x: True, "likely: pins have 3.11 wheels"),
    ("pallets/flask", lambda x: True, "likely: pure Python, pins install on 3.11"),
    ("psf/requests", lambda x: v(x) < [2, 26], "unlikely: old bundled urllib3 uses collections ABCs removed in 3.10"),
    ("psf/requests", lambda x: True, "likely (the network caveat stays)"),
    ("pydata/xarray", lambda x: True, "partly: the pip pins install, environment.yml's test dependencies do not"),
    ("pylint-dev/pylint", lambda x: v(x) < [2, 15], "unlikely: pylint/astroid before 2.15 do not support 3.11"),
    ("pylint-dev/pylint", lambda x: True, "likely"),
    ("pytest-dev/pytest", lambda x: v(x) < [6, 2], "unlikely: pytest < 6.2.5 breaks on 3.10+"),
    ("pytest-dev/pytest", lambda x: True, "likely: pure Python pins"),
    ("scikit-learn/scikit-learn", lambda x: True, "no: numpy==1.19.2 / scipy==1.5.2 have no 3.11 build"),
    ("sphinx-doc/sphinx", lambda x: v(x) < [5], "unlikely: old Sphinx and its pins on 3.11; `tox -epy39` must become py311"),
    ("sphinx-doc/sphinx", lambda x: True, "possible: `tox --current-env -epy39` must become -epy311"),
    ("sympy/sympy", lambda x: v(x) < [1, 9], "unlikely: SymPy < 1.9 predates 3.10 (collections ABCs)"),
    ("sympy/sympy", lambda x: True, "likely: pure Python (mpmath 1.3.0)"),
]


def blockers(t, vnotes):
    """Why a version cannot build/run here as shipped (empty: it can, from the spec)."""
    out = []
    if t["python"] not in HOST_PYTHONS:
        if version_key(t["python"]) < [3, 7]:
            out.append(f"interpreter {t['python']} (not here; uv has no managed build before 3.7)")
        else:
            out.append(f"interpreter {t['python']} (not here; a uv-managed one needs GitHub or a mirror)")
    if any("environment.yml" in n for n in vnotes):
        out.append("conda (environment.yml)")
    if any("apt-get" in n for n in vnotes):
        out.append("apt packages")
    elif any("system" in n for n in vnotes):
        out.append("system locale setup")
    if any("wget" in c for c in t.get("pre_install", [])):
        out.append("network at build (qhull from qhull.org)")
    if t.get("network"):
        out.append("tests need a routable network (network = true, see envs/README.md)")
    return out


# Instances per repository in SWE-bench Verified (data/SWE-bench_Verified/test.parquet of the
# SWE-bench repository at 52b72b35): what the measured section counts against.
VERIFIED = {
    "astropy/astropy": 22, "django/django": 231, "matplotlib/matplotlib": 34,
    "mwaskom/seaborn": 2, "pallets/flask": 1, "psf/requests": 8, "pydata/xarray": 22,
    "pylint-dev/pylint": 10, "pytest-dev/pytest": 19, "scikit-learn/scikit-learn": 32,
    "sphinx-doc/sphinx": 44, "sympy/sympy": 75,
}


def measured_section(envs_dir):
    """COVERAGE.md's measured part: envs/measured.jsonl (one row per instance, written by
    scripts/validation-table.py --jsonl) with the causes of envs/causes.json."""
    import statistics

    path = os.path.join(envs_dir, "measured.jsonl")
    if not os.path.exists(path):
        return []
    rows = []
    for n, line in enumerate(open(path), 1):
        if line.strip():
            r = json.loads(line)
            if r.get("schema_version") != 1:
                sys.exit(f"{path}:{n}: schema_version {r.get('schema_version')!r}, expected 1")
            rows.append(r)
    with open(os.path.join(envs_dir, "causes.json")) as f:
        causes = json.load(f)
    if causes.get("schema_version") != 1:
        sys.exit(f"{envs_dir}/causes.json: schema_version {causes.get('schema_version')!r}, expected 1")
    causes = causes.get("instances", {})

    def kind(r):
        return causes.get(r["instance_id"], {}).get("kind", "unexplained")

    def kinds(rs):
        c = {}
        for r in rs:
            if not r["validates"]:
                c[kind(r)] = c.get(kind(r), 0) + 1
        return ", ".join(f"{k} {n}" for k, n in sorted(c.items())) or "-"

    def cells(rs):
        """measured | validate | official agrees | not validating, by kind"""
        ag = [r["official_agrees"] for r in rs if r["official_agrees"] is not None]
        return f"{len(rs)} | {sum(r['validates'] for r in rs)} | {sum(ag)}/{len(ag)} | {kinds(rs)}"

    def median(xs):
        xs = [x for x in xs if x is not None]
        return f"{statistics.median(xs):.1f}" if xs else "–"

    ver = [r for r in rows if r["dataset"] == "verified"]
    ok = sum(r["validates"] for r in ver)
    agree = [r["official_agrees"] for r in ver if r["official_agrees"] is not None]
    lines = [
        "## Measured on this machine (`envs/measured.jsonl`)",
        "",
        "One row per instance, from `dojo validate --out` runs (`scripts/validation-table.py",
        "--jsonl`; the rows' evidence and each batch's build, load and times are in",
        "`envs/VALIDATION.md`), official grading (`swebench` 5.0.2) run on dojo's own logs. Why an",
        "instance does not validate is `envs/causes.json`, read from its logs; its *kind* says what",
        "a Docker-free runner here could do about it (that file's `kinds`).",
        "",
        f"**SWE-bench Verified: {len(ver)} of {sum(VERIFIED.values())} measured, {ok} validate"
        f" ({100 * ok / max(len(ver), 1):.1f}% of those measured); official grading agrees on"
        f" {sum(agree)}/{len(agree)}.**",
        "",
        "| repository | Verified | measured | validate | official agrees | not validating, by kind |",
        "|---|---|---|---|---|---|",
    ]
    for repo, n in VERIFIED.items():
        lines.append(f"| {repo} | {n} | {cells([r for r in ver if r['repo'] == repo])} |")
    lines.append(f"| **all** | {sum(VERIFIED.values())} | {cells(ver)} |")
    lines += [
        "",
        "Per repository version (Verified):",
        "",
        "| repository | version | python | measured | validate | prepare s (median) | runs s (median) | not validating |",
        "|---|---|---|---|---|---|---|---|",
    ]
    groups = {}
    for r in ver:
        groups.setdefault((r["repo"], r["version"]), []).append(r)
    for (repo, v), rs in sorted(groups.items(), key=lambda g: (g[0][0], version_key(g[0][1]))):
        pys = ", ".join(sorted({r["python"] for r in rs if r["python"] != "?"})) or "?"
        bad = "; ".join(
            f"{r['instance_id'].rsplit('-', 1)[1]} ({kind(r)})" for r in rs if not r["validates"]
        )
        lines.append(
            f"| {repo} | {v} | {pys} | {len(rs)} | {sum(r['validates'] for r in rs)} "
            f"| {median(r['prepare_s'] for r in rs)} | {median(r['runs_s'] for r in rs)} | {bad or '-'} |"
        )
    lines.append("")
    for ds in sorted({r["dataset"] for r in rows} - {"verified"}):
        rs_ds = [r for r in rows if r["dataset"] == ds]
        lines += [
            f"SWE-bench {ds} (instances measured here, not the whole split):",
            "",
            "| repository | measured | validate | official agrees | not validating, by kind |",
            "|---|---|---|---|---|",
        ]
        for repo in sorted({r["repo"] for r in rs_ds}):
            lines.append(f"| {repo} | {cells([r for r in rs_ds if r['repo'] == repo])} |")
        lines.append("")
    why = [r for r in ver if not r["validates"]]
    if why:
        lines += ["The instances that do not validate:", ""]
        for r in sorted(why, key=lambda r: (kind(r), r["instance_id"])):
            c = causes.get(r["instance_id"], {}).get("cause", "not read yet: " + (r["why_not"] or ""))
            lines.append(f"- `{r['instance_id']}` ({kind(r)}): {c}")
        lines.append("")
    return lines


def coverage(per_repo, envs_dir):
    top = ["# Environment coverage: SWE-bench Verified and Lite repositories", ""]
    top += measured_section(envs_dir)
    lines = [
        "## From the specs (not measured)",
        "",
        "Generated by `scripts/gen-envs-from-harness.py`",
        "together with the specs it describes (`envs/<repo>.toml`); no environment was built for",
        "this table. It says, per repository version of the harness, what the version needs and",
        "whether it can run on a machine of this project's kind, whose interpreters are the system's",
        f"CPython {HOST_PYTHON} and pyenv's CPython {HOST_PYTHONS[0]}-{HOST_PYTHONS[-1]} (found by dojo, see",
        "`envs/README.md`), and which has no conda and no internet beyond the package registries.",
        "Versions are the harness's (MAP_REPO_VERSION_TO_SPECS_PY); not every one has Verified or",
        "Lite instances, and the instance counts per version are not in this table.",
        "",
        "- *Here, as shipped*: the spec asks for the host's interpreter and nothing the format cannot",
        "  express. It still has to build and validate: the measured section above has what did.",
        f"- *python = {HOST_PYTHON} override*: a guess at whether the version's pinned packages install",
        f"  and its suite runs on {HOST_PYTHON} when a task line sets `\"env\": {{\"python\": \"{HOST_PYTHON}\"}}`",
        "  (not the harness's environment: grading may differ).",
        "- *Not expressible* in the spec format (conda `environment.yml`, `apt-get`, locale",
        "  generation): each spec file's header and its version tables name the left-out commands.",
        "",
    ]
    head_len = len(lines)
    total = here = 0
    for repo, (tables, notes) in per_repo.items():
        lines += [f"## {repo} (`envs/{NAMES[repo]}.toml`)", ""]
        lines += [
            f"| version | python | installer | here, as shipped | why not | python = {HOST_PYTHON} override (guess) |",
            "|---|---|---|---|---|---|",
        ]
        for ver, t in tables.items():
            b = blockers(t, notes[ver])
            guess = next(g for r, f, g in OVERRIDE_GUESS if r == repo and f(ver))
            if t["python"] == HOST_PYTHON:
                guess = "(is 3.11)"
            total += 1
            here += not b
            lines.append(
                f"| {ver} | {t['python']} | {t['installer']} | {'yes' if not b else 'no'} "
                f"| {'; '.join(b) or '-'} | {guess} |"
            )
        lines.append("")
    summary = [
        f"In all: {here} of {total} repository versions can be built here as shipped (from the specs).",
        "",
        "| repository | versions | pythons | here, as shipped |",
        "|---|---|---|---|",
    ]
    for repo, (tables, notes) in per_repo.items():
        pys = sorted({t["python"] for t in tables.values()}, key=version_key)
        ok = [ver for ver, t in tables.items() if not blockers(t, notes[ver])]
        summary.append(
            f"| {repo} | {len(tables)} | {', '.join(pys)} | {', '.join(ok) or 'none'} |"
        )
    lines[head_len:head_len] = summary + [""]
    # The spec-derived repositories are level-3 sections under "From the specs".
    lines = [("#" + l if l.startswith("## ") and "(`envs/" in l else l) for l in lines]
    return "\n".join(top + lines)


def load_harness(path):
    spec = importlib.util.spec_from_file_location("swebench_harness_specs", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "harness",
        nargs="?",
        default=os.path.join(root, "..", "shared", "reference", "swebench-harness-specs.py"),
    )
    ap.add_argument("--out", default=os.path.join(root, "envs"))
    ap.add_argument("--check", action="store_true", help="compare, write nothing")
    a = ap.parse_args()
    h = load_harness(a.harness)
    stale, per_repo, outputs = [], {}, []
    for repo, name in NAMES.items():
        text, tables, notes = render(
            repo, h.MAP_REPO_VERSION_TO_SPECS_PY[repo], h.MAP_REPO_TO_REQS_PATHS
        )
        per_repo[repo] = (tables, notes)
        outputs.append((os.path.join(a.out, f"{name}.toml"), text))
    outputs.append((os.path.join(a.out, "COVERAGE.md"), coverage(per_repo, a.out)))
    for path, text in outputs:
        if a.check:
            old = open(path).read() if os.path.exists(path) else None
            if old != text:
                stale.append(path)
            continue
        with open(path, "w") as f:
            f.write(text)
        print(f"wrote {path}")
    if stale:
        print("stale (re-run the generator):", *stale, sep="\n  ", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
