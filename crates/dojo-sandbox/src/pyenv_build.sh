# The environment build (BUILD_SCRIPT in pyenv.rs), run inside the build sandbox as
# `bash -c SCRIPT dojo-env-build UV PYTHON EDITABLE(0|1) INSTALLER(uv|pip) REQUIREMENT...`.
set -euo pipefail
# Whether the venv's pip builds /testbed's editable install through PEP 660 (see pip.conf below).
NEEDS_COMPAT='import os, re, sys, pip
v = tuple(int(x) for x in re.match(r"(\d+)\.(\d+)", pip.__version__).groups())
pep660 = v >= (25, 3) or (v >= (22, 1) and os.path.exists("/testbed/pyproject.toml"))
sys.exit(0 if pep660 else 1)'

# The project's `[build-system] requires`, a line each (nothing where none can be read): TOML
# through tomllib (3.11+) or the copy pip vendors (tomli from pip 21.2, toml before).
BUILD_REQUIRES='import io
try:
    import tomllib as toml
except ImportError:
    try:
        from pip._vendor import tomli as toml
    except ImportError:
        from pip._vendor import toml
with io.open("/testbed/pyproject.toml", encoding="utf-8") as f:
    data = toml.loads(f.read())
for r in data.get("build-system", {}).get("requires", []):
    print(r)'

# Moves each up-to-date .pyc under a tree (argv[2]) to a new source timestamp (argv[1]): the
# header's source mtime, at a fixed offset (PEP 3147/552: after the magic, and after the flags
# from 3.7; hash-based .pyc files are left alone), is rewritten where it matches the source's
# mtime now, and the source is given the new one. Exactly what recompiling would write, without
# the minutes of compiling. Runs under every interpreter the specs name (2.7 to 3.13).
RESTAMP='import os, struct, sys
t, root = int(sys.argv[1]), sys.argv[2]
try:
    from importlib.util import source_from_cache
except ImportError:
    def source_from_cache(p):
        return p[:-1]
at = 8 if sys.version_info >= (3, 7) else 4
for d, _, names in os.walk(root):
    for n in names:
        if not n.endswith(".pyc"):
            continue
        pyc = os.path.join(d, n)
        if os.path.islink(pyc):
            continue
        try:
            src = source_from_cache(pyc)
            if os.path.islink(src):
                continue
            mtime = int(os.stat(src).st_mtime) & 0xFFFFFFFF
        except (ValueError, OSError):
            continue
        with open(pyc, "r+b") as f:
            head = f.read(at + 4)
            if len(head) < at + 4 or (at == 8 and head[4:8] != b"\0\0\0\0"):
                continue
            if struct.unpack("<I", head[at:at + 4])[0] != mtime:
                continue
            f.seek(at)
            f.write(struct.pack("<I", t))
        os.utime(src, (t, t))'

UV="$1"; PY="$2"; EDITABLE="$3"; INSTALLER="$4"; shift 4
# Each step named on stderr before it runs: a failed build's error names the last one
# (pyenv.rs, `failed_step`).
step() { echo "@@DOJO_BUILD_STEP $*" >&2; }
trap 'rm -rf /venv/.dojo-uv' EXIT
# Byte-compiled at install, as pip (the harness's installer) does: a module compiled later, at
# import under a test suite's `filterwarnings = error`, turns its SyntaxWarnings into errors
# (flask 2.0's blinker 1.4: `invalid escape sequence`), where the harness's image had a .pyc.
# uv's compiler script needs Python >= 3.7 (py_compile.PycInvalidationMode): older interpreters
# compile the venv's site-packages with their own compileall at the end instead.
export UV_LINK_MODE=copy UV_NO_PROGRESS=1
if "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 7))'; then
  export UV_COMPILE_BYTECODE=1; COMPILE_AFTER=
else
  COMPILE_AFTER=1
fi
if [ "$INSTALLER" = pip ]; then SEED=--seed; else SEED=; fi
# C and C++ compilations through ccache where the host has it (Debian's /usr/lib/ccache
# wrappers, found before the compilers on PATH): every instance of a version builds the same
# extension sources at the same paths (/testbed, /venv), so all but the first build of a
# version hit the cache. ccache keys on the preprocessed source, flags and compiler, so a hit
# is the object the compiler would make; Cython's translation is not cached.
if [ -n "${DOJO_CCACHE:-}" ] && [ -x /usr/lib/ccache/gcc ]; then
  mkdir -p "$DOJO_CCACHE"
  # (The working directory, in the key by default for -g builds, is /testbed for all.)
  export CCACHE_DIR="$DOJO_CCACHE" CCACHE_NOHASHDIR=1 PATH="/usr/lib/ccache:$PATH"
fi
step "creating the venv (uv venv, Python $PY)"
"$UV" venv -q --allow-existing $SEED --python "$PY" /venv
if [ -n "${DOJO_EXCLUDE_NEWER:-}" ]; then
  # After seeding: the newest pip is the one with --uploaded-prior-to (pip >= 26).
  export UV_EXCLUDE_NEWER="$DOJO_EXCLUDE_NEWER" PIP_UPLOADED_PRIOR_TO="$DOJO_EXCLUDE_NEWER"
  if [ "$INSTALLER" = pip ]; then
    step "checking pip for exclude_newer"
    if ! /venv/bin/python -m pip install --help | grep -q -- --uploaded-prior-to; then
      echo "exclude_newer needs pip >= 26 (--uploaded-prior-to), which needs Python >= 3.9; this venv has $(/venv/bin/python -m pip --version)" >&2
      exit 1
    fi
    /venv/bin/python -m pip install -q --force-reinstall setuptools wheel
  fi
fi
# Build backends such as setuptools-scm run git at /testbed, whose .git belongs to another uid,
# and they strip GIT_* variables first: a global config through XDG_CONFIG_HOME survives that.
mkdir -p /venv/etc/git && printf '[safe]\n\tdirectory = *\n' > /venv/etc/git/config
export XDG_CONFIG_HOME=/venv/etc
export VIRTUAL_ENV=/venv PATH="/venv/bin:$PATH"
if [ -n "${DOJO_PRE_INSTALL:-}" ]; then
  step "pre_install commands"
  (cd /testbed && bash -euo pipefail -c "$DOJO_PRE_INSTALL")
  # The harness's pre_install edits tracked files too (sphinx: `sed -i 's/pytest/pytest -rA/'
  # tox.ini`) and its image keeps the edits: note which files, so that the environment keeps
  # them (pyenv::keep_tree) and sandbox diffs start from them.
  if git -C /testbed rev-parse -q --verify HEAD >/dev/null 2>&1; then
    git -C /testbed --no-optional-locks diff --name-only -z > /tmp/dojo-pre-install-files
  fi
fi
inst() {
  if [ "$INSTALLER" = pip ]; then /venv/bin/python -m pip install -q "$@";
  else "$UV" pip install -q --python /venv/bin/python "$@"; fi
}
if [ "$INSTALLER" = pip ] && /venv/bin/python -c "$NEEDS_COMPAT"; then
  # The harness's pip (2023) installed editables with `setup.py develop`: a path entry for
  # /testbed. pip >= 25.3 always asks the backend's build_editable, and setuptools then installs
  # an import-hook finder for flat layouts, through which astroid cannot map /testbed files to
  # modules. Its compat mode writes the path entry again; in the venv's own pip.conf, so the eval
  # script's reinstall in grading sandboxes gets it too. Only where pip would use PEP 660: pip
  # 22.1-25.2 still runs `setup.py develop` for a project without pyproject.toml, unless given a
  # config setting, which switches it to an isolated PEP 517 build with today's setuptools.
  printf '[install]\nconfig-settings = editable_mode=compat\n' > /venv/pip.conf
fi
if [ "$#" -gt 0 ]; then step "installing the requirements"; inst "$@"; fi
if [ "$EDITABLE" = 1 ]; then
  step "installing the project editable (/testbed)"
  if [ "$INSTALLER" = pip ]; then
    # A build backend pinned below setuptools 64 has no build_editable; old pip then ran
    # `setup.py develop` with the venv's setuptools, which is what building without isolation
    # does now.
    if ! log=$(/venv/bin/python -m pip install -q -e /testbed 2>&1); then
      if grep -q build_editable <<<"$log"; then
        echo "dojo: the project's build backend has no build_editable; installing it editable with the venv's setuptools (no build isolation), as the harness's pip fell back to setup.py develop" >&2
        /venv/bin/python -m pip install -q --no-build-isolation -e /testbed
      else
        printf '%s\n' "$log" >&2
        exit 1
      fi
    fi
  else
    inst -e /testbed
  fi
fi
# Install commands may call `dojo_pip_install ARG...`: the environment's own installer with
# its settings (exclude_newer, the cache), as requirements are installed. dojo-task moves an
# eval script's pip install of requirement specifiers there (its eval_script.rs).
dojo_pip_install() { inst "$@"; }
export -f inst dojo_pip_install
export INSTALLER UV
if [ -n "${DOJO_INSTALL:-}" ]; then step "install commands"; cd /testbed && bash -euo pipefail -c "$DOJO_INSTALL"; fi
if [ "$INSTALLER" = pip ] && [ -f /testbed/pyproject.toml ]; then
  # An eval script's reinstall at grading runs offline without build isolation (eval_script.rs
  # in dojo-task): it builds with what the venv holds, so the project's build requirements
  # (astropy's extension-helpers, seaborn's flit_core) must be in it or a patch to compiled
  # sources is never compiled. Added where missing, never changing what is installed (the
  # installed versions are constraints); one that conflicts with them is left out, said here.
  step "keeping the project's build requirements for an offline reinstall"
  /venv/bin/python -m pip list --format=freeze --exclude-editable 2>/dev/null \
    | grep -E '^[A-Za-z0-9_.-]+==' > /tmp/dojo-installed.txt || true
  if /venv/bin/python -c "$BUILD_REQUIRES" > /tmp/dojo-build-requires.txt \
    && [ -s /tmp/dojo-build-requires.txt ] \
    && ! /venv/bin/python -m pip install -q -c /tmp/dojo-installed.txt \
      -r /tmp/dojo-build-requires.txt >/dev/null 2>&1; then
    while IFS= read -r req; do
      if ! log=$(/venv/bin/python -m pip install -q -c /tmp/dojo-installed.txt "$req" 2>&1); then
        echo "dojo: build requirement left out (the reinstall may need the network): $req: $(tail -n 1 <<<"$log")" >&2
      fi
    done < /tmp/dojo-build-requires.txt
  fi
fi
if [ -n "$COMPILE_AFTER" ]; then
  # (A file the interpreter cannot compile stays uncompiled, as with pip.)
  /venv/bin/python -m compileall -q /venv/lib/python*/site-packages >/dev/null 2>&1 || true
fi
if [ -s /tmp/dojo-pre-install-files ]; then
  # Their final content, as a patch over the base: the diff base of sandboxes (patch.rs).
  cp /tmp/dojo-pre-install-files /venv/.dojo-tree-changed
  xargs -0 git -C /testbed --no-optional-locks diff --binary --no-color --no-ext-diff \
    --no-renames -- < /tmp/dojo-pre-install-files > /venv/.dojo-tree-base.diff
fi
# The harness's interpreter is a conda environment: a whole installation, whose prefix Python
# finds from the binary's resolved path, so a symlink to it elsewhere (tox-current-env's
# .tox/py39/bin/python -> sys.executable) still imports the environment's packages. A venv is
# found only through the pyvenv.cfg next to the path the interpreter was started as, so through
# such a link its site-packages were gone. Give the venv the same property: bin/python is a copy
# of the interpreter (resolving a link to it ends here), pyvenv.cfg's home is .dojo-base/bin, an
# installation holding a copy of the base's standard library whose site-packages is the venv's
# (Python < 3.11 takes the prefix from the home of the pyvenv.cfg beside the resolved binary),
# and lib/pythonX.Y links the standard library too (3.11+ look for it beside the resolved
# binary). Started as /venv/bin/python, it is the same venv as before (sys.prefix = /venv).
step "making the venv's interpreter self-contained"
real="$(readlink -f /venv/bin/python)"
if [ "$real" != /venv/bin/python ]; then
  std="$(/venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')"
  inc="$(/venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("include"))')"
  ver="${std##*/}"
  base=/venv/.dojo-base
  mkdir -p "$base/bin" "$base/lib/$ver" "/venv/lib/$ver"
  for e in "$std"/*; do
    n="${e##*/}"
    case "$n" in site-packages|dist-packages|EXTERNALLY-MANAGED) continue ;; esac
    # Copied, not linked: a module's resolved path must stay under the standard library's
    # (astroid's `is_standard_module` compares `realpath(module.__file__)` with sysconfig's
    # `stdlib`; through links it left it, and hashlib was not standard). Identical across
    # environments of one interpreter (and the two copies of one), the copies are stored once
    # (dojo-cache's objects).
    cp -a "$e" "$base/lib/$ver/$n"
    [ -e "/venv/lib/$ver/$n" ] || [ -L "/venv/lib/$ver/$n" ] || cp -a "$e" "/venv/lib/$ver/$n"
  done
  ln -s "/venv/lib/$ver/site-packages" "$base/lib/$ver/site-packages"
  # Debian's Python outside a venv reads <prefix>/lib/python3/dist-packages instead.
  if [ -d "${std%/*}/python3/dist-packages" ] && [ ! -e /venv/lib/python3 ]; then
    mkdir -p /venv/lib/python3 && ln -s "/venv/lib/$ver/site-packages" /venv/lib/python3/dist-packages
  fi
  if [ -d "$inc" ]; then mkdir -p "$base/include" && ln -s "$inc" "$base/include/${inc##*/}"; fi
  ln -s "$real" "$base/bin/${real##*/}"
  # A relocatable interpreter (uv's) finds libpython at $ORIGIN/../lib.
  for l in "${real%/bin/*}"/lib/libpython*; do
    if [ -e "$l" ] && [ ! -e "/venv/lib/${l##*/}" ]; then ln -s "$l" /venv/lib/; fi
  done
  rm /venv/bin/python && cp "$real" /venv/bin/python
  # The installation itself stays named (Python ignores the key): sandboxes show it (visible.rs).
  home="$(sed -n 's/^home = //p' /venv/pyvenv.cfg)"
  sed -i "s|^home = .*|home = $base/bin|" /venv/pyvenv.cfg
  printf 'dojo-interpreter-home = %s\n' "$home" >> /venv/pyvenv.cfg
fi
chmod -R a+rX /venv
# One timestamp for every file of the venv, so that the files environments have in common
# (every package but the project) are identical in content *and* metadata, and the cache stores
# them once (dojo-cache's share.rs). Compiled files stay valid: their headers move with their
# sources. 1980-01-02: zip's epoch and a day, so a wheel built from the venv still packs it.
step "giving the venv's files one timestamp"
/venv/bin/python -c "$RESTAMP" 315619200 /venv
find /venv -type f -exec touch -m -d @315619200 {} +
