"""`GET /metrics` (issue 30, item 1; decisions.md, Metrics): who may read it, what it exposes, and
that labels never carry ids, emails, query strings or path-parameter values.

The app is served in-process on the suite's MongoDB and Redis (`client`); webhook deliveries run in a
burst worker on the same services (`run_jobs`), realtime streams over real HTTP (`streams`).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest
from aiohttp import web

from cms.api.routes import ROUTES
from cms.app import create_app
from cms.config import Config, ConfigError
from cms.observability.metrics import limit_label
from cms.observability.signals import UNMATCHED_ROUTE
from cms.wiring import Services, open_services
from tests.conftest import USER_PASSWORD, Client, bearer, create_collection, create_record, error_of, login
from tests.fixtures import wait_until
from tests.observability.metrics_text import label_values, samples, value

METRICS = "/metrics"
TOKEN = "metrics-token-" + "t" * 24
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
COLLECTION = "zqleakycoll"
EMAIL = "leaky.person@zq-example.org"
QUERY_MARK = "zqquerymark"
AUTH_COLLECTION = "zqleakymembers"
ROUTE_TEMPLATES = {route.path for route in ROUTES}


async def scrape(client: Client, headers: dict[str, str]) -> str:
    response = await client.get(METRICS, headers=headers)
    assert response.status == 200, await response.text()
    assert response.headers["Content-Type"] == CONTENT_TYPE
    return await response.text()


# --- who may read --------------------------------------------------------------------------------


@pytest.fixture
def config(config: Config) -> Config:
    return replace(config, metrics_token=TOKEN, webhook_allow_private=True)


async def test_admins_and_the_metrics_token_may_read_others_may_not(client: Client, admin_token: str,
                                                                   user_token: str) -> None:
    await error_of(await client.get(METRICS), 401, "unauthorized")
    await error_of(await client.get(METRICS, headers=bearer("not-a-token")), 401, "unauthorized")
    await error_of(await client.get(METRICS, headers=bearer(TOKEN + "x")), 401, "unauthorized")
    await error_of(await client.get(METRICS, headers={"Authorization": "Basic abc"}), 401, "unauthorized")
    await error_of(await client.get(METRICS, headers=bearer(user_token)), 403, "forbidden")
    assert "cms_http_requests_total" in await scrape(client, bearer(admin_token))
    assert "cms_http_requests_total" in await scrape(client, bearer(TOKEN))


async def test_an_admins_api_key_is_not_an_admin_here(client: Client, admin_token: str) -> None:
    """decisions.md: admin-table admins; an API key reaches records, files, batch and realtime only."""
    response = await client.post("/api/v1/api-keys", headers=bearer(admin_token),
                                 json={"name": "scraper", "scopes": ["read"]})
    assert response.status == 201, await response.text()
    key = (await response.json())["key"]
    await error_of(await client.get(METRICS, headers={"X-API-Key": key}), 403, "forbidden")


async def test_metrics_are_exempt_from_the_rate_limit(client: Client, services: Services) -> None:
    await services.settings.set("rate_limit_per_minute", 1)
    assert [(await client.get(METRICS, headers=bearer(TOKEN))).status for _ in range(3)] == [200, 200, 200]
    assert [(await client.get("/api/v1/collections")).status for _ in range(2)] == [200, 429]


async def test_without_a_metrics_token_only_admins_read(aiohttp_client: Any, config: Config,
                                                       admin_token: str) -> None:
    """With METRICS_TOKEN unset, no bearer text passes as the token (not even an empty one)."""
    async with open_services(replace(config, metrics_token=None)) as services:
        served: Client = await aiohttp_client(create_app(services.config, services=services))
        for header in ({}, bearer(TOKEN), {"Authorization": "Bearer "}):
            await error_of(await served.get(METRICS, headers=header), 401, "unauthorized")
        assert "cms_processes" in await scrape(served, bearer(admin_token))


async def test_metrics_turned_off_add_no_sink_and_answer_404(aiohttp_client: Any, config: Config,
                                                            admin_token: str) -> None:
    async with open_services(replace(config, metrics_enabled=False)) as services:
        assert services.metrics is None
        assert services.signals.sinks == ()
        served: Client = await aiohttp_client(create_app(services.config, services=services))
        for header in ({}, bearer(TOKEN), bearer(admin_token)):
            await error_of(await served.get(METRICS, headers=header), 404, "not_found")
        assert (await served.get("/health")).status == 200


@pytest.mark.parametrize("env, expected", [
    ({}, (True, None, None)),
    ({"METRICS_ENABLED": "false", "METRICS_TOKEN": TOKEN, "METRICS_PORT": "9100"}, (False, TOKEN, 9100)),
    ({"METRICS_ENABLED": "maybe"}, "METRICS_ENABLED"),
    ({"METRICS_TOKEN": "short"}, "METRICS_TOKEN"),
    ({"METRICS_TOKEN": "has a space in it ........"}, "METRICS_TOKEN"),
    ({"METRICS_PORT": "70000"}, "METRICS_PORT"),
    ({"METRICS_PORT": "nine"}, "METRICS_PORT"),
], ids=["defaults", "set", "bad switch", "short token", "spaced token", "port range", "port text"])
def test_metrics_settings_come_from_the_environment(env: dict[str, str], expected: Any, tmp_path: Any) -> None:
    environ = {"CMS_DATA_DIR": str(tmp_path), **env}
    if isinstance(expected, str):
        with pytest.raises(ConfigError, match=expected):
            Config.from_env(environ)
        return
    config = Config.from_env(environ)
    assert (config.metrics_enabled, config.metrics_token, config.metrics_port) == expected
    assert TOKEN not in repr(config)


# --- what is exposed -----------------------------------------------------------------------------


async def traffic(client: Client, admin_token: str) -> dict[str, Any]:
    """Requests whose paths, queries and bodies carry distinctive ids, emails, collection names and
    query text; returns the record created."""
    await create_collection(client, admin_token, COLLECTION, [{"name": "title", "type": "text"}])
    record = await create_record(client, admin_token, COLLECTION, {"title": "hello"})
    path = f"/api/v1/collections/{COLLECTION}/records"
    for _ in range(3):  # a warm list: the second and third come from the read cache
        response = await client.get(path, params={"page": "1", "filter": f"title!='{QUERY_MARK}'"})
        assert response.status == 200, await response.text()
    assert (await client.get(f"{path}/{record['id']}")).status == 200
    assert (await client.get(f"{path}/zqmissingid0000")).status == 404
    assert (await client.get(f"/zq/unmatched/{record['id']}", params={"q": QUERY_MARK})).status == 404
    assert (await client.request("PROPFIND", f"{path}/{record['id']}")).status in (404, 405)
    response = await client.post("/api/v1/auth/register", json={"email": EMAIL, "password": USER_PASSWORD})
    assert response.status == 201, await response.text()
    await login(client, EMAIL, USER_PASSWORD)
    assert (await client.get("/api/v1/auth/me", headers=bearer(admin_token))).status == 200
    return record


async def test_labels_carry_templates_and_fixed_names_never_values(client: Client, admin_token: str) -> None:
    record = await traffic(client, admin_token)
    text = await scrape(client, bearer(admin_token))
    for secret in (COLLECTION, record["id"], EMAIL, "zq-example", QUERY_MARK, "zqmissingid", "/zq/", "PROPFIND",
                   "page=", "?"):
        assert secret not in text, secret
    routes = label_values(text, "route")
    assert routes <= ROUTE_TEMPLATES | {UNMATCHED_ROUTE}, routes - ROUTE_TEMPLATES
    assert {"/api/v1/collections/{collection_name}/records", "/api/v1/collections/{collection_name}/records/"
            "{record_id}", "/api/v1/auth/register", UNMATCHED_ROUTE} <= routes
    assert label_values(text, "method") <= {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "other"}
    assert all(re.fullmatch(r"[1-5]\d\d", status) for status in label_values(text, "status"))
    # every label of every cms_ series, by name, is one the service defines
    labels = {k for name, series in samples(text).items() if name.startswith("cms_")
              for label_set in series for k, _ in label_set}
    assert labels == {"route", "method", "status", "le", "cache", "result", "command", "version"}, labels


async def test_the_expected_series_count_what_happened(client: Client, admin_token: str) -> None:
    record = await traffic(client, admin_token)
    text = await scrape(client, bearer(admin_token))
    records = "/api/v1/collections/{collection_name}/records"
    assert value(text, "cms_http_requests_total", route=records, method="GET", status="200") == 3
    assert value(text, "cms_http_requests_total", route=records + "/{record_id}", method="GET", status="200") == 1
    assert value(text, "cms_http_requests_total", route=records + "/{record_id}", method="GET", status="404") == 1
    assert value(text, "cms_http_requests_total", route=UNMATCHED_ROUTE, method="GET", status="404") == 1
    assert value(text, "cms_http_requests_total", route=UNMATCHED_ROUTE, method="other") == 1
    assert value(text, "cms_http_request_duration_seconds_count", route=records, method="GET") == 3
    assert value(text, "cms_http_request_duration_seconds_bucket", route=records, method="GET", le="+Inf") == 3
    assert value(text, "cms_http_request_duration_seconds_sum", route=records, method="GET") > 0
    assert value(text, "cms_cache_lookups_total", cache="read", result="hit") >= 2
    assert value(text, "cms_cache_lookups_total", cache="read", result="miss") >= 1
    assert value(text, "cms_cache_lookups_total", cache="definition", result="hit") >= 1
    assert value(text, "cms_cache_lookups_total", cache="session", result="hit") >= 1
    for command in ("find", "insert"):
        assert value(text, "cms_mongodb_command_duration_seconds_count", command=command) >= 1, command
    assert value(text, "cms_job_queue_depth") >= 1  # the verification email waits: no worker ran
    assert value(text, "cms_webhook_outbox_backlog") == 0
    assert value(text, "cms_realtime_connections") == 0
    assert value(text, "cms_processes") == 1
    assert value(text, "process_cpu_seconds_total") > 0 and value(text, "process_resident_memory_bytes") > 0
    assert record["id"] not in text


async def test_webhook_deliveries_count_by_outcome(client: Client, admin_token: str, aiohttp_server: Any,
                                                   run_jobs: Any) -> None:
    answers = [503, 200, 410]

    async def hook(request: web.Request) -> web.Response:
        return web.Response(status=answers.pop(0) if answers else 200)

    app = web.Application()
    app.router.add_post("/hook", hook)
    receiver = await aiohttp_server(app)
    await create_collection(client, admin_token, COLLECTION, [{"name": "title", "type": "text"}])
    response = await client.post("/api/v1/webhooks", headers=bearer(admin_token),
                                 json={"url": str(receiver.make_url("/hook")), "collection_name": COLLECTION,
                                       "events": ["create"], "retry_count": 3})
    assert response.status == 201, await response.text()
    await create_record(client, admin_token, COLLECTION, {"title": "first"})  # 503, then 200 on the retry
    await run_jobs()
    text = await scrape(client, bearer(TOKEN))
    assert value(text, "cms_webhook_deliveries_total", outcome="retrying") == 1

    async def retried() -> bool:
        await run_jobs()
        return value(await scrape(client, bearer(TOKEN)), "cms_webhook_deliveries_total", outcome="delivered") == 1

    await wait_until(retried, "the retried delivery", timeout_s=15)
    await create_record(client, admin_token, COLLECTION, {"title": "second"})  # 410: final
    await run_jobs()
    text = await scrape(client, bearer(TOKEN))
    assert value(text, "cms_webhook_deliveries_total", outcome="failed") == 1
    assert value(text, "cms_webhook_delivery_duration_seconds_count") == 3
    assert COLLECTION not in text and "/hook" not in text


async def test_rate_limit_refusals_count_by_limit_name_without_keys(client: Client, admin_token: str,
                                                                    services: Services) -> None:
    await create_collection(client, admin_token, AUTH_COLLECTION, [], type="auth", otp_enabled=True)
    otp = f"/api/v1/collections/{AUTH_COLLECTION}/auth/otp/request"
    assert (await client.post(otp, json={"email": EMAIL})).status == 200
    await error_of(await client.post(otp, json={"email": EMAIL}), 429, "rate_limited")
    await services.settings.set("rate_limit_per_minute", 2)
    statuses = [(await client.get("/api/v1/collections")).status for _ in range(3)]
    assert statuses[-1] == 429
    text = await scrape(client, bearer(TOKEN))
    assert value(text, "cms_rate_limited_total", limit="mail:otp_request") == 1
    assert value(text, "cms_rate_limited_total", limit="general") >= 1
    assert AUTH_COLLECTION not in text and EMAIL not in text and "127.0.0.1" not in text


@pytest.mark.parametrize("kind, label", [
    ("general", "general"),
    ("auth:login", "auth:login"),
    ("mail:forgot_password", "mail:forgot_password"),
    ("mail:shop:otp_request", "mail:otp_request"),
    ("mail:Shop:Weird Name", "other"),
    ("auth:" + "x" * 60, "other"),
], ids=["general", "auth", "mail", "collection mail", "odd", "long"])
def test_limit_labels_drop_collection_names(kind: str, label: str) -> None:
    assert limit_label(kind) == label


async def test_realtime_connections_and_events_sent(client: Client, admin_token: str, streams: Any) -> None:
    await create_collection(client, admin_token, COLLECTION, [{"name": "title", "type": "text"}])
    first, second = streams(), streams()
    for stream in (first, second):
        await stream.open()
        assert (await stream.subscribe([f"{COLLECTION}/*"])).status_code == 204
    assert value(await scrape(client, bearer(TOKEN)), "cms_realtime_connections") == 2
    await create_record(client, admin_token, COLLECTION, {"title": "news"})
    for stream in (first, second):
        assert (await stream.next()).event == f"{COLLECTION}/*"

    async def sent() -> bool:
        return value(await scrape(client, bearer(TOKEN)), "cms_realtime_events_sent_total") >= 2

    await wait_until(sent, "events counted")
    await first.close()

    async def one_left() -> bool:
        return value(await scrape(client, bearer(TOKEN)), "cms_realtime_connections") == 1

    await wait_until(one_left, "one connection left")
