#!/usr/bin/env bash
# The GPU check of the PD pair, on one GPU (written for one H200), under 8 minutes:
#  1. the unit suite (-m "not e2e") and the GPU e2e cases (-m gpu test/e2e), side by side;
#  2. a PD pair on the one GPU: the tiny Qwen3-Next of test/e2e (dummy weights, NEXTN,
#     Mooncake over TCP on 127.0.0.1), one decode server kept throughout, the prefill
#     server started twice (plugin on, then SGLANG_PD_LEAN=0); the same greedy requests
#     go through each pair the way SGLang's PD router sends them (one /generate to the
#     prefill and the decode server at once, with bootstrap host, port and room: 0.5.17
#     and 0.5.23 ship no Python mini_lb, and sglang_router is a separate package), and
#     the two pairs must return identical tokens and identical speculative acceptance
#     (every spec_* field of meta_info);
#  3. the prefill rank's start-up seconds and torch.cuda.memory_reserved() at ready,
#     with and without the plugin.
#
#   scripts/gpu_check.sh           on the GPU host
#   scripts/gpu_check.sh --check   on any host: the embedded Python's imports, the
#                                  recipe and the memory probe, no server and no GPU
#
# PYTHON: the interpreter of an environment with SGLang (CUDA build) and this plugin
# (default: the first of python3 and ~/.cache/sglang-pd-lean/sglang-*/bin/python that
# imports SGLang). Logs go to $OUT when set (the device tool brings that folder back),
# else to a temporary folder that is kept and named at the end.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here" || exit 2
mode="${1:-run}"
start_s=$SECONDS
budget_s=470 # leaves a margin under 8 minutes for start-up and teardown

pick_python() {
  local candidate
  for candidate in "${PYTHON:-}" python3 "$HOME"/.cache/sglang-pd-lean/sglang-*/bin/python; do
    [ -n "$candidate" ] || continue
    if "$candidate" -c "import sglang, torch" >/dev/null 2>&1; then
      echo "$candidate"
      return 0
    fi
  done
  return 1
}

py="$(pick_python)" || {
  echo "gpu_check: no Python here imports sglang and torch; set PYTHON" >&2
  exit 2
}
echo "gpu_check: $py"

# --- the PD pair (steps 2 and 3), in Python; GPU_CHECK_DRY=1 stops before any server
write_pd_pair() {
  cat >"$1" <<'PY'
"""PD pair: one decode server, the prefill server with and without the plugin."""

import json
import os
import random
import re
import subprocess
import sys
import threading
import time
import urllib.request

ROOT = os.getcwd()
E2E = os.path.join(ROOT, "test", "e2e")
sys.path.insert(0, E2E)
from e2e_runs import BASE_ARGS, KV_LINE, MAMBA_LINE, RUNS  # noqa: E402
from harness import SITE, Server  # noqa: E402
from tiny_model import VOCAB_SIZE, write_model  # noqa: E402

DRY = os.environ.get("GPU_CHECK_DRY") == "1"
WORK = os.environ["GPU_CHECK_WORK"]
PREFILLS = {
    "with plugin": "prefill",
    "without (SGLANG_PD_LEAN=0)": "prefill, kill switch",
}
MAX_NEW_TOKENS = 32
PROMPTS = [
    [(7 * i + 11 * n) % (VOCAB_SIZE - 4) + 4 for i in range(n)] for n in (5, 17, 40, 96)
]
GIB = 1 << 30
# Every SGLang process of the pair imports this first (PYTHONPATH): test/e2e's own
# site (the budget probe), then torch.cuda.memory_reserved() added to each scheduler's
# /server_info entry, read at ready. It changes nothing else.
PROBE = """
import importlib.util
import os

_site = os.environ["GPU_CHECK_E2E_SITE"]
_spec = importlib.util.spec_from_file_location(
    "_e2e_sitecustomize", os.path.join(_site, "sitecustomize.py")
)
_e2e_site = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_e2e_site)


def _probe(original):
    def get_internal_state(self, *args, **kwargs):
        import torch

        reply = original(self, *args, **kwargs)  # a GetInternalStateReqOutput
        cuda = torch.cuda.is_available()
        reply.internal_state["gpu_check"] = {
            "memory_reserved": torch.cuda.memory_reserved() if cuda else None,
            "max_memory_reserved": torch.cuda.max_memory_reserved() if cuda else None,
            "memory_allocated": torch.cuda.memory_allocated() if cuda else None,
        }
        return reply

    get_internal_state.gpu_check_probe = True
    return get_internal_state


# test/e2e's site wraps listed methods as their module is imported: one more.
_e2e_site._PATCHES.setdefault("sglang.srt.managers.scheduler", []).append(
    ("Scheduler", "get_internal_state", _probe)
)
"""


def probe_env() -> dict:
    folder = os.path.join(WORK, "probe-site")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "sitecustomize.py"), "w") as f:
        f.write(PROBE)
    return {
        "PYTHONPATH": os.pathsep.join([folder, SITE]),
        "GPU_CHECK_E2E_SITE": SITE,
    }


def server(name: str, model_dir: str, probe: dict) -> Server:
    extra, env = RUNS[name]
    args = [*BASE_ARGS, "--speculative-draft-model-path", model_dir, *extra]
    return Server(
        model_dir,
        args,
        device="cuda",
        workdir=WORK,
        env={**env, **probe},
        startup_timeout=150.0,
    )


def started(srv: Server) -> float:
    """Start ``srv``; seconds from process start to ready."""
    tic = time.monotonic()
    srv.start()
    if not srv.wait():
        raise srv.fail("exited before ready")
    return time.monotonic() - tic


def post(url: str, body: dict, out: dict, key: str) -> None:
    request = urllib.request.Request(
        url + "/generate",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as reply:
            out[key] = json.loads(reply.read())
    except Exception as exc:  # reported with the pair's logs
        out[key] = {"error": repr(exc)}


def request_body(bootstrap_port: int, input_ids: list[int]) -> dict:
    """A greedy request with the fields SGLang's PD router adds: where the decode
    rank fetches the prefill rank's state (bootstrap host and port) and the room
    pairing the two halves."""
    return {
        "input_ids": input_ids,
        "sampling_params": {
            "temperature": 0.0,
            "max_new_tokens": MAX_NEW_TOKENS,
            "ignore_eos": True,
        },
        "bootstrap_host": "127.0.0.1",
        "bootstrap_port": bootstrap_port,
        "bootstrap_room": random.randrange(1 << 62),
    }


def generate(prefill: Server, decode: Server, input_ids: list[int]) -> dict:
    """One request through the pair, as SGLang's PD router sends it: to both
    servers at once; the decode server's answer is the result."""
    flag = prefill.command.index("--disaggregation-bootstrap-port")
    body = request_body(int(prefill.command[flag + 1]), input_ids)
    out: dict = {}
    threads = [
        threading.Thread(target=post, args=(s.url, body, out, k))
        for k, s in (("prefill", prefill), ("decode", decode))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    answer = out["decode"]
    if "error" in answer or "error" in out["prefill"]:
        raise prefill.fail(f"request failed: {out}\n--- decode log ---\n{decode.log}")
    return {
        "output_ids": answer.get("output_ids"),
        "completion_tokens": answer["meta_info"].get("completion_tokens"),
        "spec": {k: v for k, v in answer["meta_info"].items() if k.startswith("spec_")},
    }


def facts(srv: Server, seconds: float) -> dict:
    state = srv.server_info()["internal_states"][0]
    mamba = re.search(MAMBA_LINE, srv.log)
    kv = re.search(KV_LINE, srv.log)
    return {
        "wall_s": seconds,
        "scheduler_s": (state.get("startup_time") or {}).get("scheduler_e2e"),
        "reserved": state["gpu_check"]["memory_reserved"],
        "max_reserved": state["gpu_check"]["max_memory_reserved"],
        "mamba_slots": int(mamba["slots"]) if mamba else None,
        "verify_gb": (mamba["verify_ssm"] or "0") if mamba else None,
        "kv_tokens": int(kv["tokens"]) if kv else None,
        "pd_lean": state.get("pd_lean"),
    }


def check_probe(probe: dict) -> None:
    """--check: the probe loads test/e2e's site and wraps the scheduler, on any host."""
    env = {**os.environ, **probe, "SGLANG_PD_LEAN_E2E_STANDINS": "0"}
    code = (
        "import sglang.srt.managers.scheduler as s\n"
        "import sglang.srt.mem_cache.kv_cache_configurator as k\n"
        "assert s.Scheduler.get_internal_state.gpu_check_probe\n"
        "assert k.KVCacheConfigurator._handle_max_mamba_cache.__wrapped__\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True
    )
    if done.returncode:
        sys.exit(f"probe check failed:\n{done.stderr[-3000:]}")


def dry_run(model_dir: str, probe: dict) -> int:
    from sglang.srt.managers.io_struct import GenerateReqInput

    check_probe(probe)
    GenerateReqInput(**request_body(1, PROMPTS[-1]))
    for name in ("decode", *PREFILLS.values()):
        print(" ".join(server(name, model_dir, probe).command))
    print("dry run: recipe and probe ready, no server started")
    return 0


def run_pairs(model_dir: str, probe: dict) -> dict:
    """label -> (facts of the prefill rank, answers), the decode server kept."""
    decode = server("decode", model_dir, probe)
    results = {}
    try:
        started(decode)
        for label, name in PREFILLS.items():
            prefill = server(name, model_dir, probe)
            try:
                seconds = started(prefill)
                info = facts(prefill, seconds)
                answers = [generate(prefill, decode, ids) for ids in PROMPTS]
                results[label] = (info, answers)
            finally:
                prefill.stop()
    finally:
        decode.stop()
    return results


def print_facts(results: dict) -> None:
    print(
        f"{'prefill server':28}{'ready s':>9}{'scheduler s':>13}{'reserved GiB':>14}"
        f"{'max GiB':>9}{'mamba slots':>13}{'verify ssm GB':>15}{'KV tokens':>11}"
    )
    for label, (info, _) in results.items():
        scheduler = f"{info['scheduler_s']:.1f}" if info["scheduler_s"] else "n/a"
        print(
            f"{label:28}{info['wall_s']:>9.1f}{scheduler:>13}"
            f"{info['reserved'] / GIB:>14.3f}{info['max_reserved'] / GIB:>9.3f}"
            f"{info['mamba_slots']!s:>13}{info['verify_gb']!s:>15}"
            f"{info['kv_tokens']!s:>11}"
        )
    on, _ = results["with plugin"]
    print(f"plugin record on the prefill rank: {json.dumps(on['pd_lean'])}")


def compare_answers(results: dict) -> int:
    """Mismatching prompts between the two pairs (tokens or speculative acceptance)."""
    (_, with_plugin), (_, without) = results.values()
    failures = 0
    for ids, a, b in zip(PROMPTS, with_plugin, without, strict=True):
        same_tokens = bool(a["output_ids"]) and a["output_ids"] == b["output_ids"]
        same_spec = (a["spec"], a["completion_tokens"]) == (
            b["spec"],
            b["completion_tokens"],
        )
        print(
            f"prompt of {len(ids):3} tokens: tokens "
            f"{'identical' if same_tokens else 'DIFFER'}, speculative acceptance "
            f"{'identical' if same_spec else 'DIFFERS'} {a['spec']}"
        )
        if not (same_tokens and same_spec):
            print(f"  with plugin: {a}\n  without:     {b}")
            failures += 1
    if not with_plugin[0]["spec"]:
        print("note: the decode server reported no spec_* fields in meta_info")
    return failures


def main() -> int:
    model_dir = write_model(os.path.join(WORK, "tiny-qwen3-next"))
    probe = probe_env()
    if DRY:
        return dry_run(model_dir, probe)
    results = run_pairs(model_dir, probe)
    print_facts(results)
    return 1 if compare_answers(results) else 0


sys.exit(main())
PY
}

work="$(mktemp -d -t sglang-pd-lean-gpu-check-XXXXXX)"
trap 'rm -rf "$work"' EXIT
write_pd_pair "$work/pd_pair.py"
if [ "$mode" = "--check" ]; then
  GPU_CHECK_DRY=1 GPU_CHECK_WORK="$work" "$py" "$work/pd_pair.py"
  exit
fi
logs="${OUT:-$(mktemp -d -t sglang-pd-lean-gpu-check-logs-XXXXXX)}"
mkdir -p "$logs"
echo "gpu_check: logs in $logs"

# --- 0: a GPU, and the plugin installed where SGLang finds it (an offline editable install)
"$py" - <<'PY' || exit 2
import sys

import torch

if not torch.cuda.is_available():
    sys.exit("gpu_check: torch sees no CUDA device")
print(f"gpu_check: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
PY
if ! "$py" -c "import sglang_pd_lean" >/dev/null 2>&1; then
  "$py" -m pip install -q --no-deps --no-build-isolation --no-index -e . || exit 2
fi
"$py" -m sglang_pd_lean doctor || echo "gpu_check: doctor reports a problem (above)"

# --- 1: unit suite and GPU e2e cases, side by side; SIGINT first so pytest stops its servers
timeout -s INT -k 30 240 "$py" -m pytest -q -p no:cacheprovider -m "not e2e" test \
  >"$logs/unit.log" 2>&1 &
unit_pid=$!
timeout -s INT -k 30 270 "$py" -m pytest -q -p no:cacheprovider -m gpu test/e2e \
  --basetemp "$work/e2e" >"$logs/gpu_e2e.log" 2>&1
e2e_rc=$?
wait "$unit_pid"
unit_rc=$?
# Servers a killed pytest could not stop: only ours (their model lives under $work);
# each leads its own process group (harness.Server), so the group goes with it.
for pid in $(pgrep -f "sglang.launch_server --model-path $work/" || true); do
  kill -9 -- "-$pid" 2>/dev/null
done
mkdir -p "$logs/e2e"
find "$work/e2e" -name 'server-*.log' -exec cp {} "$logs/e2e/" \; 2>/dev/null
echo "=== 1. unit suite: exit $unit_rc; GPU e2e: exit $e2e_rc ($((SECONDS - start_s)) s so far)"
for log in "$logs/unit.log" "$logs/gpu_e2e.log"; do
  grep -E "^(FAILED|ERROR) " "$log" | head -n 20
  tail -n 2 "$log"
done

# --- 2 and 3: the PD pair, with what time is left
left=$((budget_s - (SECONDS - start_s)))
if [ "$left" -lt 120 ]; then
  echo "=== 2. PD pair skipped: ${left} s left of ${budget_s} s"
  pair_rc=3
else
  mkdir -p "$work/pair"
  GPU_CHECK_WORK="$work/pair" timeout -s INT -k 30 "$left" "$py" "$work/pd_pair.py" \
    2>&1 | tee "$logs/pd_pair.log"
  pair_rc=${PIPESTATUS[0]}
  cp "$work"/pair/server-*.log "$logs/" 2>/dev/null
fi
echo "=== 2./3. PD pair: exit $pair_rc"
echo "=== gpu_check: $((SECONDS - start_s)) s; logs in $logs"
[ "$unit_rc" -eq 0 ] && [ "$e2e_rc" -eq 0 ] && [ "$pair_rc" -eq 0 ]
