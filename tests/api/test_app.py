"""The app shell: error model, body limits, request ids, CORS, health, stats, API explorer."""

from __future__ import annotations

import logging
import re
from dataclasses import replace

from aiohttp import web

from cms.app import create_app
from cms.runtime.embedded import start_redis
from cms.wiring import open_services
from tests.conftest import bearer
from tests.fixtures import post_raw_json


async def test_unknown_path_is_404_in_error_model(client):
    response = await client.get("/api/v1/nothing-here")
    assert response.status == 404
    assert await response.json() == {"detail": "No such endpoint", "code": "not_found"}


async def test_wrong_method_is_405_in_error_model(client):
    response = await client.put("/health")
    assert response.status == 405
    body = await response.json()
    assert body["code"] == "method_not_allowed"
    assert "GET" in body["detail"]
    assert "GET" in response.headers["Allow"].split(",")  # RFC 9110: a 405 lists the allowed methods


async def test_malformed_json_is_400(client):
    response = await post_raw_json(client, "/api/v1/auth/login", b'{"email": ')
    assert response.status == 400
    body = await response.json()
    assert body["code"] == "bad_request"
    assert "Malformed JSON" in body["detail"]


async def test_non_utf8_body_is_400(client):
    response = await post_raw_json(client, "/api/v1/auth/login", b'\xff\xfe{"a"')
    assert response.status == 400


async def test_json_array_body_is_400(client):
    response = await client.post("/api/v1/auth/login", json=[1, 2])
    assert response.status == 400
    assert (await response.json())["detail"] == "JSON body must be an object"


async def test_body_over_one_mib_is_413(client):
    response = await client.post("/api/v1/auth/login", data=b"{" + b" " * (1024 * 1024 + 10) + b"}")
    assert response.status == 413
    assert (await response.json())["code"] == "payload_too_large"


async def test_validation_error_lists_fields(client):
    response = await client.post("/api/v1/auth/login", json={"email": 5})
    assert response.status == 422
    body = await response.json()
    assert body["code"] == "validation_error"
    assert set(body["errors"]) == {"email", "password"}


async def test_unhandled_exception_is_500_without_internals(aiohttp_client, config, services, caplog):
    async def boom(request: web.Request) -> web.Response:
        raise RuntimeError("secret internals /etc/passwd")

    app = create_app(config, services=services)
    app.router.add_get("/boom", boom)
    client = await aiohttp_client(app)
    with caplog.at_level(logging.ERROR, logger="cms.api"):
        response = await client.get("/boom", headers={"X-Request-Id": "req-123"})
    assert response.status == 500
    body = await response.json()
    assert body == {"detail": "Internal server error (request id req-123)", "code": "internal_error"}
    assert "secret" not in await response.text()
    assert response.headers["X-Request-Id"] == "req-123"
    logged = [r for r in caplog.records if "req-123" in r.getMessage()]
    assert logged and logged[0].exc_info is not None


async def test_request_id_generated_when_absent(client):
    response = await client.get("/health")
    assert len(response.headers["X-Request-Id"]) == 32


async def test_cors_preflight_and_simple_request(client):
    response = await client.options(
        "/api/v1/collections",
        headers={"Origin": "https://app.example", "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "Authorization, Content-Type"},
    )
    assert response.status == 200
    assert response.headers["Access-Control-Allow-Origin"] in ("*", "https://app.example")
    assert "POST" in response.headers["Access-Control-Allow-Methods"]
    response = await client.get("/api/v1/collections", headers={"Origin": "https://app.example"})
    assert response.headers["Access-Control-Allow-Origin"] in ("*", "https://app.example")


async def test_cors_restricted_origins(aiohttp_client, config, services):
    app = create_app(replace(config, cors_origins=("https://good.example",)), services=services)
    client = await aiohttp_client(app)
    good = await client.get("/health", headers={"Origin": "https://good.example"})
    bad = await client.get("/health", headers={"Origin": "https://evil.example"})
    assert good.headers.get("Access-Control-Allow-Origin") == "https://good.example"
    assert "Access-Control-Allow-Origin" not in bad.headers


async def test_health_ok(client):
    response = await client.get("/health")
    assert response.status == 200
    body = await response.json()
    assert body["status"] == "ok" and body["mongodb"] == "ok" and body["redis"] == "ok"
    assert body["version"]


async def test_health_under_api_v1_answers_as_health(client):
    """`GET /api/v1/health` is the same handler as `/health` (issue 44: clients that call only /api/v1)."""
    response = await client.get("/api/v1/health")
    assert response.status == 200
    assert await response.json() == await (await client.get("/health")).json()
    spec = await (await client.get("/openapi.json")).json()
    paths = spec["paths"]
    assert paths["/api/v1/health"]["get"]["responses"].keys() == paths["/health"]["get"]["responses"].keys()


async def test_health_503_names_redis_when_it_is_down(aiohttp_client, config, tmp_path):
    server = start_redis(tmp_path / "redis-down")
    own = replace(config, redis_url=server.url)
    async with open_services(own) as services:
        client = await aiohttp_client(create_app(own, services=services))
        assert (await client.get("/health")).status == 200
        server.stop()
        for path in ("/health", "/api/v1/health"):
            response = await client.get(path)
            assert response.status == 503
            body = await response.json()
            assert body["status"] == "unavailable"
            assert body["mongodb"] == "ok"
            assert body["redis"].startswith("error")


async def test_stats_for_admins_has_every_figure(client, admin_token):
    await client.get("/health")
    response = await client.get("/api/v1/stats", headers=bearer(admin_token))
    assert response.status == 200
    body = await response.json()
    assert body["http"]["requests_total"] >= 2
    assert body["http"]["active_connections"] >= 1
    assert "objects" in body["mongodb"]
    assert body["redis"]["connected_clients"] >= 1
    assert body["uptime_s"] >= 0


async def test_stats_for_anonymous_and_non_admins_has_only_http_and_uptime(client, user_token):
    for headers in ({}, bearer(user_token)):
        response = await client.get("/api/v1/stats", headers=headers)
        assert response.status == 200
        body = await response.json()
        assert set(body) == {"http", "uptime_s"}, body
        assert body["http"]["requests_total"] >= 1
        assert "version" not in str(body) and "redis" not in body and "mongodb" not in body


async def test_docs_served_offline(client):
    page = await client.get("/docs")
    assert page.status == 200
    html = await page.text()
    assert "/docs/static/swagger-ui-bundle.js" in html
    assert "http://" not in html and "https://" not in html  # no CDN
    script = await client.get("/docs/static/swagger-ui-bundle.js")
    assert script.status == 200
    assert len(await script.read()) > 100_000


async def test_openapi_document_is_generated_from_schemas(client):
    response = await client.get("/openapi.json")
    assert response.status == 200
    document = await response.json()
    assert document["openapi"].startswith("3.")
    login = document["paths"]["/api/v1/auth/login"]["post"]
    assert login["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/Login")
    schemas = document["components"]["schemas"]
    assert set(schemas["Login"]["required"]) == {"email", "password"}
    listing = document["paths"]["/api/v1/collections/{collection_name}/records"]["get"]
    names = {p["name"] for p in listing["parameters"]}
    assert {"collection_name", "page", "per_page", "sort", "filter", "search"} <= names
    assert document["paths"]["/api/v1/collections"]["post"]["security"] == [{"bearerAuth": []}]
    # constraints the service enforces are declared (found by the contract check, tests/test_contract.py)
    assert schemas["Register"]["properties"]["password"]["minLength"] == 8
    assert "rate_limit_enabled" in schemas["SettingUpdate"]["properties"]["key"]["enum"]
    backup = document["paths"]["/api/v1/backups/{filename}"]["delete"]["parameters"][0]["schema"]
    assert re.fullmatch(backup["pattern"].strip("^$"), "backup-20260101-120000.tar.gz")
    audit = {p["name"]: p["schema"] for p in document["paths"]["/api/v1/audit"]["get"]["parameters"]}
    assert audit["from_date"]["format"] == "date-time"
    upload = document["paths"]["/api/v1/files"]["post"]
    form = upload["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert set(form["required"]) == {"file", "collection", "record_id"} and form["additionalProperties"] is False
    # anonymous callers may upload where the rules allow; API keys reach files
    assert upload["security"] == [{}, {"bearerAuth": []}, {"apiKeyAuth": []}]


async def test_lone_surrogate_in_json_is_400(client):
    response = await post_raw_json(client, "/api/v1/auth/login", b'{"email": "a@b.co", "password": "\\ud800"}')
    assert response.status == 400
    assert "not valid Unicode" in (await response.json())["detail"]


async def test_openapi_documents_csv_upload_and_download(client):
    document = await (await client.get("/openapi.json")).json()
    base = "/api/v1/collections/{collection_name}/records"
    upload = document["paths"][base + "/import/csv"]["post"]["requestBody"]["content"]["multipart/form-data"]
    assert upload["schema"]["properties"]["file"] == {"type": "string", "format": "binary"}
    download = document["paths"][base + "/export/csv"]["get"]["responses"]["200"]["content"]
    assert set(download) == {"text/csv"}


async def test_stats_for_admins_has_pool_server_redis_and_queue_figures(client, services, config, admin_token):
    await services.redis.enqueue_job("no_such_job", _queue_name=config.queue_name)
    await services.redis.enqueue_job("no_such_job", _queue_name=config.queue_name)
    body = await (await client.get("/api/v1/stats", headers=bearer(admin_token))).json()
    mongodb, redis = body["mongodb"], body["redis"]
    assert mongodb["pool"]["max_size"] == 100 and mongodb["pool"]["servers"] >= 1
    assert mongodb["server"]["connections"]["current"] >= 1  # serverStatus: the embedded server has it
    assert mongodb["server"]["version"] and mongodb["server"]["opcounters"]["insert"] >= 1
    assert redis["queue_depth"] == 2
    assert redis["total_commands_processed"] > 0 and redis["used_memory_peak"] >= 1
    assert redis["keyspace_hits"] is not None and redis["maxclients"] >= 1
