"""Record the ``/server_info`` documents that ``test/test_check.py`` replays.

    python test/e2e/record_server_info.py test/data/server_info

Starts the check fleet of the e2e suite (``e2e_runs.FLEET``: a prefill server with
the plugin, one with the plugin left out of ``SGLANG_PLUGINS``, a decode server) on
the CPU with the installed SGLang, all up at once, and writes each one's
``/server_info`` to ``DIR/<release>/<name>.json``. The model path and ports are
kept as the server reported them; the tests give ``--config`` for the model.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

import sglang

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_runs import FLEET, Runs  # noqa: E402
from tiny_model import write_model  # noqa: E402


def main(out: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = write_model(os.path.join(tmp, "tiny-qwen3-next"))
        os.makedirs(os.path.join(tmp, "servers"))
        runs = Runs(model_dir, os.path.join(tmp, "servers"))
        folder = os.path.join(out, sglang.__version__)
        os.makedirs(folder, exist_ok=True)
        with runs.fleet(FLEET, "cpu") as servers:
            for name, server in servers.items():
                path = os.path.join(folder, FLEET[name] + ".json")
                with open(path, "w") as f:
                    json.dump(server.server_info(), f, indent=1, sort_keys=True)
                    f.write("\n")
                print(path)


if __name__ == "__main__":
    main(sys.argv[1])
