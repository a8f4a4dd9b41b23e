#!/usr/bin/env bash
# Run the test suite against each SGLang release CI covers (creating each release's
# CPU-only venv on first use). One release only:  SGLANG_VERSIONS=0.5.23 scripts/test.sh
# Extra arguments go to pytest:                    scripts/test.sh -k pool
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
versions="${SGLANG_VERSIONS:-0.5.17 0.5.23}"
failed=()
for version in $versions; do
  venv="$(bash "$here/scripts/ensure_venv.sh" "$version")" || { failed+=("$version (set-up)"); continue; }
  echo "=== SGLang $version: pytest ($venv)"
  (cd "$here" && "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@") || failed+=("$version")
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED on SGLang: ${failed[*]}"
  exit 1
fi
echo "all tests passed on SGLang: $versions"
