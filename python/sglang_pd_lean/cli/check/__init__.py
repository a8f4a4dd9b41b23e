"""``sglang-pd-lean check URL...``: is every prefill server of a fleet lean, and what
is each one leaving on the table?

    sglang-pd-lean check http://prefill-0:30000 http://prefill-1:30000 http://decode-0:30000
    sglang-pd-lean check --json --timeout 10 --no-predict URL...

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

Exit codes: 0 when no prefill target holds verify-only state the plugin could
remove; 1 when one does (each named, with why: no plugin record, an unsupported
release, a gate not registered); 2 for bad input or a server that does not answer
(one line each; the other servers are still checked), which wins over 1. Decode and
unified servers, and prefill servers without speculative decoding, are listed and
never fail. The kill switch (``SGLANG_PD_LEAN=0``) registers nothing, so a server
under it has no record, the same as one without the plugin.

The parts, one job each: ``servers`` (asking, the plugin's record read as
``record.Record``), ``judge`` (the exit code and the predictions), ``output``
(table and JSON). This module parses the command's input and runs them.
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


def cmd_check(args) -> int:
    model = model_override(args)
    _known_gpu(args.gpu)
    answers: list = []
    urls = []
    for url in args.urls:
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
    code = exit_code(answers)
    if args.json:
        print(json.dumps(check_json(urls, answers, predictions, code), indent=2))
    else:
        print("\n".join(render(urls, answers, predictions, code)))
    return code
