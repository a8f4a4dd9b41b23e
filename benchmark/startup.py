"""What the plugin costs an SGLang process at start-up, against its kill switch.

    python benchmark/startup.py [--runs 5] [--before DIR] [--server]

Two process kinds, each a fresh interpreter that calls SGLang's own entry function
until its ``load_plugins()`` returns (no server starts):
- scheduler: ``run_scheduler_process``, in a process that has first imported every
  module a real CPU prefill rank has imported when its ``Scheduler.__init__``
  returns (the list is taken at the start from a real server: the e2e recipe of
  ``test/e2e``, NEXTN, under the kill switch); after ``load_plugins()`` the plugin's
  launch hook runs for that launch (NEXTN: SGLang's EAGLE worker), timed apart;
- launcher: ``python -m sglang.launch_server --help`` (nothing imported but what the
  launcher imports before ``load_plugins()``).
For each: the seconds ``load_plugins()`` took, the plugin's own ``register()`` inside
it, the SGLang modules it added and the process's resident memory after it, and for
the scheduler the launch hook's seconds and the SGLang modules it added. The variants
(this tree, ``SGLANG_PD_LEAN=0``, and with ``--before DIR`` another checkout's package
first on ``PYTHONPATH``) run interleaved, ``--runs`` times each; the table gives
medians. ``--server`` also times a real CPU prefill server (the same recipe) from
start to ready, with and without the plugin, once each per run. Run it with a
release's venv python (``~/.cache/sglang-pd-lean/sglang-<v>/bin/python``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

SCRIPT = """
import json, sys, time
import sglang.srt.plugins as plugins
seen = {}
real = plugins.load_plugins
def timed_register():
    try:
        import sglang_pd_lean.plugin as plugin
    except ImportError:
        return
    inner = plugin.register
    def register():
        start = time.perf_counter()
        try:
            return inner()
        finally:
            seen["register_s"] = time.perf_counter() - start
    plugin.register = register
def sglang_modules():
    return {name for name in sys.modules if name.startswith("sglang.")}
def wrapped_load_plugins():
    before = sglang_modules()
    start = time.perf_counter()
    timed_register()  # imports the plugin's module, as load_plugins() would
    real()
    seen["load_plugins_s"] = time.perf_counter() - start
    seen["modules_added"] = len(sglang_modules() - before)
    with open("/proc/self/statm") as f:
        seen["rss_mib"] = int(f.read().split()[1]) * 4096 / 2**20
plugins.load_plugins = wrapped_load_plugins
%s
print("RESULT" + json.dumps(seen))
"""
# The rank's modules, imported first (each may fail outside a real rank: skipped).
PRE_IMPORT = """
import importlib
for name in open(%r).read().split():
    try:
        importlib.import_module(name)
    except BaseException:
        pass
"""
# NEXTN's launch (SGLang's EAGLE worker) given to the plugin's launch hook.
LAUNCH = """
import types
try:
    from sglang_pd_lean import compat, plugin
except ImportError:
    plugin = None
if hasattr(plugin, "launch") and not compat.kill_switch_on():
    args = types.SimpleNamespace(speculative_algorithm="EAGLE",
                                 enable_multi_layer_eagle=False,
                                 disable_overlap_schedule=True)
    before = sglang_modules()
    start = time.perf_counter()
    plugin.launch(None, args)
    seen["launch_s"] = time.perf_counter() - start
    seen["launch_modules_added"] = len(sglang_modules() - before)
"""
CALLS = {
    "scheduler": (
        "import inspect\n"
        "import sglang.srt.managers.scheduler as m\n"
        "m.load_plugins = wrapped_load_plugins\n"
        "n = [p for p in inspect.signature(m.run_scheduler_process).parameters.values()"
        " if p.default is p.empty]\n"
        "try:\n"
        "    m.run_scheduler_process(*[None] * len(n))\n"
        "except Exception:\n"
        "    pass\n"
    ),
    "launcher": (
        "import runpy\n"
        "sys.argv = ['sglang.launch_server', '--help']\n"
        "try:\n"
        "    runpy.run_module('sglang.launch_server', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
    ),
}


def variants(before: str | None) -> dict[str, dict[str, str]]:
    """Variant name -> environment changes."""
    found = {"plugin": {}, "kill switch": {"SGLANG_PD_LEAN": "0"}}
    if before:
        path = os.path.join(os.path.abspath(before), "python")
        found["before"] = {"PYTHONPATH": path}
    return found


def one_run(kind: str, env_changes: dict[str, str], modules_file: str) -> dict:
    env = dict(os.environ)
    env.pop("SGLANG_PLUGINS", None)
    env.pop("SGLANG_PD_LEAN", None)
    env.update(env_changes)
    call = CALLS[kind]
    if kind == "scheduler":
        call = PRE_IMPORT % modules_file + call + LAUNCH
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT % call],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT")]
    if not lines:
        raise SystemExit(f"{kind} run failed:\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT") :])


def server_seconds(plugin: bool, workdir: str, extra_env: dict | None = None) -> float:
    """A real CPU prefill server (the e2e recipe) from start to ready."""
    sys.path.insert(0, os.path.join(ROOT, "test", "e2e"))
    from harness import (  # noqa: E402
        COMMON_ARGS,
        PD_TRANSFER_ARGS,
        SPEC_ARGS,
        Server,
    )
    from tiny_model import write_model  # noqa: E402

    model_dir = os.path.join(workdir, "model")
    if not os.path.exists(model_dir):
        write_model(model_dir)
    args = [*COMMON_ARGS, *SPEC_ARGS, "--disaggregation-mode", "prefill"]
    args += PD_TRANSFER_ARGS
    env = {} if plugin else {"SGLANG_PD_LEAN": "0"}
    env.update(extra_env or {})
    server = Server(model_dir, args, device="cpu", workdir=workdir, env=env)
    start = time.monotonic()
    with server:
        if not server.wait():
            raise SystemExit(server.fail("the prefill server exited before ready"))
        return time.monotonic() - start


def rank_modules(workdir: str) -> str:
    """A file listing every module a real CPU prefill rank (the e2e recipe, under
    the kill switch) has imported when its ``Scheduler.__init__`` returns."""
    prefix = os.path.join(workdir, "rank-modules")
    server_seconds(False, workdir, {"SGLANG_PD_LEAN_E2E_MODULES": prefix})
    written = sorted(
        name for name in os.listdir(workdir) if name.startswith("rank-modules.")
    )
    if not written:
        raise SystemExit("the e2e server wrote no module list")
    return os.path.join(workdir, written[0])


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--before", help="another checkout, timed beside this one")
    parser.add_argument(
        "--server", action="store_true", help="also time a CPU prefill server"
    )
    args = parser.parse_args(argv)
    import sglang

    todo = variants(args.before)
    results: dict[tuple[str, str], list[dict]] = {}
    with tempfile.TemporaryDirectory() as workdir:
        modules_file = rank_modules(workdir)
        with open(modules_file) as listed:
            count = len(listed.read().split())
        for _ in range(args.runs):
            for kind in CALLS:
                for name, env in todo.items():
                    run = one_run(kind, env, modules_file)
                    results.setdefault((kind, name), []).append(run)
    print(
        f"SGLang {sglang.__version__}; medians of {args.runs} fresh processes each; "
        f"the scheduler first imports the {count} modules of a real CPU prefill rank"
    )
    header = (
        "process",
        "variant",
        "load_plugins s",
        "register s",
        "vs kill switch s",
        "SGLang modules added",
        "RSS MiB",
        "vs kill switch MiB",
        "launch hook s",
        "its SGLang modules",
    )
    rows = [header]
    for kind in CALLS:
        base = results[(kind, "kill switch")]
        base_s = median([r["load_plugins_s"] for r in base])
        base_rss = median([r["rss_mib"] for r in base])
        for name in todo:
            runs = results[(kind, name)]
            load_s = median([r["load_plugins_s"] for r in runs])
            rss = median([r["rss_mib"] for r in runs])
            register = [r["register_s"] for r in runs if "register_s" in r]
            launch = [r["launch_s"] for r in runs if "launch_s" in r]
            launch_added = [r["launch_modules_added"] for r in runs if launch]
            rows.append(
                (
                    kind,
                    name,
                    f"{load_s:.3f}",
                    f"{median(register):.3f}" if register else "-",
                    f"{load_s - base_s:+.3f}",
                    f"{median([r['modules_added'] for r in runs]):.0f}",
                    f"{rss:.0f}",
                    f"{rss - base_rss:+.1f}",
                    f"{median(launch):.3f}" if launch else "-",
                    f"{median(launch_added):.0f}" if launch else "-",
                )
            )
    if args.server:
        with tempfile.TemporaryDirectory() as workdir:
            timings = {True: [], False: []}
            for _ in range(args.runs):
                for plugin in (True, False):
                    timings[plugin].append(server_seconds(plugin, workdir))
        for plugin in (True, False):
            name = "plugin" if plugin else "kill switch"
            rows.append(
                (
                    "prefill server, start to ready",
                    name,
                    f"{median(timings[plugin]):.1f}",
                )
                + ("",) * 7
            )
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(header))]
    for row in rows:
        cells = zip(row, widths, strict=True)
        print("  ".join(str(cell).ljust(width) for cell, width in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
