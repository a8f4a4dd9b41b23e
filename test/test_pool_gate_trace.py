"""The pool gate's measuring build leaves no trace in the live process.

To log and record the bytes it did not allocate, the pool gate runs upstream's
``KVCacheConfigurator._build_hybrid_req_pool`` (on 0.5.14 to 0.5.15.post1, the
``HybridReqToTokenPool`` that ``ModelRunnerKVCacheMixin._init_pools`` builds) once
more under ``FakeTensorMode`` (SGLang's pool logger muted) before the build it keeps. These tests call the gate's
hook around the *unhooked* upstream function for a prefill target (so the
measuring build runs on every release: on 0.5.18+ it finds no verify state and the
gate steps aside) and compare what that leaves behind with what upstream's own
single build of the same plugin-shaped pool leaves (the unhooked function, the
configurator's ``server_args`` a copy with no draft tokens; no plugin code):

- the configurator's fields, and the objects it carries from the model runner
  (``server_args``, ``model_config``, its parallel state and layer info: the hooked
  call receives nothing else of the model runner);
- SGLang's published runtime configuration and every loaded ``sglang.*`` module's
  globals, and which ``sglang.*`` modules are loaded;
- the ``sglang.srt.mem_cache.memory_pool`` logger (disabled flag, level, handlers,
  filters, propagation) and ``logging.disable``;
- SGLang's ``Mamba Cache is allocated`` line: once per hooked build, as upstream.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import inspect
import logging
import sys
from unittest import mock

import pytest
import torch
from helpers import server_fields
from placeholder import Inputs, prepare

from sglang_pd_lean import census
from sglang_pd_lean.gates import pool

MODELS = ["qwen3-next-80b-a3b", "kimi-linear-48b-a3b", "nemotron-h-8b"]
REQUESTS = 8
POOL_LOGGER = "sglang.srt.mem_cache.memory_pool"
MAMBA_LINE = "Mamba Cache is allocated"
# Objects the configurator carries from the model runner, read through it.
CARRIED = ("server_args", "model_config", "ps", "layer_info", "spec_aux_config")
# SGLang's published configuration, where the release publishes one.
NAMESPACES = (
    "get_spec",
    "get_schedule",
    "get_exec",
    "get_memory",
    "get_disagg",
    "get_parallel",
)
PRIMITIVE = (type(None), bool, int, float, complex, str, bytes, enum.Enum)
MISSING = "<missing>"


@pytest.fixture(autouse=True)
def no_pool_kernel_warmup(monkeypatch):
    """0.5.23's pool constructor warms a Triton kernel (a launch, not an
    allocation); SGLang's own switch turns it off, as the census does."""
    monkeypatch.setenv("SGLANG_DISABLE_FUSED_MAMBA_SLOT_OPS", "1")


def fingerprint(value, depth: int = 2):
    """What a value is, comparable across snapshots: primitives by value,
    containers by their items (``depth`` levels down), anything else by identity."""
    if isinstance(value, (*PRIMITIVE, torch.dtype, torch.device)):
        return value
    if depth and isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(fingerprint(v, depth - 1) for v in value))
    if depth and isinstance(value, (set, frozenset)):
        return (type(value).__name__, frozenset(fingerprint(v, 0) for v in value))
    if depth and isinstance(value, dict):
        return (
            "dict",
            frozenset(
                (fingerprint(k, 0), fingerprint(v, depth - 1)) for k, v in value.items()
            ),
        )
    return ("object", type(value).__qualname__, id(value))


def without_identities(fp):
    """A fingerprint with object identities dropped: two builds make different
    objects, but the same kinds of object in the same places."""
    if isinstance(fp, tuple) and fp[:1] == ("object",):
        return fp[:2]
    if isinstance(fp, tuple):
        return tuple(without_identities(item) for item in fp)
    if isinstance(fp, frozenset):
        return frozenset(without_identities(item) for item in fp)
    return fp


def attributes(owner) -> dict:
    """Every attribute an object holds: fields, slots and instance dict (where a
    cached property lands)."""
    names = set(getattr(type(owner), "__struct_fields__", ()))  # a msgspec Struct
    if dataclasses.is_dataclass(owner):
        names.update(f.name for f in dataclasses.fields(owner))
    for cls in type(owner).__mro__:
        names.update(getattr(cls, "__slots__", ()))
    names.update(getattr(owner, "__dict__", {}))
    names.discard("__dict__")
    names.discard("__weakref__")
    return {name: fingerprint(getattr(owner, name, MISSING)) for name in names}


def published_config() -> dict:
    from sglang.srt import runtime_context

    found = {}
    for getter_name in NAMESPACES:
        getter = getattr(runtime_context, getter_name, None)
        if getter is None:
            continue
        namespace = getter()
        found.update(
            {f"{getter_name}().{k}": v for k, v in attributes(namespace).items()}
        )
    return found


def sglang_globals() -> dict:
    found = {"sys.modules": frozenset(n for n in sys.modules if n.startswith("sglang"))}
    for name, module in list(sys.modules.items()):
        if not name.startswith("sglang.") or module is None:
            continue
        for attr, value in list(vars(module).items()):
            if not inspect.ismodule(value):
                found[f"{name}.{attr}"] = fingerprint(value)
    return found


def logger_state() -> dict:
    pool_logger = logging.getLogger(POOL_LOGGER)
    return {
        "disabled": pool_logger.disabled,
        "level": pool_logger.level,
        "propagate": pool_logger.propagate,
        "handlers": [id(h) for h in pool_logger.handlers],
        "filters": [id(f) for f in pool_logger.filters],
        "logging.disable": logging.root.manager.disable,
    }


def snapshot(conf) -> dict:
    state = {f"configurator.{k}": v for k, v in attributes(conf).items()}
    for carried in CARRIED:
        owner = getattr(conf, carried, None)
        if owner is None:
            continue
        for name, value in attributes(owner).items():
            state[f"configurator.{carried}.{name}"] = value
    state.update(published_config())
    state.update(sglang_globals())
    return state


def changes(before: dict, after: dict) -> dict:
    """What a call changed: each key whose fingerprint differs, with its new value
    (identities dropped)."""
    return {
        key: without_identities(after.get(key, MISSING))
        for key in before.keys() | after.keys()
        if before.get(key, MISSING) != after.get(key, MISSING)
    }


class PluginShaped:
    """``server_args`` as the pool gate hands it to upstream: no draft tokens.
    A read-through view made with no plugin code."""

    NO_DRAFT = ("speculative_num_draft_tokens", "max_speculative_num_draft_tokens")

    def __init__(self, base) -> None:
        self._base = base

    def __getattr__(self, name: str):
        return None if name in self.NO_DRAFT else getattr(self._base, name)


def upstream_plugin_shaped_build(original, conf, **kwargs):
    """Upstream's own build of the pool the gate keeps: no plugin code. On 0.5.14
    to 0.5.15.post1, whose ``_init_pools`` also reads the draft-token count for the
    request rows' length, only ``HybridReqToTokenPool`` gets no draft tokens."""
    if OLDER:
        names = inspect.unwrap(original).__globals__
        cls = names["HybridReqToTokenPool"]

        def lean(**fields):
            return cls(**{**fields, "speculative_num_draft_tokens": None})

        with mock.patch.dict(names, {"HybridReqToTokenPool": lean}):
            return original(conf, **kwargs)
    saved = conf.server_args
    conf.server_args = PluginShaped(saved)
    try:
        return original(conf, **kwargs)
    finally:
        conf.server_args = saved


def hooked_build(original, conf, **kwargs):
    """The pool gate's AROUND hook, as ``HookRegistry`` runs it."""
    return pool.GATE.around(original, conf, **kwargs)


def has_configurator() -> bool:
    try:
        from sglang.srt.mem_cache import kv_cache_configurator  # noqa: F401
    except ImportError:
        return False
    return True


# 0.5.14 to 0.5.15.post1: no KVCacheConfigurator; the model runner's
# ``_init_pools`` (ModelRunnerKVCacheMixin) builds the request pool, then the KV
# pool, where the census's runner stops it.
OLDER = not has_configurator()


def hooked_target():
    """(class, name) of the pool build the gate hooks on the installed SGLang."""
    if OLDER:
        from sglang.srt.model_executor.model_runner_kv_cache_mixin import (
            ModelRunnerKVCacheMixin,
        )

        return ModelRunnerKVCacheMixin, "_init_pools"
    from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator

    return KVCacheConfigurator, "_build_hybrid_req_pool"


def upstream_original():
    """Upstream's pool build without any hook applied."""
    owner, name = hooked_target()
    return inspect.unwrap(getattr(owner, name))


def build_request_pool(conf, build):
    """Upstream's caller, ``_build_req_to_token_pool`` (on 0.5.14 to 0.5.15.post1
    the census runner's, which calls ``_init_pools``), with ``build`` in place of
    the hooked function (it reads the ``server_args`` the hooked call reads, and
    passes the extra context length it derived)."""
    original = upstream_original()
    owner, name = hooked_target()

    def in_place(configurator, **kwargs):
        return build(original, configurator, **kwargs)

    with mock.patch.object(owner, name, in_place):
        return conf._build_req_to_token_pool(max_num_reqs=REQUESTS)


@contextlib.contextmanager
def prefill_target(model: str):
    """A fresh prefill-target configurator (its own published ServerArgs), inside
    FakeTensorMode so upstream's real build allocates nothing."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    inputs = Inputs(
        model=model, tp=2, max_running_requests=REQUESTS, context_length=512
    )
    mc, _ = prepare(inputs)
    with contextlib.ExitStack() as stack:
        stack.enter_context(census.parallel(tp=inputs.tp))
        server_args = stack.enter_context(
            census.published(**server_fields(inputs, "prefill"))
        )
        conf = census.configurator(mc, server_args, is_draft_worker=False)
        stack.enter_context(FakeTensorMode(allow_non_fake_inputs=True))
        yield conf


def traced(model: str, build) -> dict:
    """What a request-pool build with ``build`` changed, on a fresh configurator."""
    with prefill_target(model) as conf:
        before = snapshot(conf)
        build_request_pool(conf, build)
        after = snapshot(conf)
    return changes(before, after)


@pytest.mark.parametrize("model", MODELS)
def test_measuring_build_leaves_sglang_as_upstreams_single_build(model):
    traced(model, upstream_plugin_shaped_build)  # first-use imports and caches
    upstream = traced(model, upstream_plugin_shaped_build)
    hooked = traced(model, hooked_build)
    assert hooked == upstream


@pytest.mark.parametrize("model", MODELS)
def test_measuring_build_leaves_the_pool_logger_as_it_found_it(model):
    initial = logger_state()
    with prefill_target(model) as conf:
        build_request_pool(conf, upstream_plugin_shaped_build)
    after_upstream = logger_state()
    with prefill_target(model) as conf:
        build_request_pool(conf, hooked_build)
    assert logger_state() == after_upstream == initial


@pytest.mark.parametrize("model", MODELS)
def test_mamba_cache_line_is_logged_once_per_hooked_build(model, caplog):
    """SGLang's allocation line: the build kept logs it, the measuring build not."""
    from sglang.srt.mem_cache import memory_pool

    assert MAMBA_LINE in inspect.getsource(memory_pool)  # upstream's own wording

    def lines_logged(build) -> int:
        caplog.clear()
        with caplog.at_level(logging.INFO, logger=POOL_LOGGER):
            with prefill_target(model) as conf:
                build_request_pool(conf, build)
        return sum(MAMBA_LINE in r.getMessage() for r in caplog.records)

    upstream = lines_logged(upstream_plugin_shaped_build)
    assert upstream == 1
    assert lines_logged(hooked_build) == upstream
