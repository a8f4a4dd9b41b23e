"""The report as a table: one column per role and column (upstream, plugin), rows per
component, capacity and notes.

    print(render_table(census.run(inputs)))

Cells read in GiB, MiB, KiB or B (``sglang_pd_lean.units``); columns right-aligned.
"""

from __future__ import annotations

from sglang_pd_lean.accounting import COMPONENT_ORDER
from sglang_pd_lean.units import human_bytes

ROLE_TITLES = {
    "prefill": "prefill target",
    "decode": "decode target",
    "null": "unified (null)",
}
OTHER = "other bookkeeping"


def _signed(nbytes: int) -> str:
    sign = "+" if nbytes > 0 else "-" if nbytes < 0 else ""
    return sign + human_bytes(abs(nbytes))


def component_rows(roles: dict) -> list[tuple[str, tuple[str, ...]]]:
    """(row label, components summed in it): the named components that are
    non-zero somewhere, in upstream's order, then the rest as one bookkeeping row.
    The table and the chart both use these."""
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
    if "resolved" in result:
        lines += launch_header(result) + [""]
    roles = result["roles"]
    titles = [""] + [ROLE_TITLES[role] for role in roles]
    columns = [col for r in roles.values() for col in (r["upstream"], r["plugin"])]
    rows = [["component"] + ["upstream", "plugin"] * len(roles)]
    rows.append(["request slots"] + [f"{c['request_slots']:,}" for c in columns])
    rows.append(["mamba slots"] + [f"{c['mamba_slots']:,}" for c in columns])
    for label, names in component_rows(roles):
        rows.append(
            [label]
            + [
                human_bytes(sum(c["components"].get(n, 0) for n in names))
                for c in columns
            ]
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
            for col in ("upstream", "plugin"):
                if c[col].get("requests_capped"):
                    asked = result["resolved"][role]["max_running_requests"]
                    notes.append(
                        f"{col} {ROLE_TITLES[role]}: {c[col]['max_running_requests']:,} "
                        f"of {asked:,} running requests (SGLang caps them by the mamba "
                        f"slots and KV tokens it sized)"
                    )
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
        source = (
            "the available memory above, per role"
            if "memory" in result
            else f"{inputs['available_gib']!r} GiB per rank after weights"
        )
        lines += [
            "",
            f"Sizing: SGLang's own, from {source}; mamba slots "
            f"{inputs['mamba_sizing']}.",
        ]
        if inputs["mamba_sizing"].startswith("automatic"):
            lines.append(
                "Automatic split: SGLang gives the mamba state a fixed share of the "
                "budget; on a prefill target the plugin spends the verify reservation "
                "on more mamba slots, not on KV (docs/memory-model.md)."
            )
        lines += notes
    if "advice" in result:
        lines += ["", *advice_lines(result)]
    return "\n".join(lines)


# Resolved values shown per role, in this order, with their labels.
RESOLVED_ROWS = (
    ("page_size", "page size"),
    ("attention_backend", "attention backend"),
    ("linear_attn_backend", "linear attn backend"),
    ("mamba_radix_cache_strategy", "mamba radix strategy"),
    ("disable_radix_cache", "radix cache off"),
    ("mem_fraction_static", "mem fraction static"),
    ("max_running_requests", "max running requests"),
    ("speculative_draft_model_path", "draft model path"),
    ("context_length", "context length"),
)


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "-" if value is None else str(value)


def launch_header(result: dict) -> list[str]:
    """What SGLang resolved from the launch flags, per role, and memory per rank."""
    launch, resolved, memory = result["launch"], result["resolved"], result["memory"]
    gpu = launch["gpu"]
    roles = list(resolved)
    rows = [["resolved by SGLang"] + [ROLE_TITLES[r] for r in roles]]
    rows.append(
        ["server flags give"]
        + ["this server" if r == launch["role"] else "other role" for r in roles]
    )
    for key, label in RESOLVED_ROWS:
        rows.append([label] + [_cell(resolved[r][key]) for r in roles])
    rows.append(
        ["draft layers in KV"]
        + [str(memory[r]["draft_layers_in_kv_sizing"]) for r in roles]
    )
    if "weights_bytes" in memory[roles[0]]:
        rows.append(
            ["weights"] + [human_bytes(memory[r]["weights_bytes"]) for r in roles]
        )
        rows.append(
            ["draft weights"]
            + [human_bytes(memory[r]["draft_weights_bytes"]) for r in roles]
        )
    rows.append(
        ["available (A)"]
        + [human_bytes(memory[r]["available_gib"] * (1 << 30)) for r in roles]
    )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    where = (
        f"{gpu['name']} ({gpu['memory_mib'] / 1024:.2f} GiB, SM {gpu['sm']})"
        if gpu["sm"]
        else gpu["name"]
    )
    lines = [
        f"Launch flags resolved by SGLang on {where}; the other roles: "
        f"the same flags with --disaggregation-mode replaced.",
    ]
    for row in rows:
        cells = "".join(f"  {c:>{widths[i]}}" for i, c in enumerate(row[1:], 1))
        lines.append(f"{row[0]:{widths[0]}}{cells}")
    first = memory[roles[0]]
    if "weights_source" in first:
        lines.append(
            f"Weights: {first['weights_source']}. A = (T - C) * mem_fraction_static "
            f"- weights, T the GPU's memory, C = {first['cuda_context_gib']:g} GiB "
            f"of CUDA context and communicators (--available-gib gives A exactly)."
        )
    else:
        lines.append("Available memory A per rank: --available-gib, exactly.")
    return lines


ADVICE_HEADER = ("KV cache", "KV tokens", "mamba slots", "request slots", "fits")


def _capacity_cells(cap: dict) -> list[str]:
    if not cap["fits"]:
        return ["does not fit"] * 4 + ["no"]
    return [
        human_bytes(cap["kv_cache_bytes"]),
        f"{cap['kv_tokens']:,}",
        f"{cap['mamba_slots']:,}",
        f"{cap['max_running_requests']:,}",
        "yes",
    ]


def advice_lines(result: dict) -> list[str]:
    """How to spend what the plugin frees on the prefill target: per choice, the
    flags to add and what SGLang's sizing gives with them; else why nothing."""
    lines = []
    if result["advice"]:
        upstream = result["capacity"]["prefill"]["upstream"]
        rows = [["", *ADVICE_HEADER]]
        rows.append(["upstream, without the plugin", *_capacity_cells(upstream)])
        flags = []
        for choice in result["advice"]:
            rows.append([choice["title"], *_capacity_cells(choice["capacity"])])
            flags.append(" ".join(choice["flags"]) or "nothing")
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines.append(
            "How to spend what the plugin frees on the prefill target: each "
            "choice's flags added to the prefill server's flags, SGLang's sizing "
            "run again with them."
        )
        for i, row in enumerate(rows):
            cells = "".join(f"  {c:>{widths[k]}}" for k, c in enumerate(row[1:], 1))
            lines.append(f"{row[0]:{widths[0]}}{cells}".rstrip())
            if i >= 2:
                lines.append(f"    add: {flags[i - 2]}")
        for choice in result["advice"]:
            if not choice["capacity"]["fits"]:
                lines.append(f"{choice['title']}: {choice['capacity']['reason']}")
        if not upstream["fits"]:
            lines.append(
                "upstream does not fit, so there is no upstream KV cache or slot "
                "count to start from: only the launch as given."
            )
    for role, reason in result["nothing_to_spend"].items():
        lines.append(f"{ROLE_TITLES[role]}: nothing to spend: {reason}.")
    return lines
