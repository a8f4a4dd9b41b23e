"""sglang-pd-lean: an SGLang general plugin for PD-prefill speculative targets.

A speculative target worker on a PD prefill server never runs ``TARGET_VERIFY``;
the plugin makes it skip the verify-only mamba state, the target-verify graph, the
``TARGET_VERIFY`` warmup and the budget reserved for them. See ``role`` for the one
predicate, ``gates`` for what is hooked, ``census`` for the byte counts.
"""

__version__ = "0.1.0"
