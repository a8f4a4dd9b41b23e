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
#   SGLANG_PD_LEAN_JOBS=2                           unit suites run this many at a
#                                                   time once no server runs
#   SGLANG_PD_LEAN_FULL_VERSIONS=0.5.23             where the whole unit suite runs
#   SGLANG_PD_LEAN_LEDGER_VERSIONS=0.5.15.post1     e2e releases that run the ledger only
# Each behaviour line's newest release runs the whole suite: 0.5.15.post1 (0.5.15 and
# 0.5.15.post1: the plugin does everything, sizing on the model runner), 0.5.17 (the
# plugin does everything), 0.5.21 (SGLang skips the verify state), 0.5.23 (and its
# budget). The other releases run the gates, seams, doctor, audit, report and census
# tests: not the command-line tests (tables, JSON, signals, charts, `check`: the
# files in `presentation` below) nor those of what no release changes
# (`release_independent`) (docs/testing.md).
# First every venv is set up, one after another (the editable install writes into
# this checkout). Then two lanes run side by side:
# - servers: test/e2e on each e2e release, one release at a time, its output shown as
#   it comes. A CPU server leaves about 40% of two cores idle (it waits on its
#   processes' start-up, its tests on it), so
# - units: the rest of the suite on every release runs beside it, one release at a
#   time while the servers run, then SGLANG_PD_LEAN_JOBS at a time; each pytest's
#   output is shown whole when it ends.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
all="0.5.15 0.5.15.post1 0.5.16 0.5.17 0.5.18 0.5.19 0.5.20 0.5.21 0.5.22 0.5.23"
versions="${SGLANG_VERSIONS:-$all}"
e2e_versions=" ${SGLANG_PD_LEAN_E2E_VERSIONS:-0.5.15.post1 0.5.17 0.5.23} "
jobs="${SGLANG_PD_LEAN_JOBS:-2}"
full_versions=" ${SGLANG_PD_LEAN_FULL_VERSIONS:-0.5.15.post1 0.5.17 0.5.21 0.5.23} "
presentation=(test_cli.py test_cli_edges.py test_check.py test_check_router.py
  test_served.py test_chart.py test_table.py test_json_schema.py)
# Tests of what no release changes: the package's own layout and docs, its
# benchmarks, its start-up cost, its /metrics and the monitoring files.
release_independent=(test_startup_cost.py test_benchmarks.py test_doc_commands.py
  test_docs.py test_package_layout.py test_monitoring.py test_metrics.py)
# The servers: all of test/e2e on the newest e2e release; on the other e2e releases
# all but the fleet's `check` and the monitoring files; on the ledger releases only
# the start-up allocation ledger.
ledger_versions=" ${SGLANG_PD_LEAN_LEDGER_VERSIONS:-0.5.15.post1} "
e2e_fleet=(test_e2e_check.py test_e2e_monitoring_files.py)
# None of the releases asked for is a line's newest: the last one asked runs them.
full_asked=0
for version in $versions; do
  [[ "$full_versions" == *" $version "* ]] && full_asked=1
done
[ "$full_asked" = 1 ] || full_versions=" ${versions##* } "
with_e2e=1
for arg in "$@"; do
  [[ "$arg" == *"not e2e"* ]] && with_e2e=0
done
logs="$(mktemp -d)"
started=$SECONDS

servers=()
for version in $versions; do
  if [ "$with_e2e" = 1 ] && [[ "$e2e_versions" == *" $version "* ]]; then
    servers+=("$version")
  fi
done
newest_e2e=""
[ ${#servers[@]} -gt 0 ] && newest_e2e="${servers[-1]}"

# The checkout each venv had installed editable before this run (set-up and the
# wrapper's doc tests install this one): put back at the end, so that running the
# tests leaves another clone's venvs as they were.
venvs="${SGLANG_PD_LEAN_VENVS:-$HOME/.cache/sglang-pd-lean}"
editable_of() {
  local url
  url="$(cat "$1"/lib/python*/site-packages/sglang_pd_lean-*.dist-info/direct_url.json 2>/dev/null \
    | grep -o '"url": *"file://[^"]*"' | sed 's/.*file:\/\///; s/"$//' | head -n 1)"
  echo "$url"
}
declare -A editable_before
for version in $versions; do
  editable_before[$version]="$(editable_of "$venvs/sglang-$version")"
done
put_back() {
  local version before venv
  for version in $versions; do
    before="${editable_before[$version]}"
    venv="$venvs/sglang-$version"
    [ -n "$before" ] && [ "$before" != "$here" ] && [ -f "$before/pyproject.toml" ] || continue
    [ "$(editable_of "$venv")" = "$before" ] && continue
    if "$venv/bin/python" -m pip --disable-pip-version-check -qq install --no-deps \
      --no-build-isolation -e "$before" > /dev/null 2>&1; then
      echo "$before $(cksum < "$before/pyproject.toml")" > "$venv/.sglang-pd-lean-editable"
      echo "=== SGLang $version: its venv's editable install put back to $before"
    fi
  done
}
trap 'put_back; rm -rf "$logs"' EXIT

# Set-up, one release after another; a release whose set-up fails is marked and
# skipped by both lanes.
declare -A venv_of
for version in $versions; do
  start=$SECONDS
  setup=()
  [[ " ${servers[*]} " == *" $version "* ]] && setup=(--server)
  if venv="$(bash "$here/scripts/ensure_venv.sh" "$version" "${setup[@]}")"; then
    venv_of[$version]="$venv"
    echo "=== SGLang $version: set-up $((SECONDS - start)) s ($venv)"
  else
    echo "=== SGLang $version: set-up FAILED"
    echo setup > "$logs/$version.failed"
  fi
done

# run_pytest VERSION LANE(units|servers) [PYTEST ARGS]: one pytest, all output on
# stdout; a failure is marked for the summary.
run_pytest() {
  local version="$1" lane="$2" start=$SECONDS
  shift 2
  local scope=(--ignore=test/e2e) name
  if [[ "$full_versions" != *" $version "* ]]; then
    for name in "${presentation[@]}" "${release_independent[@]}"; do
      scope+=("--ignore=test/$name")
    done
  fi
  if [ "$lane" = servers ]; then
    scope=(test/e2e)
    if [[ "$ledger_versions" == *" $version "* ]]; then
      scope=(test/e2e/test_e2e_ledger.py)
    elif [ "$version" != "$newest_e2e" ]; then
      for name in "${e2e_fleet[@]}"; do scope+=("--ignore=test/e2e/$name"); done
    fi
  fi
  echo "=== SGLang $version: pytest, $lane"
  local rc=0
  (cd "$here" && "${venv_of[$version]}/bin/python" -m pytest -q -p no:cacheprovider \
    --durations=5 "${scope[@]}" "$@") 2>&1 || rc=$?
  # 5: pytest selected nothing, which a -k or -m of the caller may do to one lane.
  if [ "$rc" != 0 ] && ! { [ "$rc" = 5 ] && [ $# -gt 0 ]; }; then
    echo "$lane" >> "$logs/$version.failed"
  fi
  echo "=== SGLang $version: pytest, $lane, took $((SECONDS - start)) s"
}

server_lane=""
if [ ${#servers[@]} -gt 0 ]; then
  (
    for version in "${servers[@]}"; do
      [ -n "${venv_of[$version]:-}" ] && run_pytest "$version" servers "$@"
    done
  ) &
  server_lane=$!
fi

running=()
for version in $versions; do
  [ -n "${venv_of[$version]:-}" ] || continue
  run_pytest "$version" units "$@" > "$logs/$version.units" &
  running+=("$!:$version")
  while :; do
    limit="$jobs"
    if [ -n "$server_lane" ] && kill -0 "$server_lane" 2> /dev/null; then
      limit=1
    fi
    [ ${#running[@]} -lt "$limit" ] && break
    # Wait for the oldest unit run (or, while it runs, poll so that the limit
    # rises as soon as the server lane ends).
    if kill -0 "${running[0]%%:*}" 2> /dev/null; then
      sleep 5
      continue
    fi
    wait "${running[0]%%:*}"
    cat "$logs/${running[0]#*:}.units"
    running=("${running[@]:1}")
  done
done
for entry in "${running[@]}"; do
  wait "${entry%%:*}"
  cat "$logs/${entry#*:}.units"
done
[ -n "$server_lane" ] && wait "$server_lane"

failed=()
for version in $versions; do
  [ -f "$logs/$version.failed" ] && failed+=("$version ($(sort -u "$logs/$version.failed" | paste -sd,))")
done
echo "=== $(echo $versions | wc -w) release(s) in $((SECONDS - started)) s"
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED on SGLang: ${failed[*]}"
  exit 1
fi
echo "all tests passed on SGLang: $versions"
