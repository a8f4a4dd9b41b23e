#!/usr/bin/env bash
# Unpack one SGLang release's wheel into a folder and apply our patch to it:
#   scripts/patched_sglang.sh 0.5.17 /tmp/sglang-0.5.17-patched
# The folder then holds sglang/ with patches/sglang-<version>-pd-prefill-lean.patch
# applied (patch -p2), ready to go first on PYTHONPATH. The wheel is downloaded once
# (pip download --no-deps) into ${SGLANG_PD_LEAN_WHEELS:-~/.cache/sglang-pd-lean/wheels}.
# Exit 3: no wheel (download failed, nothing cached). Exit 4: the patch does not
# apply; the rejected hunks are printed.
set -euo pipefail
version="$1"
dest="$2"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
patch_file="$here/patches/sglang-$version-pd-prefill-lean.patch"
wheels="${SGLANG_PD_LEAN_WHEELS:-$HOME/.cache/sglang-pd-lean/wheels}"
py="${PYTHON:-python3}"

[ -f "$patch_file" ] || { echo "no patch for SGLang $version: $patch_file" >&2; exit 2; }
mkdir -p "$wheels"
wheel="$(ls "$wheels"/sglang-"$version"-*.whl 2>/dev/null | head -n 1 || true)"
if [ -z "$wheel" ]; then
  "$py" -m pip download --disable-pip-version-check -q --no-deps "sglang==$version" -d "$wheels" >&2 || true
  wheel="$(ls "$wheels"/sglang-"$version"-*.whl 2>/dev/null | head -n 1 || true)"
fi
[ -n "$wheel" ] || { echo "cannot get the SGLang $version wheel (pip download failed, none in $wheels)" >&2; exit 3; }

rm -rf "$dest"
mkdir -p "$dest"
"$py" -m zipfile -e "$wheel" "$dest"
if ! (cd "$dest" && patch -p2 --fuzz=0 --forward --batch --no-backup-if-mismatch < "$patch_file" >&2); then
  echo "$(basename "$patch_file") does not apply to SGLang $version; rejected hunks:" >&2
  find "$dest" -name '*.rej' -exec cat {} + >&2
  exit 4
fi
echo "$dest"
