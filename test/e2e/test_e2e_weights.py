"""``report``'s weights per rank equal the bytes the server's target model holds.

The e2e probe (test/e2e/site/e2e_probe.py) logs, after ``ModelRunner.load_model``,
the bytes of the target's parameters (each storage once) in the scheduler process.
``sglang-pd-lean report --gpu h200 --json -- ARGV`` with that server's own argv (no
``--available-gib``, so the report works its weights out: safetensors index, else a
model class on the meta device) must give the same ``weights_bytes`` for the
server's role. The draft worker's own figure is logged too; the report estimates it
(MTP layers) and it is shown in the failure message, not compared.

Known gap: the tiny model has no safetensors index, so the report falls back to
transformers' class on the meta device, whose parameters are not SGLang's (0.5.17:
24 bytes fewer on the tiny model, SGLang keeping some GDN parameters in float32).
Until the report builds SGLang's own model class, that case is an expected failure
that names both figures (within 0.1%); any other difference or source must match exactly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.e2e

NAMES = ["prefill", "decode", "null"]


def report_memory(argv: list[str]) -> dict:
    cli = os.path.join(os.path.dirname(sys.executable), "sglang-pd-lean")
    command = [cli, "report", "--gpu", "h200", "--json", "--", *argv]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{' '.join(command)}:\n{done.stderr}"
    result = json.loads(done.stdout)
    return result["memory"][result["launch"]["role"]]


@pytest.mark.parametrize("name", NAMES)
def test_report_weights_equal_the_servers_parameter_bytes(runs, device, name):
    run = runs.get(name, device)
    assert run.ready, run.explain(f"the {name} server did not start")
    memory = report_memory(run.argv)
    server = {
        "target": run.parameter_bytes(),
        "draft": run.parameter_bytes(draft=True),
    }
    message = (
        f"report {memory['weights_bytes']} B ({memory['weights_source']}), "
        f"server {server} B"
    )
    off = abs(memory["weights_bytes"] - server["target"])
    if 0 < off <= server["target"] // 1000 and memory["weights_source"].startswith(
        "transformers'"
    ):
        pytest.xfail(f"transformers' class is not SGLang's: {message}")
    assert memory["weights_bytes"] == server["target"], message
