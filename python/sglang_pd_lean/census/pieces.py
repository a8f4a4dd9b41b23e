"""What a launch's prefill target does not build, piece by piece: the audit's row
(``audit.row_for``) for the worker class SGLang's own dispatch picks for the launch.

    pieces = prefill_pieces(done)  # {"verify graph": "not captured (the plugin)", ...}

The worker class is what ``SpeculativeAlgorithm.create_worker`` returns for the
prefill server's resolved arguments, published as a server publishes them; each
piece that worker (or its target) could build for a verify or decode step reads as
not built (or, a graph, not captured) by SGLang itself or by the plugin, still
built under the flags the audit names, or not audited (upstream's behaviour). A
piece the worker never builds is left out. A decode or unified server builds every
one: its target verifies. Bytes are in the report's pool and warm-up rows; a
graph's exist only on a GPU.
"""

from __future__ import annotations

from collections.abc import Mapping

from sglang_pd_lean.census.inputs import failure
from sglang_pd_lean.census.launch import ResolvedLaunch, exported, resolved_fields
from sglang_pd_lean.census.pools import published
from sglang_pd_lean.census.results import frozen_map
from sglang_pd_lean.shims import setting


def _said(title: str, state, detail: str) -> str:
    from sglang_pd_lean.audit import State

    built = {"graph": "captured", "budget": "reserved"}.get(
        title.rpartition(" ")[2], "built"
    )
    if state is State.NATIVE:
        return f"not {built} (SGLang)"
    if state is State.PLUGIN:
        return f"not {built} (the plugin)"
    if state is State.BUILT:
        return f"still {built} {detail}"
    return f"{built} as upstream does: {state} ({detail})"


def prefill_pieces(done: ResolvedLaunch) -> Mapping[str, str] | None:
    """Per piece, what the prefill target of ``done`` does with it, and the worker
    class (``worker``); None without speculative decoding or a prefill column."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    from sglang_pd_lean import audit

    prefill = done.resolved.get("prefill")
    if prefill is None:
        return None
    fields = resolved_fields(prefill.server_args)
    with exported(prefill.environ), published(**fields) as server_args:
        name = setting("get_spec", "speculative_algorithm", server_args)
        algorithm = SpeculativeAlgorithm.from_string(name)
        if algorithm.is_none():
            return None
        try:
            worker = algorithm.create_worker(server_args)
        except Exception as exc:  # e.g. its module needs a GPU package
            return frozen_map({"worker": f"not importable here: {failure(exc)}"})
    if not isinstance(worker, type):
        return None
    row = audit.row_for(worker)
    said = {"worker": worker.__name__}
    for piece in audit.PIECES:
        cell = row.cells[piece.key]
        if cell.state is not audit.State.ABSENT:
            said[piece.title] = _said(piece.title, cell.state, cell.detail)
    return frozen_map(said)
