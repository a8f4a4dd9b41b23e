"""``sglang-pd-lean check URL...`` on recorded ``/server_info`` documents of real
servers, served over real HTTP on this host.

The documents in ``test/data/server_info/<release>/`` were answered by the e2e
suite's CPU servers (``test/e2e/record_server_info.py``): a prefill server with the
plugin, one with the plugin left out of ``SGLANG_PLUGINS``, and a decode server,
all up at once. Each test serves one or more of them (as recorded, or with one field
changed to make the state it names), runs the real command, and checks its exit code
and what it says. The prediction tests run the report on the recorded arguments with
the installed SGLang, where it is the release that answered them.
"""

from __future__ import annotations

import contextlib
import copy
import http.server
import json
import os
import threading
import time
from types import SimpleNamespace

import pytest
from helpers import (
    assert_documented,
    documented_keys,
    sglang_minor,
    tiny_model_folder,
    upstream_has,
)

from sglang_pd_lean import cli
from sglang_pd_lean.compat import GateState

DATA = os.path.join(os.path.dirname(__file__), "data", "server_info")
RELEASES = sorted(os.listdir(DATA))
NOT_REGISTERED = [
    GateState.UNSAFE.value,
    GateState.MISSING.value,
    GateState.UNHANDLED.value,
    GateState.DISABLED.value,
]


def recorded(release: str, name: str) -> dict:
    with open(os.path.join(DATA, release, name + ".json")) as f:
        return json.load(f)


class _Answers:
    """What every served path answers, and how many requests are in flight."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.in_flight = 0
        self.most_in_flight = 0


@contextlib.contextmanager
def served(*docs, delay: float = 0.0, status: int = 200, answers=None):
    """One HTTP server per document on 127.0.0.1 answering ``GET /server_info``
    with it (a ``bytes`` document as it is); yields their URLs."""
    answers = answers or _Answers()

    def handler_for(doc):
        body = doc if isinstance(doc, bytes) else json.dumps(doc).encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                with answers.lock:
                    answers.in_flight += 1
                    answers.most_in_flight = max(
                        answers.most_in_flight, answers.in_flight
                    )
                try:
                    time.sleep(delay)
                    if self.path != "/server_info":
                        self.send_error(404)
                        return
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (its timeout)
                finally:
                    with answers.lock:
                        answers.in_flight -= 1

            def log_message(self, *args):
                pass

        return Handler

    servers = [
        http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler_for(doc))
        for doc in docs
    ]
    # A short poll: shutdown() waits for one (0.5 s by default, per server).
    threads = [
        threading.Thread(target=s.serve_forever, args=(0.02,), daemon=True)
        for s in servers
    ]
    for thread in threads:
        thread.start()
    try:
        yield [f"http://127.0.0.1:{s.server_address[1]}" for s in servers]
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


ROUTER_DATA = os.path.join(os.path.dirname(__file__), "data", "router")


def router_answer(name: str, urls: list[str]) -> bytes:
    """A router's answer recorded from the real router (test/data/router/NAME), its
    workers' URLs ({prefill0}, {prefill1}, {decode0}) replaced by ``urls``, in
    that order."""
    with open(os.path.join(ROUTER_DATA, name)) as f:
        text = f.read()
    for key, url in zip(("prefill0", "prefill1", "decode0"), urls, strict=True):
        text = text.replace("{" + key + "}", url)
    return text.encode()


@contextlib.contextmanager
def routed(answers: dict[str, bytes], api_key: str | None = None):
    """A router stand-in on 127.0.0.1 answering ``GET path`` with ``answers[path]``
    (404 for any other path; 401 without ``Authorization: Bearer api_key`` where
    one is set); yields (its URL, the Authorization headers it received)."""
    received: list[str | None] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            auth = self.headers.get("Authorization")
            received.append(auth)
            if api_key is not None and auth != f"Bearer {api_key}":
                self.send_error(401, "Unauthorized")
            elif self.path not in answers:
                self.send_error(404)
            else:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(answers[self.path])

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()


def nothing_listens() -> str:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def check(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(["check", *args])
    out, err = capsys.readouterr()
    return code, out, err


def check_json(capsys, *args: str) -> tuple[int, dict]:
    code, out, err = check(capsys, "--json", *args)
    assert "Traceback" not in err
    result = json.loads(out)
    assert out == json.dumps(result, indent=2) + "\n"  # one key per line
    return code, result


@pytest.fixture(params=RELEASES)
def release(request) -> str:
    return request.param


# ------------------------------------------------------------- plugin states


def test_a_prefill_server_with_the_plugin_passes(capsys, release):
    doc = recorded(release, "prefill")
    with served(doc) as urls:
        code, result = check_json(capsys, "--no-predict", *urls)
    assert code == 0
    (server,) = result["servers"]
    assert server["role"] == "prefill" and server["prefill_target"] is True
    assert server["sglang_version"] == release
    assert server["problems"] == []
    ranks = server["ranks"]
    assert [r["plugin"] for r in ranks] == ["active"] * len(doc["internal_states"])
    record = doc["internal_states"][0]["pd_lean"]
    assert ranks[0]["gates"] == record["gates"]
    assert ranks[0]["not_allocated_bytes"] == record["not_allocated_bytes"]
    assert ranks[0]["kv_tokens"] == doc["max_total_num_tokens"]
    with served(doc) as urls:
        code, out, _ = check(capsys, "--no-predict", *urls)
    assert code == 0 and out.splitlines()[-1] == (
        "lean: no prefill target holds verify-only state the plugin could remove"
    )


def test_a_prefill_server_without_the_plugin_fails_and_says_why(capsys, release):
    with served(recorded(release, "prefill-no-plugin")) as urls:
        code, out, err = check(capsys, "--no-predict", *urls)
    assert code == 1
    assert f"{urls[0]}: rank 0: no plugin record" in out
    assert "SGLANG_PD_LEAN=0" in out  # the kill switch is one of the causes
    row = next(line for line in out.splitlines() if line.startswith(urls[0] + " "))
    assert row.split()[1:5] == ["0", "prefill", release, "absent"]


def test_a_decode_server_is_listed_and_never_counted(capsys, release):
    """Decode verifies drafts: holding the verify state is right there, with the
    plugin or without it."""
    with_plugin = recorded(release, "decode")
    without = copy.deepcopy(with_plugin)
    for state in without["internal_states"]:
        state.pop("pd_lean")
    with served(with_plugin, without) as urls:
        code, result = check_json(capsys, "--no-predict", *urls)
    assert code == 0
    assert [s["role"] for s in result["servers"]] == ["decode", "decode"]
    assert [s["ranks"][0]["plugin"] for s in result["servers"]] == ["active", "absent"]
    assert all(s["problems"] == [] for s in result["servers"])


def test_a_unified_server_without_the_plugin_is_not_counted(capsys):
    doc = recorded(RELEASES[0], "prefill-no-plugin")
    doc["disaggregation_mode"] = "null"
    with served(doc) as urls:
        code, result = check_json(capsys, "--no-predict", *urls)
    assert code == 0 and result["servers"][0]["role"] == "null"


def test_a_prefill_server_without_speculative_decoding_never_fails(capsys):
    doc = recorded(RELEASES[0], "prefill-no-plugin")
    doc["speculative_algorithm"] = None
    with served(doc) as urls:
        code, result = check_json(capsys, "--no-predict", *urls)
    assert code == 0 and result["servers"][0]["prefill_target"] is False


def test_an_unsupported_release_is_named(capsys):
    doc = recorded(RELEASES[-1], "prefill-no-plugin")
    doc["version"] = "0.6.0"
    with served(doc) as urls:
        code, result = check_json(capsys, "--no-predict", *urls)
    assert code == 1
    server = result["servers"][0]
    assert server["ranks"][0]["plugin"] == "unsupported release"
    assert server["problems"] == [
        "rank 0: SGLang 0.6.0 is not a release the plugin supports (0.5.15 to "
        "0.5.23) and it has no plugin record"
    ]


@pytest.mark.parametrize(
    "name, code, plugin", [("prefill", 0, "active"), ("prefill-no-plugin", 1, "absent")]
)
def test_a_post_release_is_judged_as_its_release(capsys, name, code, plugin):
    """``0.5.17.post1`` is release 0.5.17, which the plugin supports: with the
    plugin's record the prefill server passes; without it, it fails for want of a
    record (the plugin is absent, not the release unsupported). The version is
    shown as the server gives it."""
    doc = recorded("0.5.17", name)
    doc["version"] = "0.5.17.post1"
    with served(doc) as urls:
        got, result = check_json(capsys, "--no-predict", *urls)
    assert got == code
    (server,) = result["servers"]
    assert server["sglang_version"] == "0.5.17.post1"
    assert [r["plugin"] for r in server["ranks"]] == [plugin] * len(
        doc["internal_states"]
    )
    if plugin == "active":
        assert server["problems"] == []
    else:
        assert server["problems"][0].startswith("rank 0: no plugin record")
        assert not any("not a release" in p for p in server["problems"])


@pytest.mark.parametrize("state", NOT_REGISTERED)
@pytest.mark.parametrize("name, fails", [("prefill", True), ("decode", False)])
def test_a_gate_not_registered_fails_a_prefill_target_only(capsys, state, name, fails):
    """A prefill target names the gate and its state; a decode server, which keeps
    its verify state by design, is never counted."""
    doc = recorded(RELEASES[0], name)
    doc["internal_states"][0]["pd_lean"]["gates"]["pool"] = state
    with served(doc) as urls:
        code, result = check_json(capsys, "--no-predict", *urls)
    assert code == int(fails)
    problems = [f"rank 0: pool gate {state}"] if fails else []
    assert result["servers"][0]["problems"] == problems


def test_every_rank_is_a_row_and_each_is_judged(capsys):
    """Two scheduler ranks (DP 2): the second without a record fails alone."""
    doc = recorded(RELEASES[0], "prefill")
    second = copy.deepcopy(doc["internal_states"][0])
    second.pop("pd_lean")
    doc["internal_states"].append(second)
    with served(doc) as urls:
        code, out, _ = check(capsys, "--no-predict", *urls)
    assert code == 1
    rows = [line.split()[:5] for line in out.splitlines() if line.startswith(urls[0])]
    assert [r[1] for r in rows[:2]] == ["0", "1"]
    assert [r[4] for r in rows[:2]] == ["active", "absent"]
    assert f"{urls[0]}: rank 1: no plugin record" in out
    assert f"{urls[0]}: rank 0:" not in out


# ------------------------------------------------------------- answers


def test_a_server_that_does_not_answer_is_one_line_and_the_rest_are_checked(capsys):
    dead = nothing_listens()
    docs = [
        recorded(RELEASES[0], "prefill"),
        recorded(RELEASES[0], "prefill-no-plugin"),
    ]
    with served(*docs) as urls:
        code, out, err = check(capsys, "--no-predict", dead, *urls)
    assert code == 2  # wins over the failing prefill server's 1
    assert [line for line in out.splitlines() if line.startswith(dead)] == [
        f"{dead}: no answer: GET /server_info: [Errno 111] Connection refused"
    ]
    assert f"{urls[1]}: rank 0: no plugin record" in out
    assert "Traceback" not in out + err


@pytest.mark.parametrize(
    "body, status, said",
    [
        (b"<html>not json</html>", 200, "the answer is not JSON"),
        (b'{"hello": 1}', 200, "not SGLang's server info"),
        (b"{}", 500, "HTTP 500"),
    ],
)
def test_an_answer_that_is_not_server_info_is_exit_2(capsys, body, status, said):
    with served(body, status=status) as urls:
        code, result = check_json(capsys, "--no-predict", *urls)
    assert code == 2
    assert result["servers"] == [
        {"url": urls[0], "ok": False, "error": result["servers"][0]["error"]}
    ]
    error = result["servers"][0]["error"]
    assert error.startswith("GET /server_info: ") and said in error


@pytest.mark.parametrize(
    "url, said",
    [
        ("ftp://host:1", "'ftp://host:1' is not a server URL (http://HOST:PORT)"),
        ("localhost:port", "'localhost:port': the port is not a number"),
        ("http://", "'http://' is not a server URL (http://HOST:PORT)"),
    ],
)
def test_a_bad_url_is_one_line_and_exit_2(capsys, url, said):
    with served(recorded(RELEASES[0], "prefill")) as urls:
        code, out, _ = check(capsys, "--no-predict", url, *urls)
    assert code == 2
    assert [line for line in out.splitlines() if line.startswith(url + ":")] == [
        f"{url}: no answer: {said}"
    ]


def test_host_and_port_without_a_scheme_is_asked_over_http(capsys):
    with served(recorded(RELEASES[0], "prefill")) as urls:
        bare = urls[0].removeprefix("http://")
        code, result = check_json(capsys, "--no-predict", bare + "/")
    assert code == 0 and result["servers"][0]["url"] == urls[0]


def test_timeout_bounds_each_request(capsys):
    with served(recorded(RELEASES[0], "prefill"), delay=5.0) as urls:
        start = time.monotonic()
        code, out, _ = check(capsys, "--no-predict", "--timeout", "0.5", *urls)
        took = time.monotonic() - start
    assert code == 2 and took < 4.0
    assert f"{urls[0]}: no answer: GET /server_info: timed out" in out


@pytest.mark.parametrize("concurrency, most", [(1, 1), (4, 4)])
def test_servers_are_asked_concurrently_within_the_bound(capsys, concurrency, most):
    answers = _Answers()
    docs = [recorded(RELEASES[0], "decode")] * 4
    with served(*docs, delay=0.6, answers=answers) as urls:
        code, _, _ = check(
            capsys, "--no-predict", "--concurrency", str(concurrency), *urls
        )
    assert code == 0
    assert answers.most_in_flight == most


def test_the_table_puts_each_figure_under_its_heading(capsys):
    doc = recorded(RELEASES[0], "prefill")
    with served(doc) as urls:
        code, out, _ = check(capsys, "--no-predict", *urls)
    lines = out.splitlines()
    header = lines[0]
    row = lines[1]
    record = doc["internal_states"][0]["pd_lean"]

    def cell(heading: str) -> str:
        start = header.index(heading)
        return row[start:].split("  ")[0].strip()

    assert cell("server") == urls[0]
    assert cell("role") == "prefill"
    assert cell("SGLang") == RELEASES[0]
    assert cell("plugin") == "active"
    freed = sum(record["not_allocated_bytes"].values())
    assert cell("not allocated").replace(" ", "") in (
        f"{freed}B",
        f"{freed / 1024:.2f}KiB",
    )
    budget = record["budget"]
    if budget:
        kv = f"{budget['upstream']['kv_tokens']:,} -> {budget['plugin']['kv_tokens']:,}"
        assert cell("KV tokens") == kv
    assert lines[2].strip() == "gates: " + ", ".join(
        f"{g}: {s}" for g, s in record["gates"].items()
    )


def test_config_that_does_not_exist_is_one_line(capsys):
    code, out, err = check(capsys, "--config", "/no/such/model", "http://x:1")
    assert code == 2 and out == ""
    assert (
        err.strip() == "sglang-pd-lean: error: /no/such/model: no such file or folder"
    )


# ------------------------------------------------------------- prediction


def installed_release() -> str:
    return f"0.5.{sglang_minor()}"


needs_recorded_release = pytest.mark.skipif(
    installed_release() not in RELEASES,
    reason="documents recorded on another release: the prediction resolves with "
    "the installed SGLang",
)


@needs_recorded_release
def test_prediction_equals_what_each_server_recorded(capsys, tmp_path):
    """The report on each server's own arguments, at the budget the plugin
    recorded there, gives the bytes not allocated, the mamba slots and the KV
    tokens the server reports; the server without the plugin, on a CPU, cannot be
    predicted (its budget is nowhere on /server_info) and says so."""
    release = installed_release()
    docs = [recorded(release, n) for n in ("prefill", "decode", "prefill-no-plugin")]
    with served(*docs) as urls:
        code, result = check_json(
            capsys, "--config", tiny_model_folder(tmp_path / "tiny"), *urls
        )
    assert code == 1
    check_documented(result, every_key=False)
    prefill, decode, bare = result["servers"]
    for server in (prefill, decode):
        figures = server["prediction"]["figures"]
        assert figures and all(f["agrees"] is not False for f in figures), figures
        names = {f["name"] for f in figures if f["agrees"]}
        assert {"mamba slots", "KV tokens", "bytes not allocated"} <= names
    assert prefill["prediction"]["advice"]
    assert "budget is the host's free memory" in bare["prediction"]["error"]


@needs_recorded_release
def test_a_model_path_not_readable_here_asks_for_config(capsys):
    with served(recorded(installed_release(), "decode")) as urls:
        code, result = check_json(capsys, *urls)
    assert code == 0
    error = result["servers"][0]["prediction"]["error"]
    assert "is not readable here: give --config" in error


# ------------------------------------------------------------- docs/check.md


def check_documented(result: dict, every_key: bool) -> None:
    printed = assert_documented(result, "check.md")
    if every_key:
        missing = set(documented_keys("check.md")) - printed
        assert missing == set(), "in docs/check.md, never printed"


@needs_recorded_release
def test_docs_list_every_key_check_prints_and_no_other(capsys, tmp_path):
    """Both ways: a server of each kind, with and without a prediction, and one
    that does not answer print every key docs/check.md lists, and only those."""
    release = installed_release()
    docs = [recorded(release, n) for n in ("prefill", "decode", "prefill-no-plugin")]
    with served(*docs) as urls:
        # The same servers behind a router (smg's recorded answer).
        listing = router_answer("smg-1.13.0-workers.json", [urls[0], urls[2], urls[1]])
        with routed({"/workers": listing}) as (router, _):
            code, result = check_json(
                capsys,
                "--config",
                tiny_model_folder(tmp_path / "tiny"),
                "--router",
                router,
                *urls,
                nothing_listens(),
            )
    assert code == 2 == result["exit_code"]
    assert result["schema_version"] == 1
    check_documented(result, every_key=True)


def test_keys_without_a_prediction_are_documented(capsys):
    docs = [recorded(r, n) for r in RELEASES for n in ("prefill", "decode")]
    with served(*docs) as urls:
        code, result = check_json(capsys, "--no-predict", *urls, nothing_listens())
    assert code == 2
    assert not any("prediction" in server for server in result["servers"])
    check_documented(result, every_key=False)


def test_an_unknown_gpu_is_bad_input_before_any_server_is_asked(capsys):
    answers = _Answers()
    with served(recorded(RELEASES[0], "prefill"), answers=answers) as urls:
        code, out, err = check(capsys, "--gpu", "no-such-gpu", *urls)
    assert code == 2 and out == "" and answers.most_in_flight == 0
    assert err.startswith("sglang-pd-lean: error: unknown --gpu 'no-such-gpu'; known:")
    assert "h200" in err


@needs_recorded_release
@pytest.mark.parametrize("spelling", ["--model-path", "--config"])
def test_model_path_and_config_both_name_the_model_read_here(
    capsys, tmp_path, spelling
):
    model = str(tiny_model_folder(tmp_path / "tiny"))
    with served(recorded(installed_release(), "decode")) as urls:
        code, result = check_json(capsys, f"{spelling}={model}", *urls)
    assert code == 0
    figures = result["servers"][0]["prediction"]["figures"]
    assert {f["name"] for f in figures if f["agrees"]} >= {"mamba slots", "KV tokens"}


@needs_recorded_release
def test_a_server_without_the_plugin_is_compared_with_upstreams_column(tmp_path):
    """The prefill server recorded without the plugin, predicted at the budget the
    plugin's server recorded (the same host and flags): nothing is left out of
    its pools, it runs upstream's sizing, and the plugin would free its verify-only
    state; the plugin's server, beside it, is compared with the plugin's column and
    its budget record with both."""
    from sglang_pd_lean.census.environment import load_sglang_plugins
    from sglang_pd_lean.census.launch import LOCAL, gpu_facts
    from sglang_pd_lean.census.live import predict
    from sglang_pd_lean.cli import check as fleet

    load_sglang_plugins()
    release = installed_release()
    active = fleet.read_server("a", recorded(release, "prefill"))
    bare = fleet.read_server("b", recorded(release, "prefill-no-plugin"))
    assert active.ranks[0].state is fleet.PluginState.ACTIVE
    assert bare.ranks[0].state is fleet.PluginState.ABSENT
    budget = active.ranks[0].record.total_rest_memory_gib
    model = tiny_model_folder(tmp_path / "tiny")
    gpu = gpu_facts(LOCAL)

    result = predict(bare.info, gpu, model, budget)
    pools, sized = result.roles["prefill"], result.capacity["prefill"]
    got = fleet.compare(bare, result)
    figures = {f.name: f for f in got.figures}
    assert figures["bytes not allocated"].predicted == 0
    assert figures["bytes not allocated"].measured == 0
    assert figures["bytes not allocated"].unit == "bytes"
    assert figures["mamba slots"].predicted == sized.upstream.mamba_slots
    assert figures["KV tokens"].predicted == sized.upstream.kv_tokens
    verify_only = pools.upstream.verify_only_bytes
    assert pools.plugin.verify_only_bytes == 0
    # Where SGLang itself leaves the verify state out (0.5.18+), nothing to free.
    assert (verify_only > 0) != upstream_has("pool")
    assert got.would_free >= verify_only
    assert got.would_free == sum(
        up - pools.plugin.components.get(name, 0)
        for name, up in pools.upstream.components.items()
        if up > pools.plugin.components.get(name, 0)
    )
    assert got.advice and got.error is None
    # Its own role's advice only: nothing said of the roles it does not run.
    assert not [x for x in got.advice if x.startswith(("decode", "unified"))]
    assert "decode" in result.nothing_to_spend

    result = predict(active.info, gpu, model, budget)
    sized = result.capacity["prefill"]
    got = fleet.compare(active, result)
    assert got.would_free is None
    figures = {f.name: f for f in got.figures}
    assert figures["mamba slots"].predicted == sized.plugin.mamba_slots
    record = active.ranks[0].record
    freed = record.not_allocated_bytes
    for name, value in freed.items():
        assert figures[f"  {name}"].measured == value
        assert figures[f"  {name}"].unit == "bytes"
    # Per component, predicted: what the plugin's pool holds less than upstream's.
    pools = result.roles["prefill"]
    up, now = pools.upstream.components, pools.plugin.components
    for name in set(up) | set(freed):
        less = up.get(name, 0) - now.get(name, 0)
        if less > 0:
            assert figures[f"  {name}"].predicted == less, name
        else:
            assert f"  {name}" not in figures or name in freed, name
    assert figures["bytes not allocated"].measured == sum(freed.values())
    if record.budget:
        for side in ("upstream", "plugin"):
            mamba = figures[f"budget gate: {side} mamba slots"]
            tokens = figures[f"budget gate: {side} KV tokens"]
            assert mamba.predicted == sized.column(side).mamba_slots
            assert mamba.measured == record.budget[side]["mamba_slots"]
            assert tokens.predicted == sized.column(side).kv_tokens
            assert tokens.measured == record.budget[side]["kv_tokens"]


def test_prediction_lines_put_each_figure_beside_its_measurement():
    from sglang_pd_lean.cli import check as fleet

    server = fleet.read_server("http://p:1", recorded(RELEASES[0], "prefill"))
    prediction = fleet.Prediction(
        figures=(
            fleet.Figure("bytes not allocated", 3 << 30, 3 << 30, unit="bytes"),
            fleet.Figure("  ssm state", 1000, 1023, unit="bytes"),
            fleet.Figure("mamba slots", 1234, 1235),
            fleet.Figure("KV tokens", None, 77),
        ),
        would_free=5 << 20,
        advice=("(a) one", "(b) two"),
    )
    assert fleet.prediction_lines(server, prediction) == [
        "http://p:1 (prefill): the report on this server's own arguments:",
        "  no plugin here: it would not allocate 5.00 MiB per rank",
        "  bytes not allocated  predicted 3.00 GiB (3,221,225,472 B), measured "
        "3.00 GiB (3,221,225,472 B): agrees",
        "    ssm state          predicted 1000 B, measured 1023 B: DIFFERS",
        "  mamba slots          predicted 1,234, measured 1,235: DIFFERS",
        "  KV tokens            predicted -, measured 77: -",
        "  (a) one",
        "  (b) two",
    ]
    assert fleet.output._figure(fleet.Figure("x", 0, 0, unit="bytes"), 1024) == (
        "1.00 KiB (1,024 B)"
    )
    failed = fleet.Prediction(error="the model is not readable")
    assert fleet.prediction_lines(server, failed) == [
        "http://p:1 (prefill): the report on this server's own arguments: not "
        "predicted: the model is not readable"
    ]
    assert fleet.prediction_lines(server, fleet.Prediction()) == [
        "http://p:1 (prefill): the report on this server's own arguments:"
    ]
    active = fleet.Prediction(figures=(fleet.Figure("KV tokens", 5, 5),))
    assert fleet.prediction_lines(server, active)[1:] == [
        "  KV tokens  predicted 5, measured 5: agrees"
    ]


def test_a_budget_record_without_a_side_gives_no_figure_for_it():
    from sglang_pd_lean.census.results import RoleSizing, Sizing
    from sglang_pd_lean.cli import check as fleet

    fits = Sizing(fits=True, kv_tokens=10, mamba_slots=4, kv_cache_bytes=1)
    unfit = Sizing(fits=False, reason="no room")
    from sglang_pd_lean.record import Record

    budget = {"upstream": "not sized", "plugin": {"mamba_slots": 4}}
    rank = fleet.Rank(
        0, fleet.PluginState.ACTIVE, Record.read({"budget": budget}), None, None
    )
    figures = fleet.judge._budget_figures(
        rank, RoleSizing(upstream=unfit, plugin=fits, change=None)
    )
    assert [(f.name, f.predicted, f.measured) for f in figures] == [
        ("budget gate: plugin mamba slots", 4, 4),
        ("budget gate: plugin KV tokens", 10, None),
    ]
    empty = Record.read({"budget": {"upstream": {}}})
    figures = fleet.judge._budget_figures(
        fleet.Rank(0, fleet.PluginState.ACTIVE, empty, 0, 0),
        RoleSizing(upstream=unfit, plugin=fits, change=None),
    )
    assert [(f.predicted, f.agrees) for f in figures] == [(None, None), (None, None)]
    assert fleet.judge._int(Sizing(fits=True, kv_tokens=12.0), "kv_tokens") == 12
    assert fleet.judge._int(Sizing(fits=True, reason="x"), "reason") is None


def test_a_row_per_rank_gives_role_release_plugin_gates_and_figures():
    from sglang_pd_lean.cli import check as fleet

    info = {
        "version": "0.5.17",
        "disaggregation_mode": "prefill",
        "speculative_algorithm": None,
        "max_total_num_tokens": 900,
        "internal_states": [
            {
                "pd_lean": {
                    "gates": {"pool": "applied by the plugin"},
                    "not_allocated_bytes": {"ssm": 1 << 20, "conv": 1 << 20},
                    "budget": {
                        "upstream": {"kv_tokens": 1000, "mamba_slots": 10},
                        "plugin": {"kv_tokens": 3000, "mamba_slots": 20},
                    },
                },
                "memory_usage": {"token_capacity": 3000},
                "max_mamba_cache_size": 20,
            },
            {"max_mamba_cache_size": 7},  # a rank without the plugin's record
        ],
    }
    server = fleet.read_server("http://p:1", info)
    cells = [
        [
            *("http://p:1", "0", "prefill (no spec)", "0.5.17", "active"),
            *("pool: applied by the plugin", "2.00 MiB"),
            *("1,000 -> 3,000", "10 -> 20"),
        ],
        [
            *("http://p:1", "1", "prefill (no spec)", "0.5.17", "absent", "-", "-"),
            *("900", "7"),  # no budget record: what the rank has
        ],
    ]
    expected = [dict(zip(fleet.HEADER, row, strict=True)) for row in cells]
    assert fleet.rows(server) == expected
    info["speculative_algorithm"] = "EAGLE"
    assert fleet.rows(fleet.read_server("u", info))[0]["role"] == "prefill"


def test_the_text_report_gives_table_misses_predictions_and_verdict_in_order():
    from sglang_pd_lean.cli import check as fleet

    lean = fleet.read_server("http://a:1", recorded(RELEASES[0], "prefill"))
    bare = fleet.read_server("http://b:1", recorded(RELEASES[0], "prefill-no-plugin"))
    missing = fleet.Unanswered("connection refused")
    urls = ["http://a:1", "http://b:1", "http://c:1"]
    answers = [lean, bare, missing]
    predictions = {
        "http://a:1": fleet.Prediction(figures=(fleet.Figure("KV tokens", 5, 5),)),
        "http://b:1": fleet.Prediction(error="no budget"),
    }
    code = fleet.exit_code(answers)
    assert code == 2
    lines = fleet.render(urls, answers, predictions, code)
    table = fleet.output._columns(fleet.rows(lean) + fleet.rows(bare))
    assert lines[: len(table)] == table
    assert table[0].startswith("server") and table[0] == table[0].rstrip()
    assert table[1].startswith("http://a:1  ") and table[2].startswith("    gates: ")
    rest = lines[len(table) :]
    assert rest[0] == "http://c:1: no answer: connection refused"
    assert rest[1] == "" and rest[4] == ""
    assert rest[2:4] == fleet.prediction_lines(lean, predictions["http://a:1"])
    assert rest[5].startswith("http://b:1 (prefill): the report on this server's own ")
    assert rest[6:] == ["", *fleet.verdict_lines(answers, code)]
    assert rest[7:] == [
        f"http://b:1: rank 0: {fleet.NO_RECORD}",
        "exit 2: 1 prefill server(s) hold verify-only state, 1 server(s) did not "
        "answer",
    ]


def test_the_verdict_of_a_lean_fleet_and_of_one_that_is_not():
    from sglang_pd_lean.cli import check as fleet

    lean = fleet.read_server("http://a:1", recorded(RELEASES[0], "prefill"))
    bare = fleet.read_server("http://b:1", recorded(RELEASES[0], "prefill-no-plugin"))
    assert fleet.verdict_lines([lean], 0) == [
        "lean: no prefill target holds verify-only state the plugin could remove"
    ]
    assert fleet.verdict_lines([bare, lean, bare], 1) == [
        f"http://b:1: rank 0: {fleet.NO_RECORD}",
        f"http://b:1: rank 0: {fleet.NO_RECORD}",
        "exit 1: 2 prefill server(s) hold verify-only state, 0 server(s) did not "
        "answer",
    ]
    assert fleet.render([], [], {}, 0) == [
        "",
        "lean: no prefill target holds verify-only state the plugin could remove",
    ]


def test_a_budget_pair_reads_upstream_to_now_or_the_ranks_own_figure():
    from sglang_pd_lean.cli import check as fleet

    assert fleet.output._pair(1000, 3000, 5) == "1,000 -> 3,000"
    assert fleet.output._pair(None, 3000, 5) == "- -> 3,000"
    assert fleet.output._pair(1000, None, 5) == "1,000 -> -"
    assert fleet.output._pair(None, None, 5) == "5"
    assert fleet.output._pair(None, None, None) == "-"


@needs_recorded_release
def test_a_prefill_server_with_nothing_to_spend_is_told_why(tmp_path):
    """A prefill server without speculative decoding: its advice is the census's
    reason for its own role."""
    from sglang_pd_lean.census.environment import load_sglang_plugins
    from sglang_pd_lean.census.launch import LOCAL, gpu_facts
    from sglang_pd_lean.census.live import predict
    from sglang_pd_lean.cli import check as fleet

    load_sglang_plugins()
    doc = recorded(installed_release(), "prefill")
    budget = doc["internal_states"][0]["pd_lean"]["total_rest_memory_gib"]
    info = {k: v for k, v in doc.items() if not k.startswith("speculative_")}
    server = fleet.read_server("http://p:1", info)
    assert not server.speculative
    model = tiny_model_folder(tmp_path / "tiny")
    result = predict(server.info, gpu_facts(LOCAL), model, budget)
    reason = result.nothing_to_spend["prefill"]
    assert reason.startswith("no speculative decoding")
    got = fleet.compare(server, result)
    assert any(reason in line for line in got.advice), got.advice
    assert not [x for x in got.advice if x.startswith(("decode", "unified"))]


def test_the_bytes_freed_are_per_component_what_upstream_holds_more():
    from sglang_pd_lean.census.results import Pair, PoolSummary
    from sglang_pd_lean.cli import check as fleet

    def pool(**components):
        return PoolSummary(
            components=components,
            verify_only_bytes=0,
            total_bytes=sum(components.values()),
            mamba_slots=1,
            request_slots=1,
        )

    upstream = pool(ssm=10, conv=4, verify=7, map=9, flag=1)
    plugin = pool(ssm=10, conv=5, map=3)
    assert fleet.judge._freed(Pair(upstream=upstream, plugin=plugin)) == {
        "verify": 7,
        "map": 6,
        "flag": 1,  # one byte the plugin's pool lacks is one byte freed
    }


def test_the_json_of_a_server_carries_its_own_fields_and_the_ranks_record(capsys):
    """Each field of a server's entry is the one ``/server_info`` or the rank's
    record holds (tp, dp and pp set apart so a swap shows), and a server that does
    not answer between two that do leaves the rest listed in order."""
    doc = copy.deepcopy(recorded(RELEASES[0], "prefill"))
    doc.update(tp_size=2, dp_size=3, pp_size=4, speculative_algorithm="NEXTN")
    record = doc["internal_states"][0]["pd_lean"]
    bare = copy.deepcopy(recorded(RELEASES[0], "decode"))
    bare["internal_states"][0].pop("pd_lean", None)
    with served(doc, bare) as urls:
        code, result = check_json(
            capsys, "--no-predict", urls[0], nothing_listens(), urls[1]
        )
    assert code == 2
    first, missing, last = result["servers"]
    assert missing["ok"] is False and "error" in missing
    assert (first["url"], last["url"]) == (urls[0], urls[1])
    assert first["ok"] is True and last["ok"] is True
    assert first["speculative_algorithm"] == "NEXTN"
    assert (first["tp_size"], first["dp_size"], first["pp_size"]) == (2, 3, 4)
    assert first["sglang_version"] == doc["version"]
    rank = first["ranks"][0]
    assert rank["budget"] == record["budget"] and rank["budget"]
    assert rank["total_rest_memory_gib"] == record["total_rest_memory_gib"]
    assert rank["not_allocated_bytes"] == record["not_allocated_bytes"]
    # No record: no budget and no memory figure, not an empty one.
    assert last["ranks"][0]["budget"] is None
    assert last["ranks"][0]["total_rest_memory_gib"] is None


def test_a_component_on_one_side_only_is_compared_with_zero_on_the_other():
    """A component the report predicts and the server did not record (or the other
    way round) is a figure of its own, with 0 on the side that lacks it."""
    from sglang_pd_lean.census.results import Pair, PoolSummary, RoleSizing, Sizing
    from sglang_pd_lean.cli import check as fleet

    def pool(**components):
        return PoolSummary(
            components=components,
            verify_only_bytes=0,
            total_bytes=sum(components.values()),
            mamba_slots=1,
            request_slots=1,
        )

    info = {
        "version": "0.5.17",
        "disaggregation_mode": "decode",
        "internal_states": [{"pd_lean": {"not_allocated_bytes": {"a": 5, "b": 7}}}],
    }
    server = fleet.read_server("http://d:1", info)
    sized = Sizing(fits=True, kv_tokens=10, mamba_slots=2)
    result = SimpleNamespace(
        roles={"decode": Pair(upstream=pool(a=5, c=3), plugin=pool())},
        capacity={"decode": RoleSizing(upstream=sized, plugin=sized, change=None)},
    )
    figures = fleet.compare(server, result).figures
    assert [(f.name, f.predicted, f.measured) for f in figures[:4]] == [
        ("bytes not allocated", 8, 12),
        ("  a", 5, 5),
        ("  b", 0, 7),
        ("  c", 3, 0),
    ]


def test_a_cpu_server_is_predicted_on_this_machine_whatever_gpu_names(
    capsys, monkeypatch
):
    """``--gpu`` names the GPU of the fleet's GPU servers; a server whose
    ``/server_info`` says it runs on the CPU is predicted on this machine's own
    probes (``--gpu local``). Each at the budget its record holds, from the command
    line to the census (the census itself stands aside here: it says what it was
    asked, and that is the prediction's error)."""
    from sglang_pd_lean.census import live
    from sglang_pd_lean.census.inputs import CensusError
    from sglang_pd_lean.census.launch import GPUS, LOCAL, gpu_facts

    asked = {}

    def spy(info, gpu, model, budget):
        asked[info["device"]] = (gpu, model, budget)
        raise CensusError(f"spied on {info['device']}")

    monkeypatch.setattr(live, "predict", spy)
    cpu = recorded(RELEASES[0], "prefill")
    gpu = {**copy.deepcopy(cpu), "device": "cuda"}
    with served(cpu, gpu) as urls:
        code, result = check_json(capsys, "--gpu", "b200", *urls)
    assert code == 0
    assert asked["cpu"][0] == gpu_facts(LOCAL)
    assert asked["cuda"][0] == GPUS["b200"] != gpu_facts(LOCAL)
    budget = cpu["internal_states"][0]["pd_lean"]["total_rest_memory_gib"]
    assert asked["cpu"][1:] == (None, budget) == asked["cuda"][1:]
    errors = [server["prediction"]["error"] for server in result["servers"]]
    assert errors == ["spied on cpu", "spied on cuda"]


@pytest.mark.parametrize(
    "info",
    [
        [{"version": "0.5.17"}],  # JSON, but not an object
        {"internal_states": []},  # no version
        {"version": "0.5.17", "internal_states": {"0": {}}},  # states not a list
        {"version": "0.5.17"},  # no states
    ],
)
def test_a_document_that_is_not_server_info_is_unanswered_in_one_line(info):
    from sglang_pd_lean.cli import check as fleet

    with pytest.raises(fleet.Unanswered) as raised:
        fleet.read_server("http://x:1", info)
    assert str(raised.value) == (
        "GET /server_info: not SGLang's server info (no version or internal_states)"
    )


def test_each_rank_reads_its_own_token_capacity_before_the_servers():
    """A rank's KV tokens: its own ``memory_usage.token_capacity`` where it
    reports one, else the server's ``max_total_num_tokens``; a rank whose state
    is not an object is a rank without a record."""
    from sglang_pd_lean.cli import check as fleet

    info = {
        "version": "0.5.17",
        "max_total_num_tokens": 900,
        "internal_states": [
            {"memory_usage": {"token_capacity": 3000}, "max_mamba_cache_size": 5},
            {"memory_usage": {}},
            None,
        ],
    }
    ranks = fleet.read_server("http://x:1", info).ranks
    assert [(r.kv_tokens, r.mamba_slots) for r in ranks] == [
        (3000, 5),
        (900, None),
        (900, None),
    ]
    assert [r.state for r in ranks] == [fleet.PluginState.ABSENT] * 3


def test_an_https_url_keeps_its_scheme():
    from sglang_pd_lean.cli import check as fleet

    assert fleet.normalize("https://p:1/") == "https://p:1"
    assert fleet.normalize("HTTP://p:1") == "HTTP://p:1"
    assert fleet.normalize("http://prefill-X/") == "http://prefill-X"


@pytest.mark.parametrize(
    "field, value",
    [
        ("gates", ["pool"]),
        ("gates", {"pool": 3}),
        ("not_allocated_bytes", {"verify ssm snapshots": "12"}),
        ("not_allocated_bytes", {"verify ssm snapshots": True}),
        ("not_allocated_bytes", ["verify ssm snapshots"]),
        ("stepped_aside_because", "graph"),
        ("total_rest_memory_gib", "91.2"),
        ("sglang_version", 17),
        ("budget", [1, 2]),
    ],
)
def test_a_record_with_a_field_of_another_type_is_judged_not_raised(
    capsys, field, value
):
    """A prefill target whose record has a field of another type (another plugin,
    a corrupted answer) fails the check with that field named, as JSON too; never a
    traceback. A decode server with such a record is listed and passes."""
    from sglang_pd_lean.record import Record, UnreadableRecord

    doc = copy.deepcopy(recorded(RELEASES[0], "prefill"))
    doc["internal_states"][0]["pd_lean"][field] = value
    with pytest.raises(UnreadableRecord, match=field):
        Record.read(doc["internal_states"][0]["pd_lean"])
    for args in (["--no-predict"], []):
        with served(doc) as urls:
            code, out, err = check(capsys, *args, *urls)
        assert code == 1, (out, err)
        assert f"rank 0: plugin record unreadable: {field}: " in out + err
        assert "Traceback" not in out + err
    with served(doc) as urls:
        code, out, err = check(capsys, "--no-predict", "--json", *urls)
    rank = json.loads(out)["servers"][0]["ranks"][0]
    assert rank["plugin"] == "record unreadable"
    assert rank["record_error"].startswith(f"{field}: ")
    decode = copy.deepcopy(recorded(RELEASES[0], "decode"))
    decode["internal_states"][0]["pd_lean"][field] = value
    with served(decode) as urls:
        code, out, err = check(capsys, "--no-predict", *urls)
    assert code == 0 and "record unreadable" in out, (out, err)
