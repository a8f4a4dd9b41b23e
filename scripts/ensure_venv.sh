#!/usr/bin/env bash
# Create (once) a CPU-only virtual environment holding one SGLang release, then
# (every time) install this checkout into it. Prints the venv's path on stdout.
#
#   scripts/ensure_venv.sh [SGLANG_VERSION]     (default: the pinned 0.5.17)
#
# SGLang's full dependency set is ~9 GB of GPU kernels (flashinfer, sgl-kernel,
# deep-gemm, ...) that nothing here can run. We install the SGLang wheel itself
# with --no-deps and then only the Python packages its memory-pool, configurator,
# graph-setup and warmup modules import, at the versions SGLang's own metadata pins.
# Venvs live in ${SGLANG_PD_LEAN_VENVS:-~/.cache/sglang-pd-lean}/sglang-<version>.
set -euo pipefail

version="${1:-0.5.17}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
root="${SGLANG_PD_LEAN_VENVS:-$HOME/.cache/sglang-pd-lean}"
venv="$root/sglang-$version"
py="${PYTHON:-python3}"

# Packages SGLang imports on the code paths we drive (pins come from SGLang's metadata).
lean_deps=(
  aiohttp compressed-tensors dill einops fastapi gguf ipython msgspec numpy openai
  orjson packaging partial-json-parser pillow psutil pybase64 pydantic pyzmq
  requests sentencepiece setproctitle tqdm transformers uvicorn xgrammar
)
# Test and report extras of ours.
own_deps=(pytest matplotlib)
# torch: the release that lies on this kind of machine's disk (also 0.5.23's pin).
torch_deps=(torch==2.14.1 torchvision==0.29.1)

stamp="$venv/.sglang-pd-lean-ready"
wanted="sglang==$version ${torch_deps[*]} ${lean_deps[*]} ${own_deps[*]}"
log() { echo "[ensure_venv] $*" >&2; }
pip=("$venv/bin/python" -m pip --disable-pip-version-check -qq)

if [ ! -f "$venv/.sglang-installed" ]; then
  log "creating $venv (SGLang $version, CPU-only; takes a few minutes once)"
  rm -rf "$venv"
  mkdir -p "$root"
  "$py" -m venv "$venv"
  "${pip[@]}" install --upgrade pip >&2
  "${pip[@]}" install "${torch_deps[@]}" >&2
  "${pip[@]}" install --no-deps "sglang==$version" >&2
  touch "$venv/.sglang-installed"
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
  log "installing the packages SGLang $version needs here into $venv"
  mapfile -t pinned < <("$venv/bin/python" - "${lean_deps[@]}" <<'PY'
import re, sys
from importlib.metadata import requires
want = {n.lower().replace("_", "-") for n in sys.argv[1:]}
seen = set()
for req in requires("sglang") or []:
    if "extra ==" in req:
        continue
    spec = req.split(";")[0].strip()
    name = re.split(r"[<>=!~\[ ]", spec, 1)[0].lower().replace("_", "-")
    if name in want:
        print(re.sub(r"\[.*?\]", "", spec))
        seen.add(name)
for name in sorted(want - seen):
    print(name)
PY
)
  "${pip[@]}" install --no-warn-conflicts "${pinned[@]}" "${own_deps[@]}" "${torch_deps[@]}" >&2
  echo "$wanted" > "$stamp"
fi

# Our package, editable, without touching the pinned dependency set.
"$venv/bin/python" -m pip --disable-pip-version-check -qq install --no-deps --no-build-isolation -e "$here" >&2 \
  || "$venv/bin/python" -m pip --disable-pip-version-check -qq install --no-deps -e "$here" >&2
echo "$venv"
