"""``sglang-pd-lean report`` end to end against its import floor, in one run: the
README's main job (a launch command on an H200: resolution per role, the weights
build, SGLang's sizing, the advice) and a process that only imports the SGLang
modules the report must ask (``server_args``, ``kv_cache_configurator``,
``plugins``, ``configs.model_config``). Each is a fresh process, as an operator runs
it; the runs are interleaved, and the table gives medians and their ratio.
The report's command freezes the collector before the interpreter's teardown
(``cli.commands.run``: ~1.6 s of a report on two cores), which the floor as
defined still pays: the last column divides by a floor that ends the same way,
the report's own work against the imports alone.

    python benchmark/report.py [--runs 3] [--before DIR] [--limit 1.25]
    python benchmark/report.py --smoke   # one run, no limit (test_benchmarks)

``--before DIR``: also time the report of another checkout (e.g. a ``git worktree``
of an earlier commit), its package put first on ``PYTHONPATH``, for before/after
figures from one run. Run it with the venv's python
(``~/.cache/sglang-pd-lean/sglang-<version>/bin/python``). Exit code 1 when this
tree's ratio to the floor is above ``--limit`` (never with ``--smoke``: one run
times nothing worth holding to a limit).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# The README's main job.
MAIN_JOB = [
    *("report", "--json", "--model", "qwen3-next-80b-a3b", "--gpu", "h200", "--"),
    *("--tp", "4", "--disaggregation-mode", "prefill"),
    *("--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3"),
    *("--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"),
    *("--max-running-requests", "256"),
]
FLOOR = (
    "import sglang.srt.server_args, sglang.srt.mem_cache.kv_cache_configurator, "
    "sglang.srt.plugins, sglang.srt.configs.model_config"
)
# The floor, ending as the report's command does.
FROZEN_FLOOR = FLOOR + "; import gc; gc.freeze()"


def seconds(command: list[str], pythonpath: str | None = None) -> float:
    """Wall time of one process running ``command`` (after ``python``)."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (pythonpath, env.get("PYTHONPATH")) if p
        )
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, *command],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--before", metavar="DIR", help="another checkout to time")
    parser.add_argument("--limit", type=float, default=1.25)
    parser.add_argument("--smoke", action="store_true", help="one run, no limit")
    args = parser.parse_args()
    if args.smoke:
        args.runs, args.limit = 1, float("inf")
    rows = {
        "import floor": (["-c", FLOOR], None),
        "floor, frozen exit": (["-c", FROZEN_FLOOR], None),
        "report (this tree)": (["-m", "sglang_pd_lean", *MAIN_JOB], None),
    }
    if args.before:
        package = os.path.join(os.path.abspath(args.before), "python")
        rows["report (--before)"] = (["-m", "sglang_pd_lean", *MAIN_JOB], package)
    times: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(args.runs):
        for name, (command, pythonpath) in rows.items():
            times[name].append(seconds(command, pythonpath))
    floor = statistics.median(times["import floor"])
    print(f"median of {args.runs} interleaved runs, 1 process each")
    frozen = statistics.median(times["floor, frozen exit"])
    print(f"{'':22}{'seconds':>10}{'x floor':>10}{'x frozen':>10}")
    for name, runs in times.items():
        median = statistics.median(runs)
        print(
            f"{name:22}{median:>10.2f}{median / floor:>10.2f}{median / frozen:>10.2f}"
        )
    ratio = statistics.median(times["report (this tree)"]) / floor
    return 0 if ratio <= args.limit else 1


if __name__ == "__main__":
    sys.exit(main())
