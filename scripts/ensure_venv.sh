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
#
# Every release shares one base venv (torch, and those packages at the newest
# supported release's pins: ~6 GB once). A release's venv is a small overlay: the
# SGLang wheel, the packages whose pins differ from the base's (0.5.16 to 0.5.21 pin
# an older transformers and xgrammar, for instance), and a .pth file that puts the
# base's site-packages after its own on sys.path, so its own pins win. SGLang's
# non-Python pins (cuda-tile on 0.5.18 to 0.5.22, served only by a vendor index) are
# never installed: --no-deps.
# --server adds to the base, behind its own stamp, what `python -m
# sglang.launch_server` needs on a CPU (the end-to-end tests in test/e2e): a few more
# Python packages the same way, the Mooncake TCP transfer engine and the Debian
# libraries it links (apt-get, root), SGLang's routers from PyPI (routers/) and
# Debian's Prometheus package, unpacked (prometheus-<version>/).
# Venvs live in ${SGLANG_PD_LEAN_VENVS:-~/.cache/sglang-pd-lean}: base/ and
# sglang-<version>/; wheels are cached in ${SGLANG_PD_LEAN_WHEELS:-.../wheels}.
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
wheels="${SGLANG_PD_LEAN_WHEELS:-$HOME/.cache/sglang-pd-lean/wheels}"
base="$root/base"
venv="$root/sglang-$version"
py="${PYTHON:-python3}"
# The release whose pins the base follows (the newest supported).
base_release=0.5.23

# Packages SGLang imports on the code paths we drive (pins come from SGLang's metadata),
# the modules of every seam included (uvloop: Engine, the detokenizer; a test hides
# server_deps below and resolves every seam: test_seams.py; prometheus-client: the
# plugin's /metrics gauges, test_metrics.py).
lean_deps=(
  aiohttp compressed-tensors dill einops fastapi gguf ipython msgspec numpy openai
  orjson packaging partial-json-parser pillow prometheus-client psutil pybase64
  pydantic pyzmq requests sentencepiece setproctitle tqdm transformers uvicorn uvloop
  xgrammar
)
# Test and report extras of ours.
own_deps=(pytest matplotlib)
# torch: the release that lies on this kind of machine's disk (also 0.5.23's pin).
torch_deps=(torch==2.14.1 torchvision==0.29.1)
# --server: what launch_server imports on a CPU beyond lean_deps (found by starting
# the e2e servers on the lean venv; pins from SGLang's metadata), and the PD transfer
# engine a prefill server needs (SGLang refuses the `fake` backend there). SGLang pins
# no Mooncake: this is the release the e2e tests were checked with.
server_deps=(jsonschema python-multipart soundfile)
transfer_deps=(mooncake-transfer-engine-non-cuda==0.3.13.post1)
# Debian libraries Mooncake's engine.so links (ldd) on a machine without RDMA.
debian_libs=(libibverbs1 librdmacm1 libnuma1)
# --server: SGLang's routers the e2e `check --router` test starts in front of its
# fleet, each in a venv of its own under $venvs/routers/ (both ship an `smg` binary).
routers=(smg==1.13.0 sglang-router==0.3.2)
# --server: Prometheus as Debian 12 ships it, unpacked under $venvs/prometheus-<version>
# (no service, no root): the e2e tests scrape the real servers with it, and its
# promtool checks examples/monitoring's alert rules.
prometheus_version=2.42.0+ds-5+deb12u1
prometheus_deb="prometheus_${prometheus_version}_amd64.deb"
prometheus_sha256=81d59a24fce84f7fbe97a45a4f2914b6a5881b5cd1db2a6a0e129e515e1a5f55

log() { echo "[ensure_venv] $*" >&2; }
pip_in() { "$1/bin/python" -m pip --disable-pip-version-check -qq "${@:2}"; }

# The SGLang wheel of a release, downloaded once.
wheel_of() {
  local found
  mkdir -p "$wheels"
  found="$(ls "$wheels"/sglang-"$1"-*.whl 2>/dev/null | head -n 1 || true)"
  if [ -z "$found" ]; then
    "$py" -m pip download --disable-pip-version-check -q --no-deps "sglang==$1" -d "$wheels" >&2
    found="$(ls "$wheels"/sglang-"$1"-*.whl 2>/dev/null | head -n 1 || true)"
  fi
  [ -n "$found" ] || { log "cannot get the SGLang $1 wheel"; return 1; }
  echo "$found"
}

# The given packages at the versions a SGLang wheel's metadata pins (unpinned where
# it has none): sglang_pins WHEEL NAME...
sglang_pins() {
  "$py" - "$@" <<'PY'
import re, sys, zipfile
from email.parser import Parser
wheel, names = sys.argv[1], sys.argv[2:]
with zipfile.ZipFile(wheel) as zf:
    meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
    requires = Parser().parsestr(zf.read(meta).decode()).get_all("Requires-Dist") or []
want = {n.lower().replace("_", "-") for n in names}
seen = set()
for req in requires:
    if "extra ==" in req:
        continue
    spec = req.split(";")[0].strip()
    name = re.split(r"[<>=!~\[ (]", spec, 1)[0].lower().replace("_", "-")
    if name in want:
        print(re.sub(r"\[.*?\]", "", spec).replace(" ", "").replace("(", "").replace(")", ""))
        seen.add(name)
for name in sorted(want - seen):
    print(name)
PY
}

# --- the shared base ---------------------------------------------------------------
base_wheel="$(wheel_of "$base_release")"
mapfile -t base_pinned < <(sglang_pins "$base_wheel" "${lean_deps[@]}")
base_wanted="${torch_deps[*]} ${base_pinned[*]} ${own_deps[*]}"
if [ "$(cat "$base/.ready" 2>/dev/null)" != "$base_wanted" ]; then
  if [ ! -f "$base/.torch" ]; then
    log "creating the shared base venv $base (torch and SGLang's pure-Python pins; once)"
    rm -rf "$base"
    mkdir -p "$root"
    "$py" -m venv "$base"
    pip_in "$base" install --upgrade pip >&2
    pip_in "$base" install "${torch_deps[@]}" >&2
    touch "$base/.torch"
  fi
  log "installing SGLang $base_release's pins into $base"
  pip_in "$base" install --no-warn-conflicts "${base_pinned[@]}" "${own_deps[@]}" "${torch_deps[@]}" >&2
  echo "$base_wanted" > "$base/.ready"
fi
if [ "$server" = 1 ]; then
  mapfile -t server_pinned < <(sglang_pins "$base_wheel" "${server_deps[@]}")
  server_wanted="${server_pinned[*]} ${transfer_deps[*]} ${debian_libs[*]}"
  if [ "$(cat "$base/.server-ready" 2>/dev/null)" != "$server_wanted" ]; then
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
    log "installing what launch_server needs on a CPU into $base"
    pip_in "$base" install --no-warn-conflicts "${server_pinned[@]}" "${transfer_deps[@]}" "${torch_deps[@]}" >&2
    echo "$server_wanted" > "$base/.server-ready"
  fi
  for router in "${routers[@]}"; do
    router_venv="$root/routers/${router/==/-}"
    if [ "$(cat "$router_venv/.ready" 2>/dev/null)" != "$router" ]; then
      log "creating $router_venv ($router)"
      rm -rf "$router_venv"
      "$py" -m venv "$router_venv"
      pip_in "$router_venv" install "$router" >&2
      echo "$router" > "$router_venv/.ready"
    fi
  done
  prometheus_dir="$root/prometheus-${prometheus_version%%+*}"
  if [ "$(cat "$prometheus_dir/.ready" 2>/dev/null)" != "$prometheus_deb" ]; then
    log "unpacking Debian's $prometheus_deb into $prometheus_dir"
    scratch="$(mktemp -d)" && chmod 755 "$scratch"  # apt-get download runs as _apt
    ( cd "$scratch" && apt-get download -qq "prometheus=$prometheus_version" >&2 ) \
      || curl -fsSL -o "$scratch/$prometheus_deb" \
        "http://deb.debian.org/debian/pool/main/p/prometheus/$prometheus_deb"
    echo "$prometheus_sha256  $scratch/$prometheus_deb" | sha256sum -c --quiet -
    rm -rf "$prometheus_dir"
    dpkg-deb -x "$scratch/$prometheus_deb" "$prometheus_dir"
    rm -rf "$scratch"
    "$prometheus_dir/usr/bin/prometheus" --version >/dev/null
    echo "$prometheus_deb" > "$prometheus_dir/.ready"
  fi
fi

# --- the release's overlay -----------------------------------------------------------
wheel="$(wheel_of "$version")"
mapfile -t pinned < <(sglang_pins "$wheel" "${lean_deps[@]}")
base_site="$("$base/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
wanted="overlay on $base_site: $(basename "$wheel") ${pinned[*]}"
if [ "$(cat "$venv/.ready" 2>/dev/null)" != "$wanted" ]; then
  log "creating $venv (SGLang $version over the shared base)"
  rm -rf "$venv"
  "$py" -m venv --without-pip "$venv"
  site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  # After the overlay's own site-packages: the overlay's packages win.
  echo "$base_site" > "$site/_sglang_pd_lean_base.pth"
  pip_in "$venv" install --no-deps "$wheel" >&2
  # Installs only what the base does not satisfy, into the overlay (pip leaves
  # packages outside this environment alone).
  pip_in "$venv" install --no-warn-conflicts "${pinned[@]}" "${torch_deps[@]}" >&2
  echo "$wanted" > "$venv/.ready"
fi

# Our package, editable, without touching the pinned dependency set; reinstalled only
# when this checkout is not the one installed or its pyproject.toml (entry points,
# scripts) changed: the editable install reads the sources from the checkout.
own_stamp="$venv/.sglang-pd-lean-editable"
own_wanted="$here $(cksum < "$here/pyproject.toml")"
if [ "$(cat "$own_stamp" 2>/dev/null)" != "$own_wanted" ] \
  || ! grep -qsF '"editable": true' "$venv"/lib/python*/site-packages/sglang_pd_lean-*.dist-info/direct_url.json \
  || ! grep -qsF "\"file://$here\"" "$venv"/lib/python*/site-packages/sglang_pd_lean-*.dist-info/direct_url.json; then
  pip_in "$venv" install --no-deps --no-build-isolation -e "$here" >&2 \
    || pip_in "$venv" install --no-deps -e "$here" >&2
  echo "$own_wanted" > "$own_stamp"
fi
echo "$venv"
