"""The deployment files, checked without a Docker engine: docker-compose.yml (services, environment,
health checks, the replica set, Redis persistence, the `monitoring` profile), deploy/Caddyfile
(replicas found in Docker's DNS, realtime unbuffered), deploy/prometheus.yml and deploy/grafana (every
metric the dashboard asks for is one `/metrics` exposes) and the Dockerfile."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from cms.config import Config

ROOT = Path(__file__).resolve().parent.parent
CMS_SERVICES = ("web", "worker")
FIXED_VARIABLES = {"MONGODB_URL", "REDIS_URL", "CACHE_REDIS_URL", "CMS_DATA_DIR", "BACKUP_DIR"}
"""Variables the stack sets itself (its own service names and volumes); the rest come from the environment."""
_DEFAULTED = re.compile(r"^\$\{([A-Z0-9_]+)(?::-([^}]*)|:\?[^}]*)?\}$")


def interpolate(value: Any, env: dict[str, str]) -> str:
    """`value` with compose's `${NAME}`, `${NAME:-default}` and `${NAME:?error}` resolved from
    `env` (a missing required one fails the test)."""
    def one(match: re.Match[str]) -> str:
        name, default, required = match.group(1), match.group(3), match.group(2) == ":?"
        if name in env and env[name]:
            return env[name]
        if required:
            pytest.fail(f"{name} is required")
        return default or ""

    return re.sub(r"\$\{([A-Z0-9_]+)(?:(:-|:\?)([^}]*))?\}", one, str(value))


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return loaded


def config_variables() -> set[str]:
    """Every variable `Config.from_env` reads, found in its source."""
    source = Path(__import__("cms.config").config.__file__).read_text()
    return set(re.findall(r'(?:env\.get\(|env\[|\(env, )"([A-Z][A-Z0-9_]+)"', source)) | {
        name for name in re.findall(r'"([A-Z][A-Z0-9_]+)" in env', source)}


MONITORING = {"prometheus", "grafana"}


def test_the_stack_has_its_services(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {name for name, service in services.items() if "profiles" not in service} == {
        "mongodb", "redis", "cache", "web", "worker", "caddy"}
    assert {name for name, service in services.items() if service.get("profiles") == ["monitoring"]} == MONITORING
    assert set(services) == {"mongodb", "redis", "cache", "web", "worker", "caddy"} | MONITORING
    web, worker = compose["services"]["web"], compose["services"]["worker"]
    assert int(interpolate(web["deploy"]["replicas"], {})) == 2
    assert web["command"][:2] == ["cms", "serve"] and "0.0.0.0" in web["command"]
    assert worker["command"] == ["cms", "worker"]
    assert web["build"] == worker["build"] == "." and web["image"] == worker["image"]  # one image


def test_every_setting_comes_from_the_environment(compose: dict[str, Any]) -> None:
    for name in CMS_SERVICES:
        environment = compose["services"][name]["environment"]
        assert config_variables() <= set(environment), config_variables() - set(environment)
        for variable, value in environment.items():
            if variable in FIXED_VARIABLES:
                continue
            match = _DEFAULTED.match(str(value))
            assert match and match.group(1) == variable, f"{name}: {variable}={value!r} is not from the environment"
    environment = compose["services"]["web"]["environment"]
    assert "${SECRET_KEY:?" in environment["SECRET_KEY"]  # no default secret
    with pytest.raises(pytest.fail.Exception):
        interpolate(environment["SECRET_KEY"], {})


def test_the_defaults_make_a_valid_production_config(compose: dict[str, Any]) -> None:
    environment = compose["services"]["web"]["environment"]
    env = {k: interpolate(v, {"SECRET_KEY": "s" * 40}) for k, v in environment.items()}
    config = Config.from_env(env)
    assert not config.embedded
    assert config.log_format == "json" and config.shutdown_timeout_s == 10


def test_mongodb_is_a_one_node_replica_set_initiated_by_its_health_check(compose: dict[str, Any]) -> None:
    mongodb = compose["services"]["mongodb"]
    command = mongodb["command"]
    assert command[command.index("--replSet") + 1] == "rs0"
    check = " ".join(mongodb["healthcheck"]["test"])
    assert "rs.initiate(" in check and "_id: 'rs0'" in check and "mongodb:27017" in check
    assert "isWritablePrimary" in check  # healthy only once it is primary
    for name in CMS_SERVICES:
        url = compose["services"][name]["environment"]["MONGODB_URL"]
        assert url.startswith("mongodb://mongodb:27017/") and "replicaSet=rs0" in url


def test_redis_persists_with_aof_and_never_evicts(compose: dict[str, Any]) -> None:
    command = [interpolate(word, {}) for word in compose["services"]["redis"]["command"]]
    assert command[0] == "redis-server"
    options = dict(zip(command[1::2], command[2::2], strict=True))
    assert options["--appendonly"] == "yes"
    assert options["--maxmemory-policy"] == "noeviction"
    assert re.fullmatch(r"\d+[kmg]b", options["--maxmemory"])
    assert "redis:/data" in compose["services"]["redis"]["volumes"]


def test_the_cache_redis_is_bounded_and_evicts_least_recently_used(compose: dict[str, Any]) -> None:
    cache = compose["services"]["cache"]
    command = [interpolate(word, {}) for word in cache["command"]]
    assert command[0] == "redis-server"
    options = dict(zip(command[1::2], command[2::2], strict=True))
    assert options["--maxmemory-policy"] == "allkeys-lru"
    assert re.fullmatch(r"\d+[kmg]b", options["--maxmemory"])
    assert options["--appendonly"] == "no" and options["--save"] == ""
    assert "volumes" not in cache
    for name in CMS_SERVICES:
        assert compose["services"][name]["environment"]["CACHE_REDIS_URL"] == "redis://cache:6379/0"


def test_every_service_is_health_checked_and_waited_for(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in ("mongodb", "redis", "cache", "worker"):
        assert services[name]["healthcheck"]["test"][0] == "CMD", name
    assert "arq" in services["worker"]["healthcheck"]["test"]
    for name in CMS_SERVICES:
        assert services[name]["depends_on"] == {"mongodb": {"condition": "service_healthy"},
                                                "redis": {"condition": "service_healthy"},
                                                "cache": {"condition": "service_healthy"}}
        grace_s = int(services[name]["stop_grace_period"].removesuffix("s"))
        assert grace_s > int(interpolate(services[name]["environment"]["SHUTDOWN_TIMEOUT_S"], {}))
    # web uses the image's HEALTHCHECK
    assert "healthcheck" not in services["web"]
    assert re.search(r"^HEALTHCHECK .*/health", (ROOT / "Dockerfile").read_text(), re.M | re.S)


def test_web_replicas_sit_behind_caddy_which_they_trust(compose: dict[str, Any]) -> None:
    services = compose["services"]
    caddy = services["caddy"]
    assert caddy["image"].startswith("caddy:")
    assert "./deploy/Caddyfile:/etc/caddy/Caddyfile:ro" in caddy["volumes"]
    caddy_ip = caddy["networks"]["cms"]["ipv4_address"]
    for name in CMS_SERVICES:
        assert interpolate(services[name]["environment"]["TRUSTED_PROXIES"], {}) == caddy_ip
        assert "ports" not in services[name]  # reachable only through the proxy
    caddyfile = (ROOT / "deploy" / "Caddyfile").read_text()
    assert re.search(r"dynamic a \{\s*name web\s*port 8090", caddyfile)


def caddyfile_directives() -> str:
    """deploy/Caddyfile without its comments."""
    return re.sub(r"#.*", "", (ROOT / "deploy" / "Caddyfile").read_text())


def caddy_block(text: str, opener: str) -> str:
    """The body of the block that starts with the line `opener {` in `text` (braces matched)."""
    match = re.search(r"^\s*" + re.escape(opener) + r"\s*\{", text, re.M)
    assert match, f"no block {opener!r}"
    depth, start = 1, match.end()
    for index in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[index], 0)
        if depth == 0:
            return text[start:index]
    pytest.fail(f"block {opener!r} is not closed")


def test_caddy_passes_realtime_streams_through_unbuffered() -> None:
    """Server-sent events (docs/concepts/realtime.md): the realtime path has its own proxy, which flushes
    every write at once, and no `encode` in front of it; every other path is gzipped as before."""
    site = caddy_block(caddyfile_directives(), "{$SITE_ADDRESS::80}")
    realtime = caddy_block(site, "handle /api/v1/realtime")
    rest = caddy_block(site, "handle")
    top_level = site
    while re.search(r"\{[^{}]*\}", top_level):
        top_level = re.sub(r"\{[^{}]*\}", "", top_level)
    assert "encode" not in top_level  # nothing site-wide in front of the realtime path
    assert re.search(r"^\s*flush_interval -1\s*$", caddy_block(realtime, "reverse_proxy"), re.M)
    assert "encode" not in realtime
    assert re.search(r"^\s*encode gzip\s*$", rest, re.M) and "flush_interval" not in rest
    for block in (realtime, rest):  # both reach the same replicas
        assert re.search(r"^\s*import replicas\s*$", caddy_block(block, "reverse_proxy"), re.M)


def test_volumes_are_named(compose: dict[str, Any]) -> None:
    declared = set(compose["volumes"])
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            assert source in declared or source.startswith("./deploy/"), f"{name}: {volume}"
            assert source in declared or (ROOT / source).exists(), f"{name}: {volume}"


def test_the_dockerfile_is_slim_multi_stage_and_unprivileged() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    stages = re.findall(r"^FROM (\S+)", dockerfile, re.M)
    assert len(stages) == 2 and all(re.fullmatch(r"python:3\.\d+-slim", image) for image in stages), stages
    users = re.findall(r"^USER (\S+)", dockerfile, re.M)
    assert users and users[-1] not in ("root", "0")
    assert re.search(r'^CMD \["cms", "serve"', dockerfile, re.M)


# --- the monitoring profile ----------------------------------------------------------------------


def test_the_monitoring_profile_scrapes_every_replica_and_worker_with_the_token(compose: dict[str, Any]) -> None:
    services = compose["services"]
    prometheus, grafana = services["prometheus"], services["grafana"]
    assert "./deploy/prometheus.yml:/etc/prometheus/prometheus.yml:ro" in prometheus["volumes"]
    assert "$$METRICS_TOKEN" in " ".join(prometheus["entrypoint"])  # the shell's, not compose's
    assert prometheus["environment"]["METRICS_TOKEN"] == "${METRICS_TOKEN:-}"
    for service in (prometheus, grafana):  # only on this host unless the operator publishes them
        assert all(interpolate(port, {}).startswith("127.0.0.1:") for port in service["ports"])
    assert "./deploy/grafana/provisioning:/etc/grafana/provisioning:ro" in grafana["volumes"]
    scrape = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in scrape["scrape_configs"]}
    assert set(jobs) == {"cms-web", "cms-worker"}
    worker_port = int(interpolate(services["worker"]["environment"]["METRICS_PORT"], {}))
    for name, service, port in (("cms-web", "web", 8090), ("cms-worker", "worker", worker_port)):
        job = jobs[name]
        assert job["metrics_path"] == "/metrics"
        assert job["authorization"] == {"type": "Bearer", "credentials_file": "/prometheus/metrics_token"}
        assert job["dns_sd_configs"] == [{"names": [service], "type": "A", "port": port, "refresh_interval": "15s"}]
        assert "ports" not in services[service]  # Prometheus reaches them inside the network


def test_grafana_is_provisioned_with_prometheus_and_the_dashboard() -> None:
    grafana = ROOT / "deploy" / "grafana"
    sources = yaml.safe_load((grafana / "provisioning" / "datasources" / "prometheus.yml").read_text())
    [source] = sources["datasources"]
    assert (source["type"], source["uid"], source["url"]) == ("prometheus", "prometheus", "http://prometheus:9090")
    providers = yaml.safe_load((grafana / "provisioning" / "dashboards" / "cms.yml").read_text())
    assert providers["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    dashboard = json.loads((grafana / "dashboards" / "cms.json").read_text())
    titles = " ".join(panel["title"].lower() for panel in dashboard["panels"])
    for subject in ("requests per second", "p50", "p95", "error rate", "cache hit ratio", "webhook",
                    "queue depth", "realtime connections", "mongodb"):
        assert subject in titles, subject
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == source["uid"]
        assert all(target["datasource"]["uid"] == source["uid"] for target in panel["targets"])


def exposed_names(text: str) -> set[str]:
    """The sample names a scrape can carry: each family's (`# TYPE` lines), with a histogram's
    `_bucket`, `_count` and `_sum`."""
    names = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M):
        names.add(name)
        if kind == "histogram":
            names |= {name + "_bucket", name + "_count", name + "_sum"}
    return names


async def test_every_metric_of_the_dashboard_is_one_metrics_exposes(client: Any, admin_token: str) -> None:
    response = await client.get("/metrics", headers={"Authorization": f"Bearer {admin_token}"})
    assert response.status == 200, await response.text()
    exposed = exposed_names(await response.text())
    dashboard = json.loads((ROOT / "deploy" / "grafana" / "dashboards" / "cms.json").read_text())
    queried = {name for panel in dashboard["panels"] for target in panel["targets"]
               for name in re.findall(r"\b((?:cms|process)_[a-z_]+)\b", target["expr"])}
    assert len(queried) >= 12
    assert queried <= exposed, queried - exposed
