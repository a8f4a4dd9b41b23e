#!/usr/bin/env bash
# Run the test suite against every supported SGLang release (creating each release's
# CPU-only venv on first use: scripts/ensure_venv.sh). Every release runs the whole
# suite but the end-to-end servers (test/e2e), which run on the e2e releases only.
#
#   scripts/test.sh                                 all of it (CI)
#   SGLANG_VERSIONS=0.5.23 scripts/test.sh          one release (or a few)
#   scripts/test.sh -m "not e2e"                    the fast subset: no servers
#   scripts/test.sh -k pool                         extra arguments go to pytest
#   SGLANG_PD_LEAN_E2E_VERSIONS=0.5.23              where the e2e servers run
#   SGLANG_PD_LEAN_JOBS=2                           releases without servers run
#                                                   this many at a time
# The e2e releases run first, one at a time, their output shown as it comes (their
# servers are timed); then every other release's venv is set up, one after another
# (the editable install writes into this checkout), and their suites run side by
# side, each pytest's output shown whole when it ends.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
all="0.5.16 0.5.17 0.5.18 0.5.19 0.5.20 0.5.21 0.5.22 0.5.23"
versions="${SGLANG_VERSIONS:-$all}"
e2e_versions=" ${SGLANG_PD_LEAN_E2E_VERSIONS:-0.5.17 0.5.23} "
jobs="${SGLANG_PD_LEAN_JOBS:-2}"
with_e2e=1
for arg in "$@"; do
  [[ "$arg" == *"not e2e"* ]] && with_e2e=0
done
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
started=$SECONDS

# run_release VERSION SERVERS(0|1) [PYTEST ARGS]: set-up and pytest, all output on
# stdout.
run_release() {
  local version="$1" servers="$2" start=$SECONDS venv
  shift 2
  local setup=() extra=(--ignore=test/e2e)
  if [ "$servers" = 1 ]; then setup=(--server); extra=(); fi
  {
    if ! venv="$(bash "$here/scripts/ensure_venv.sh" "$version" "${setup[@]}")"; then
      echo "=== SGLang $version: set-up FAILED"
      echo setup > "$logs/$version.failed"
      return
    fi
    echo "=== SGLang $version: pytest ($venv; set-up $((SECONDS - start)) s)"
    start=$SECONDS
    (cd "$here" && "$venv/bin/python" -m pytest -q -p no:cacheprovider --durations=5 \
      "${extra[@]}" "$@") || echo pytest > "$logs/$version.failed"
    echo "=== SGLang $version: pytest took $((SECONDS - start)) s" \
      "$([ "$servers" = 1 ] && echo "(with the e2e servers)" || echo "(no e2e servers)")"
  } 2>&1
}

serial=()
parallel=()
for version in $versions; do
  if [ "$with_e2e" = 1 ] && [[ "$e2e_versions" == *" $version "* ]]; then
    serial+=("$version")
  else
    parallel+=("$version")
  fi
done
for version in "${serial[@]}"; do
  run_release "$version" 1 "$@"
done
# Set-up one release after another (the shared base, the editable install into this
# checkout); a failure shows again in that release's run.
for version in "${parallel[@]}"; do
  bash "$here/scripts/ensure_venv.sh" "$version" > /dev/null \
    || echo "=== SGLang $version: set-up failed (its run says more)"
done
running=()
for version in "${parallel[@]}"; do
  run_release "$version" 0 "$@" > "$logs/$version" &
  running+=("$!:$version")
  while [ ${#running[@]} -ge "$jobs" ]; do
    wait "${running[0]%%:*}"
    cat "$logs/${running[0]#*:}"
    running=("${running[@]:1}")
  done
done
for entry in "${running[@]}"; do
  wait "${entry%%:*}"
  cat "$logs/${entry#*:}"
done

failed=()
for version in $versions; do
  [ -f "$logs/$version.failed" ] && failed+=("$version ($(cat "$logs/$version.failed"))")
done
echo "=== $(echo $versions | wc -w) release(s) in $((SECONDS - started)) s"
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED on SGLang: ${failed[*]}"
  exit 1
fi
echo "all tests passed on SGLang: $versions"
