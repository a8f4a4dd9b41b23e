"""The gates: each removes one verify-only piece from a worker that cannot verify.

    from sglang_pd_lean.gates import all_gates
    for gate in all_gates():
        print(gate.name, gate.target, [hook.when for hook in gate.hooks()])

A gate is a ``gates.base.Gate`` subclass in a module of its own, exposed as that
module's ``GATE``; adding one means one module and one line in ``all_gates()``.
``compat`` picks the gates an installed SGLang needs, ``plugin`` registers their
hooks, and each gate files what it did on a rank with ``record``.
"""

from __future__ import annotations

from sglang_pd_lean.gates.base import Gate


def all_gates() -> list[Gate]:
    """Every gate, in the order the plugin registers them."""
    from sglang_pd_lean.gates import (
        adaptive,
        autotune,
        budget,
        dflash_graph,
        draft_graph,
        frozen_kv_graph,
        graph,
        multi_layer_graph,
        pool,
        replayssm,
        warmup,
    )

    modules = (
        pool,
        graph,
        warmup,
        budget,
        draft_graph,
        autotune,
        frozen_kv_graph,
        multi_layer_graph,
        dflash_graph,
        adaptive,
        replayssm,
    )
    return [module.GATE for module in modules]
