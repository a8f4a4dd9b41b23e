"""The one predicate: only a speculative target on a plain PD prefill server cannot
run TARGET_VERIFY; anything that may still verify keeps its verify state."""

from __future__ import annotations

import types

import pytest
from helpers import server_fields

from sglang_pd_lean import census, role

INPUTS = census.Inputs(model="qwen3-next-80b-a3b")


def judged(mode: str, *, speculative: bool = True, draft: bool = False, **extra):
    fields = server_fields(INPUTS, mode, speculative=speculative)
    fields.update(extra)
    with census.published(**fields) as server_args:
        return role.judge(server_args, is_draft_worker=draft)


@pytest.mark.parametrize(
    "mode,speculative,draft,expected",
    [
        ("prefill", True, False, False),
        ("prefill", True, True, True),
        ("prefill", False, False, True),
        ("decode", True, False, True),
        ("null", True, False, True),
    ],
)
def test_only_a_prefill_speculative_target_cannot_verify(
    mode, speculative, draft, expected
):
    assert (
        judged(mode, speculative=speculative, draft=draft).can_run_target_verify
        is expected
    )


def test_unified_memory_prefill_keeps_verify_state():
    worker = judged("prefill", enable_unified_memory=True)
    assert worker.can_run_target_verify
    assert worker.keeps_verify_because == "unified memory pool"


def test_role_switch_prefill_keeps_verify_state():
    from sglang.srt.server_args import ServerArgs

    fields = getattr(ServerArgs, "__dataclass_fields__", None) or {}
    if "enable_pd_role_switch" not in fields and not hasattr(
        ServerArgs, "enable_pd_role_switch"
    ):
        pytest.skip("this SGLang has no PD role switch")
    worker = judged("prefill", enable_pd_role_switch=True)
    assert worker.can_run_target_verify
    assert worker.keeps_verify_because == "PD role switch"


def test_npu_prefill_keeps_verify_state(monkeypatch):
    monkeypatch.setattr(role, "is_npu", lambda: True)
    worker = judged("prefill")
    assert worker.can_run_target_verify
    assert worker.keeps_verify_because == "NPU pool layout"


def test_upstream_behaviour_makes_every_worker_step_aside():
    with role.upstream_behaviour():
        assert judged("prefill").can_run_target_verify
    assert not judged("prefill").can_run_target_verify


def test_describe_names_mode_kind_and_algorithm():
    assert judged("prefill").describe() == "prefill target (EAGLE)"


def test_unified_memory_is_read_from_the_published_memory_namespace():
    """``server_args`` says no unified memory; SGLang's published memory config says
    yes: the published value wins (it is what SGLang itself reads)."""
    from sglang_pd_lean.gates.base import ReadThrough

    try:
        from sglang.srt.runtime_context import get_memory  # noqa: F401
    except ImportError:
        pytest.skip("SGLang 0.5.16 publishes no config namespaces")
    fields = server_fields(INPUTS, "prefill")
    fields["enable_unified_memory"] = True
    with census.published(**fields) as server_args:
        stale = ReadThrough(server_args, enable_unified_memory=False)
        worker = role.judge(stale, is_draft_worker=False)
    assert worker.can_run_target_verify
    assert worker.keeps_verify_because == "unified memory pool"


def test_the_server_args_fallback_is_logged_at_debug(caplog):
    """A leaf the published configuration lacks is read from server_args, and the
    fallback says so at DEBUG (never above: it is routine before publication)."""
    import logging

    runtime_context = pytest.importorskip("sglang.srt.runtime_context")
    if not hasattr(runtime_context, "get_spec"):
        pytest.skip(
            "this SGLang publishes no config namespace: nothing to fall back from"
        )
    from sglang_pd_lean.shims import setting

    with caplog.at_level(logging.DEBUG, logger="sglang_pd_lean.shims"):
        value = setting(
            "get_spec", "no_such_leaf", types.SimpleNamespace(no_such_leaf=7)
        )
    assert value == 7
    records = [r for r in caplog.records if "no_such_leaf" in r.getMessage()]
    assert records and {r.levelno for r in records} == {logging.DEBUG}
    assert "reading server_args" in records[0].getMessage()
