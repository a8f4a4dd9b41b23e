"""``sglang-pd-lean check URL...``: is every prefill server of a fleet lean, and what
is each one leaving on the table?

    sglang-pd-lean check http://prefill-0:30000 http://prefill-1:30000 http://decode-0:30000
    sglang-pd-lean check --json --timeout 10 --no-predict URL...
    sglang-pd-lean check --router http://router:30000 [URL...]

Each server is asked for SGLang's ``/server_info`` (its resolved server arguments,
its SGLang version, and one internal state per scheduler rank, where the plugin's
record sits as ``["pd_lean"]``), at most ``--concurrency`` servers at a time, each
request bounded by ``--timeout``. One row per server and rank: role, release, plugin
state, each gate's state, the bytes the plugin did not allocate, and the budget
gate's KV tokens and mamba slots, upstream's and now.

Then, per server (unless ``--no-predict``), the report's own census on the server's
own arguments (the installed SGLang resolves them again, with the budget the plugin
recorded on the server where there is one): prediction beside measurement for the
bytes not allocated, the mamba slots and the KV tokens, and for a prefill server the
report's advice on spending the freed bytes.

``--router URL`` (repeatable): the fleet as SGLang's router lists it (``router``):
every worker it lists is asked as a URL given here is, beside any URLs given.

Exit codes: 0 when no prefill target holds verify-only state the plugin could
remove; 1 when one does (each named, with why: no plugin record, an unsupported
release, a gate not registered); 2 for bad input, a server that does not answer, a
router that gives no listing or a worker it marks unhealthy (one line each; the
other servers are still checked), which wins over 1. Decode and
unified servers, and prefill servers without speculative decoding, are listed and
never fail. The kill switch (``SGLANG_PD_LEAN=0``) registers nothing, so a server
under it has no record, the same as one without the plugin.

The parts, one job each: ``router`` (the router's worker list), ``servers``
(asking, the plugin's record read as ``record.Record``), ``judge`` (the exit code
and the predictions), ``output`` (table and JSON). This module parses the command's
input and runs them.
"""

from __future__ import annotations

import json
import os

from sglang_pd_lean.cli.args import UsageError

# The command's parts, where its tests and callers find them.
from sglang_pd_lean.cli.check.judge import (  # noqa: F401
    Figure,
    Prediction,
    compare,
    exit_code,
    predict_all,
)
from sglang_pd_lean.cli.check.output import (  # noqa: F401
    HEADER,
    SCHEMA_VERSION,
    check_json,
    prediction_lines,
    render,
    rows,
    verdict_lines,
)
from sglang_pd_lean.cli.check.router import (  # noqa: F401
    API_KEY_ENV,
    Listing,
    Worker,
    api_key,
    list_workers,
)
from sglang_pd_lean.cli.check.servers import (  # noqa: F401
    NO_RECORD,
    PluginState,
    Rank,
    Server,
    Unanswered,
    ask,
    ask_all,
    normalize,
    read_server,
)


def model_override(args) -> str | None:
    path = args.config or args.model_path
    if path is not None and not os.path.exists(path):
        raise UsageError(f"{path}: no such file or folder")
    return path


def _known_gpu(name: str | None) -> None:
    """An unknown ``--gpu`` is bad input before any server is asked."""
    from sglang_pd_lean.census.gpus import gpu_facts
    from sglang_pd_lean.census.inputs import CensusError

    try:
        gpu_facts(name)
    except CensusError as exc:
        raise UsageError(str(exc)) from None


def _fleet(args) -> tuple[list[str], list[Listing]]:
    """The URLs to ask: those given, then each router's workers not given already;
    and each router's listing."""
    routers = []
    for router in args.router or ():
        try:
            routers.append(normalize(router))
        except UsageError as exc:
            raise UsageError(f"--router: {exc}") from None
    if not args.urls and not routers:
        raise UsageError("give a server URL, or --router URL")
    if args.api_key and not routers:
        raise UsageError("--api-key is the router's: give it with --router URL")
    key = api_key(args.api_key)
    listings = [list_workers(router, args.timeout, key) for router in routers]
    given = list(args.urls)
    seen = set()
    for url in given:
        try:
            seen.add(normalize(url))
        except UsageError:
            seen.add(url)
    for listing in listings:
        for worker in listing.workers:
            if worker.url not in seen:
                seen.add(worker.url)
                given.append(worker.url)
    return given, listings


def cmd_check(args) -> int:
    model = model_override(args)
    _known_gpu(args.gpu)
    given, listings = _fleet(args)
    answers: list = []
    urls = []
    for url in given:
        try:
            urls.append(normalize(url))
        except UsageError as exc:
            urls.append(url)
            answers.append((len(urls) - 1, Unanswered(str(exc))))
    bad = dict(answers)
    asked = [u for i, u in enumerate(urls) if i not in bad]
    got = iter(ask_all(asked, args.timeout, args.concurrency))
    answers = [bad[i] if i in bad else next(got) for i in range(len(urls))]
    predictions = {} if args.no_predict else predict_all(answers, args, model)
    code = exit_code(answers, listings)
    if args.json:
        print(
            json.dumps(check_json(urls, answers, predictions, code, listings), indent=2)
        )
    else:
        print("\n".join(render(urls, answers, predictions, code, listings)))
    return code
