"""``check``, judging: which servers fail the check, and the report on each
server's own arguments beside what the server has.

    exit_code(answers, listings)           # 0 lean, 1 not lean, 2 bad answers
    predictions = predict_all(answers, args, model)

Prediction: the report's own census (``census.live.predict``: the installed
SGLang resolves the server's arguments again, with the budget the plugin recorded
on the server where there is one), prediction beside measurement for the bytes not
allocated, the mamba slots and the KV tokens, and for a prefill server the report's
advice on spending the freed bytes.
"""

from __future__ import annotations

import dataclasses

from sglang_pd_lean.cli.check.servers import PluginState, Rank, Server, Unanswered


def exit_code(answers: list, listings: list = ()) -> int:
    """2 where a server did not answer, a router gave no listing or marks a worker
    unhealthy; else 1 where a prefill target fails; else 0."""
    if any(isinstance(a, Unanswered) for a in answers):
        return 2
    if any(listing.error is not None or listing.unhealthy for listing in listings):
        return 2
    return 1 if any(a.problems() for a in answers) else 0


@dataclasses.dataclass(frozen=True)
class Figure:
    """One figure of a server, as the report predicts it and as the server has it."""

    name: str
    predicted: int | None
    measured: int | None
    unit: str = "count"  # or "bytes"

    @property
    def agrees(self) -> bool | None:
        if self.predicted is None or self.measured is None:
            return None
        return self.predicted == self.measured


@dataclasses.dataclass(frozen=True)
class Prediction:
    """The report on one server's own arguments, beside what the server has."""

    figures: tuple[Figure, ...] = ()
    would_free: int | None = None  # bytes the plugin would give back (no record)
    advice: tuple[str, ...] = ()  # the report's advice lines (a prefill server)
    error: str | None = None  # why there is no prediction


def compare(server: Server, report) -> Prediction:
    """Prediction beside measurement for ``server`` (its rank 0; every rank of a
    server is sized alike): the column the server runs (with the plugin where it
    has a record, else upstream's) against what the rank reports."""
    rank = server.ranks[0]
    role = server.role
    freed = _freed(report.roles[role])
    sized = report.capacity[role]
    active = rank.state is PluginState.ACTIVE
    column = sized.column("plugin" if active else "upstream")
    measured = rank.not_allocated_bytes
    predicted = freed if active else {}
    figures = [
        Figure(
            "bytes not allocated",
            sum(predicted.values()),
            sum(measured.values()),
            unit="bytes",
        ),
        *(
            Figure(f"  {c}", predicted.get(c, 0), measured.get(c, 0), unit="bytes")
            for c in sorted(set(predicted) | set(measured))
        ),
        Figure("mamba slots", _int(column, "mamba_slots"), rank.mamba_slots),
        Figure("KV tokens", _int(column, "kv_tokens"), rank.kv_tokens),
        *_budget_figures(rank, sized),
    ]
    return Prediction(
        tuple(figures),
        would_free=None if active else sum(freed.values()),
        advice=_advice(report, role),
    )


def _budget_figures(rank: Rank, sized) -> list[Figure]:
    """The budget gate's upstream and plugin figures, recorded and predicted
    (``sized``: the role's ``RoleSizing``)."""
    figures = []
    for side in ("upstream", "plugin"):
        if rank.record is None or not isinstance(rank.budget.get(side), dict):
            continue
        for key, label in (("mamba_slots", "mamba slots"), ("kv_tokens", "KV tokens")):
            figures.append(
                Figure(
                    f"budget gate: {side} {label}",
                    _int(sized.column(side), key),
                    rank.record.budget_figure(side, key),
                )
            )
    return figures


def _advice(report, role: str) -> tuple[str, ...]:
    """The report's advice lines for a prefill server (its own role's only), and
    what it does not build, piece by piece."""
    from sglang_pd_lean.cli.table import advice_lines, pieces_lines

    if role != "prefill":
        return ()
    lines = advice_lines(report, roles=(role,))
    if report.prefill_pieces:
        lines += pieces_lines(report.prefill_pieces)
    return tuple(lines)


def _freed(pools) -> dict[str, int]:
    """Per component, the bytes upstream's pool holds and the plugin's does not."""
    up, now = pools.upstream.components, pools.plugin.components
    return {c: up[c] - now.get(c, 0) for c in up if up[c] > now.get(c, 0)}


def _int(sized, key: str) -> int | None:
    """One figure of a ``Sizing``; None where it does not fit."""
    value = getattr(sized, key) if sized.fits else None
    return int(value) if isinstance(value, (int, float)) else None


def predict_all(answers: list, args, model: str | None) -> dict[str, Prediction]:
    """url -> the report's prediction for every server that answered."""
    from sglang_pd_lean.census.environment import load_sglang_plugins, require_seams
    from sglang_pd_lean.census.gpus import LOCAL, gpu_facts
    from sglang_pd_lean.census.inputs import CensusError
    from sglang_pd_lean.census.live import predict

    servers = [a for a in answers if isinstance(a, Server) and a.ranks]
    if not servers:
        return {}
    load_sglang_plugins()
    require_seams()
    out = {}
    for server in servers:
        record = server.ranks[0].record
        budget = record.total_rest_memory_gib if record else None
        cpu = server.info.get("device") == "cpu"
        try:
            gpu = gpu_facts(LOCAL if cpu else args.gpu)
            out[server.url] = compare(server, predict(server.info, gpu, model, budget))
        except CensusError as exc:
            out[server.url] = Prediction(error=str(exc))
    return out
