"""The commands' entry point: dispatch, the report command, one-line errors and signals.

    sys.exit(main(["report", "--model", "qwen3-next-80b-a3b", "--json"]))

Bad input (``UsageError``, ``CensusError``) is one line on stderr and exit code 2;
SIGINT, SIGTERM and SIGHUP end the command with one line and exit code 128 + signal.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import sys

from sglang_pd_lean.census.inputs import CensusError, check_slots
from sglang_pd_lean.cli.args import UsageError, parse
from sglang_pd_lean.cli.chart import check_png_target, draw_png
from sglang_pd_lean.cli.doctor import cmd_doctor
from sglang_pd_lean.cli.table import render_table

# ``report --json``'s schema (docs/json.md): changes when a key is renamed or
# removed, or its meaning changes.
SCHEMA_VERSION = 1


class _Stopped(BaseException):
    """SIGTERM or SIGHUP: unwind (temporary folders are removed at exit)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def cmd_report(args) -> int:
    """Parse, ``census.report``, print."""
    from sglang_pd_lean import census

    if args.list_models:
        for name in census.bundled_models():
            print(name)
        return 0
    launch = report_launch(args)
    if args.png:
        check_png_target(args.png)
    return _print(args, census.report(launch))


def report_launch(args):
    """The launch ``report`` describes (``census.Launch``), checked as far as plain
    Python can before SGLang's import. The census flags are shorthand for the
    launch flags they name, added to the flags after --; alone they describe a
    speculative server (``census.flags.SHORTHAND_DEFAULTS``). Sized where a launch
    command or the memory is given; census flags alone: the pools at their own
    counts."""
    from sglang_pd_lean.census.flags import SHORTHAND, shorthand_argv
    from sglang_pd_lean.census.gpus import gpu_facts
    from sglang_pd_lean.census.launch import Launch, check

    check_slots(
        max_running_requests=args.max_running_requests,
        max_mamba_cache_size=args.max_mamba_cache_size,
    )
    alone = args.launch is None
    shorthand = shorthand_argv(
        {dest: getattr(args, dest) for dest in SHORTHAND}, alone=alone
    )
    memory = (args.gpu, args.gpu_memory_gib, args.gpu_sm, args.available_gib)
    launch = Launch(
        argv=tuple(shorthand if alone else args.launch),
        shorthand=() if alone else tuple(shorthand),
        gpu=gpu_facts(args.gpu, args.gpu_memory_gib, args.gpu_sm),
        model=args.model,
        config=args.config,
        available_gib=args.available_gib,
        weights_gib=args.weights_gib,
        sized=not alone or any(v is not None for v in (*memory, args.weights_gib)),
    )
    check(launch)
    return launch


def _print(args, report) -> int:
    """``report`` as JSON or a table (and a chart where asked)."""
    if args.json:
        from sglang_pd_lean.census.results import jsonable

        payload = {"schema_version": SCHEMA_VERSION, **jsonable(report)}
        print(json.dumps(payload, indent=2))
    else:
        print(render_table(report))
        print()
        print(
            "plugin gates on this SGLang: "
            + ", ".join(f"{k}: {v}" for k, v in report.plugin_gates.items())
        )
    if args.png:
        draw_png(report, args.png)
        print(f"chart written to {os.path.abspath(args.png)}", file=sys.stderr)
    return 0


def run() -> int:
    """The ``sglang-pd-lean`` command (``main`` on ``sys.argv``), ending quickly.

    At exit the interpreter tears down the ~5,000 modules SGLang imports, and each
    garbage collection on the way walks every object they made: 1.8 s of a report
    on two cores. Frozen (``gc.freeze``), those objects are left out of the walks;
    atexit handlers, buffered output and every reference-counted finalizer still
    run. Only the command does this: a caller of ``main`` keeps its collector."""
    code = main()
    gc.freeze()
    return code


def _stop(signum: int, frame) -> None:
    raise _Stopped(signum)


def main(argv: list[str] | None = None) -> int:
    stops = [s for s in (signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s]
    saved = {s: signal.signal(s, _stop) for s in stops}
    try:
        args = parse(sys.argv[1:] if argv is None else list(argv))
        if args.command == "report":
            return cmd_report(args)
        if args.command == "check":
            from sglang_pd_lean.cli.check import cmd_check

            return cmd_check(args)
        return cmd_doctor(args)
    except (CensusError, UsageError) as exc:
        print(f"sglang-pd-lean: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (| head): no traceback, no second error at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        print("sglang-pd-lean: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    except _Stopped as stop:
        name = signal.Signals(stop.signum).name
        print(f"sglang-pd-lean: stopped by {name}", file=sys.stderr)
        return 128 + stop.signum
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
