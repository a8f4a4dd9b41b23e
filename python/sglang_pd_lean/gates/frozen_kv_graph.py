"""Frozen-KV MTP graph gate: a prefill server's frozen-KV MTP draft worker captures
no draft decode CUDA graph.

Hooks (AROUND) ``FrozenKVMTPDraftWorker._capture_cuda_graphs`` in
``sglang/srt/speculative/frozen_kv_mtp_worker_v2.py`` (FROZEN_KV_MTP, which SGLang
also resolves NEXTN or EAGLE to for a Gemma 4 assistant draft), SGLang 0.5.16 to
0.5.23. Its one graph (``FrozenKVMTPCudaGraphRunner``) replays only in ``draft()``,
the multi-step drafting that follows a target verify. Upstream returns early only
where every phase's CUDA graph is off (``cuda_graph_fully_disabled()``): a prefill
server turns the decode phase off, but the prefill phase defaults to ``breakable``
on CUDA, so with default flags upstream captures the draft graph there and never
replays it.

When the server's target cannot verify, the hook lets upstream run on a view of the
draft worker on which two attributes are tripwires: ``gpu_id``, read (0.5.17+) only
to measure memory right before the capture, and ``draft_model_runner``, the first
thing the graph runner reads of the worker (0.5.16 measures nothing). Upstream takes
its own early returns (CUDA graphs fully off, no draft steps, not CUDA, each with its
own log line) unchanged: the gate steps aside with upstream's result. A tripped wire
leaves the worker as upstream's early return leaves it (``cuda_graph_runner`` None:
"run the draft eagerly"). Upstream's "capture begin" line, logged just before the
wire, is held back when the wire trips (nothing was captured) and passed on when it
does not. Nothing here assumes a hybrid model or a mamba pool.

Deliberately left alone: the draft's prefill graph (its draft extend runs on a
prefill server) and every draft worker of another class.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from sglang_pd_lean import seams
from sglang_pd_lean.gates.base import Call, DraftCaptureGate


class HeldRecords(logging.Filter):
    """Keeps a logger's records back instead of emitting them."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        self.records.append(record)
        return False


@contextlib.contextmanager
def held_log(logger_name: str) -> Iterator[HeldRecords]:
    """Hold back what ``logger_name`` logs in the block; the caller passes the held
    records on (``release``) or drops them."""
    held = HeldRecords()
    upstream_logger = logging.getLogger(logger_name)
    upstream_logger.addFilter(held)
    try:
        yield held
    finally:
        upstream_logger.removeFilter(held)


def release(logger_name: str, held: HeldRecords) -> None:
    """Log the held records as upstream would have, in their order."""
    upstream_logger = logging.getLogger(logger_name)
    for record in held.records:
        upstream_logger.handle(record)


class FrozenKVGraphGate(DraftCaptureGate):
    name = "frozen_kv_graph"
    summary = "no frozen-KV MTP draft decode CUDA graph on a prefill server"
    targets = seams.HOOK_TARGETS["frozen_kv_graph"]
    wires = ("gpu_id", "draft_model_runner")
    skipped = "skipped the frozen-KV MTP draft decode graph capture"

    def run_upstream(self, call: Call, probe: Any) -> tuple[bool, Any]:
        """Upstream's run, its "capture begin" line held back until it is known
        whether a capture followed."""
        module = self.target.rsplit(".", 2)[0]  # its logger's name
        with held_log(module) as held:
            tripped, result = super().run_upstream(call, probe)
        if not tripped:
            release(module, held)
        return tripped, result


GATE = FrozenKVGraphGate()
