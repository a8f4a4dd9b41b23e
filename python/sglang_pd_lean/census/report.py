"""``census.report(launch) -> Report``: the report on one launch, built once.

    report = census.report(Launch(argv=("--tp", "4"), gpu=gpu_facts("h200")))
    report.roles["prefill"].upstream.verify_only_bytes, report.advice[0].flags
    json.dumps(jsonable(report))  # report --json (docs/json.md)

The steps, in order: what plain Python can check (before SGLang's import); the
role the flags name resolved by SGLang (``launch.resolve_launch``); the weights
build started in a child from it (``server.weights_build``); the other roles shown
resolved, once each (``ResolvedLaunch.more``); the plugins loaded as an SGLang
process loads them, and the seams the census needs checked; the census per role
and the plugin's gates on this SGLang (``server.census_launch``); for a sized report with a prefill column, the advice (``advice.advise``, one more
resolution per set of flags it tries); what the prefill target does not build,
piece by piece (``pieces``).
"""

from __future__ import annotations

from sglang_pd_lean.census.environment import (
    load_sglang_plugins,
    require_seams,
    require_sglang,
)
from sglang_pd_lean.census.inputs import ROLES
from sglang_pd_lean.census.launch import Launch, check, resolve_launch
from sglang_pd_lean.census.results import Report


def report(launch: Launch, roles: tuple[str, ...] = ROLES) -> Report:
    """The report on ``launch``, its columns the ``roles`` wanted (a caller that
    needs one role, such as ``check`` for one server, saves the others'
    resolution and pools)."""
    from sglang_pd_lean.census.advice import advise
    from sglang_pd_lean.census.columns import census_launch, weights_build
    from sglang_pd_lean.census.pieces import prefill_pieces

    check(launch)
    require_sglang()
    done = resolve_launch(launch, roles=())  # the role the flags name
    with weights_build(done) as build:  # a child, beside the rest
        done = done.more(tuple(r for r in ROLES if r in roles))
        columns = tuple(r for r in ROLES if r in roles and r in done.resolved)
        load_sglang_plugins()
        require_seams()
        census = census_launch(done, columns, build)
    advised = advise(done, census) if launch.sized and "prefill" in columns else None
    return Report(
        **census.parts(),
        advice=advised.advice if advised else None,
        nothing_to_spend=advised.nothing_to_spend if advised else None,
        prefill_pieces=prefill_pieces(done),
        refused=done.refused or None,
    )
