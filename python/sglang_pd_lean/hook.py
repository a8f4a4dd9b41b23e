"""What a gate asks SGLang's ``HookRegistry`` to do: a target, a function, a hook type.

    Hook("sglang.srt...KVCacheConfigurator._build_hybrid_req_pool", fn, When.AROUND)

``plugin`` turns each into ``HookRegistry.register(target, fn, HookType[when.value])``.
This module imports nothing, so gates and the record can name their hooks without
importing SGLang.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import NamedTuple


class When(str, Enum):
    """SGLang's ``HookType`` members the plugin uses, by name."""

    BEFORE = "BEFORE"  # fn(*args, **kwargs) runs before the upstream function
    AFTER = "AFTER"  # fn(result, *args, **kwargs) runs after it
    AROUND = "AROUND"  # fn(original, *args, **kwargs) runs instead and calls it

    def __str__(self) -> str:
        return self.value


class Hook(NamedTuple):
    target: str  # dotted path HookRegistry resolves
    fn: Callable
    when: When
