#!/usr/bin/env bash
# The first thing to run when SGLang publishes a release: what of it the plugin and
# the report can use, in a few minutes on 2 cores, before anyone adds it to the
# supported list (then CI: scripts/test.sh, and docs/releases.md:
# scripts/releases_table.sh).
#
#   scripts/check_release.sh 0.5.24
#
# Installs the release the way the test matrix does (scripts/ensure_venv.sh: its
# wheel over the shared base), then prints: doctor with every seam of seams.SEAMS,
# found or missing (each gate's state, the gates off and why, whether `report` can
# run), and the summary of the gate and report tests on it. An unsupported release
# reads as such in doctor; everything else still answers.
# Exit code: 0 when doctor is healthy and the tests pass, 1 otherwise.
set -uo pipefail
[ $# -eq 1 ] || { echo "usage: $0 SGLANG_VERSION" >&2; exit 2; }
version="$1"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
start=$SECONDS
venv="$(bash "$here/scripts/ensure_venv.sh" "$version")" || exit 1
cd "$here"
status=0
echo "=== doctor --seams (SGLang $version)"
"$venv/bin/python" -m sglang_pd_lean doctor --seams 2>/dev/null || status=1
echo "=== gate and report tests (SGLang $version)"
"$venv/bin/python" -m pytest -q -p no:cacheprovider --no-header -rfE \
  test/test_seams.py test/test_compat.py test/test_gates.py test/test_plugin.py \
  test/test_native_markers.py test/test_doctor.py test/test_pool_gate.py \
  test/test_budget_gate.py test/test_graph_gate.py test/test_warmup_gate.py \
  test/test_newer_gates.py test/test_report_launch.py test/test_report_inputs.py \
  2>&1 | grep -E "^(FAILED|ERROR)|passed|failed|error" || status=1
echo "=== SGLang $version checked in $((SECONDS - start)) s: $([ $status = 0 ] && echo healthy || echo 'see above')"
exit $status
