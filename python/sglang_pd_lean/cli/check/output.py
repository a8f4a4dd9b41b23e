"""``check``, printing: one table row per server and rank, each prediction beside
its measurement, the verdict; or the same as JSON (docs/check.md).

    print("\\n".join(render(urls, answers, predictions, code)))
    json.dumps(check_json(urls, answers, predictions, code))
"""

from __future__ import annotations

from typing import Any

from sglang_pd_lean.cli.check.judge import Figure, Prediction
from sglang_pd_lean.cli.check.router import listing_json
from sglang_pd_lean.cli.check.servers import Server, Unanswered
from sglang_pd_lean.cli.grid import grid
from sglang_pd_lean.units import human_bytes

SCHEMA_VERSION = 1


def rows(server: Server) -> list[dict[str, str]]:
    """The table's rows for one server, one per rank: cell by ``HEADER`` name."""
    out = []
    for rank in server.ranks:
        record = rank.record

        def recorded(column, key, record=record):
            return record.budget_figure(column, key) if record else None

        freed = sum(rank.not_allocated_bytes.values())
        cells = [
            server.url,
            str(rank.index),
            server.role + ("" if server.speculative else " (no spec)"),
            server.version,
            str(rank.state),
            ", ".join(f"{g}: {s}" for g, s in rank.gates.items()) or "-",
            human_bytes(freed) if rank.record else "-",
            _pair(*(recorded(c, "kv_tokens") for c in COLUMNS), rank.kv_tokens),
            _pair(*(recorded(c, "mamba_slots") for c in COLUMNS), rank.mamba_slots),
        ]
        out.append(dict(zip(HEADER, cells, strict=True)))
    return out


def _pair(upstream: Any, now: Any, has: Any) -> str:
    """``upstream -> now`` where the budget gate recorded both, else what the
    rank has (the budget gate did not act: upstream's own figure)."""
    if upstream is None and now is None:
        return _count(has)
    return f"{_count(upstream)} -> {_count(now)}"


def _count(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else "-"


HEADER = [
    "server",
    "rank",
    "role",
    "SGLang",
    "plugin",
    "gates",
    "not allocated",
    "KV tokens (upstream -> now)",
    "mamba slots (upstream -> now)",
]


COLUMNS = ("upstream", "plugin")


def server_json(server: Server) -> dict:
    return {
        "url": server.url,
        "ok": True,
        "role": server.role,
        "speculative_algorithm": server.info.get("speculative_algorithm"),
        "sglang_version": server.version,
        "tp_size": server.info.get("tp_size"),
        "dp_size": server.info.get("dp_size"),
        "pp_size": server.info.get("pp_size"),
        "prefill_target": server.prefill_target,
        "problems": server.problems(),
        "ranks": [
            {
                "rank": rank.index,
                "plugin": str(rank.state),
                "record_error": rank.record_error,
                "gates": rank.gates,
                "not_allocated_bytes": rank.not_allocated_bytes,
                "budget": rank.budget or None,
                "kv_tokens": rank.kv_tokens,
                "mamba_slots": rank.mamba_slots,
                "total_rest_memory_gib": (
                    rank.record.total_rest_memory_gib if rank.record else None
                ),
            }
            for rank in server.ranks
        ],
    }


def unanswered_json(url: str, error: Unanswered) -> dict:
    return {"url": url, "ok": False, "error": str(error)}


def check_json(
    urls: list[str], answers: list, predictions: dict, code: int, listings: list = ()
) -> dict:
    servers = []
    for url, answer in zip(urls, answers, strict=True):
        if isinstance(answer, Unanswered):
            servers.append(unanswered_json(url, answer))
            continue
        entry = server_json(answer)
        if url in predictions:
            entry["prediction"] = prediction_json(predictions[url])
        servers.append(entry)
    return {
        "schema_version": SCHEMA_VERSION,
        "exit_code": code,
        "servers": servers,
        "routers": [listing_json(listing) for listing in listings],
    }


def prediction_json(prediction: Prediction) -> dict:
    if prediction.error is not None:
        return {"error": prediction.error}
    return {
        "figures": [
            {
                "name": f.name.strip(),
                "predicted": f.predicted,
                "measured": f.measured,
                "unit": f.unit,
                "agrees": f.agrees,
            }
            for f in prediction.figures
        ],
        "would_free_bytes": prediction.would_free,
        "advice": list(prediction.advice),
    }


def render(
    urls: list[str], answers: list, predictions: dict, code: int, listings: list = ()
) -> list[str]:
    table = [r for a in answers if isinstance(a, Server) for r in rows(a)]
    lines = [listing.summary() for listing in listings]
    lines += [""] if lines and table else []
    lines += _columns(table) if table else []
    for url, answer in zip(urls, answers, strict=True):
        if isinstance(answer, Unanswered):
            lines.append(f"{url}: no answer: {answer}")
    for answer in answers:
        if isinstance(answer, Server) and answer.url in predictions:
            lines += ["", *prediction_lines(answer, predictions[answer.url])]
    lines += ["", *verdict_lines(answers, code, listings)]
    return lines


def _columns(table: list[dict[str, str]]) -> list[str]:
    """Left-aligned columns under ``HEADER`` (all but the gates); each row's gates
    on a line below it."""
    shown = [h for h in HEADER if h != "gates"]
    rows = [shown] + [[row[h] for h in shown] for row in table]
    below = {i: f"    gates: {row['gates']}" for i, row in enumerate(table, 1)}
    return grid(rows, align="<", below=below)


def prediction_lines(server: Server, prediction: Prediction) -> list[str]:
    head = f"{server.url} ({server.role}): the report on this server's own arguments"
    if prediction.error is not None:
        return [f"{head}: not predicted: {prediction.error}"]
    lines = [head + ":"]
    if prediction.would_free is not None:
        lines.append(
            f"  no plugin here: it would not allocate "
            f"{human_bytes(prediction.would_free)} per rank"
        )
    width = max((len(f.name) for f in prediction.figures), default=0)
    for f in prediction.figures:
        verdict = {True: "agrees", False: "DIFFERS", None: "-"}[f.agrees]
        lines.append(
            f"  {f.name:{width}}  predicted {_figure(f, f.predicted)}, "
            f"measured {_figure(f, f.measured)}: {verdict}"
        )
    lines += [f"  {line}" for line in prediction.advice]
    return lines


def _figure(figure: Figure, value: int | None) -> str:
    if value is None:
        return "-"
    if figure.unit != "bytes":
        return f"{value:,}"
    if value < 1024:
        return f"{value} B"
    return f"{human_bytes(value)} ({value:,} B)"


def verdict_lines(answers: list, code: int, listings: list = ()) -> list[str]:
    lines = []
    for answer in answers:
        if isinstance(answer, Server):
            lines += [f"{answer.url}: {p}" for p in answer.problems()]
    unhealthy = [(w, listing) for listing in listings for w in listing.unhealthy]
    lines += [
        f"{worker.url}: the router {listing.router} marks it unhealthy"
        for worker, listing in unhealthy
    ]
    no_listing = sum(listing.error is not None for listing in listings)
    unanswered = sum(isinstance(a, Unanswered) for a in answers)
    failing = sum(isinstance(a, Server) and bool(a.problems()) for a in answers)
    if code == 0:
        lines.append(
            "lean: no prefill target holds verify-only state the plugin could remove"
        )
    else:
        routers = (
            f", {len(unhealthy)} worker(s) a router marks unhealthy, {no_listing} "
            "router(s) gave no listing"
            if listings
            else ""
        )
        lines.append(
            f"exit {code}: {failing} prefill server(s) hold verify-only state, "
            f"{unanswered} server(s) did not answer{routers}"
        )
    return lines
