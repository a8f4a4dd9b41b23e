"""``sglang-pd-lean``: the operator's commands.

    sglang-pd-lean report --model qwen3.5-397b-a17b --tp 8 --max-running-requests 256 \\
        --speculative-num-draft-tokens 4 [--available-gib 100] [--json] [--png FILE]
    sglang-pd-lean report --list-models
    sglang-pd-lean doctor [--json]
    python -m sglang_pd_lean ...

``report`` prints the census (bytes per role and component, upstream vs plugin, per
rank); ``doctor`` prints which gates the installed SGLang needs and exits 1 when the
plugin cannot do its job there. Bad input gets one line on stderr and exit code 2,
found before SGLang's slow import where plain Python can find it; SIGINT, SIGTERM
and SIGHUP end the command with one line and exit code 128 + signal.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import signal
import sys
import warnings

from sglang_pd_lean import __version__
from sglang_pd_lean.units import human_bytes

ROLE_TITLES = {
    "prefill": "prefill target",
    "decode": "decode target",
    "null": "unified (null)",
}
OTHER = "other bookkeeping"


class _Stopped(BaseException):
    """SIGTERM or SIGHUP: unwind (temporary folders are removed at exit)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _quiet_sglang() -> None:
    """No import-time notes about the missing GPU, no start-up INFO logs."""
    warnings.filterwarnings("ignore")
    for name in (
        "sglang",
        "sglang_pd_lean",
        "transformers",
        "torch",
        "torch.utils.cpp_extension",
    ):
        logging.getLogger(name).setLevel(logging.ERROR)


def _load_sglang_plugins() -> None:
    """Apply the plugin exactly as an SGLang process does (entry point discovery)."""
    from sglang_pd_lean.census import CensusError

    if importlib.util.find_spec("sglang") is None:
        raise CensusError(
            f"SGLang is not installed for {sys.executable}: install a supported "
            f"release (pip install 'sglang-pd-lean[sglang]') or run "
            f"scripts/sglang-pd-lean"
        )
    _quiet_sglang()
    from sglang.srt.plugins import load_plugins

    load_plugins()


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
    """Shows each flag's default where it has a value."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
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
    from sglang_pd_lean.census import MAMBA_RADIX_CACHE_STRATEGIES, SSM_DTYPES

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
    source = report.add_mutually_exclusive_group()
    source.add_argument(
        "--model",
        help="a bundled model (see --list-models; default: qwen3-next-80b-a3b)",
    )
    source.add_argument("--config", help="a config.json, or a model folder holding one")
    source.add_argument(
        "--list-models", action="store_true", help="list bundled models"
    )
    report.add_argument("--tp", type=_positive_int, default=1, help="attention TP size")
    report.add_argument("--pp", type=_positive_int, default=1, help="pipeline stages")
    report.add_argument(
        "--max-running-requests", type=_positive_int, default=256, help="request slots"
    )
    report.add_argument(
        "--max-mamba-cache-size",
        type=_positive_int,
        help="mamba state slots (default: 3 x running requests; with --available-gib, "
        "SGLang's automatic sizing)",
    )
    report.add_argument(
        "--speculative-num-draft-tokens",
        type=_positive_int,
        default=4,
        help="draft tokens per verify step",
    )
    report.add_argument(
        "--mamba-ssm-dtype",
        choices=SSM_DTYPES,
        help="ssm state dtype (default: the model's)",
    )
    report.add_argument(
        "--context-length",
        type=_positive_int,
        help="context length (default: the model's)",
    )
    report.add_argument(
        "--page-size", type=_positive_int, default=1, help="KV cache page size"
    )
    report.add_argument(
        "--mamba-radix-cache-strategy",
        choices=MAMBA_RADIX_CACHE_STRATEGIES,
        help="as the server's flag (default: SGLang's, which sizes like no_buffer "
        "here; a launched server may resolve auto to extra_buffer)",
    )
    report.add_argument(
        "--available-gib",
        type=_positive_finite_float,
        help="GPU memory per rank left after weights (the total_rest_memory SGLang's "
        "mamba sizing receives), used exactly: adds KV capacity rows and builds the "
        "pools with the slots SGLang sizes from it",
    )
    report.add_argument(
        "--disable-radix-cache",
        action="store_true",
        help="size mamba slots from running requests (SGLang's radix-off branch)",
    )
    report.add_argument("--json", action="store_true", help="print one JSON object")
    report.add_argument(
        "--png", metavar="FILE", help="also draw a stacked bar chart, PNG, to FILE"
    )

    doctor = sub.add_parser(
        "doctor", help="what the installed SGLang does natively and what we apply"
    )
    doctor.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def _signed(nbytes: int) -> str:
    sign = "+" if nbytes > 0 else "-" if nbytes < 0 else ""
    return sign + human_bytes(abs(nbytes))


def component_rows(roles: dict) -> list[tuple[str, tuple[str, ...]]]:
    """(row label, components summed in it): the named components that are
    non-zero somewhere, in upstream's order, then the rest as one bookkeeping row.
    The table and the chart both use these."""
    from sglang_pd_lean.census import COMPONENT_ORDER

    columns = [col for r in roles.values() for col in r.values()]
    present = {c for col in columns for c, n in col["components"].items() if n}
    rows = [(name, (name,)) for name in COMPONENT_ORDER if name in present]
    others = tuple(sorted(present - set(COMPONENT_ORDER)))
    if others:
        rows.append((OTHER, others))
    return rows


def _grid(header: list[str], rows: list[list[str]]) -> list[str]:
    """Right-aligned columns as wide as their widest cell; the role titles span two."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    widths[0] = max(widths[0], 10)
    for i in range(1, len(widths), 2):
        span = max(len(header[(i + 1) // 2]), widths[i] + widths[i + 1] + 2)
        widths[i + 1] = max(widths[i + 1], span - widths[i] - 2)
    lines = [
        f"{'':{widths[0]}}"
        + "".join(
            f"  {title:>{widths[2 * k + 1] + widths[2 * k + 2] + 2}}"
            for k, title in enumerate(header[1:])
        )
    ]
    for row in rows:
        cells = "".join(f"  {cell:>{widths[i]}}" for i, cell in enumerate(row[1:], 1))
        lines.append(f"{row[0]:{widths[0]}}{cells}".rstrip())
    return lines


def render_table(result: dict) -> str:
    inputs = result["inputs"]
    stage = inputs["pp_stage_layers"]
    strategy = inputs.get("mamba_radix_cache_strategy")
    lines = [
        f"SGLang {result['sglang_version']}, model {result['model']}: bytes per rank",
        f"TP {inputs['tp']}, PP {inputs['pp']} (layers {stage[0]}-{stage[1] - 1}), "
        f"{inputs['speculative_num_draft_tokens']} draft tokens, "
        f"ssm {inputs['mamba_ssm_dtype']}, context {inputs['context_length']}, "
        f"page size {inputs['page_size']}"
        + (f", mamba radix cache {strategy}" if strategy else ""),
        "",
    ]
    roles = result["roles"]
    titles = [""] + [ROLE_TITLES[role] for role in roles]
    columns = [col for r in roles.values() for col in (r["upstream"], r["plugin"])]
    rows = [["component"] + ["upstream", "plugin"] * len(roles)]
    rows.append(["request slots"] + [f"{c['request_slots']:,}" for c in columns])
    rows.append(["mamba slots"] + [f"{c['mamba_slots']:,}" for c in columns])
    for label, names in component_rows(roles):
        rows.append(
            [label]
            + [human_bytes(sum(c["components"][n] for n in names)) for c in columns]
        )
    rows.append(["total"] + [human_bytes(c["total_bytes"]) for c in columns])
    rows.append(
        ["verify-only"] + [human_bytes(c["verify_only_bytes"]) for c in columns]
    )
    change = ["change with plugin"]
    for r in roles.values():
        change += [
            "",
            _signed(r["plugin"]["total_bytes"] - r["upstream"]["total_bytes"]),
        ]
    rows.append(change)
    warm = result.get("warmup")
    if warm:
        rows.append(["warmup, transient:"] + [""] * len(columns))
        rows.append(
            ["autotune buffers"]
            + [
                human_bytes(w[col]["autotune_buffers_bytes"])
                for w in warm.values()
                for col in ("upstream", "plugin")
            ]
        )
    capacity = result.get("capacity")
    notes = []
    if capacity:
        rows.append(["capacity:"] + [""] * len(columns))

        def cells(key, fmt):
            return [
                fmt(c[col][key]) if c[col]["fits"] else "does not fit"
                for c in capacity.values()
                for col in ("upstream", "plugin")
            ]

        rows.append(["KV cache"] + cells("kv_cache_bytes", human_bytes))
        rows.append(["KV tokens"] + cells("kv_tokens", lambda v: f"{v:,}"))
        unfit: dict[str, list[str]] = {}
        for role, c in capacity.items():
            for col in ("upstream", "plugin"):
                if not c[col]["fits"]:
                    unfit.setdefault(c[col]["reason"], []).append(
                        f"{col} {ROLE_TITLES[role]}"
                    )
        for reason, where in unfit.items():
            notes.append(f"does not fit ({reason}): {', '.join(where)}")
        for role, c in capacity.items():
            change = c["change"]
            if change and any(change.values()):
                said = [
                    text
                    for key, text in (
                        ("mamba_slots", f"{change['mamba_slots']:+,} mamba slots"),
                        (
                            "kv_cache_bytes",
                            f"KV cache {_signed(change['kv_cache_bytes'])}",
                        ),
                        ("kv_tokens", f"{change['kv_tokens']:+,} KV tokens"),
                        (
                            "max_running_requests",
                            f"{change['max_running_requests']:+,} request slots",
                        ),
                    )
                    if change[key]
                ]
                notes.append(f"{ROLE_TITLES[role]} with the plugin: {', '.join(said)}")
    lines += _grid(titles, rows)
    if capacity:
        lines += [
            "",
            f"Sizing: SGLang's own, from {inputs['available_gib']!r} GiB per rank "
            f"after weights; mamba slots {inputs['mamba_sizing']}.",
        ]
        if inputs["mamba_sizing"].startswith("automatic"):
            lines.append(
                "Automatic split: SGLang gives the mamba state a fixed share of the "
                "budget; on a prefill target the plugin spends the verify reservation "
                "on more mamba slots, not on KV (docs/memory-model.md)."
            )
        lines += notes
    return "\n".join(lines)


def chart(result: dict):
    """A matplotlib figure: a stacked bar per role and column, the table's rows as
    its legend, outside the axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sglang_pd_lean.units import GIB

    roles = result["roles"]
    labels, columns = [], []
    for role, cols in roles.items():
        for col in ("upstream", "plugin"):
            labels.append(f"{ROLE_TITLES[role]}\n{col}")
            columns.append(cols[col]["components"])
    fig, ax = plt.subplots(figsize=(12, 5))
    bottoms = [0.0] * len(columns)
    for label, names in component_rows(roles):
        heights = [sum(col[n] for n in names) / GIB for col in columns]
        ax.bar(labels, heights, bottom=bottoms, label=label)
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    inputs = result["inputs"]
    ax.set_ylabel("GiB per rank")
    ax.set_title(
        f"{os.path.basename(str(result['model']))}: TP {inputs['tp']}, "
        f"{inputs['speculative_num_draft_tokens']} draft tokens "
        f"(SGLang {result['sglang_version']})"
    )
    ax.set_ylim(top=max(bottoms) * 1.05 or 1.0)
    # Outside the axes, so it never covers a bar; top to bottom as the stack.
    handles, names = ax.get_legend_handles_labels()
    ax.legend(
        handles[::-1],
        names[::-1],
        fontsize=8,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
    )
    fig.tight_layout()
    return fig


def draw_png(result: dict, path: str) -> None:
    """The chart as PNG, to exactly ``path`` whatever its extension."""
    import matplotlib.pyplot as plt

    fig = chart(result)
    with open(path, "wb") as f:
        fig.savefig(f, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)


def check_png_target(path: str) -> None:
    """Fail before the census if the chart cannot be written to ``path``."""
    from sglang_pd_lean.census import CensusError

    if importlib.util.find_spec("matplotlib") is None:
        raise CensusError(
            "--png needs matplotlib: pip install 'sglang-pd-lean[report]'"
        )
    if os.path.isdir(path):
        raise CensusError(f"cannot write --png {path}: it is a folder")
    existed = os.path.exists(path)
    flags = os.O_WRONLY | (os.O_APPEND if existed else os.O_CREAT | os.O_EXCL)
    try:
        os.close(os.open(path, flags, 0o644))
    except OSError as exc:
        raise CensusError(f"cannot write --png {path}: {exc.strerror}") from None
    if not existed:
        os.unlink(path)


def cmd_report(args) -> int:
    from sglang_pd_lean import census

    if args.list_models:
        for name in census.bundled_models():
            print(name)
        return 0
    inputs = census.Inputs(
        model=args.model or (None if args.config else census.DEFAULT_MODEL),
        config=args.config,
        tp=args.tp,
        pp=args.pp,
        max_running_requests=args.max_running_requests,
        max_mamba_cache_size=args.max_mamba_cache_size,
        speculative_num_draft_tokens=args.speculative_num_draft_tokens,
        mamba_ssm_dtype=args.mamba_ssm_dtype,
        context_length=args.context_length,
        available_gib=args.available_gib,
        disable_radix_cache=args.disable_radix_cache,
        page_size=args.page_size,
        mamba_radix_cache_strategy=args.mamba_radix_cache_strategy,
    )
    # Everything plain Python can check, before SGLang's import (~20 s).
    inputs.validate()
    census.read_config_dict(inputs)
    if args.png:
        check_png_target(args.png)
    _load_sglang_plugins()
    result = census.run(inputs)
    from sglang_pd_lean import compat

    result["plugin_gates"] = {gate.name: gate.state for gate in compat.plan()}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(render_table(result))
        print()
        print(
            "plugin gates on this SGLang: "
            + ", ".join(f"{k}: {v}" for k, v in result["plugin_gates"].items())
        )
    if args.png:
        draw_png(result, args.png)
        print(f"chart written to {os.path.abspath(args.png)}", file=sys.stderr)
    return 0


def doctor_report() -> dict:
    """The installed SGLang, every gate's state, and whether the plugin is healthy."""
    from sglang_pd_lean import compat

    version = compat.sglang_version()
    supported = compat.is_supported(version)
    plans = compat.plan() if version is not None else []
    missing = compat.missing_targets(
        [
            hook.target
            for gate in plans
            if gate.state == compat.NEEDED
            for hook in gate.hooks
        ]
    )
    gates = [
        {
            "name": gate.name,
            "state": gate.state if supported else "not applied (unsupported SGLang)",
            "detail": gate.detail or gate.summary,
        }
        for gate in plans
    ]
    unhandled = [gate.name for gate in plans if gate.state == compat.UNHANDLED]
    return {
        "sglang_version": version,
        "supported": supported,
        "supported_releases": [compat.SUPPORTED[0], compat.SUPPORTED[-1]],
        "kill_switch": compat.kill_switch_on(),
        "gates": gates,
        "missing_hook_targets": missing,
        "unhandled_gates": unhandled,
        "healthy": supported and not missing and not unhandled,
    }


def cmd_doctor(args) -> int:
    if importlib.util.find_spec("sglang") is not None:
        _quiet_sglang()
    report = doctor_report()
    if args.json:
        print(json.dumps(report, indent=2))
        return 0 if report["healthy"] else 1
    version = report["sglang_version"]
    low, high = report["supported_releases"]
    if version is None:
        print(f"SGLang: not installed (supported: {low} to {high})")
        return 1
    print(f"SGLang {version}")
    print(f"supported: {'yes' if report['supported'] else 'no'} ({low} to {high})")
    width = max(len(gate["state"]) for gate in report["gates"]) + 2
    print(f"{'gate':13}{'state':{width}}detail")
    for gate in report["gates"]:
        print(f"{gate['name']:13}{gate['state']:{width}}{gate['detail']}")
    for line in report["missing_hook_targets"]:
        print(f"missing hook target: {line}")
    for name in report["unhandled_gates"]:
        print(f"unhandled: {name} (this SGLang needs a gate the plugin does not have)")
    return 0 if report["healthy"] else 1


def _stop(signum: int, frame) -> None:
    raise _Stopped(signum)


def main(argv: list[str] | None = None) -> int:
    from sglang_pd_lean.census import CensusError

    stops = [s for s in (signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s]
    saved = {s: signal.signal(s, _stop) for s in stops}
    try:
        args = build_parser().parse_args(argv)
        if args.command == "report":
            return cmd_report(args)
        return cmd_doctor(args)
    except CensusError as exc:
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


if __name__ == "__main__":
    sys.exit(main())
