"""Verify-only bytes per prefill rank for every bundled model at TP 1/2/4/8, with the
census run time (median of several runs; SGLang's import timed separately).

    python benchmark/census.py [--runs 5] [--max-running-requests 256] [--draft-tokens 4]
    python benchmark/census.py --smoke   # one model at TP 4, one run (test_benchmarks;
                                         # exit 1 where it prints an error row)

Each row is ``report``'s census flags for the model, as the command runs them
(``report_launch``, ``census.report``), read from the typed ``Report``.
Run it with the venv's python (``~/.cache/sglang-pd-lean/sglang-<version>/bin/python``).
Times come from one process on a shared machine: compare them within one run only.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
import warnings

GIB = 1 << 30


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--max-running-requests", type=int, default=256)
    parser.add_argument("--draft-tokens", type=int, default=4)
    parser.add_argument(
        "--smoke", action="store_true", help="the first bundled model at TP 4, once"
    )
    args = parser.parse_args()
    runs = 1 if args.smoke else args.runs

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    start = time.perf_counter()
    from sglang.srt.plugins import load_plugins

    load_plugins()
    import sglang

    from sglang_pd_lean import census
    from sglang_pd_lean.cli.args import parse
    from sglang_pd_lean.cli.commands import report_launch

    import_s = time.perf_counter() - start
    print(f"SGLang {sglang.__version__}: import + load_plugins {import_s:.2f} s")
    print(
        f"{args.max_running_requests} running requests, {args.draft_tokens} draft tokens, "
        f"SGLang's own mamba slots per request; median of {runs} census runs"
    )
    header = (
        f"{'model':22}{'TP':>4}{'prefill upstream GiB':>22}{'prefill plugin GiB':>20}"
        f"{'decode GiB':>12}{'census ms':>11}"
    )
    print(header)
    print("-" * len(header))
    models = census.bundled_models()[:1] if args.smoke else census.bundled_models()
    errors = 0
    for model in models:
        for tp in (4,) if args.smoke else (1, 2, 4, 8):
            flags = ["report", "--model", model, "--tp", str(tp)]
            flags += ["--max-running-requests", str(args.max_running_requests)]
            flags += ["--speculative-num-draft-tokens", str(args.draft_tokens)]
            times = []
            try:
                for _ in range(runs):
                    tic = time.perf_counter()
                    report = census.report(report_launch(parse(flags)))
                    times.append(time.perf_counter() - tic)
            except census.CensusError as exc:
                print(f"{model:22}{tp:>4}  n/a: {exc}")
                errors += 1
                continue
            prefill, decode = report.roles["prefill"], report.roles["decode"]
            print(
                f"{model:22}{tp:>4}"
                f"{prefill.upstream.verify_only_bytes / GIB:>22.2f}"
                f"{prefill.plugin.verify_only_bytes / GIB:>20.2f}"
                f"{decode.plugin.verify_only_bytes / GIB:>12.2f}"
                f"{statistics.median(times) * 1000:>11.0f}"
            )

    # A smoke run's one row is a launch the census must answer: an error row fails.
    return 1 if args.smoke and errors else 0


if __name__ == "__main__":
    sys.exit(main())
