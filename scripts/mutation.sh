#!/usr/bin/env bash
# Mutation score of one half of the package (docs/testing.md), on one release.
#
#   bash scripts/mutation.sh runtime [MUTANT_GLOB...]   # plugin, role, shims, compat, ..., gates/
#   bash scripts/mutation.sh report  [MUTANT_GLOB...]   # census/, cli/
#
# mutmut 3 imports mutated code only from ./ or src/, and this package lives in
# python/: the run happens in a throwaway copy of the tracked tree
# (SGLANG_PD_LEAN_MUTANTS, default /tmp/pdl-mut-HALF) where src -> python. The
# runtime half uses pyproject's [tool.mutmut]; the report half swaps in
# scripts/mutmut-report.toml. A MUTANT_GLOB such as 'sglang_pd_lean.census.memory*'
# runs one module (the report half fits a sitting module by module); the score is
# printed from `mutmut results` at the end. Not part of CI. To go on after a run
# stops, run `mutmut run` in that folder: with no names it runs only the mutants not
# run yet (with names or globs, those again). Each mutant's tests run fastest first
# (test/conftest.py); SGLANG_PD_LEAN_MUTMUT_BUDGET_S=5 keeps only the fastest that
# add up to 5 s of recorded time, so a survivor costs seconds instead of a minute,
# and a mutant only a slower test kills counts as survived (a lower bound).
set -euo pipefail
half=${1:?usage: mutation.sh runtime|report [MUTANT_GLOB...]}
shift
case "$half" in runtime | report) ;; *) echo "mutation.sh: runtime or report, not '$half'" >&2 && exit 2 ;; esac
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
release=${SGLANG_PD_LEAN_RELEASE:-0.5.17}
venv=${SGLANG_PD_LEAN_VENVS:-$HOME/.cache/sglang-pd-lean}/sglang-$release
work=${SGLANG_PD_LEAN_MUTANTS:-/tmp/pdl-mut-$half}
bash "$repo/scripts/ensure_venv.sh" "$release" >/dev/null
"$venv/bin/python" -c "import mutmut" 2>/dev/null || "$venv/bin/python" -m pip install -q "mutmut>=3.8,<4"

rm -rf "$work" && mkdir -p "$work"
(cd "$repo" && git ls-files -z --cached --others --exclude-standard | xargs -0 -I{} cp --parents {} "$work/")
cd "$work" && ln -s python src
if [ "$half" = report ]; then
    "$venv/bin/python" - <<'EOF'
import pathlib, re
pyproject = pathlib.Path("pyproject.toml")
section = pathlib.Path("scripts/mutmut-report.toml").read_text()
text = re.sub(r"(?ms)^\[tool\.mutmut\]\n.*?(?=^\[)", section.rstrip("\n") + "\n\n", pyproject.read_text())
pyproject.write_text(text)
EOF
fi
"$venv/bin/mutmut" run --max-children "${SGLANG_PD_LEAN_MUTMUT_CHILDREN:-2}" "$@" >"$work/run.log" 2>&1 || true
"$venv/bin/mutmut" results --all true 2>/dev/null >"$work/results.txt" || "$venv/bin/mutmut" results >"$work/results.txt"
"$venv/bin/python" - "$work/results.txt" "$@" <<'EOF'
import collections, fnmatch, sys
path, globs = sys.argv[1], sys.argv[2:]
counts, by_module = collections.Counter(), collections.Counter()
for line in open(path):
    name, _, status = line.strip().rpartition(": ")
    if not name or (globs and not any(fnmatch.fnmatch(name, g) for g in globs)):
        continue
    counts[status] += 1
    if status != "killed":
        parts = name.split(".")
        module = [p for p in parts if not p.startswith("x")]
        by_module[".".join(module[: len(module)])] += 1
total = sum(counts.values())
print(f"{total} mutants: " + ", ".join(f"{n} {s}" for s, n in counts.most_common()))
if total:
    print(f"killed: {100 * counts['killed'] / total:.1f} %")
for module, n in by_module.most_common():
    print(f"  not killed in {module}: {n}")
EOF
