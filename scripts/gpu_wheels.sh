#!/usr/bin/env bash
# The GPU check for hosts that have no SGLang and reach no package registry (the GPU
# machines this project can borrow: Python 3.12, PyTorch 2.11 for CUDA 13, Triton,
# numpy, transformers; at most 64 MiB travels with the working tree, 10 minutes a
# command). The wheels travel in .gpu-wheels/ (ignored by git).
#
#   scripts/gpu_wheels.sh            here: fetch SGLang 0.5.17's wheel for Python 3.12,
#                                    this package's wheel and what the check imports
#                                    that the image lacks into .gpu-wheels/; prints
#                                    each size and the total (at most 64 MiB)
#   scripts/gpu_wheels.sh --check    here and in CI (test/test_gpu_carry.py): the list
#                                    resolves for that platform, fits, installs with
#                                    --no-index, and the check runs (--dry) in a fresh
#                                    environment of torch, the image's packages and
#                                    the carry; no GPU
#   scripts/gpu_wheels.sh --run      on the GPU host, with .gpu-wheels carried: installs
#                                    the wheels (pip --no-index --no-deps --target) and
#                                    runs scripts/gpu_lean_check.py: one table, also in
#                                    $OUT/gpu_lean_check.txt; 8 minutes at most
#
# Downloads are kept in ~/.cache/sglang-pd-lean/gpu-wheels (SGLANG_PD_LEAN_VENVS).
# Here the Python is the shared base venv's (scripts/ensure_venv.sh), or $PYTHON;
# on the GPU host, python3. A GPU host with SGLang installed runs scripts/gpu_check.sh.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
root="${SGLANG_PD_LEAN_VENVS:-$HOME/.cache/sglang-pd-lean}"
if [ "${1:-}" = "--run" ]; then
  py="${PYTHON:-python3}"
else
  py="${PYTHON:-$root/base/bin/python}"
  [ -x "$py" ] || py=python3
fi
exec "$py" "$here/scripts/gpu_carry.py" "$@"
