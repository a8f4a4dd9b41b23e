"""Seconds the pool gate's measuring build adds to a prefill rank's request-pool build,
per bundled model and for the e2e tiny model, in one run.

    python benchmark/measuring_build.py [--runs 7] [--tp 4] [--server]
    python benchmark/measuring_build.py --smoke   # one model and the tiny one, once

To record the bytes it did not allocate, the pool gate runs upstream's
``_build_hybrid_req_pool`` once more under ``FakeTensorMode`` before the build it
keeps. Each row times the gate's hook on a prefill target, with the measuring build
and without it (the gate acting without a figure), interleaved, median of ``--runs``;
the difference is what the measuring build adds. The kept build runs under
``FakeTensorMode`` too (no GPU here): its Python work is the real build's, its CUDA
allocations are not counted. ``--server`` also starts the CPU e2e prefill server of
``test/e2e`` once (tiny Qwen3-Next, NEXTN, plugin on) and sets the tiny model's
measuring build against that server's start-up (process start to ready).

Run it with the venv's python (``~/.cache/sglang-pd-lean/sglang-<version>/bin/python``).
Times come from one process on a shared machine: compare them within one run only.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import logging
import os
import re
import statistics
import sys
import tempfile
import time
import warnings
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
E2E = os.path.join(HERE, "..", "test", "e2e")
# The e2e servers' flags that shape the pool (test/e2e/e2e_runs.py REPORT_ARGS).
E2E_REQUESTS = 8
E2E_DRAFT_TOKENS = 2
E2E_CONTEXT = 2048
MAMBA_LINE = r"Mamba Cache is allocated\. max_mamba_cache_size: (?P<slots>\d+)"


def prefill_configurator(stack: contextlib.ExitStack, inputs):
    """A prefill target's KVCacheConfigurator for ``inputs`` (the census road)."""
    from helpers import server_fields
    from placeholder import prepare

    from sglang_pd_lean import census

    mc, _ = prepare(inputs)
    stack.enter_context(census.parallel(tp=inputs.tp))
    server_args = stack.enter_context(
        census.published(**server_fields(inputs, "prefill"))
    )
    return census.configurator(mc, server_args, is_draft_worker=False)


def time_hook(inputs, runs: int) -> tuple[float, float]:
    """Median seconds of the pool gate's hook (with, without the measuring build)."""
    from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator
    from torch._subclasses.fake_tensor import FakeTensorMode

    from sglang_pd_lean.gates import pool

    original = inspect.unwrap(KVCacheConfigurator._build_hybrid_req_pool)
    kwargs = dict(max_num_reqs=inputs.max_running_requests, extra_max_context_len=4)
    with_times, without_times = [], []
    with contextlib.ExitStack() as stack:
        # 0.5.23 warms a Triton kernel as the pool is built (a launch, not an
        # allocation): SGLang's own switch turns it off, as the census does.
        stack.enter_context(
            mock.patch.dict(os.environ, {"SGLANG_DISABLE_FUSED_MAMBA_SLOT_OPS": "1"})
        )
        conf = prefill_configurator(stack, inputs)
        stack.enter_context(FakeTensorMode(allow_non_fake_inputs=True))
        pool.GATE.around(original, conf, **kwargs)  # first-use imports and caches
        for _ in range(runs):
            tic = time.perf_counter()
            pool.GATE.around(original, conf, **kwargs)
            with_times.append(time.perf_counter() - tic)
            with mock.patch.object(pool, "verify_state_bytes", lambda call: None):
                tic = time.perf_counter()
                pool.GATE.around(original, conf, **kwargs)
                without_times.append(time.perf_counter() - tic)
    return statistics.median(with_times), statistics.median(without_times)


def server_startup(model_dir: str, workdir: str) -> tuple[float | None, int | None]:
    """The e2e CPU prefill server (plugin on), started once: seconds from process
    start to ready (None where it exited first) and the mamba slots it built."""
    from e2e_runs import BASE_ARGS, RUNS
    from harness import Server

    args, env = RUNS["prefill"]
    server = Server(
        model_dir, [*BASE_ARGS, *args], device="cpu", workdir=workdir, env=env
    )
    tic = time.perf_counter()
    with server:
        ready = server.wait()
        seconds = time.perf_counter() - tic
    slots = re.search(MAMBA_LINE, server.log)
    return (seconds if ready else None), (int(slots["slots"]) if slots else None)


def run(args, workdir: str) -> None:
    import sglang
    from helpers import server_fields
    from placeholder import Inputs
    from tiny_model import write_model

    from sglang_pd_lean import census

    model_dir = write_model(os.path.join(workdir, "tiny-qwen3-next"))
    rows = [
        (
            f"{model} TP{args.tp}",
            Inputs(
                model=model,
                tp=args.tp,
                max_running_requests=args.max_running_requests,
                speculative_num_draft_tokens=args.draft_tokens,
            ),
        )
        for model in census.bundled_models()[: 1 if args.smoke else None]
    ]
    startup, slots = server_startup(model_dir, workdir) if args.server else (None, None)
    tiny = Inputs(
        config=model_dir,
        tp=1,
        max_running_requests=E2E_REQUESTS,
        max_mamba_cache_size=slots,  # as the server built it, where it ran
        speculative_num_draft_tokens=E2E_DRAFT_TOKENS,
        context_length=E2E_CONTEXT,
    )
    tiny_name = f"e2e tiny model TP1, {server_fields(tiny, 'prefill')['max_mamba_cache_size']} slots"
    rows.append((tiny_name, tiny))

    print(
        f"SGLang {sglang.__version__}: pool gate hook on a prefill target, "
        f"median of {args.runs} interleaved runs (FakeTensorMode)"
    )
    print(
        f"bundled models: {args.max_running_requests} running requests, "
        f"{args.draft_tokens} draft tokens; e2e tiny model: {E2E_REQUESTS} requests, "
        f"{E2E_DRAFT_TOKENS} draft tokens"
    )
    header = (
        f"{'model':30}{'with ms':>10}{'without ms':>12}{'measuring ms':>14}"
        f"{'with/without':>14}"
    )
    print(header)
    print("-" * len(header))
    added = {}
    for name, inputs in rows:
        try:
            with_s, without_s = time_hook(inputs, args.runs)
        except census.CensusError as exc:
            print(f"{name:30}  n/a: {exc}")
            continue
        added[name] = with_s - without_s
        print(
            f"{name:30}{with_s * 1000:>10.1f}{without_s * 1000:>12.1f}"
            f"{added[name] * 1000:>14.1f}{with_s / without_s:>14.2f}"
        )

    if args.server and startup is None:
        print("e2e CPU prefill server: exited before ready")
    elif args.server:
        print(
            f"e2e CPU prefill server start-up: {startup:.1f} s; the tiny model's "
            f"measuring build is {added[tiny_name] / startup:.3%} of it"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--tp", type=int, default=4)
    parser.add_argument("--max-running-requests", type=int, default=256)
    parser.add_argument("--draft-tokens", type=int, default=4)
    parser.add_argument(
        "--server",
        action="store_true",
        help="also start the CPU e2e prefill server once and time its start-up",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the first bundled model and the tiny one, once",
    )
    args = parser.parse_args()
    if args.smoke:
        args.runs = 1

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    from sglang.srt.plugins import load_plugins

    load_plugins()
    sys.path.insert(0, E2E)
    sys.path.insert(0, os.path.dirname(E2E))  # test/: helpers, placeholder
    with tempfile.TemporaryDirectory(prefix="sglang-pd-lean-bench-") as workdir:
        run(args, workdir)


if __name__ == "__main__":
    main()
