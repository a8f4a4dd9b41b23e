"""``check --router URL``: the fleet as SGLang's router lists it.

    listing = list_workers("http://router:30000", timeout=10, api_key=None)
    [w.url for w in listing.workers]  # then asked as ``check URL...`` asks them

SGLang's router (``smg``, and ``sglang-router`` before it) answers ``GET /workers``
from 0.2.4 on: each worker's ``url``, ``worker_type`` (``prefill``, ``decode``,
``regular``) and ``is_healthy``. Routers 0.1.x answer only ``GET /list_workers``
(``{"urls": [...]}``: no role, no health; each server's own ``/server_info`` says
its role). A router started with ``--api-key`` wants ``Authorization: Bearer KEY``
on the listing (``--api-key``, or ``SGLANG_PD_LEAN_ROUTER_API_KEY``; never printed).

The router keeps only a few keys of each worker's ``/server_info``, so the plugin's
record is still read from each worker; the router gives the list and its health
view. A router that gives no listing, and a worker it marks unhealthy, are reported
with exit code 2, as a server that does not answer is.
"""

from __future__ import annotations

import dataclasses
import json
import os
import urllib.error
import urllib.request
from typing import Any

from sglang_pd_lean.cli.args import UsageError
from sglang_pd_lean.cli.check.servers import normalize

API_KEY_ENV = "SGLANG_PD_LEAN_ROUTER_API_KEY"
# The router's roles, in the order a summary names them.
ROLES = ("prefill", "decode", "regular")


@dataclasses.dataclass(frozen=True)
class Worker:
    url: str  # as the router lists it, normalized where it is an HTTP URL
    role: str | None  # prefill / decode / regular; None: the router does not say
    healthy: bool | None  # the router's health view; None: it does not say


@dataclasses.dataclass(frozen=True)
class Listing:
    """One router's answer: the endpoint that answered and its workers, or why
    there is none."""

    router: str
    endpoint: str | None = None  # "/workers" or "/list_workers"
    workers: tuple[Worker, ...] = ()
    error: str | None = None

    @property
    def unhealthy(self) -> list[Worker]:
        return [w for w in self.workers if w.healthy is False]

    def summary(self) -> str:
        """One line: what the router lists, by role and health."""
        if self.error is not None:
            return f"router {self.router}: no listing: {self.error}"
        head = (
            f"router {self.router} (GET {self.endpoint}): {len(self.workers)} worker(s)"
        )
        if all(w.role is None for w in self.workers):
            return head + (
                " (this router does not say their roles or health: each server's "
                "/server_info says its role)"
            )
        parts = []
        for role in sorted({w.role or "?" for w in self.workers}, key=_role_order):
            listed = [w for w in self.workers if (w.role or "?") == role]
            healthy = sum(w.healthy is True for w in listed)
            parts.append(f"{len(listed)} {role} ({healthy} healthy)")
        return f"{head}: {', '.join(parts)}"


def _role_order(role: str) -> tuple[int, str]:
    return (ROLES.index(role) if role in ROLES else len(ROLES), role)


def api_key(given: str | None) -> str | None:
    """``--api-key``, else ``SGLANG_PD_LEAN_ROUTER_API_KEY``, else none."""
    return given or os.environ.get(API_KEY_ENV) or None


def list_workers(router: str, timeout: float, key: str | None) -> Listing:
    """The workers ``router`` lists (``/workers``, else ``/list_workers`` where the
    router has no ``/workers``), or why it lists none."""
    try:
        body = _get(router, "/workers", timeout, key)
        if body is not None:
            return Listing(router, "/workers", _in_order(_workers(body)))
        body = _get(router, "/list_workers", timeout, key)
        if body is None:
            return Listing(
                router, error="neither GET /workers nor GET /list_workers is there"
            )
        return Listing(router, "/list_workers", _in_order(_urls(body)))
    except _NoListing as exc:
        return Listing(router, error=str(exc))


def _in_order(workers: tuple[Worker, ...]) -> tuple[Worker, ...]:
    """By role (prefill first), then URL: the router's own order changes."""
    return tuple(sorted(workers, key=lambda w: (_role_order(w.role or "?"), w.url)))


class _NoListing(Exception):
    """Why a router gave no listing: one line."""


def _get(router: str, path: str, timeout: float, key: str | None) -> Any:
    """``GET router + path``, parsed; None where the router has no such path."""
    request = urllib.request.Request(router + path)
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            body = reply.read()
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        why = f"GET {path}: HTTP {exc.code} {exc.reason}"
        if exc.code in (401, 403):
            why += (
                " (a router started with --api-key wants it: give --api-key or "
                f"{API_KEY_ENV})"
            )
        raise _NoListing(why) from None
    except (urllib.error.URLError, OSError) as exc:
        raise _NoListing(f"GET {path}: {getattr(exc, 'reason', exc)}") from None
    try:
        return json.loads(body)
    except ValueError:
        raise _NoListing(f"GET {path}: the answer is not JSON") from None


def _url(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise _NoListing(f"GET {path}: a worker without a URL")
    try:
        return normalize(value)
    except UsageError:
        return value  # a gRPC worker, say: asked, and reported as not HTTP


def _workers(body: Any) -> tuple[Worker, ...]:
    items = body.get("workers") if isinstance(body, dict) else None
    if not isinstance(items, list):
        raise _NoListing("GET /workers: not a router's worker list (no workers[])")
    workers = []
    for item in items:
        if not isinstance(item, dict):
            raise _NoListing("GET /workers: a worker entry that is not an object")
        role = item.get("worker_type")
        healthy = item.get("is_healthy")
        workers.append(
            Worker(
                _url(item.get("url"), "/workers"),
                str(role).lower() if isinstance(role, str) else None,
                healthy if isinstance(healthy, bool) else None,
            )
        )
    return tuple(workers)


def _urls(body: Any) -> tuple[Worker, ...]:
    urls = body.get("urls") if isinstance(body, dict) else None
    if not isinstance(urls, list):
        raise _NoListing("GET /list_workers: not a router's worker list (no urls[])")
    return tuple(Worker(_url(url, "/list_workers"), None, None) for url in urls)


def listing_json(listing: Listing) -> dict:
    return {
        "url": listing.router,
        "endpoint": listing.endpoint,
        "error": listing.error,
        "workers": [dataclasses.asdict(w) for w in listing.workers],
    }
