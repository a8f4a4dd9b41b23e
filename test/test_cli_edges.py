"""The command's edges: what happens before SGLang is imported, without SGLang,
under a signal, and around a library caller (handlers restored, a stop that
``except Exception`` cannot swallow); the parser's own checks and the host-safety
caps at their exact limits; the --png probe leaves nothing behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from sglang_pd_lean import census, cli, compat

PACKAGE_ROOT = os.path.join(os.path.dirname(__file__), "..", "python")
STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def run_cli(*args: str, env: dict | None = None, python: list[str] | None = None):
    full_env = dict(os.environ, **(env or {}))
    full_env.pop("SGLANG_PD_LEAN", None)
    return subprocess.run(
        [*(python or [sys.executable]), "-m", "sglang_pd_lean", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=300,
    )


# ------------------------------------------------------ before and without SGLang


@pytest.mark.parametrize(
    "args",
    [
        ["--model", "no-such-model"],
        ["--config", "/no/such/config.json"],
        ["--config", os.devnull],
        ["--model", "qwen3-next-80b-a3b", "--png", "/no/such/dir/chart.png"],
    ],
)
def test_input_errors_are_found_before_sglang_is_imported(args):
    code = (
        "import sys; from sglang_pd_lean import cli; "
        f"code = cli.main(['report', *{args!r}]); "
        "print(code, 'sglang' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert done.stdout.split() == ["2", "False"], done.stderr


def test_sglang_not_installed_is_said_in_words():
    """``python -S``: no site-packages, so no SGLang; the package from the source tree."""
    python = [sys.executable, "-S"]
    env = {"PYTHONPATH": os.path.abspath(PACKAGE_ROOT)}
    done = run_cli("report", "--model", "qwen3-next-80b-a3b", env=env, python=python)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "SGLang is not installed" in lines[0]
    doctor = run_cli("doctor", env=env, python=python)
    assert doctor.returncode == 1
    assert (
        doctor.stdout.startswith("SGLang: not installed")
        and "None" not in doctor.stdout
    )
    version = run_cli("--version", env=env, python=python)
    assert version.stdout.strip().endswith("(SGLang not installed)")


def test_version_names_the_plugin_and_sglang(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out.strip()
    assert out == f"sglang-pd-lean 0.1.0 (SGLang {compat.sglang_version()})"


def test_python_dash_m_runs_the_command():
    done = run_cli("report", "--list-models")
    assert done.returncode == 0 and "qwen3-next-80b-a3b" in done.stdout.split()


# --------------------------------------------------------------------- signals


# The test-only hold point (test/hold_site/sitecustomize.py): the report waits
# there, census computed and nothing printed, once it has created the file named.
TEST_HOLD = "SGLANG_PD_LEAN_TEST_HOLD"
HOLD_SITE = os.path.join(os.path.dirname(__file__), "hold_site")


def default_signal_dispositions() -> None:
    """In the child before exec: SIGINT, SIGTERM and SIGHUP at their defaults and
    unblocked, whatever the test run inherited (a background job ignores SIGINT)."""
    for signum in STOPS:
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)


@pytest.mark.parametrize("signum", STOPS, ids=lambda signum: signum.name)
def test_a_signal_ends_report_with_one_line_and_no_temporary_folder(signum, tmp_path):
    """The report is held at the test-only hold point of ``test/hold_site`` (census
    computed, temporary model folder present, nothing printed) when the signal
    arrives."""
    held = tmp_path / "held"
    env = dict(os.environ, TMPDIR=str(tmp_path), **{TEST_HOLD: str(held)})
    env["PYTHONPATH"] = os.pathsep.join(
        [HOLD_SITE, *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    env.pop("SGLANG_PD_LEAN", None)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sglang_pd_lean",
            "report",
            "--model",
            "qwen3-next-80b-a3b",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=default_signal_dispositions,
    )
    try:
        deadline = time.monotonic() + 600
        while not held.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert list(tmp_path.glob("sglang-pd-lean-model-*"))
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=100)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signum, err
    assert out == "" and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("sglang-pd-lean: ")
    assert not list(tmp_path.glob("sglang-pd-lean-model-*"))


def test_main_puts_back_the_signal_handlers_it_found(capsys):
    """A library caller's handlers are its own again once ``main`` returns, on
    success and on an error alike."""

    def mine(signum, frame):
        return None

    saved = {signum: signal.signal(signum, mine) for signum in STOPS}
    try:
        assert cli.main(["report", "--list-models"]) == 0
        assert all(signal.getsignal(signum) is mine for signum in STOPS)
        assert cli.main(["report", "--model", "no-such-model"]) == 2
        assert all(signal.getsignal(signum) is mine for signum in STOPS)
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
    capsys.readouterr()


def test_a_stop_is_not_swallowed_by_code_that_catches_exception(monkeypatch, capsys):
    """SGLang code run by the command catches ``Exception`` in places; SIGTERM
    arriving there still ends the command with its exit code and one line."""
    real_decide = compat.decide

    def decide_catching_everything():
        try:
            signal.raise_signal(signal.SIGTERM)
            time.sleep(0)  # the handler runs between bytecodes
        except Exception:
            pass
        return real_decide()

    monkeypatch.setattr(compat, "decide", decide_catching_everything)
    code = cli.main(["doctor"])
    out, err = capsys.readouterr()
    assert code == 128 + signal.SIGTERM
    assert err.strip() == "sglang-pd-lean: stopped by SIGTERM"
    assert "gate" not in out


# ------------------------------------------------------ parser and caps at limits


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1", "1e400"])
def test_parser_refuses_an_available_budget_that_is_not_positive_finite(value, capsys):
    """The parser's own check, with the library never reached."""
    with pytest.raises(SystemExit) as exit_info:
        cli.build_parser().parse_args(["report", f"--available-gib={value}"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "must be a positive finite number" in err[0]


@pytest.mark.parametrize("field", ["max_running_requests", "max_mamba_cache_size"])
def test_slot_cap_admits_exactly_2_to_the_20(field, capsys):
    """2^20 slots are built; one more is refused in one line, before SGLang."""
    from sglang_pd_lean.cli.args import parse
    from sglang_pd_lean.cli.commands import report_launch

    census.check_slots(**{field: 1 << 20})
    flag = "--" + field.replace("_", "-")
    given = ["report", "--model", "qwen3-next-80b-a3b", flag]
    report_launch(parse([*given, str(2**20)]))
    code = cli.main([*given, str(2**20 + 1)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1
    assert err[0].endswith(
        f"{flag} 1,048,577 is more than the census builds (1,048,576 slots)"
    )


# ----------------------------------------------------------------- the PNG probe


def test_png_probe_leaves_no_file_behind(tmp_path):
    target = tmp_path / "chart.png"
    cli.check_png_target(str(target))
    assert list(tmp_path.iterdir()) == []


def test_png_probe_keeps_an_existing_file_as_it_was(tmp_path):
    target = tmp_path / "chart.png"
    target.write_bytes(b"earlier chart")
    cli.check_png_target(str(target))
    assert target.read_bytes() == b"earlier chart"
    assert list(tmp_path.iterdir()) == [target]


def test_a_report_that_fails_after_the_png_probe_writes_no_file(tmp_path, capsys):
    """The probe runs before the census; a census that then refuses leaves the
    operator's folder as it was."""
    config = tmp_path / "model"
    config.mkdir()
    (config / "config.json").write_text(
        '{"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", '
        '"num_hidden_layers": 0}'
    )
    png = tmp_path / "out" / "chart.png"
    png.parent.mkdir()
    code = cli.main(["report", "--config", str(config), "--png", str(png)])
    assert code == 2 and capsys.readouterr().err.startswith("sglang-pd-lean: error")
    assert list(png.parent.iterdir()) == []
