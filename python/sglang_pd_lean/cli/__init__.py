"""``sglang-pd-lean``: the operator's commands.

    sglang-pd-lean report --model qwen3.5-397b-a17b --tp 8 --max-running-requests 256 \\
        --speculative-num-draft-tokens 4 [--available-gib 100] [--json] [--png FILE]
    sglang-pd-lean report --list-models
    sglang-pd-lean doctor [--json]
    python -m sglang_pd_lean ...

``report`` prints the census (bytes per role and component, upstream vs plugin, per
rank); ``doctor`` prints which gates the installed SGLang needs and exits 1 when the
plugin cannot do its job there. Bad input gets one line on stderr and exit code 2,
found before SGLang's slow import where plain Python can find it; SIGINT, SIGTERM
and SIGHUP end the command with one line and exit code 128 + signal.

Modules, one job each: ``args`` (the parser and ``UsageError``), ``commands`` (dispatch,
``report``, errors and signals), ``table``, ``chart`` (PNG), ``doctor`` and
``environment`` (SGLang loaded quietly, the plugin applied as SGLang applies it).
"""

from sglang_pd_lean.cli.args import UsageError, build_parser
from sglang_pd_lean.cli.chart import chart, check_png_target, draw_png
from sglang_pd_lean.cli.commands import cmd_report, main
from sglang_pd_lean.cli.doctor import cmd_doctor, doctor_report
from sglang_pd_lean.cli.table import ROLE_TITLES, component_rows, render_table

__all__ = [
    "ROLE_TITLES",
    "UsageError",
    "build_parser",
    "chart",
    "check_png_target",
    "cmd_doctor",
    "cmd_report",
    "component_rows",
    "doctor_report",
    "draw_png",
    "main",
    "render_table",
]
