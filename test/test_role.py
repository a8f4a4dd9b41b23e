"""The one predicate: only a speculative target on a plain PD prefill server cannot
run TARGET_VERIFY; anything that may still verify keeps its verify state."""

from __future__ import annotations

import types

import pytest
from helpers import server_fields
from placeholder import Inputs

from sglang_pd_lean import census, role

INPUTS = Inputs(model="qwen3-next-80b-a3b")


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


# --- SGLang's own resolution of launch flags, read before SGLang publishes it --------

SPEC = (
    "--speculative-algorithm",
    "NEXTN",
    "--speculative-num-steps",
    "1",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "2",
)


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """``launched(*flags)``: SGLang's own ServerArgs for ``launch_server`` flags on
    the e2e tests' tiny Qwen3-Next (``prepare_server_args``, as the report resolves
    them), not published."""
    from helpers import tiny_model_folder

    from sglang_pd_lean.census import launch

    folder = tiny_model_folder(tmp_path_factory.mktemp("tiny") / "model")

    def resolve(*flags: str):
        argv = ["--model-path", folder, *flags]
        return launch.resolve(argv, launch.gpu_facts("h200")).server_args

    return resolve


@pytest.fixture
def before_publication():
    """This process as a scheduler is while plugins load: SGLang has published no
    configuration namespace yet (0.5.16 has none at all), so SGLang's own getter
    refuses, and the predicate can only read the worker's ``server_args``."""
    import sglang.srt.runtime_context as runtime_context

    get_disagg = getattr(runtime_context, "get_disagg", None)
    if get_disagg is not None:
        with pytest.raises(ValueError, match="not published"):
            get_disagg()


@pytest.mark.parametrize(
    "flags,can_verify",
    [
        (("--disaggregation-mode", "prefill", *SPEC), False),
        (("--disaggregation-mode", "prefill"), True),
        (("--disaggregation-mode", "decode", *SPEC), True),
        (SPEC, True),
    ],
    ids=["prefill-spec", "prefill", "decode-spec", "unified-spec"],
)
def test_a_launch_is_judged_from_its_own_server_args_before_publication(
    flags, can_verify, launched, before_publication
):
    server_args = launched(*flags)
    worker = role.judge(server_args, is_draft_worker=False)
    assert worker.can_run_target_verify is can_verify
    assert worker.disaggregation_mode == server_args.disaggregation_mode
    assert (worker.speculative_algorithm is None) is (
        "--speculative-algorithm" not in flags
    )


@pytest.mark.parametrize("draft", [False, True])
def test_a_hooked_model_runner_is_judged_from_its_own_server_args_before_publication(
    draft, launched, before_publication
):
    """What a hooked upstream function receives (a model runner): its own
    ``server_args`` and ``is_draft_worker`` decide; only the target cannot verify."""
    server_args = launched("--disaggregation-mode", "prefill", *SPEC)
    owner = types.SimpleNamespace(server_args=server_args, is_draft_worker=draft)
    worker = role.judge_owner(owner)
    assert worker.can_run_target_verify is draft
    kind = "draft" if draft else "target"
    assert worker.describe() == f"prefill {kind} ({server_args.speculative_algorithm})"


@pytest.mark.parametrize(
    "flag,reason",
    [
        ("enable_unified_memory", "unified memory pool"),
        ("enable_pd_role_switch", "PD role switch"),
    ],
)
def test_a_prefill_target_asking_to_keep_verify_state_keeps_it_before_publication(
    flag, reason, launched, before_publication
):
    """SGLang resolves no such launch today (it refuses speculative decoding with
    either), so the flag is set on SGLang's own prefill + NEXTN resolution: the
    worker's ``server_args`` alone must keep its verify state."""
    from sglang_pd_lean.gates.base import ReadThrough

    server_args = launched("--disaggregation-mode", "prefill", *SPEC)
    worker = role.judge(ReadThrough(server_args, **{flag: True}), is_draft_worker=False)
    assert worker.can_run_target_verify
    assert worker.keeps_verify_because == reason


def test_server_args_without_a_disaggregation_mode_read_as_sglangs_default(
    launched, before_publication
):
    """An object built with only what upstream reads (upstream's own unit tests) may
    lack the field: it reads as the mode SGLang resolves when the flag is not given."""
    default = launched(*SPEC).disaggregation_mode
    worker = role.judge(
        types.SimpleNamespace(speculative_algorithm="EAGLE"), is_draft_worker=False
    )
    assert worker.disaggregation_mode == default
    assert worker.can_run_target_verify


def test_the_published_role_wins_over_a_stale_server_args():
    """SGLang's published configuration says prefill + EAGLE; the worker's
    ``server_args`` view says neither: the published values decide (what SGLang
    itself reads), so the prefill target still cannot verify."""
    from sglang_pd_lean.gates.base import ReadThrough

    try:
        from sglang.srt.runtime_context import get_disagg, get_spec  # noqa: F401
    except ImportError:
        pytest.skip("SGLang 0.5.16 publishes no config namespaces")
    with census.published(**server_fields(INPUTS, "prefill")) as server_args:
        stale = ReadThrough(
            server_args, disaggregation_mode="null", speculative_algorithm=None
        )
        worker = role.judge(stale, is_draft_worker=False)
    assert not worker.can_run_target_verify
    assert (worker.disaggregation_mode, worker.speculative_algorithm) == (
        "prefill",
        "EAGLE",
    )


# --- what /server_info and the gate logs show (Worker.describe) --------------------


@pytest.mark.parametrize(
    "mode,speculative,draft,extra,shown",
    [
        ("prefill", True, True, {}, "prefill draft (EAGLE)"),
        ("decode", False, False, {}, "decode target (no speculative decoding)"),
        (
            "prefill",
            True,
            False,
            {"enable_unified_memory": True},
            "prefill target (EAGLE), keeps verify state: unified memory pool",
        ),
    ],
)
def test_a_stepped_aside_gate_names_the_worker_as_server_info_shows_it(
    mode, speculative, draft, extra, shown
):
    assert judged(mode, speculative=speculative, draft=draft, **extra).describe() == (
        shown
    )


class BareModelRunner:
    """What an upstream unit test may hand a hooked function: no ``server_args``."""


def python_says_when_reading_server_args(owner) -> str:
    try:
        _ = owner.server_args
    except AttributeError as exc:
        return f"AttributeError: {exc}"
    raise AssertionError("the owner has server_args")


def test_an_owner_that_cannot_be_judged_keeps_upstream_and_says_why(caplog):
    import logging

    owner = BareModelRunner()
    with caplog.at_level(logging.DEBUG, logger="sglang_pd_lean.role"):
        worker = role.judge_owner(owner)
    why = f"cannot be judged ({python_says_when_reading_server_args(owner)})"
    assert worker.can_run_target_verify
    assert worker.keeps_verify_because == why
    assert worker.describe() == (
        f"unknown target (no speculative decoding), keeps verify state: {why}"
    )
    lines = [r for r in caplog.records if r.name == "sglang_pd_lean.role"]
    assert len(lines) == 1 and lines[0].levelno == logging.DEBUG
    assert lines[0].getMessage().startswith(f"[sglang-pd-lean] BareModelRunner {why}")


def test_a_draft_worker_that_cannot_be_judged_is_still_named_a_draft():
    worker = role.judge_owner(BareModelRunner(), is_draft_worker=True)
    assert worker.is_draft_worker is True
    assert worker.describe().startswith("unknown draft (")
