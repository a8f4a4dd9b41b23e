"""``sglang-pd-lean check URL...``: is every prefill server of a fleet lean, and what
is each one leaving on the table?

    sglang-pd-lean check http://prefill-0:30000 http://prefill-1:30000 http://decode-0:30000
    sglang-pd-lean check --json --timeout 10 --no-predict URL...

Each server is asked for SGLang's ``/server_info`` (its resolved server arguments,
its SGLang version, and one internal state per scheduler rank, where the plugin's
record sits as ``["pd_lean"]``), at most ``--concurrency`` servers at a time, each
request bounded by ``--timeout``. One row per server and rank: role, release, plugin
state, each gate's state, the bytes the plugin did not allocate, and the budget
gate's KV tokens and mamba slots, upstream's and now.

Then, per server (unless ``--no-predict``), the report's own census on the server's
own arguments (the installed SGLang resolves them again, with the budget the plugin
recorded on the server where there is one): prediction beside measurement for the
bytes not allocated, the mamba slots and the KV tokens, and for a prefill server the
report's advice on spending the freed bytes.

Exit codes: 0 when no prefill target holds verify-only state the plugin could
remove; 1 when one does (each named, with why: no plugin record, an unsupported
release, a gate not registered); 2 for bad input or a server that does not answer
(one line each; the other servers are still checked), which wins over 1. Decode and
unified servers, and prefill servers without speculative decoding, are listed and
never fail. The kill switch (``SGLANG_PD_LEAN=0``) registers nothing, so a server
under it has no record, the same as one without the plugin.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from enum import Enum
from typing import Any

from sglang_pd_lean.cli.args import UsageError
from sglang_pd_lean.compat import SUPPORTED, GateState, release
from sglang_pd_lean.units import human_bytes

SCHEMA_VERSION = 1
# Gate states in a record that leave a prefill target's verify work in place.
NOT_APPLIED = (
    GateState.UNSAFE.value,
    GateState.MISSING.value,
    GateState.UNHANDLED.value,
    GateState.DISABLED.value,
)
NO_RECORD = (
    "no plugin record (not installed, left out of SGLANG_PLUGINS, or SGLANG_PD_LEAN=0)"
)


class PluginState(str, Enum):
    """The plugin on one scheduler rank, as its ``/server_info`` entry shows it."""

    ACTIVE = "active"  # a record: the plugin registered its gates
    ABSENT = "absent"  # no record on a supported release
    UNSUPPORTED = "unsupported release"  # no record, and not a release we support

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass(frozen=True)
class Rank:
    """One scheduler rank's entry of ``internal_states``."""

    index: int
    state: PluginState
    record: dict | None  # the plugin's record, as the server reported it
    kv_tokens: int | None  # the KV cache's token capacity the rank reports
    mamba_slots: int | None  # the mamba slots the rank schedules with

    @property
    def gates(self) -> dict[str, str]:
        return dict((self.record or {}).get("gates", {}))

    @property
    def not_allocated_bytes(self) -> dict[str, int]:
        return dict((self.record or {}).get("not_allocated_bytes", {}))

    @property
    def budget(self) -> dict:
        return dict((self.record or {}).get("budget") or {})


@dataclasses.dataclass(frozen=True)
class Server:
    """What one server answered."""

    url: str
    info: dict  # /server_info as served
    ranks: tuple[Rank, ...]

    @property
    def version(self) -> str:
        return str(self.info.get("version"))

    @property
    def role(self) -> str:
        return str(self.info.get("disaggregation_mode") or "null")

    @property
    def speculative(self) -> bool:
        return self.info.get("speculative_algorithm") not in (None, "", "NONE")

    @property
    def prefill_target(self) -> bool:
        """A PD prefill server whose target would verify drafts upstream."""
        return self.role == "prefill" and self.speculative

    def problems(self) -> list[str]:
        """Why this server's prefill target may still hold verify-only state."""
        if not self.prefill_target:
            return []
        found = []
        for rank in self.ranks:
            where = f"rank {rank.index}: "
            if rank.state is PluginState.UNSUPPORTED:
                found.append(
                    f"{where}SGLang {self.version} is not a release the plugin "
                    f"supports ({SUPPORTED[0]} to {SUPPORTED[-1]}) and it has no "
                    f"plugin record"
                )
            elif rank.state is PluginState.ABSENT:
                found.append(where + NO_RECORD)
            for gate, state in rank.gates.items():
                if state in NOT_APPLIED:
                    found.append(f"{where}{gate} gate {state}")
        return found


class Unanswered(Exception):
    """A server that did not answer, or answered something that is not SGLang's
    ``/server_info``: one line."""


def normalize(url: str) -> str:
    """``host:port`` or ``http(s)://host:port[/]`` -> ``http(s)://host:port``."""
    text = url.strip()
    if "://" not in text:
        text = "http://" + text
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"{url!r} is not a server URL (http://HOST:PORT)")
    try:
        _ = parts.port
    except ValueError:
        raise UsageError(f"{url!r}: the port is not a number") from None
    return text.rstrip("/")


def ask(url: str, timeout: float) -> Server:
    """``url``'s ``/server_info``, read into a ``Server``."""
    try:
        with urllib.request.urlopen(url + "/server_info", timeout=timeout) as reply:
            body = reply.read()
    except urllib.error.HTTPError as exc:
        raise Unanswered(f"GET /server_info: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise Unanswered(f"GET /server_info: {reason}") from None
    try:
        info = json.loads(body)
    except ValueError:
        raise Unanswered("GET /server_info: the answer is not JSON") from None
    return read_server(url, info)


def read_server(url: str, info: Any) -> Server:
    """A ``/server_info`` document -> ``Server``."""
    states = info.get("internal_states") if isinstance(info, dict) else None
    if not isinstance(states, list) or "version" not in info:
        raise Unanswered(
            "GET /server_info: not SGLang's server info (no version or "
            "internal_states)"
        )
    supported = release(str(info["version"])) in SUPPORTED
    ranks = []
    for index, state in enumerate(states):
        state = state if isinstance(state, dict) else {}
        record = state.get("pd_lean")
        if isinstance(record, dict):
            plugin = PluginState.ACTIVE
        else:
            record = None
            plugin = PluginState.ABSENT if supported else PluginState.UNSUPPORTED
        usage = state.get("memory_usage") or {}
        tokens = usage.get("token_capacity", info.get("max_total_num_tokens"))
        slots = state.get("max_mamba_cache_size")
        ranks.append(Rank(index, plugin, record, tokens, slots))
    return Server(url, info, tuple(ranks))


def ask_all(
    urls: list[str], timeout: float, concurrency: int
) -> list[Server | Unanswered]:
    """Every server's answer (or why none), in the order given."""
    workers = max(1, min(concurrency, len(urls)))
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(ask, url, timeout) for url in urls]
        answers: list[Server | Unanswered] = []
        for future in futures:
            try:
                answers.append(future.result())
            except Unanswered as exc:
                answers.append(exc)
    return answers


def exit_code(answers: list) -> int:
    if any(isinstance(a, Unanswered) for a in answers):
        return 2
    return 1 if any(a.problems() for a in answers) else 0


def rows(server: Server) -> list[list[str]]:
    """The table's rows for one server: one per rank."""
    out = []
    for rank in server.ranks:
        budget = rank.budget
        up, now = budget.get("upstream") or {}, budget.get("plugin") or {}
        freed = sum(rank.not_allocated_bytes.values())
        out.append(
            [
                server.url,
                str(rank.index),
                server.role + ("" if server.speculative else " (no spec)"),
                server.version,
                str(rank.state),
                ", ".join(f"{g}: {s}" for g, s in rank.gates.items()) or "-",
                human_bytes(freed) if rank.record else "-",
                _pair(up.get("kv_tokens"), now.get("kv_tokens"), rank.kv_tokens),
                _pair(up.get("mamba_slots"), now.get("mamba_slots"), rank.mamba_slots),
            ]
        )
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
                "gates": rank.gates,
                "not_allocated_bytes": rank.not_allocated_bytes,
                "budget": rank.budget or None,
                "kv_tokens": rank.kv_tokens,
                "mamba_slots": rank.mamba_slots,
                "total_rest_memory_gib": (rank.record or {}).get(
                    "total_rest_memory_gib"
                ),
            }
            for rank in server.ranks
        ],
    }


def unanswered_json(url: str, error: Unanswered) -> dict:
    return {"url": url, "ok": False, "error": str(error)}


def model_override(args) -> str | None:
    path = args.config or args.model_path
    if path is not None and not os.path.exists(path):
        raise UsageError(f"{path}: no such file or folder")
    return path


def _known_gpu(name: str | None) -> None:
    """An unknown ``--gpu`` is bad input before any server is asked."""
    from sglang_pd_lean.census.inputs import CensusError
    from sglang_pd_lean.census.launch import gpu_facts

    try:
        gpu_facts(name)
    except CensusError as exc:
        raise UsageError(str(exc)) from None


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


def compare(server: Server, result: dict) -> Prediction:
    """Prediction beside measurement for ``server`` (its rank 0; every rank of a
    server is sized alike): the column the server runs (with the plugin where it
    has a record, else upstream's) against what the rank reports."""
    rank = server.ranks[0]
    role = server.role
    freed = _freed(result["roles"][role])
    sized = result["capacity"][role]
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
        advice=_advice(result, role),
    )


def _budget_figures(rank: Rank, sized) -> list[Figure]:
    """The budget gate's upstream and plugin figures, recorded and predicted
    (``sized``: the role's ``RoleSizing``)."""
    figures = []
    for side, recorded in rank.budget.items():
        if not isinstance(recorded, dict):
            continue
        for key, label in (("mamba_slots", "mamba slots"), ("kv_tokens", "KV tokens")):
            figures.append(
                Figure(
                    f"budget gate: {side} {label}",
                    _int(sized.column(side), key),
                    recorded.get(key),
                )
            )
    return figures


def _advice(result: dict, role: str) -> tuple[str, ...]:
    """The report's advice lines for a prefill server (its own role's only)."""
    from sglang_pd_lean.cli.table import advice_lines

    if role != "prefill":
        return ()
    reasons = {k: v for k, v in result["nothing_to_spend"].items() if k == role}
    return tuple(advice_lines({**result, "nothing_to_spend": reasons}))


def _freed(pools: dict) -> dict[str, int]:
    """Per component, the bytes upstream's pool holds and the plugin's does not."""
    up, now = pools["upstream"].components, pools["plugin"].components
    return {c: up[c] - now.get(c, 0) for c in up if up[c] > now.get(c, 0)}


def _int(sized, key: str) -> int | None:
    """One figure of a ``Sizing``; None where it does not fit."""
    value = getattr(sized, key) if sized.fits else None
    return int(value) if isinstance(value, (int, float)) else None


def predict_all(answers: list, args, model: str | None) -> dict[str, Prediction]:
    """url -> the report's prediction for every server that answered."""
    from sglang_pd_lean.census.inputs import CensusError
    from sglang_pd_lean.census.launch import LOCAL, gpu_facts
    from sglang_pd_lean.census.served import predict
    from sglang_pd_lean.cli.environment import load_sglang_plugins, require_seams

    servers = [a for a in answers if isinstance(a, Server) and a.ranks]
    if not servers:
        return {}
    load_sglang_plugins()
    require_seams()
    out = {}
    for server in servers:
        budget = (server.ranks[0].record or {}).get("total_rest_memory_gib")
        cpu = server.info.get("device") == "cpu"
        try:
            gpu = gpu_facts(LOCAL if cpu else args.gpu)
            result = predict(server.info, gpu, model, budget)
            out[server.url] = compare(server, result)
        except CensusError as exc:
            out[server.url] = Prediction(error=str(exc))
    return out


def cmd_check(args) -> int:
    model = model_override(args)
    _known_gpu(args.gpu)
    answers: list = []
    urls = []
    for url in args.urls:
        try:
            urls.append(normalize(url))
        except UsageError as exc:
            urls.append(url)
            answers.append((len(urls) - 1, Unanswered(str(exc))))
    bad = dict(answers)
    asked = [u for i, u in enumerate(urls) if i not in bad]
    got = iter(ask_all(asked, args.timeout, args.concurrency))
    answers = [bad[i] if i in bad else next(got) for i in range(len(urls))]
    predictions = {} if args.no_predict else predict_all(answers, args, model)
    code = exit_code(answers)
    if args.json:
        print(json.dumps(check_json(urls, answers, predictions, code), indent=2))
    else:
        print("\n".join(render(urls, answers, predictions, code)))
    return code


def check_json(urls: list[str], answers: list, predictions: dict, code: int) -> dict:
    servers = []
    for url, answer in zip(urls, answers, strict=True):
        if isinstance(answer, Unanswered):
            servers.append(unanswered_json(url, answer))
            continue
        entry = server_json(answer)
        if url in predictions:
            entry["prediction"] = prediction_json(predictions[url])
        servers.append(entry)
    return {"schema_version": SCHEMA_VERSION, "exit_code": code, "servers": servers}


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


def render(urls: list[str], answers: list, predictions: dict, code: int) -> list[str]:
    table = [r for a in answers if isinstance(a, Server) for r in rows(a)]
    lines = _columns(table) if table else []
    for url, answer in zip(urls, answers, strict=True):
        if isinstance(answer, Unanswered):
            lines.append(f"{url}: no answer: {answer}")
    for answer in answers:
        if isinstance(answer, Server) and answer.url in predictions:
            lines += ["", *prediction_lines(answer, predictions[answer.url])]
    lines += ["", *verdict_lines(answers, code)]
    return lines


def _columns(table: list[list[str]]) -> list[str]:
    """Left-aligned columns under ``HEADER``; each row's gates on a line below it."""
    shown = [HEADER[:5] + HEADER[6:]] + [row[:5] + row[6:] for row in table]
    widths = [max(len(row[i]) for row in shown) for i in range(len(shown[0]))]
    lines = ["  ".join(f"{c:{w}}" for c, w in zip(shown[0], widths, strict=True))]
    for row, cells in zip(table, shown[1:], strict=True):
        lines.append("  ".join(f"{c:{w}}" for c, w in zip(cells, widths, strict=True)))
        lines.append(f"    gates: {row[5]}")
    return [line.rstrip() for line in lines]


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


def verdict_lines(answers: list, code: int) -> list[str]:
    lines = []
    for answer in answers:
        if isinstance(answer, Server):
            lines += [f"{answer.url}: {p}" for p in answer.problems()]
    unanswered = sum(isinstance(a, Unanswered) for a in answers)
    failing = sum(isinstance(a, Server) and bool(a.problems()) for a in answers)
    if code == 0:
        lines.append(
            "lean: no prefill target holds verify-only state the plugin could remove"
        )
    else:
        lines.append(
            f"exit {code}: {failing} prefill server(s) hold verify-only state, "
            f"{unanswered} server(s) did not answer"
        )
    return lines
