"""``check``, asking: each server's ``/server_info``, read into typed answers.

    servers = ask_all(["http://prefill-0:30000"], timeout=10, concurrency=8)
    servers[0].ranks[0].record.gates  # the plugin's record (sglang_pd_lean.record)

Each server is asked for SGLang's ``/server_info`` (its resolved server arguments,
its SGLang version, and one internal state per scheduler rank, where the plugin's
record sits as ``["pd_lean"]``, read by ``record.Record.read``), at most
``concurrency`` servers at a time, each request bounded by ``timeout``. A server
that does not answer, or answers something that is not SGLang's, is an
``Unanswered`` with one line.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import urllib.error
import urllib.parse
import urllib.request
from enum import Enum
from typing import Any

from sglang_pd_lean.cli.args import UsageError
from sglang_pd_lean.compat import SUPPORTED, GateState, release
from sglang_pd_lean.record import Record, UnreadableRecord

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
    UNREADABLE = "record unreadable"  # a record with a field of another type

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass(frozen=True)
class Rank:
    """One scheduler rank's entry of ``internal_states``."""

    index: int
    state: PluginState
    record: Record | None  # the plugin's record, as the server reported it
    kv_tokens: int | None  # the KV cache's token capacity the rank reports
    mamba_slots: int | None  # the mamba slots the rank schedules with
    record_error: str | None = None  # why the record could not be read

    @property
    def gates(self) -> dict[str, str]:
        return dict(self.record.gates) if self.record else {}

    @property
    def not_allocated_bytes(self) -> dict[str, int]:
        return dict(self.record.not_allocated_bytes) if self.record else {}

    @property
    def budget(self) -> dict:
        return dict(self.record.budget) if self.record else {}


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
            elif rank.state is PluginState.UNREADABLE:
                found.append(f"{where}plugin record unreadable: {rank.record_error}")
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
        error = None
        try:
            record = Record.read(state.get("pd_lean"))
        except UnreadableRecord as exc:
            record, error = None, str(exc)
        if error is not None:
            plugin = PluginState.UNREADABLE
        elif record is not None:
            plugin = PluginState.ACTIVE
        else:
            plugin = PluginState.ABSENT if supported else PluginState.UNSUPPORTED
        usage = state.get("memory_usage") or {}
        tokens = usage.get("token_capacity", info.get("max_total_num_tokens"))
        slots = state.get("max_mamba_cache_size")
        ranks.append(Rank(index, plugin, record, tokens, slots, error))
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
