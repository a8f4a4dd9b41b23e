#!/usr/bin/env bash
# The first thing to run when SGLang publishes a release: what of it the plugin and
# the report can use, in minutes, before anyone adds it to the supported list.
#
#   scripts/check_release.sh 0.5.24
#
# Builds the release's venv (scripts/ensure_venv.sh: its wheel over the shared base),
# then, on it: `doctor` (each gate's state, hook targets a gate lacks and the gates
# that are off with it, every seam of seams.SEAMS it lacks, whether `report` can
# run), the seam and native-marker tests, and one `report -- <launch flags>`.
# An unsupported release reads as such in doctor; everything else still answers.
# Exit code: 0 when every step passed, 1 otherwise.
set -uo pipefail
[ $# -eq 1 ] || { echo "usage: $0 SGLANG_VERSION" >&2; exit 2; }
version="$1"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$(bash "$here/scripts/ensure_venv.sh" "$version")" || exit 1
status=0
step() {
  echo "=== $*"
  "$@" || { status=1; echo "=== FAILED: $*"; }
}
cd "$here"
step "$venv/bin/python" -m sglang_pd_lean doctor
step "$venv/bin/python" -m pytest -q -p no:cacheprovider test/test_seams.py \
  test/test_native_markers.py test/test_compat.py
step "$venv/bin/python" -m sglang_pd_lean report --model qwen3-next-80b-a3b \
  --weights-gib 40 -- --tp 4 --speculative-algorithm NEXTN \
  --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4
exit $status
