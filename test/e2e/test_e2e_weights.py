"""``report``'s weights per rank equal the bytes the server's models hold.

The e2e probe (test/e2e/site/e2e_probe.py) logs, after ``ModelRunner.load_model``,
the bytes of the model's parameters (each storage once) in the scheduler process,
for the target worker and for the draft worker. ``sglang-pd-lean report --gpu h200
--json -- ARGV`` with that server's own argv (no ``--available-gib``, no
``--weights-gib``: the report builds SGLang's own model classes for rank 0 of the
launch, ``census.weights``) must give the same ``weights_bytes`` and
``draft_weights_bytes`` for the server's role, to the byte.
"""

from __future__ import annotations

import pytest
from e2e_runs import launch_report

pytestmark = pytest.mark.e2e

NAMES = ["prefill", "decode", "null"]


def report_memory(argv: list[str]) -> dict:
    result = launch_report(argv, None, gpu="h200")
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
        f"report {memory['weights_bytes']} + {memory['draft_weights_bytes']} B "
        f"({memory['weights_source']}), server {server} B"
    )
    assert memory["weights_source"].startswith("SGLang's model class"), message
    assert memory["weights_bytes"] == server["target"], message
    assert memory["draft_weights_bytes"] == server["draft"], message
