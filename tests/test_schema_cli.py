"""`cms schema export|diff|apply` and SCHEMA_FILE as real processes (decisions.md, Schema as code): the commands
run against the test's database (production mode on the session's MongoDB and Redis) while the test reads and
writes through an in-process app on the same database."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import subprocess
import sys
from pathlib import Path

from cms.config import Config
from tests.api.test_schema_as_code import collection_of, export, field_of
from tests.conftest import Client, bearer, create_collection, create_record, records_path
from tests.fixtures import wait_until
from tests.test_replicas import V1, Processes, _env, _wait_healthy

ANSI = "\033["


def command_env(config: Config, **extra: str) -> dict[str, str]:
    """The environment of a `cms` process on the test's own database and queue."""
    assert config.mongodb_url and config.redis_url
    return {**_env(config.mongodb_url, config.redis_url), "MONGODB_DB": config.mongodb_db,
            "QUEUE_NAME": config.queue_name, "SECRET_KEY": config.secret_key, "LOG_LEVEL": "WARNING", **extra}


async def cms(config: Config, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `python -m cms <args>` to its end (in a thread: the test's app keeps serving meanwhile)."""
    env = {**command_env(config), "CMS_DATA_DIR": str(tmp_path / "cli")}
    return await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "cms", *args], env=env,
                                   capture_output=True, text=True, timeout=120, check=False)


async def test_export_diff_and_apply_from_the_command_line(client: Client, admin_token: str, config: Config,
                                                           tmp_path: Path) -> None:
    await create_collection(client, admin_token, "posts", [{"name": "title", "type": "text"},
                                                           {"name": "note", "type": "text"}])
    record = await create_record(client, admin_token, "posts", {"title": "kept", "note": "lost"})
    path = tmp_path / "schema.json"
    result = await cms(config, tmp_path, "schema", "export", str(path))
    assert result.returncode == 0, result.stderr
    _, snapshot = await export(client, admin_token)
    text = path.read_text()
    assert json.loads(text) == snapshot and text == json.dumps(snapshot, indent=2, sort_keys=True) + "\n"
    stdout = await cms(config, tmp_path, "schema", "export")
    assert json.loads(stdout.stdout) == snapshot

    posts = collection_of(snapshot, "posts")
    field_of(posts, "title").update(name="headline", renamed_from="title")
    posts["schema"]["fields"] = [f for f in posts["schema"]["fields"] if f["name"] != "note"]
    posts["list_rule"] = None
    path.write_text(json.dumps(snapshot, indent=2))
    result = await cms(config, tmp_path, "schema", "diff", str(path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        '~ posts           list_rule: "" -> null',
        '~ posts.headline  name: "title" -> "headline"',
        "- posts.note      text  data loss",
        "3 changes, 1 losing data (apply needs --allow-data-loss)",
    ]
    assert ANSI not in result.stdout

    result = await cms(config, tmp_path, "schema", "apply", str(path))
    assert result.returncode == 1
    assert "posts.note: The field is deleted: its stored values are removed." in result.stderr
    assert (await export(client, admin_token))[1]["hash"] == snapshot["hash"]  # nothing applied

    result = await cms(config, tmp_path, "schema", "apply", str(path), "--allow-data-loss")
    assert result.returncode == 0, result.stderr
    _, now = await export(client, admin_token)
    assert result.stdout.splitlines()[-1] == f"applied 3 changes; hash {now['hash']}"
    response = await client.get(records_path("posts", record["id"]), headers=bearer(admin_token))
    stored = await response.json()
    assert stored["headline"] == "kept" and "note" not in stored and "title" not in stored
    result = await cms(config, tmp_path, "schema", "diff", str(path))
    assert result.stdout.splitlines() == ["no changes"]


async def test_a_terminal_gets_colours(client: Client, admin_token: str, config: Config, tmp_path: Path) -> None:
    await create_collection(client, admin_token, "posts", [{"name": "title", "type": "text"}])
    _, snapshot = await export(client, admin_token)
    snapshot["collections"] = []
    path = tmp_path / "empty.json"
    path.write_text(json.dumps(snapshot))
    leader, follower = pty.openpty()
    env = {**command_env(config), "CMS_DATA_DIR": str(tmp_path / "cli")}
    env.pop("NO_COLOR", None)
    process = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "cms", "schema", "diff", str(path)],
                                      env=env, stdout=follower, stderr=subprocess.PIPE, timeout=120, check=False)
    os.close(follower)
    output = os.read(leader, 65536).decode()
    os.close(leader)
    assert process.returncode == 0, process.stderr
    assert "\033[31m- posts" in output and "\033[1;31m  data loss" in output


async def test_a_bad_file_is_refused_with_each_problem(client: Client, admin_token: str, config: Config,
                                                       tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"format": 2, "collections": []}))
    result = await cms(config, tmp_path, "schema", "diff", str(path))
    assert result.returncode == 1
    assert "format: This service reads snapshot format 1." in result.stderr
    path.write_text("{not json")
    result = await cms(config, tmp_path, "schema", "apply", str(path))
    assert result.returncode == 1 and "is not JSON" in result.stderr
    result = await cms(config, tmp_path, "schema", "diff", str(tmp_path / "missing.json"))
    assert result.returncode == 1 and "Cannot read the snapshot" in result.stderr


async def test_schema_file_is_applied_once_by_replicas_started_together(
        client: Client, admin_token: str, config: Config, tmp_path: Path) -> None:
    await create_collection(client, admin_token, "posts", [{"name": "title", "type": "text"}])
    await create_record(client, admin_token, "posts", {"title": "kept"})
    _, snapshot = await export(client, admin_token)
    field_of(collection_of(snapshot, "posts"), "title").update(name="headline", renamed_from="title")
    snapshot["collections"].append({"name": "tags", "type": "base", "schema": {"fields": [
        {"name": "label", "type": "text"}]}})
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(snapshot))
    processes = Processes(tmp_path, command_env(config, SCHEMA_FILE=str(path)))
    try:
        started = [processes.serve(name) for name in ("a", "b", "c")]
        for (url, process), name in zip(started, ("a", "b", "c"), strict=True):
            await asyncio.to_thread(_wait_healthy, url, process, processes.log(name))
        response = await client.get(V1 + "/audit", headers=bearer(admin_token),
                                    params={"event_type": "schema_applied"})
        page = await response.json()
        assert page["total"] == 1, page
        _, applied = await export(client, admin_token)
        response = await client.get(records_path("posts"), headers=bearer(admin_token))
        assert [r["headline"] for r in (await response.json())["items"]] == ["kept"]
        assert [c["name"] for c in applied["collections"]] == ["posts", "tags"]
    finally:
        processes.stop_all()


async def test_schema_file_that_loses_data_stops_the_start_up(client: Client, admin_token: str, config: Config,
                                                              tmp_path: Path) -> None:
    await create_collection(client, admin_token, "posts", [{"name": "title", "type": "text"}])
    path = tmp_path / "schema.json"
    path.write_text(json.dumps({"format": 1, "collections": []}))
    processes = Processes(tmp_path, command_env(config, SCHEMA_FILE=str(path)))
    try:
        _, process = processes.serve("a")
        await wait_until(lambda: process.poll() is not None, "cms serve stopped", timeout_s=60)
        assert process.returncode != 0
        assert "The snapshot loses data" in processes.log("a").read_text()
        _, still = await export(client, admin_token)
        assert [c["name"] for c in still["collections"]] == ["posts"]
        allowed = Processes(tmp_path / "allowed", command_env(config, SCHEMA_FILE=str(path),
                                                               SCHEMA_ALLOW_DATA_LOSS="true"))
        (tmp_path / "allowed").mkdir()
        try:
            url, serving = allowed.serve("a")
            await asyncio.to_thread(_wait_healthy, url, serving, allowed.log("a"))
            _, emptied = await export(client, admin_token)
            assert emptied["collections"] == []
        finally:
            allowed.stop_all()
    finally:
        processes.stop_all()
