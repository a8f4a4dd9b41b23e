#!/usr/bin/env bash
# Run the test suite against each SGLang release CI covers (creating each release's
# CPU-only venv on first use, with what the end-to-end servers need: --server).
# One release only:   SGLANG_VERSIONS=0.5.23 scripts/test.sh
# Extra arguments go to pytest:  scripts/test.sh -k pool
# Without the end-to-end servers (test/e2e, a few minutes per release; nor their
# set-up):            scripts/test.sh -m "not e2e"
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
versions="${SGLANG_VERSIONS:-0.5.17 0.5.23}"
server=(--server)
for arg in "$@"; do
  [[ "$arg" == *"not e2e"* ]] && server=()
done
failed=()
for version in $versions; do
  start=$SECONDS
  venv="$(bash "$here/scripts/ensure_venv.sh" "$version" "${server[@]}")" \
    || { failed+=("$version (set-up)"); continue; }
  echo "=== SGLang $version: pytest ($venv; set-up $((SECONDS - start)) s)"
  start=$SECONDS
  (cd "$here" && "$venv/bin/python" -m pytest -q -p no:cacheprovider --durations=5 "$@") \
    || failed+=("$version")
  echo "=== SGLang $version: pytest took $((SECONDS - start)) s"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED on SGLang: ${failed[*]}"
  exit 1
fi
echo "all tests passed on SGLang: $versions"
