"""ReplaySSM rings on a prefill target: checked, not applicable.

``--enable-linear-replayssm-spec`` allocates verify rings in ``MambaPool`` (read only
by ``TARGET_VERIFY`` and the commit after it). Built by hand on a CPU, a prefill
target's pool would still hold them, but every supported SGLang refuses the flag on a
PD prefill server before any pool exists (``handle_linear_attn_backend`` in
``arg_groups/attention_hook.py`` on 0.5.21+, ``ServerArgs`` before; 0.5.16 refuses
its ``--enable-gdn-replayssm-spec`` and 0.5.15 its ``--enable-linear-replayssm``
under any PD mode; 0.5.14 has no ReplaySSM). So there is nothing to
hook; ``applicable()`` re-checks that refusal in the installed SGLang's code (its
string constants, not its source file: cheap enough for every process), and a
release that stopped refusing reads as "needed, not handled".
"""

from __future__ import annotations

import re

from sglang_pd_lean.gates.base import Gate
from sglang_pd_lean.upstream import constants_of

# 0.5.17+: "...replayssm-spec is not supported on a PD prefill server..."
# 0.5.16:  "--enable-gdn-replayssm-spec is not supported under PD disaggregation..."
# 0.5.15:  "--enable-linear-replayssm is not supported under PD disaggregation yet..."
_REFUSAL = re.compile(r"replayssm(-spec)? is not supported (on a PD|under PD)")
VALIDATORS = (
    "sglang.srt.arg_groups.attention_hook.handle_linear_attn_backend",
    "sglang.srt.server_args.ServerArgs",
)


class ReplaySSMGate(Gate):
    name = "replayssm"
    summary = "no ReplaySSM verify rings on a prefill target"
    targets = ()

    def applicable(self) -> str | None:
        named = False
        for validator in VALIDATORS:
            texts = constants_of(validator)
            if any(_REFUSAL.search(text) for text in texts):
                return (
                    f"SGLang refuses the ReplaySSM spec flag on a PD prefill server "
                    f"({validator})"
                )
            named = named or any("replayssm" in text for text in texts)
        if not named:  # 0.5.14 and older: no ReplaySSM flag at all
            return "this SGLang has no ReplaySSM"
        return None


GATE = ReplaySSMGate()
