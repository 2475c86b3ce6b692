#!/usr/bin/env bash
# A CUDA 13.0 toolkit from PyPI, for building dojo with `--features cuda` without a system
# install (no NVIDIA apt repository, no root). NVIDIA publishes nvcc, the headers and the
# libraries as wheels; this unpacks the pinned ones into DIR and prints the environment to build
# and run with:
#
#   eval "$(bash scripts/cuda-toolkit.sh ~/.local/dojo-cuda)"
#   cargo build --release -p dojo-cli --features cuda
#   target/release/dojo serve --device cuda
#
# Why 13.0 (Update 2): candle's kernels are compiled to PTX, which the driver compiles further
# when they load, and a driver only takes PTX from a toolkit no newer than itself. 13.0 is what
# every CUDA 13 driver (580 and later) runs; newer pins would need newer drivers. (cudarc 0.19,
# candle 0.11's CUDA layer, knows 11.4 to 13.4; a 13.4 set from PyPI built dojo here as well.)
#
# The driver (libcuda.so.1) comes with the GPU's kernel module, never from PyPI. A binary built
# with `--features cuda` links it, so it only starts where the NVIDIA driver is installed; the
# CPU build is the one to use elsewhere. To *build* on a machine without the driver, this script
# writes a link-only libcuda.so into DIR/lib/stubs, as the toolkit's own stubs directory does:
# every function in it returns CUDA_ERROR_NO_DEVICE.
set -euo pipefail
dir="${1:?usage: cuda-toolkit.sh DIR}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
py="${DOJO_PYTHON:-python3}"
cu="$dir/nvidia/cu13"
if [ ! -x "$cu/bin/nvcc" ]; then
  wheels="$dir/wheels"
  "$py" -m pip download --quiet --disable-pip-version-check --no-deps -d "$wheels" \
    nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88 \
    nvidia-cuda-runtime==13.0.96 nvidia-cuda-nvrtc==13.0.88 nvidia-cuda-cccl==13.0.85 \
    nvidia-cublas==13.1.0.3 nvidia-curand==10.4.0.35 >&2
  "$py" - "$wheels" "$dir" <<'EOF'
import sys, zipfile, pathlib, os
wheels, dest = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
for whl in sorted(wheels.glob("*.whl")):
    with zipfile.ZipFile(whl) as z:
        for info in z.infolist():
            out = z.extract(info, dest)
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                os.chmod(out, mode)
EOF
  rm -rf "$wheels"
fi
# The linker wants unversioned names; the wheels carry only the versioned ones.
for lib in "$cu"/lib/lib*.so.*; do
  base="${lib##*/}"
  ln -sf "$base" "$cu/lib/${base%%.so.*}.so"
done
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
  mkdir -p "$cu/lib/stubs"
  # Every driver entry point cuda.h declares, after the preprocessor has applied its versioned
  # names (cuCtxCreate -> cuCtxCreate_v4 ...), as a function reporting "no device".
  gcc -E -P -I"$cu/include" -x c "$cu/include/cuda.h" \
    | grep -oE 'CUresult +(cu[A-Za-z0-9_]+) *\(' | sed -E 's/CUresult +//; s/ *\($//' | sort -u \
    | awk '{print "int " $1 "(void) { return 100; }"}' >"$cu/lib/stubs/libcuda-stub.c"
  gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$cu/lib/stubs/libcuda.so" "$cu/lib/stubs/libcuda-stub.c"
  echo "cuda-toolkit: no NVIDIA driver here; wrote a link-only libcuda.so (the binary will start only where the driver is installed)" >&2
fi
echo "export CUDA_HOME='$cu'"
echo "export PATH='$cu/bin':\"\$PATH\""
echo "export LD_LIBRARY_PATH='$cu/lib':\"\${LD_LIBRARY_PATH:-}\""
# candle's kernels are compiled for one architecture; it asks nvidia-smi, or takes this.
if ! command -v nvidia-smi >/dev/null; then
  echo "export CUDA_COMPUTE_CAP=\"\${CUDA_COMPUTE_CAP:-90}\""
fi
