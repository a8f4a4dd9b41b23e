"""The report as a table: one column per role and column (upstream, plugin), rows per
component, capacity and notes.

    print(render_table(census.report(launch)))

Cells read in GiB, MiB, KiB or B (``sglang_pd_lean.units``); columns right-aligned.
"""

from __future__ import annotations

import shlex

from sglang_pd_lean.accounting import COMPONENT_ORDER
from sglang_pd_lean.census.inputs import COLUMNS, ROLE_TITLES
from sglang_pd_lean.census.results import ModelledMemory, Report
from sglang_pd_lean.cli.grid import column_widths, grid
from sglang_pd_lean.units import human_bytes

OTHER = "other bookkeeping"


def _signed(nbytes: int) -> str:
    sign = "+" if nbytes > 0 else "-" if nbytes < 0 else ""
    return sign + human_bytes(abs(nbytes))


def component_rows(roles) -> list[tuple[str, tuple[str, ...]]]:
    """(row label, components summed in it): the named components that are
    non-zero somewhere, in upstream's order, then the rest as one bookkeeping row.
    The table and the chart both use these (``roles``: per role, a ``Pair``)."""
    columns = [r.column(col) for r in roles.values() for col in COLUMNS]
    present = {c for col in columns for c, n in col.components.items() if n}
    rows = [(name, (name,)) for name in COMPONENT_ORDER if name in present]
    others = tuple(sorted(present - set(COMPONENT_ORDER)))
    if others:
        rows.append((OTHER, others))
    return rows


def _grid(header: list[str], rows: list[list[str]]) -> list[str]:
    """Right-aligned columns as wide as their widest cell; the role titles span two."""
    widths = column_widths(rows)
    widths[0] = max(widths[0], 10)
    for i in range(1, len(widths), 2):  # a title wider than its two widens the second
        widths[i + 1] = max(widths[i + 1], len(header[(i + 1) // 2]) - widths[i] - 2)
    lines = [
        f"{'':{widths[0]}}"
        + "".join(
            f"  {title:>{widths[2 * k + 1] + widths[2 * k + 2] + 2}}"
            for k, title in enumerate(header[1:])
        )
    ]
    return lines + grid(rows, widths=widths)


def render_table(report: Report) -> str:
    """The whole report: header, launch, pools per role and column, capacity,
    sizing notes and advice."""
    lines = _head(report) + launch_header(report) + [""]
    roles, capacity = report.roles, report.capacity
    rows = _pool_rows(roles) + _warmup_rows(report.warmup)
    if capacity:
        rows += _capacity_rows(capacity)
    lines += _grid([""] + [ROLE_TITLES[role] for role in roles], rows)
    for role, reason in (report.refused or {}).items():
        lines.append(f"{ROLE_TITLES[role]}: not shown: {reason}")
    if capacity:
        lines += ["", *_sizing_lines(report), *_capacity_notes(report)]
    if report.advice is not None:
        lines += ["", *advice_lines(report)]
    if report.prefill_pieces:
        lines += ["", *pieces_lines(report.prefill_pieces)]
    return "\n".join(lines)


def pieces_lines(pieces) -> list[str]:
    """What the prefill target does not build, per piece (``census.pieces``)."""
    worker = pieces["worker"]
    rows = [[f"  {name}:", said] for name, said in pieces.items() if name != "worker"]
    return [
        f"The prefill target's verify and decode pieces ({worker}; a decode or "
        f"unified server builds them all):",
        *(grid(rows, align="<") if rows else []),
    ]


def _head(report: Report) -> list[str]:
    inputs = report.inputs
    strategy = inputs.mamba_radix_cache_strategy
    lines = [
        f"SGLang {report.sglang_version}, model {report.model}: bytes per rank",
        f"{_layout(inputs)}, {inputs.speculative_num_draft_tokens} draft tokens, "
        f"{_ssm(inputs.mamba_ssm_dtype)}, "
        f"KV {'MLA ' if inputs.use_mla_backend else ''}{inputs.kv_cache_dtype}, "
        f"context {inputs.context_length}, page size {inputs.page_size}"
        + (f", mamba radix cache {strategy}" if strategy else ""),
    ]
    if inputs.pp > 1:
        stage = inputs.pp_stage_layers
        lines.append(
            f"Pipeline stage {inputs.pp_rank} of {inputs.pp} shown (layers "
            f"{stage[0]}-{stage[1] - 1}: the most linear-attention layers); every "
            f"stage sized, KV tokens the smallest stage's, as SGLang's stages agree."
        )
    if inputs.attn_dp > 1:
        lines.append(
            f"Attention DP {inputs.attn_dp}: pools, slots and requests per shard "
            f"(SGLang divides --max-running-requests and --max-mamba-cache-size)."
        )
    if inputs.not_followed:
        lines.append(
            "Not followed by the census (figures may differ): "
            + "; ".join(inputs.not_followed)
        )
    return [*lines, ""]


def _layout(inputs) -> str:
    attention = (
        f" (attention TP {inputs.attn_tp} x DP {inputs.attn_dp})"
        if inputs.attn_dp > 1
        else ""
    )
    stage = inputs.pp_stage_layers
    return (
        f"TP {inputs.tp}{attention}, PP {inputs.pp} "
        f"(layers {stage[0]}-{stage[1] - 1})"
    )


def _ssm(dtype: str | None) -> str:
    return f"ssm {dtype}" if dtype else "no linear attention"


def _cells(pairs, cell) -> list[str]:
    """One cell per role and column, in the table's order (``pairs``: per role,
    its columns: a ``Pair`` or a ``RoleSizing``)."""
    return [cell(pair.column(col)) for pair in pairs.values() for col in COLUMNS]


def _pool_rows(roles: dict) -> list[list[str]]:
    """Slots, bytes per component, totals and the plugin's change, per column."""
    rows = [["component"] + ["upstream", "plugin"] * len(roles)]
    rows.append(["request slots"] + _cells(roles, lambda c: f"{c.request_slots:,}"))
    rows.append(["mamba slots"] + _cells(roles, lambda c: f"{c.mamba_slots:,}"))
    for label, names in component_rows(roles):
        rows.append(
            [label]
            + _cells(
                roles,
                lambda c, names=names: human_bytes(
                    sum(c.components.get(n, 0) for n in names)
                ),
            )
        )
    rows.append(["total"] + _cells(roles, lambda c: human_bytes(c.total_bytes)))
    rows.append(
        ["verify-only"] + _cells(roles, lambda c: human_bytes(c.verify_only_bytes))
    )
    change = ["change with plugin"]
    for r in roles.values():
        change += ["", _signed(r.plugin.total_bytes - r.upstream.total_bytes)]
    rows.append(change)
    return rows


def _warmup_rows(warm) -> list[list[str]]:
    if not warm:
        return []
    return [
        ["warmup, transient:"] + [""] * (2 * len(warm)),
        ["autotune buffers"]
        + _cells(warm, lambda w: human_bytes(w.autotune_buffers_bytes)),
    ]


def _capacity_rows(capacity) -> list[list[str]]:
    def cells(key, fmt):
        return _cells(
            capacity, lambda c: fmt(getattr(c, key)) if c.fits else "does not fit"
        )

    return [
        ["capacity:"] + [""] * (2 * len(capacity)),
        ["KV cache"] + cells("kv_cache_bytes", human_bytes),
        ["KV tokens"] + cells("kv_tokens", lambda v: f"{v:,}"),
    ]


def _sizing_lines(report: Report) -> list[str]:
    """How a sized census sized (its memory per role is in the rows above)."""
    sizing = report.inputs.mamba_sizing
    lines = [
        "Sizing: SGLang's own, from the available memory above, per role; mamba "
        f"slots {sizing}."
    ]
    if sizing.startswith("automatic"):
        lines.append(
            "Automatic split: SGLang gives the mamba state a fixed share of the "
            "budget; on a prefill target the plugin spends the verify reservation "
            "on more mamba slots, not on KV (docs/memory-model.md)."
        )
    return lines


def _capacity_notes(report: Report) -> list[str]:
    """Columns that do not fit (with SGLang's reason), requests SGLang capped, and
    what the plugin changes in each role's sizing."""
    capacity, notes = report.capacity, []
    unfit: dict[str, list[str]] = {}
    for role, c in capacity.items():
        for col in COLUMNS:
            if not c.column(col).fits:
                unfit.setdefault(c.column(col).reason, []).append(
                    f"{col} {ROLE_TITLES[role]}"
                )
    for reason, where in unfit.items():
        notes.append(f"does not fit ({reason}): {', '.join(where)}")
    for role, c in capacity.items():
        for col in COLUMNS:
            if c.column(col).requests_capped:
                asked = report.resolved[role].max_running_requests
                notes.append(
                    f"{col} {ROLE_TITLES[role]}: {c.column(col).max_running_requests:,} "
                    f"of {asked:,} running requests (SGLang caps them by the mamba "
                    f"slots and KV tokens it sized)"
                )
    for role, c in capacity.items():
        said = _change_words(c.change)
        if said:
            notes.append(f"{ROLE_TITLES[role]} with the plugin: {', '.join(said)}")
    return notes


def _change_words(change) -> list[str]:
    """What the plugin changes in one role's sizing (a ``Change``, or None), the
    changed figures only."""
    if change is None:
        return []
    words = (
        ("mamba_slots", lambda v: f"{v:+,} mamba slots"),
        ("kv_cache_bytes", lambda v: f"KV cache {_signed(v)}"),
        ("kv_tokens", lambda v: f"{v:+,} KV tokens"),
        ("max_running_requests", lambda v: f"{v:+,} request slots"),
    )
    return [say(getattr(change, key)) for key, say in words if getattr(change, key)]


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


def launch_header(report: Report) -> list[str]:
    """The launch flags, what SGLang resolved from them per role, and the memory
    per rank where the launch is sized."""
    launch, resolved, memory = report.launch, report.resolved, report.memory
    roles = list(resolved)
    rows = [["resolved by SGLang"] + [ROLE_TITLES[r] for r in roles]]
    rows.append(
        ["server flags give"]
        + ["this server" if r == launch.role else "other role" for r in roles]
    )
    for key, label in RESOLVED_ROWS:
        rows.append([label] + [_cell(getattr(resolved[r], key)) for r in roles])
    if memory:
        rows += _memory_rows(memory, roles)
    lines = [
        f"Launch flags: {shlex.join(launch.argv)}",
        f"Launch flags resolved by SGLang on {_where(launch.gpu)}; the other roles: "
        f"the same flags with --disaggregation-mode replaced.",
    ]
    return lines + grid(rows) + [_memory_source(memory)]


def _where(gpu) -> str:
    if not gpu.sm:
        return gpu.name
    return f"{gpu.name} ({gpu.memory_mib / 1024:.2f} GiB, SM {gpu.sm})"


def _memory_rows(memory, roles: list[str]) -> list[list[str]]:
    rows = [
        ["draft layers in KV"]
        + [str(memory[r].draft_layers_in_kv_sizing) for r in roles]
    ]
    if isinstance(memory[roles[0]], ModelledMemory):
        rows.append(["weights"] + [human_bytes(memory[r].weights_bytes) for r in roles])
        rows.append(
            ["draft weights"]
            + [human_bytes(memory[r].draft_weights_bytes) for r in roles]
        )
    rows.append(
        ["available (A)"]
        + [human_bytes(memory[r].available_gib * (1 << 30)) for r in roles]
    )
    return rows


def _memory_source(memory) -> str:
    if not memory:
        return (
            "Not sized: no memory named, so each pool is built at the flags' own "
            "counts (--gpu or --available-gib sizes them as the server would)."
        )
    first = next(iter(memory.values()))
    if not isinstance(first, ModelledMemory):
        return "Available memory A per rank: --available-gib, exactly."
    return (
        f"Weights: {first.weights_source}. A = (T - C) * mem_fraction_static "
        f"- weights, T the GPU's memory, C = {first.cuda_context_gib:g} GiB "
        f"of CUDA context and communicators (--available-gib gives A exactly)."
    )


ADVICE_HEADER = ("KV cache", "KV tokens", "mamba slots", "request slots", "fits")


def _capacity_cells(cap) -> list[str]:
    """A ``Sizing`` or a choice's ``Capacity``, under ``ADVICE_HEADER``."""
    if not cap.fits:
        return ["does not fit"] * 4 + ["no"]
    return [
        human_bytes(cap.kv_cache_bytes),
        f"{cap.kv_tokens:,}",
        f"{cap.mamba_slots:,}",
        f"{cap.max_running_requests:,}",
        "yes",
    ]


def advice_lines(report: Report, roles: tuple[str, ...] | None = None) -> list[str]:
    """How to spend what the plugin frees on the prefill target: per choice, the
    flags to add and what SGLang's sizing gives with them; else why nothing
    (for ``roles``; None: every role the report names)."""
    lines = []
    if report.advice:
        upstream = report.capacity["prefill"].upstream
        rows = [["", *ADVICE_HEADER]]
        rows.append(["upstream, without the plugin", *_capacity_cells(upstream)])
        below = {}
        for choice in report.advice:
            rows.append([choice.title, *_capacity_cells(choice.capacity)])
            below[len(rows) - 1] = f"    add: {' '.join(choice.flags) or 'nothing'}"
        lines.append(
            "How to spend what the plugin frees on the prefill target: each "
            "choice's flags added to the prefill server's flags, SGLang's sizing "
            "run again with them."
        )
        lines += grid(rows, below=below)
        for choice in report.advice:
            if not choice.capacity.fits:
                lines.append(f"{choice.title}: {choice.capacity.reason}")
        if not upstream.fits:
            lines.append(
                "upstream does not fit, so there is no upstream KV cache or slot "
                "count to start from: only the launch as given."
            )
    for role, reason in report.nothing_to_spend.items():
        if roles is not None and role not in roles:
            continue
        lines.append(f"{ROLE_TITLES[role]}: nothing to spend: {reason}.")
    return lines
