"""``check --router URL``: the fleet as SGLang's router lists it.

The routers' answers are recorded from the real routers from PyPI (smg 1.13.0,
sglang-router 0.3.2 and 0.1.9, each in front of three HTTP workers:
test/data/router/), served by a stand-in router in front of recorded
``/server_info`` documents (test/data/server_info/). Each case is read against
``check URL...`` on the same servers, never against fixed figures.
"""

from __future__ import annotations

import json

import pytest
from test_check import (
    RELEASES,
    check,
    check_json,
    nothing_listens,
    recorded,
    routed,
    router_answer,
    served,
)

from sglang_pd_lean.cli.check import API_KEY_ENV

# recorded answer -> the path it answers
ROUTERS = {
    "smg-1.13.0-workers.json": "/workers",
    "sglang-router-0.3.2-workers.json": "/workers",
    "sglang-router-0.1.9-list_workers.json": "/list_workers",
}
FLEET = ("prefill", "prefill-no-plugin", "decode")


def fleet_docs(release: str) -> list[dict]:
    return [recorded(release, name) for name in FLEET]


def listing(name: str, urls: list[str]) -> dict[str, bytes]:
    """``name``'s recorded answer for the fleet served at ``urls`` (FLEET's order)."""
    return {ROUTERS[name]: router_answer(name, urls)}


def by_url(result: dict) -> dict[str, dict]:
    return {server["url"]: server for server in result["servers"]}


def table(out: str) -> set[str]:
    """The table's lines (rows and their gates), without the router's line and the
    verdict (whose wording counts routers)."""
    lines = out.split("\n\n")
    body = [block for block in lines if block.startswith("server ")]
    assert len(body) == 1, out
    return set(body[0].splitlines())


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("name", list(ROUTERS))
def test_the_router_gives_the_rows_and_exit_code_of_the_urls(capsys, name, release):
    with served(*fleet_docs(release)) as urls:
        code, direct = check_json(capsys, "--no-predict", *urls)
        text_code, text, _ = check(capsys, "--no-predict", *urls)
        with routed(listing(name, urls)) as (router, _):
            routed_code, result = check_json(capsys, "--no-predict", "--router", router)
            routed_text_code, routed_text, _ = check(
                capsys, "--no-predict", "--router", router
            )
    assert routed_code == code == result["exit_code"] == 1  # the one without us
    assert routed_text_code == text_code == 1
    assert by_url(result) == by_url(direct)
    assert table(routed_text) == table(text)
    [entry] = result["routers"]
    assert entry["url"] == router and entry["error"] is None
    assert entry["endpoint"] == ROUTERS[name]
    assert sorted(w["url"] for w in entry["workers"]) == sorted(urls)
    roles = {w["url"]: w["role"] for w in entry["workers"]}
    if ROUTERS[name] == "/list_workers":
        assert set(roles.values()) == {None}
        assert "does not say their roles or health" in routed_text
    else:
        assert roles == dict(zip(urls, ("prefill", "prefill", "decode"), strict=True))
        assert "2 prefill (2 healthy), 1 decode (1 healthy)" in routed_text


def test_a_worker_the_router_marks_unhealthy_exits_2_and_is_still_asked(capsys):
    """smg's answer after one prefill worker died (recorded: is_healthy false)."""
    with served(*fleet_docs(RELEASES[0])) as urls:
        code, direct = check_json(capsys, "--no-predict", *urls)
        answer = router_answer("smg-1.13.0-workers-prefill1-down.json", urls)
        with routed({"/workers": answer}) as (router, _):
            routed_code, result = check_json(capsys, "--no-predict", "--router", router)
            text_code, text, _ = check(capsys, "--no-predict", "--router", router)
    assert code == 1 and routed_code == text_code == 2 == result["exit_code"]
    assert by_url(result) == by_url(direct)
    health = {w["url"]: w["healthy"] for w in result["routers"][0]["workers"]}
    assert health == {urls[0]: True, urls[1]: False, urls[2]: True}
    assert f"{urls[1]}: the router {router} marks it unhealthy" in text
    assert "2 prefill (1 healthy), 1 decode (1 healthy)" in text


@pytest.mark.parametrize("how", ["--api-key", "env"])
def test_a_router_with_an_api_key_lists_only_with_it(capsys, monkeypatch, how):
    key = "sekret-key"
    with served(*fleet_docs(RELEASES[0])) as urls:
        answers = listing("smg-1.13.0-workers.json", urls)
        with routed(answers, api_key=key) as (router, received):
            monkeypatch.delenv(API_KEY_ENV, raising=False)
            refused, out, err = check(capsys, "--no-predict", "--router", router)
            assert refused == 2
            assert f"router {router}: no listing: GET /workers: HTTP 401" in out
            assert API_KEY_ENV in out and "Traceback" not in out + err
            given = ["--api-key", key] if how == "--api-key" else []
            if how == "env":
                monkeypatch.setenv(API_KEY_ENV, key)
            code, result = check_json(
                capsys, "--no-predict", "--router", router, *given
            )
    assert code == 1 and sorted(by_url(result)) == sorted(urls)
    assert received[-1] == f"Bearer {key}"
    assert key not in json.dumps(result)


def test_a_router_without_workers_is_asked_for_list_workers(capsys):
    """/workers answers 404 (sglang-router 0.1.x): the URLs come from /list_workers."""
    with served(*fleet_docs(RELEASES[0])) as urls:
        answers = listing("sglang-router-0.1.9-list_workers.json", urls)
        assert set(answers) == {"/list_workers"}
        with routed(answers) as (router, received):
            code, result = check_json(capsys, "--no-predict", "--router", router)
    assert len(received) == 2  # /workers (404), then /list_workers
    assert result["routers"][0]["endpoint"] == "/list_workers"
    assert code == 1 and sorted(by_url(result)) == sorted(urls)


def test_urls_and_routers_mix_and_each_server_is_asked_once(capsys):
    docs = fleet_docs(RELEASES[0])
    with served(*docs, recorded(RELEASES[-1], "decode")) as urls:
        answers = listing("smg-1.13.0-workers.json", urls[:3])
        with routed(answers) as (router, _):
            code, result = check_json(
                capsys, "--no-predict", urls[3], urls[0] + "/", "--router", router
            )
    asked = [server["url"] for server in result["servers"]]
    assert asked[:2] == [urls[3], urls[0]]  # the given first, as given
    assert sorted(asked) == sorted(urls) and len(asked) == len(set(asked))
    assert code == 1


@pytest.mark.parametrize(
    "answers, error",
    [
        ({}, "neither GET /workers nor GET /list_workers is there"),
        ({"/workers": b"[]"}, "not a router's worker list"),
        ({"/workers": b"not json"}, "the answer is not JSON"),
        ({"/workers": b'{"workers": [{"url": 3}]}'}, "a worker without a URL"),
    ],
)
def test_a_router_that_gives_no_listing_is_one_line_and_exit_2(capsys, answers, error):
    with served(recorded(RELEASES[0], "prefill")) as urls:
        with routed(answers) as (router, _):
            code, out, err = check(capsys, "--no-predict", "--router", router, *urls)
    assert code == 2 and "Traceback" not in out + err
    assert f"router {router}: no listing: " in out and error in out
    assert f"{urls[0]}  0     prefill" in out  # the URL given is still checked
    assert "1 router(s) gave no listing" in out


def test_a_router_nothing_listens_on_is_one_line(capsys):
    router = nothing_listens()
    code, out, _ = check(capsys, "--no-predict", "--router", router)
    assert code == 2
    assert out.startswith(f"router {router}: no listing: GET /workers: ")


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "give a server URL, or --router URL"),
        (["--router", "ftp://router:1"], "--router: 'ftp://router:1' is not a server"),
        (["--api-key", "k", "http://127.0.0.1:1"], "--api-key is the router's"),
    ],
)
def test_bad_router_input_is_a_usage_error(capsys, argv, message):
    code, out, err = check(capsys, "--no-predict", *argv)
    assert code == 2 and out == ""
    assert message in err
