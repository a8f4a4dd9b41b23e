"""``sglang-pd-lean``: the operator's commands.

    sglang-pd-lean report --model qwen3.5-397b-a17b --tp 8 --max-running-requests 256 \\
        --speculative-num-draft-tokens 4 [--available-gib 100] [--json] [--png FILE]
    sglang-pd-lean report --list-models
    sglang-pd-lean doctor

``report`` prints the census (bytes per role and component, upstream vs plugin, per
rank); ``doctor`` prints which gates the installed SGLang needs. Bad input gets one
line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import warnings

GIB = 1 << 30
ROLE_TITLES = {
    "prefill": "prefill target",
    "decode": "decode target",
    "null": "unified (null)",
}
COMPONENT_ORDER = (
    "conv state",
    "ssm state",
    "verify ssm snapshots",
    "verify conv windows",
    "replayssm rings",
    "req_to_token map",
)


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
    _quiet_sglang()
    from sglang.srt.plugins import load_plugins

    load_plugins()


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line and exit code 2."""

    def error(self, message: str):
        self.exit(2, f"sglang-pd-lean: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="sglang-pd-lean",
        description="PD-prefill speculative targets without verify-only state: "
        "memory census and plugin health.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    report = sub.add_parser(
        "report",
        help="bytes per role and component, upstream SGLang vs with the plugin, per rank",
    )
    source = report.add_mutually_exclusive_group()
    source.add_argument("--model", help="a bundled model (see --list-models)")
    source.add_argument("--config", help="a local config.json or model folder")
    source.add_argument(
        "--list-models", action="store_true", help="list bundled models"
    )
    report.add_argument("--tp", type=_positive_int, default=1, help="attention TP size")
    report.add_argument("--pp", type=_positive_int, default=1, help="pipeline stages")
    report.add_argument("--max-running-requests", type=_positive_int, default=256)
    report.add_argument(
        "--max-mamba-cache-size",
        type=_positive_int,
        help="mamba state slots (default: 3 x running requests; with --available-gib, "
        "SGLang's automatic sizing)",
    )
    report.add_argument("--speculative-num-draft-tokens", type=_positive_int, default=4)
    report.add_argument(
        "--mamba-ssm-dtype",
        choices=["float32", "bfloat16", "float16"],
        help="ssm state dtype",
    )
    report.add_argument(
        "--context-length", type=_positive_int, help="default: the model's"
    )
    report.add_argument(
        "--available-gib",
        type=_positive_float,
        help="GPU memory per rank left after weights: adds KV-cache capacity rows",
    )
    report.add_argument(
        "--disable-radix-cache",
        action="store_true",
        help="size mamba slots from running requests (SGLang's radix-off branch)",
    )
    output = report.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print one JSON object")
    report.add_argument("--png", metavar="FILE", help="also draw a stacked bar chart")

    sub.add_parser(
        "doctor", help="what the installed SGLang does natively and what we apply"
    )
    return parser


def _fmt_gib(nbytes: float) -> str:
    return f"{nbytes / GIB:.2f}"


def render_table(result: dict) -> str:
    inputs = result["inputs"]
    stage = inputs["pp_stage_layers"]
    lines = [
        f"SGLang {result['sglang_version']}, model {result['model']}: per rank, GiB",
        f"TP {inputs['tp']}, PP {inputs['pp']} (layers {stage[0]}-{stage[1] - 1}), "
        f"{inputs['max_running_requests']} running requests, "
        f"{inputs['max_mamba_cache_size']} mamba slots, "
        f"{inputs['speculative_num_draft_tokens']} draft tokens, "
        f"ssm {inputs['mamba_ssm_dtype']}, context {inputs['context_length']}",
        "",
    ]
    roles = result["roles"]
    names = [
        c
        for c in COMPONENT_ORDER
        if any(c in r[col]["components"] for r in roles.values() for col in r)
    ]
    others = sorted(
        {c for r in roles.values() for col in r.values() for c in col["components"]}
        - set(names)
    )
    width = 22
    header = f"{'':{width}}" + "".join(f"{ROLE_TITLES[role]:>24}" for role in roles)
    sub = f"{'component':{width}}" + "".join(
        f"{'upstream':>12}{'plugin':>12}" for _ in roles
    )
    lines += [header, sub]

    def row(label: str, value) -> str:
        cells = "".join(
            f"{value(r['upstream']):>12}{value(r['plugin']):>12}"
            for r in roles.values()
        )
        return f"{label:{width}}{cells}"

    for name in names:
        lines.append(
            row(name, lambda col, n=name: _fmt_gib(col["components"].get(n, 0)))
        )
    if others:
        lines.append(
            row(
                "other bookkeeping",
                lambda col: _fmt_gib(sum(col["components"].get(n, 0) for n in others)),
            )
        )
    lines.append(row("total", lambda col: _fmt_gib(col["total_bytes"])))
    lines.append(row("verify-only", lambda col: _fmt_gib(col["verify_only_bytes"])))
    given_back = "".join(
        f"{'':>12}{_fmt_gib(r['upstream']['total_bytes'] - r['plugin']['total_bytes']):>12}"
        for r in roles.values()
    )
    lines.append(f"{'given back by plugin':{width}}{given_back}")

    warm = result.get("warmup")
    if warm:
        cells = "".join(
            f"{_fmt_gib(w['upstream']['autotune_buffers_bytes']):>12}"
            f"{_fmt_gib(w['plugin']['autotune_buffers_bytes']):>12}"
            for w in warm.values()
        )
        lines += [
            "",
            "Warmup, transient (released after the warmup forward)",
            f"{'autotune buffers':{width}}{cells}",
        ]

    capacity = result.get("capacity")
    if capacity:
        lines += [
            "",
            f"Capacity from {inputs['available_gib']:g} GiB per rank after weights, "
            f"SGLang's own sizing, mamba slots {inputs['mamba_sizing']}",
            header,
            f"{'per rank':{width}}" + sub[width:],
        ]
        for label, key, fmt in (
            ("KV cache GiB", "kv_cache_gib", lambda v: f"{v:.2f}"),
            ("KV tokens", "kv_tokens", lambda v: f"{v:,}"),
            ("mamba slots", "mamba_slots", lambda v: f"{v:,}"),
        ):
            cells = "".join(
                f"{fmt(c['upstream'][key]):>12}{fmt(c['plugin'][key]):>12}"
                for c in capacity.values()
            )
            lines.append(f"{label:{width}}{cells}")
        for label, key, fmt in (
            ("regained KV GiB", "kv_cache_gib", lambda v: f"{v:+.2f}"),
            ("KV tokens ratio", "kv_tokens_ratio", lambda v: f"x{v:.3f}"),
            ("mamba slots ratio", "mamba_slots_ratio", lambda v: f"x{v:.3f}"),
        ):
            cells = "".join(
                f"{'':>12}{fmt(c['regained'][key]):>12}" for c in capacity.values()
            )
            lines.append(f"{label:{width}}{cells}")
    return "\n".join(lines)


def draw_png(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    roles = result["roles"]
    components = sorted(
        {c for r in roles.values() for col in r.values() for c in col["components"]},
        key=lambda c: (
            COMPONENT_ORDER.index(c) if c in COMPONENT_ORDER else len(COMPONENT_ORDER),
            c,
        ),
    )
    labels, columns = [], []
    for role, cols in roles.items():
        for col in ("upstream", "plugin"):
            labels.append(f"{ROLE_TITLES[role]}\n{col}")
            columns.append(cols[col]["components"])
    fig, ax = plt.subplots(figsize=(10, 5))
    bottoms = [0.0] * len(columns)
    for component in components:
        heights = [col.get(component, 0) / GIB for col in columns]
        ax.bar(labels, heights, bottom=bottoms, label=component)
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    inputs = result["inputs"]
    ax.set_ylabel("GiB per rank")
    ax.set_title(
        f"{result['model']}: TP {inputs['tp']}, {inputs['max_running_requests']} requests, "
        f"{inputs['speculative_num_draft_tokens']} draft tokens (SGLang {result['sglang_version']})"
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def cmd_report(args) -> int:
    from sglang_pd_lean import census

    if args.list_models:
        for name in census.bundled_models():
            print(name)
        return 0
    inputs = census.Inputs(
        model=args.model if (args.model or args.config) else census.DEFAULT_MODEL,
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
    )
    if args.config:
        inputs.model = None
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
        if not args.json:
            print(f"chart written to {args.png}")
    return 0


def cmd_doctor(args) -> int:
    from sglang_pd_lean import compat

    _quiet_sglang()
    version = compat.sglang_version()
    print(f"SGLang {version or 'not installed'}")
    if version is None:
        return 1
    supported = compat.is_supported(version)
    print(
        f"supported: {'yes' if supported else 'no'} "
        f"({compat.SUPPORTED[0]} to {compat.SUPPORTED[-1]})"
    )
    plans = compat.plan()
    missing = compat.missing_targets(
        [
            hook.target
            for gate in plans
            if gate.state == compat.NEEDED
            for hook in gate.hooks
        ]
    )
    print(f"{'gate':13}{'state':26}detail")
    for gate in plans:
        state = gate.state if supported else "not applied (unsupported SGLang)"
        print(f"{gate.name:13}{state:26}{gate.detail or gate.summary}")
    for line in missing:
        print(f"missing hook target: {line}")
    unhandled = [gate.name for gate in plans if gate.state == compat.UNHANDLED]
    return 0 if supported and not missing and not unhandled else 1


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from sglang_pd_lean.census import CensusError

    try:
        if args.command == "report":
            return cmd_report(args)
        return cmd_doctor(args)
    except CensusError as exc:
        print(f"sglang-pd-lean: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
