"""Argument plumbing of ``sglang-pd-lean``: the parser, its value types, and the usage
error every command raises for input it cannot run on.

    args = build_parser().parse_args(["report", "--model", "qwen3-next-80b-a3b"])

A parse error is one line and exit code 2; each flag's help shows its default.
"""

from __future__ import annotations

import argparse

from sglang_pd_lean import __version__
from sglang_pd_lean.census.gpus import DEFAULT_GPU, GPUS, LOCAL


class UsageError(Exception):
    """The command cannot run as asked (a flag, a file, a missing package): one line
    for the operator, exit code 2. Census input errors are ``CensusError``."""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def _positive_finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (0 < value < float("inf")):
        raise argparse.ArgumentTypeError(
            f"must be a positive finite number, got {text}"
        )
    return value


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line and exit code 2."""

    def error(self, message: str):
        self.exit(2, f"sglang-pd-lean: error: {message}\n")


class _Help(argparse.HelpFormatter):
    """Shows each flag's default where it has a value (argparse asks only for the
    actions that have a help text)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help
        if (
            action.default not in (None, False, argparse.SUPPRESS)
            and action.option_strings
        ):
            text += " (default: %(default)s)"
        return text


def _version() -> str:
    from sglang_pd_lean import compat

    installed = compat.sglang_version()
    sglang = f"SGLang {installed}" if installed else "SGLang not installed"
    return f"sglang-pd-lean {__version__} ({sglang})"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="sglang-pd-lean",
        description="PD-prefill speculative targets without verify-only state: "
        "memory census and plugin health.",
    )
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", required=True)
    report = sub.add_parser(
        "report",
        formatter_class=_Help,
        help="bytes per role and component, upstream SGLang vs with the plugin, per rank",
    )
    _model_source(report)
    _census_flags(report)
    _launch_flags(report)
    report.add_argument("--json", action="store_true", help="print one JSON object")
    report.add_argument(
        "--png", metavar="FILE", help="also draw a stacked bar chart, PNG, to FILE"
    )
    _check_parser(sub)
    doctor = sub.add_parser(
        "doctor", help="what the installed SGLang does natively and what we apply"
    )
    doctor.add_argument("--json", action="store_true", help="print one JSON object")
    doctor.add_argument(
        "--seams",
        action="store_true",
        help="list every SGLang seam the plugin and report touch, found or missing",
    )
    return parser


def _check_parser(sub) -> None:
    """``check URL...``: the plugin on live servers, prediction beside measurement."""
    check = sub.add_parser(
        "check",
        formatter_class=_Help,
        help="is every prefill server lean: each server's /server_info, and the "
        "report's prediction beside it",
    )
    check.add_argument(
        "urls", nargs="*", metavar="URL", help="a server: http://HOST:PORT or HOST:PORT"
    )
    check.add_argument(
        "--router",
        action="append",
        metavar="URL",
        help="SGLang's router (smg, sglang-router): every worker it lists "
        "(GET /workers, or /list_workers) is checked too; repeatable",
    )
    check.add_argument(
        "--api-key",
        metavar="KEY",
        help="the router's --api-key, for its worker list (default: "
        "$SGLANG_PD_LEAN_ROUTER_API_KEY)",
    )
    check.add_argument("--json", action="store_true", help="print one JSON object")
    check.add_argument(
        "--timeout",
        type=_positive_finite_float,
        default=30.0,
        help="seconds each request may take",
    )
    check.add_argument(
        "--concurrency",
        type=_positive_int,
        default=16,
        help="servers asked at a time",
    )
    check.add_argument(
        "--no-predict",
        action="store_true",
        help="only the servers' records: no report on their arguments (no SGLang "
        "import)",
    )
    model = check.add_mutually_exclusive_group()
    model.add_argument(
        "--config",
        help="the model (a config.json or a model folder) where a server's model "
        "path is not readable here",
    )
    model.add_argument("--model-path", help="the same, as launch_server spells it")
    check.add_argument(
        "--gpu",
        type=str.lower,
        metavar="NAME",
        help=f"the GPU of the servers without a plugin record: {', '.join(GPUS)} "
        f"(default: {DEFAULT_GPU}); CPU servers resolve as {LOCAL}",
    )


def _model_source(report: argparse.ArgumentParser) -> None:
    """``report``'s model: bundled, a config, or the list of bundled ones."""
    source = report.add_mutually_exclusive_group()
    source.add_argument(
        "--model",
        help="a bundled model (see --list-models; default: qwen3-next-80b-a3b)",
    )
    source.add_argument("--config", help="a config.json, or a model folder holding one")
    source.add_argument(
        "--list-models", action="store_true", help="list bundled models"
    )


def _census_flags(report: argparse.ArgumentParser) -> None:
    """``report``'s census flags: shorthand for the launch flags they name
    (``census.launch.SHORTHAND``); alone, they describe a speculative server."""
    from sglang_pd_lean.census.inputs import MAMBA_RADIX_CACHE_STRATEGIES, SSM_DTYPES

    census = report.add_argument_group(
        "census flags",
        "shorthand for the launch_server flags they name (--tp is --tp-size, --pp "
        "--pp-size, the others as spelled); without a launch command they describe "
        "an EAGLE-chain speculative server of 256 requests and 4 draft tokens, and "
        "the pools are built at those counts unless the memory is named (--gpu, "
        "--available-gib, ...)",
    )
    census.add_argument("--tp", type=_positive_int, help="attention TP size")
    census.add_argument("--pp", type=_positive_int, help="pipeline stages")
    census.add_argument(
        "--max-running-requests", type=_positive_int, help="request slots"
    )
    census.add_argument(
        "--max-mamba-cache-size",
        type=_positive_int,
        help="mamba state slots (default: SGLang's, from the running requests or "
        "the budget)",
    )
    census.add_argument(
        "--speculative-num-draft-tokens",
        type=_positive_int,
        help="draft tokens per verify step",
    )
    census.add_argument("--mamba-ssm-dtype", choices=SSM_DTYPES, help="ssm state dtype")
    census.add_argument("--context-length", type=_positive_int, help="context length")
    census.add_argument("--page-size", type=_positive_int, help="KV cache page size")
    census.add_argument(
        "--mamba-radix-cache-strategy",
        choices=MAMBA_RADIX_CACHE_STRATEGIES,
        help="as the server's flag",
    )
    census.add_argument(
        "--disable-radix-cache",
        action="store_true",
        help="as the server's flag (mamba slots from running requests)",
    )
    census.add_argument(
        "--available-gib",
        type=_positive_finite_float,
        help="GPU memory per rank left after weights (the total_rest_memory SGLang's "
        "mamba sizing receives), used exactly: adds KV capacity rows and builds the "
        "pools with the slots SGLang sizes from it",
    )


def _launch_flags(report: argparse.ArgumentParser) -> None:
    """``report``'s options for ``-- <launch flags>``: the GPU and the weights."""
    launch = report.add_argument_group(
        "a launch command",
        "report [these options] -- <python -m sglang.launch_server flags>: the server "
        "flags resolved by the installed SGLang on the GPU named here (a census flag "
        "that disagrees with a flag after -- is an error)",
    )
    launch.add_argument(
        "--gpu",
        type=str.lower,
        metavar="NAME",
        help=f"the GPU the server runs on: {', '.join(GPUS)} (default: {DEFAULT_GPU}); "
        f"{LOCAL}: this machine as SGLang probes it (with --available-gib)",
    )
    launch.add_argument(
        "--gpu-memory-gib",
        type=_positive_finite_float,
        help="another GPU: its total memory (with --gpu-sm)",
    )
    launch.add_argument(
        "--gpu-sm", type=_positive_int, help="another GPU: SM version, e.g. 90, 100"
    )
    launch.add_argument(
        "--weights-gib",
        type=_positive_finite_float,
        help="weights per rank (target + draft), where the checkpoint cannot tell",
    )


def parse(argv: list[str]) -> argparse.Namespace:
    """The command line; ``report ... -- FLAGS`` keeps FLAGS as ``args.launch``."""
    launch = None
    if argv and argv[0] == "report" and "--" in argv:
        cut = argv.index("--")
        argv, launch = argv[:cut], argv[cut + 1 :]
    args = build_parser().parse_args(argv)
    args.launch = launch
    if args.command == "report" and launch is not None and not launch:
        raise UsageError("nothing after --: give the launch_server flags")
    return args
