"""``report`` given a server's own launch flags equals what every rank of that server
logged and allocated, for each shape beyond one rank of a GQA hybrid.

For each run of ``e2e_shapes.SHAPE_RUNS`` (a tiny DeepSeek V3 with NEXTN, a tiny
Kimi Linear, and on two ranks TP 2, attention DP and PP 2; PD prefill servers with
the plugin and the start-up allocation ledger), ``sglang-pd-lean report --gpu local
--available-gib B --json -- ARGV`` with the server's argv and the budget it sized
with gives, for the rank the report shows (``inputs.pp_rank``; every rank where
the ranks are alike):

- the KV tokens of every rank's ``KV Cache is allocated`` line, exactly, and of
  every buffer that rank's KV pool allocated (``*TokenToKVPool._create_buffers``:
  one page more than the tokens, SGLang's padding slot); the report's KV budget
  divided by the bytes per token the pool allocated gives those tokens;
- for a hybrid, the mamba slots and state sizes of every rank's ``Mamba Cache is
  allocated`` line, and the bytes its ``MambaPool`` allocated for state, to the
  byte.

Before the census derived SGLang's MLA backend, it counted the MLA layers as GQA
heads (5.6x too few KV tokens for Kimi Linear); before it derived attention TP, an
attention-DP rank's linear heads were halved.
"""

from __future__ import annotations

import pytest
from e2e_ledger_runs import read_ledgers
from e2e_runs import KV_LINE, MAMBA_LINE, launch_report
from e2e_shapes import SHAPE_RUNS

pytestmark = pytest.mark.e2e

GIB = 1 << 30
# Index and free-list tensors the pools keep beside the state: not state bytes.
BOOKKEEPING = {"torch.int8", "torch.int32", "torch.int64", "torch.uint64", "torch.bool"}


def pools(entries: list[dict]) -> tuple[list[dict], int]:
    """One rank's start-up allocations: (its KV pool's buffers, the bytes its
    ``MambaPool`` allocated for state), by the SGLang function that asked."""
    kv, mamba = [], 0
    for entry in entries:
        if entry["dtype"] in BOOKKEEPING:
            continue
        if "TokenToKVPool._create_buffers" in entry["function"]:
            kv.append(entry)
        elif ":MambaPool." in entry["function"]:
            mamba += entry["bytes"]
    return kv, mamba


@pytest.mark.parametrize("name", sorted(SHAPE_RUNS))
def test_report_of_a_servers_own_argv_equals_every_ranks_log_and_ledger(
    runs, device, name
):
    shape = SHAPE_RUNS[name]
    if device == "cuda":
        import torch

        if torch.cuda.device_count() < shape.ranks:
            pytest.skip(f"needs {shape.ranks} CUDA devices")
    run = runs.get(name, device)
    assert run.ready, run.explain(f"the {name} server did not start")
    result = launch_report(run.argv, run.budget_gib())
    inputs = result["inputs"]
    assert result["launch"]["role"] == "prefill"
    assert inputs["use_mla_backend"] is (shape.kind != "qwen3-next")
    pool = result["roles"]["prefill"]["plugin"]
    sized = result["capacity"]["prefill"]["plugin"]

    # Every rank logged its pools, and the report's tokens are theirs.
    kv_lines = run.lines(KV_LINE)
    assert kv_lines, run.explain("no KV Cache line")
    assert {int(m["tokens"]) for m in kv_lines} == {sized["kv_tokens"]}
    mamba = run.lines(MAMBA_LINE)
    assert bool(mamba) == (pool["mamba_slots"] > 0)
    for logged in mamba:
        assert pool["mamba_slots"] == int(logged["slots"])
        for component, key in (("conv state", "conv"), ("ssm state", "ssm")):
            assert f"{pool['components'][component] / GIB:.2f}" == logged[key]

    # What the shown rank's pools allocated, to the byte.
    blocks = read_ledgers(run.ledger_path)
    assert len(blocks) == shape.ranks, [b.end for b in blocks]
    assert all(b.end["errors"] == 0 for b in blocks), [b.end for b in blocks]
    shown = [b for b in blocks if b.end["pp_rank"] == inputs["pp_rank"]]
    assert shown, [b.end for b in blocks]
    tokens, page = sized["kv_tokens"], inputs["page_size"]
    state = ("conv state", "ssm state", "verify ssm snapshots", "verify conv windows")
    for block in shown:
        kv, mamba = pools(block.entries)
        # Each buffer (a layer, or K and V of a layer from 0.5.23) has a row for
        # each of the report's tokens and SGLang's padding page.
        assert kv and all(tokens + page in e["shape"] for e in kv), (block.end, kv)
        # The server's own bytes per token, and the report's budget in them.
        per_token = sum(e["bytes"] for e in kv) // (tokens + page)
        assert sized["kv_cache_bytes"] // per_token // page * page == tokens
        assert mamba == sum(pool["components"][c] for c in state), block.end
