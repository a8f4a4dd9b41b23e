"""patches/: the patched release, without the plugin, behaves as the plugin.

Unpacks this venv's SGLang release from its wheel, applies
``patches/sglang-<release>-pd-prefill-lean.patch`` (``scripts/patched_sglang.sh``,
``patch -p2``) and, in fresh interpreters with that source first on PYTHONPATH and
the plugin not loaded (``SGLANG_PLUGINS`` names another plugin): runs the gate
tests (the release oracle in conftest told which gates the patch makes native),
the patch's own upstream unit tests, ``sglang-pd-lean doctor`` and the census.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from helpers import LAYOUTS, PATCHED_ENV

pytestmark = pytest.mark.patches

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
# Gates each patch makes upstream's own.
# The draft-worker gates of every speculative algorithm (issue 36), in both.
DRAFT_GATES = ("frozen_kv_graph", "multi_layer_graph", "dflash_graph")
PATCHED_GATES = {
    "0.5.17": (
        *("pool", "graph", "warmup", "budget", "draft_graph", "autotune"),
        *DRAFT_GATES,
    ),
    "0.5.23": ("draft_graph", "autotune", *DRAFT_GATES),
}
GATE_TESTS = [
    "test/test_pool_gate.py",
    "test/test_graph_gate.py",
    "test/test_warmup_gate.py",
    "test/test_budget_gate.py",
    "test/test_newer_gates.py",
    "test/test_compat.py",
    "test/test_draft_worker_gates.py",
    "test/test_audit.py",
]
# Compares the census' upstream and plugin columns in one process: on a patched
# SGLang both columns are the patched upstream (the census comparison below
# checks those numbers against the plugin instead).
NOT_FOR_PATCHED = (
    "test/test_newer_gates.py::test_report_counts_the_autotune_buffers_the_gate_shrinks"
)
# The census runs helpers.LAYOUTS with the radix cache off, so the mamba slot count
# is the running-request count on every role and only the budget can differ.
CENSUS_ARGS = ["--max-running-requests", "128", "--available-gib", "100"]
ROLES = ("prefill", "decode", "null")


def release() -> str:
    import sglang

    return ".".join(sglang.__version__.split(".")[:3])


@pytest.fixture(scope="module")
def patched(tmp_path_factory) -> str:
    version = release()
    if version not in PATCHED_GATES:
        pytest.skip(f"no patch in patches/ for SGLang {version}")
    dest = str(tmp_path_factory.mktemp("patched") / f"sglang-{version}")
    run = subprocess.run(
        ["bash", os.path.join(ROOT, "scripts", "patched_sglang.sh"), version, dest],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHON": sys.executable},
        timeout=600,
    )
    if run.returncode == 3:
        pytest.skip(f"SGLang {version} wheel unavailable: {run.stderr.strip()}")
    assert run.returncode == 0, run.stderr
    return dest


def patched_env(dest: str) -> dict:
    env = dict(os.environ)
    env.pop("SGLANG_PD_LEAN", None)
    env.update(
        PYTHONPATH=os.pathsep.join([dest, env.get("PYTHONPATH", "")]).rstrip(
            os.pathsep
        ),
        SGLANG_PLUGINS="not_pd_lean",  # SGLang's allow-list: our plugin stays out
        HF_HUB_OFFLINE="1",
    )
    env[PATCHED_ENV] = ",".join(PATCHED_GATES[release()])
    return env


def unpatched_env() -> dict:
    env = dict(os.environ)
    for name in ("SGLANG_PLUGINS", "SGLANG_PD_LEAN", PATCHED_ENV):
        env.pop(name, None)
    return env


def run(args: list[str], env: dict, cwd: str = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        args, capture_output=True, text=True, env=env, cwd=cwd, timeout=900
    )


def test_the_patched_sglang_is_imported_without_the_plugin(patched):
    code = (
        "import sglang.srt.disaggregation.utils as u, sglang.srt.plugins as p;"
        "p.load_plugins();"
        "import sys;"
        "print(u.__file__, hasattr(u, 'pd_prefill_keeps_verify_state'),"
        " 'sglang_pd_lean.plugin' in sys.modules)"
    )
    out = run([sys.executable, "-c", code], patched_env(patched))
    assert out.returncode == 0, out.stderr
    path, has_helper, plugin_loaded = out.stdout.split()
    assert path.startswith(patched)
    assert (has_helper, plugin_loaded) == ("True", "False")


def test_gate_tests_pass_on_the_patched_release(patched):
    out = run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        + ["--deselect", NOT_FOR_PATCHED]
        + GATE_TESTS,
        patched_env(patched),
    )
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]


def test_the_patch_carries_passing_upstream_unit_tests(patched):
    tests = os.path.join(patched, "registered")
    assert os.path.isdir(tests), "the patch adds no tests under test/registered/"
    out = run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", tests],
        patched_env(patched),
        cwd=patched,
    )
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]


def test_doctor_calls_the_patched_gates_native(patched):
    out = run([os.path.join(BIN, "sglang-pd-lean"), "doctor"], patched_env(patched))
    states = {line.split()[0]: line for line in out.stdout.splitlines() if line.strip()}
    for gate in PATCHED_GATES[release()]:
        assert "native upstream" in states.get(gate, ""), out.stdout + out.stderr


def census(env: dict, model: str, tp: int) -> dict:
    out = run(
        [os.path.join(BIN, "sglang-pd-lean"), "report", "--model", model]
        + ["--tp", str(tp), "--disable-radix-cache", "--json"]
        + CENSUS_ARGS,
        env,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def conv_window_overcharge(result: dict, role: str, model: str) -> int:
    """Bytes upstream's budget charges beyond what the pool allocates for the verify
    conv windows: D x (W-1) columns per verify slot against the deduplicated
    D + W - 2 (the dense layout of KDA models allocates D x (W-1): no difference).
    Conv columns per slot from the pool's persistent conv state; W and D from the
    inputs."""
    from sglang_pd_lean import census as census_module

    data = census_module.read_config_dict(model=model)
    if data["model_type"] == "kimi_linear":
        return 0
    text = {**data, **data.get("text_config", {})}
    width = text.get("linear_conv_kernel_dim") or text.get("conv_kernel")
    draft = result["inputs"]["speculative_num_draft_tokens"]
    row = result["roles"][role]["plugin"]
    column = row["components"]["conv state"] // (row["mamba_slots"] + 1) // (width - 1)
    per_slot = column * (draft * (width - 1) - (draft + width - 2))
    return per_slot * (result["inputs"]["max_running_requests"] + 1)


def test_patched_census_equals_the_plugin(patched):
    with ThreadPoolExecutor(max_workers=2) as pool:
        plugin = list(pool.map(lambda mt: census(unpatched_env(), *mt), LAYOUTS))
        native = list(pool.map(lambda mt: census(patched_env(patched), *mt), LAYOUTS))
    conv_fix = release() == "0.5.23"
    for (model, tp), lean, own in zip(LAYOUTS, plugin, native, strict=True):
        for gate in PATCHED_GATES[release()]:
            assert own["plugin_gates"][gate] == "native upstream", (model, gate)
        for role in ROLES:
            where = (model, tp, role)
            assert own["roles"][role]["plugin"] == lean["roles"][role]["plugin"], where
            assert (
                own["warmup"][role]["plugin"] == lean["warmup"][role]["plugin"]
            ), where
            have, want = (
                own["capacity"][role]["plugin"],
                lean["capacity"][role]["plugin"],
            )
            if role == "prefill" or not conv_fix:
                assert have == want, where
                continue
            # 0.5.23's patch also prices the verify conv windows as allocated.
            gained = have["kv_cache_bytes"] - want["kv_cache_bytes"]
            expected = conv_window_overcharge(own, role, model)
            assert gained == pytest.approx(expected, abs=4096), where
            assert have["mamba_slots"] == want["mamba_slots"], where
