#!/usr/bin/env bash
# Create (once) a CPU-only virtual environment holding one SGLang release, with this
# checkout installed editable into it. Prints the venv's path on stdout.
#
#   scripts/ensure_venv.sh [SGLANG_VERSION] [--server]   (default: the pinned 0.5.17)
#
# SGLang's full dependency set is ~9 GB of GPU kernels (flashinfer, sgl-kernel,
# deep-gemm, ...) that nothing here can run. We install the SGLang wheel itself
# with --no-deps and then only the Python packages its memory-pool, configurator,
# graph-setup and warmup modules import, at the versions SGLang's own metadata pins.
# --server adds, behind its own stamp, what `python -m sglang.launch_server` needs on
# a CPU (the end-to-end tests in test/e2e): a few more Python packages the same way,
# the Mooncake TCP transfer engine and the Debian libraries it links (apt-get, root).
# Venvs live in ${SGLANG_PD_LEAN_VENVS:-~/.cache/sglang-pd-lean}/sglang-<version>.
set -euo pipefail

version=0.5.17
server=0
for arg in "$@"; do
  case "$arg" in
    --server) server=1 ;;
    -*) echo "usage: $0 [SGLANG_VERSION] [--server]" >&2; exit 2 ;;
    *) version="$arg" ;;
  esac
done
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
# --server: what launch_server imports on a CPU beyond lean_deps (found by starting
# the e2e servers on the lean venv; pins from SGLang's metadata), and the PD transfer
# engine a prefill server needs (SGLang refuses the `fake` backend there). SGLang pins
# no Mooncake: this is the release the e2e tests were checked with.
server_deps=(jsonschema prometheus-client python-multipart soundfile uvloop)
transfer_deps=(mooncake-transfer-engine-non-cuda==0.3.13.post1)
# Debian libraries Mooncake's engine.so links (ldd) on a machine without RDMA.
debian_libs=(libibverbs1 librdmacm1 libnuma1)

stamp="$venv/.sglang-pd-lean-ready"
server_stamp="$venv/.sglang-pd-lean-server-ready"
wanted="sglang==$version ${torch_deps[*]} ${lean_deps[*]} ${own_deps[*]}"
server_wanted="${server_deps[*]} ${transfer_deps[*]} ${debian_libs[*]}"
log() { echo "[ensure_venv] $*" >&2; }
pip=("$venv/bin/python" -m pip --disable-pip-version-check -qq)

# The given packages at the versions SGLang's metadata pins (unpinned where it has none).
sglang_pins() {
  "$venv/bin/python" - "$@" <<'PY'
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
}

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
  mapfile -t pinned < <(sglang_pins "${lean_deps[@]}")
  "${pip[@]}" install --no-warn-conflicts "${pinned[@]}" "${own_deps[@]}" "${torch_deps[@]}" >&2
  echo "$wanted" > "$stamp"
fi
if [ "$server" = 1 ] && [ "$(cat "$server_stamp" 2>/dev/null)" != "$server_wanted" ]; then
  missing=()
  for lib in "${debian_libs[@]}"; do
    dpkg-query -W -f='${Status}' "$lib" 2>/dev/null | grep -q "install ok installed" \
      || missing+=("$lib")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing Debian libraries for the Mooncake transfer engine: ${missing[*]}"
    sudo_=()
    [ "$(id -u)" = 0 ] || sudo_=(sudo)
    "${sudo_[@]}" apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive "${sudo_[@]}" apt-get install -y -qq \
      --no-install-recommends "${missing[@]}" >&2
  fi
  log "installing what launch_server needs on a CPU into $venv"
  mapfile -t pinned < <(sglang_pins "${server_deps[@]}")
  "${pip[@]}" install --no-warn-conflicts "${pinned[@]}" "${transfer_deps[@]}" "${torch_deps[@]}" >&2
  echo "$server_wanted" > "$server_stamp"
fi

# Our package, editable, without touching the pinned dependency set; reinstalled only
# when this checkout is not the one installed or its pyproject.toml (entry points,
# scripts) changed: the editable install reads the sources from the checkout.
own_stamp="$venv/.sglang-pd-lean-editable"
own_wanted="$here $(cksum < "$here/pyproject.toml")"
if [ "$(cat "$own_stamp" 2>/dev/null)" != "$own_wanted" ] \
  || ! grep -qsF '"editable": true' "$venv"/lib/python*/site-packages/sglang_pd_lean-*.dist-info/direct_url.json \
  || ! grep -qsF "\"file://$here\"" "$venv"/lib/python*/site-packages/sglang_pd_lean-*.dist-info/direct_url.json; then
  "${pip[@]}" install --no-deps --no-build-isolation -e "$here" >&2 \
    || "${pip[@]}" install --no-deps -e "$here" >&2
  echo "$own_wanted" > "$own_stamp"
fi
echo "$venv"
