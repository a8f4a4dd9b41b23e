"""``python -m sglang_pd_lean``: the ``sglang-pd-lean`` command."""

import sys

from sglang_pd_lean.cli.commands import run

sys.exit(run())
