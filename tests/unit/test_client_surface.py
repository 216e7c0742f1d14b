"""Both clients reach every operation of the API document, except the operator's surfaces listed below
(issue 44: the clients' drift check covers new endpoints; decisions.md, Clients).

`scripts/clients.py check` proves the clients' generated types are the running service's document; this
test proves the hand-written calls follow it: for every operation of `docs/api/openapi.json` (which that
check keeps current), each client's source must name the operation's path by its last literal segment
(`/publish`, `"releases"`, `` `schedule` ``). It is a guard against an endpoint added to the service and
forgotten in a client, not a proof that each call is right (the clients' own suites run every call
against a live `cms serve`)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENT = ROOT / "docs" / "api" / "openapi.json"
METHODS = ("get", "post", "put", "patch", "delete")

OPERATOR_ONLY = {
    "/metrics": "Prometheus scrapes it; no client calls it",
    "/api/v1/stats": "the admin UI's dashboard",
    "/api/v1/audit": "the audit log: the admin UI and the operator's tools",
    "/api/v1/audit/security": "the audit log's security view: the admin UI",
    "/api/v1/audit/statistics": "the audit log's figures: the admin UI",
    "/api/v1/backups": "backups are an operator's work (`cms backup`, the admin UI)",
    "/api/v1/backups/{filename}": "as above",
    "/api/v1/slow-queries": "the admin UI's Slow queries screen",
    "/api/v1/slow-queries/{slow_query_id}": "as above",
    "/api/v1/slow-queries/{slow_query_id}/index": "as above",
    "/api/v1/webhooks": "webhooks are set up by operators (the admin UI, curl)",
    "/api/v1/webhooks/{webhook_id}": "as above",
    "/api/v1/webhooks/{webhook_id}/deliveries": "as above",
    "/api/v1/webhooks/deliveries/recent": "as above",
    "/api/v1/webhooks/deliveries/{delivery_id}/redeliver": "as above",
    "/api/v1/auth/forgot-password": "an alias of request-password-reset, which both clients call",
}
"""Paths of the API document the clients leave to the admin UI and operators, each with the reason."""

CLIENTS = {
    "js": [ROOT / "clients" / "js" / "src"],
    "python": [ROOT / "clients" / "python" / "cms_client"],
}


def _operations() -> list[tuple[str, str]]:
    paths = json.loads(DOCUMENT.read_text())["paths"]
    return sorted((method.upper(), path) for path, item in paths.items() for method in item if method in METHODS)


def _source(client: str) -> str:
    files = [f for d in CLIENTS[client] for f in sorted(d.rglob("*")) if f.suffix in (".ts", ".py")]
    return "\n".join(f.read_text() for f in files if "generated" not in f.parts and "_generated" not in f.parts)


def _named(source: str, path: str) -> bool:
    literal = [s for s in path.split("/") if s and not s.startswith("{")][-1]
    return re.search(rf"""[/"'`]{re.escape(literal)}(?:[/"'`?]|$)""", source, re.MULTILINE) is not None


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_each_client_names_every_operation_but_the_operators(client: str) -> None:
    source = _source(client)
    missing = [f"{method} {path}" for method, path in _operations()
               if path not in OPERATOR_ONLY and not _named(source, path)]
    assert not missing, f"the {client} client has no call for: {missing}"


def test_the_operator_only_list_names_only_paths_of_the_document() -> None:
    documented = {path for _, path in _operations()}
    assert set(OPERATOR_ONLY) <= documented, sorted(set(OPERATOR_ONLY) - documented)
