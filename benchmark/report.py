"""``sglang-pd-lean report`` end to end, before and after launch-flag resolution, in one
run: the census's own flags (the road before) against the same server given as launch
flags on a named GPU (SGLang's ServerArgs resolution for every role, weights from the
model class, SGLang's sizing). Each is a fresh process, as an operator runs it.

    python benchmark/report.py [--runs 3] [--limit 1.5]

Run it with the venv's python (``~/.cache/sglang-pd-lean/sglang-<version>/bin/python``).
Exit code 1 when the launch road is more than ``--limit`` times slower (median).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

BEFORE = [
    "--model",
    "qwen3-next-80b-a3b",
    "--tp",
    "4",
    "--max-running-requests",
    "256",
    "--speculative-num-draft-tokens",
    "4",
    "--available-gib",
    "80",
]
AFTER = [
    "--model",
    "qwen3-next-80b-a3b",
    "--gpu",
    "h200",
    "--",
    "--tp",
    "4",
    "--speculative-algorithm",
    "NEXTN",
    "--speculative-num-steps",
    "3",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "4",
    "--max-running-requests",
    "256",
]


def seconds(args: list[str]) -> float:
    """Wall time of one ``python -m sglang_pd_lean report ... --json``."""
    command = [sys.executable, "-m", "sglang_pd_lean", "report", "--json", *args]
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--limit", type=float, default=1.5)
    args = parser.parse_args()
    before, after = [], []
    for _ in range(args.runs):  # interleaved, so machine load hits both alike
        before.append(seconds(BEFORE))
        after.append(seconds(AFTER))
    b, a = statistics.median(before), statistics.median(after)
    print(
        f"census flags (before):  median {b:6.2f} s  runs {[round(x, 1) for x in before]}"
    )
    print(
        f"launch flags (after):   median {a:6.2f} s  runs {[round(x, 1) for x in after]}"
    )
    print(f"ratio after/before: {a / b:.2f} (limit {args.limit})")
    return 0 if a / b <= args.limit else 1


if __name__ == "__main__":
    sys.exit(main())
