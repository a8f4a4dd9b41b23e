"""Adaptive gate: a prefill server builds no adaptive speculative runtime state
beyond the launch's own.

Hooks (AROUND) ``AdaptiveController.init_states`` in
``sglang/srt/speculative/adaptive_runtime_state.py`` (SGLang 0.5.16 to 0.5.23, the
same code in each). With ``--speculative-adaptive`` (EAGLE, EAGLE3, NEXTN, which
SGLang resolves to EAGLE) ``EAGLEWorkerV2.init_cuda_graphs`` registers the launch's
own runtime state, then ``init_states`` builds one more per candidate step count
(``build_adaptive_runtime_state``): another draft attention backend and draft
graphs, another target attention backend with a workspace of its own (FlashInfer:
384 MiB) and, with a decode graph backend, a ``DecodeCudaGraphRunner`` that captures
in ``TARGET_VERIFY`` mode without going through ``capture_decode_graph`` (the graph
gate's target). SGLang accepts the flag on a prefill server, but switches state only
after a verify step (``on_verify_complete``) or in the decode branch
(``activate_step_by_batch``), which a prefill server never runs. On 0.5.16 and
0.5.17 with a hybrid target that capture would also meet a pool the pool gate built
without ``SpeculativeState``, and the linear-attention backend asserts: the pool
gate requires this one (``requires``).

When the server's target cannot verify, upstream's ``init_states`` runs as written,
on the worker whose ``build_adaptive_runtime_state`` builds only the launch's own
step count (upstream's call, should the launch's own state not be registered yet)
and returns None for every other: those steps are registered as None, so the
controller activates the launch's own state as upstream does, and asking for
another step later raises upstream's own ``Missing adaptive runtime state`` error
instead of running a state nobody built.
"""

from __future__ import annotations

from typing import Any

from sglang_pd_lean import seams
from sglang_pd_lean.gates.base import Acted, Call, Gate, SteppedAside, temporarily

BUILD = "build_adaptive_runtime_state"


def building_only(worker: Any, own: int):
    """For the block, ``worker.build_adaptive_runtime_state`` builds the state of
    ``own`` steps (upstream's call) and returns None for any other; the worker is
    left as it was (``temporarily``)."""
    build = getattr(worker, BUILD)

    def own_steps_only(*args: Any, **kwargs: Any) -> Any:
        steps = kwargs.get("speculative_num_steps", args[0] if args else None)
        return build(*args, **kwargs) if steps == own else None

    return temporarily(worker, **{BUILD: own_steps_only})


class AdaptiveGate(Gate):
    name = "adaptive"
    summary = "no adaptive speculative runtime states beyond the launch's own"
    targets = seams.HOOK_TARGETS["adaptive"]
    native_markers = ("disaggregation_mode",)
    # The states serve the target's verify steps: ask about the server's target.
    judge_as_target = True

    def owner_of(self, args: tuple, kwargs: dict) -> Any:
        """The speculative worker the controller builds states for."""
        return args[0].worker

    def act(self, call: Call) -> Acted | SteppedAside:
        controller = call.args[0]
        worker = controller.worker
        own = worker.speculative_num_steps
        registered = set(getattr(controller, "_states", {}) or {})
        skipped = [s for s in controller.candidate_steps if s not in registered | {own}]
        if not skipped:
            return SteppedAside(
                call.upstream(), "no candidate step beyond the launch's own"
            )
        with building_only(worker, own):
            result = call.upstream()
        return Acted(
            result,
            f"built no adaptive runtime state for steps {skipped} (their attention "
            f"backends and graphs serve verify steps only)",
        )


GATE = AdaptiveGate()
