"""Backups (decisions.md, Backups): create, list, restore, delete; the archive's mongodump layout;
refused archives leave the data untouched; the CLI."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import tarfile
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any

import bson
import pytest
from bson import json_util
from pymongo import MongoClient

from cms import redis_keys as keys
from cms.cli import main as cli_main
from cms.config import Config
from cms.runtime.children import ChildServer
from cms.services.caching.counters import counter_text
from cms.store.client import Database
from cms.wiring import Services
from tests.conftest import (
    ADMIN_EMAIL,
    Client,
    MovableClock,
    bearer,
    create_collection,
    create_record,
    error_of,
    records_path,
)
from tests.fixtures import Command, CommandLog

BACKUPS = "/api/v1/backups"
NAME = re.compile(r"backup-\d{8}-\d{6}\.tar\.gz")
AGENT = {"User-Agent": "backup-tests/1"}
POST_FIELDS: list[dict[str, Any]] = [
    {"name": "title", "type": "text", "validation": {"required": True}},
    {"name": "slug", "type": "text", "validation": {"unique": True}},
    {"name": "views", "type": "number"},
]
Snapshot = dict[str, tuple[list[dict[str, Any]], MutableMapping[str, Any]]]


@pytest.fixture
def db(mongo_db: Database, services: Services) -> Database:
    """The test database through a client of its own (to look at what is stored), once the
    services are open."""
    return mongo_db


async def snapshot(db: Database) -> Snapshot:
    """Every collection's documents (by `_id`) and `index_information()`."""
    out: Snapshot = {}
    for name in sorted(await db.list_collection_names()):
        if name.startswith("system."):
            continue
        documents = [d async for d in db[name].find({}).sort("_id", 1)]
        out[name] = (documents, await db[name].index_information())
    return out


def without_audit(state: Snapshot) -> Snapshot:
    return {name: value for name, value in state.items() if name != "audit_log"}


async def create_backup(client: Client, token: str) -> dict[str, Any]:
    response = await client.post(BACKUPS, headers={**bearer(token), **AGENT})
    assert response.status == 201, await response.text()
    body: dict[str, Any] = await response.json()
    return body


async def restore(client: Client, token: str, filename: str) -> Any:
    return await client.post(f"{BACKUPS}/{filename}/restore", headers={**bearer(token), **AGENT})


async def seed(client: Client, token: str, db: Database) -> list[dict[str, Any]]:
    """A collection with a unique index, three records, and a GridFS file with a 1 MiB chunk."""
    await create_collection(client, token, "posts", POST_FIELDS)
    posts = [await create_record(client, token, "posts", {"title": f"Post {n}", "slug": f"post-{n}", "views": n})
             for n in range(3)]
    file_id = bson.ObjectId()
    await db["fs.files"].insert_one({"_id": file_id, "length": 2**20, "chunkSize": 2**20, "filename": "big.bin"})
    await db["fs.chunks"].insert_one({"files_id": file_id, "n": 0, "data": bson.Binary(os.urandom(2**20))})
    await db["fs.chunks"].create_index([("files_id", 1), ("n", 1)], unique=True)
    return posts


async def change_everything(client: Client, token: str, db: Database, posts: list[dict[str, Any]]) -> None:
    """Add, change and delete records, add a collection, drop a GridFS collection."""
    await create_record(client, token, "posts", {"title": "Added later", "slug": "later"})
    response = await client.patch(records_path("posts", posts[0]["id"]), headers=bearer(token),
                                  json={"data": {"title": "Changed"}})
    assert response.status == 200, await response.text()
    response = await client.delete(records_path("posts", posts[1]["id"]), headers=bearer(token))
    assert response.status == 204
    await create_collection(client, token, "extra", [{"name": "note", "type": "text"}])
    await create_record(client, token, "extra", {"note": "not in the backup"})
    await db["fs.chunks"].drop()


def archive_members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path, "r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]


def write_archive(path: Path, members: dict[str, bytes], *, extra: Callable[[tarfile.TarFile], None] | None = None
                  ) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        if extra:
            extra(tar)


# --- backup and restore ---------------------------------------------------------------------------


async def test_restore_brings_back_data_and_indexes_exactly(client: Client, admin_token: str, db: Database,
                                                           config: Config):
    posts = await seed(client, admin_token, db)
    before = await snapshot(db)
    assert {"fs.files", "fs.chunks", "sessions", "admin_users", "collections"} <= set(before)

    backup = await create_backup(client, admin_token)
    assert NAME.fullmatch(backup["filename"])
    path = config.backups_path / backup["filename"]
    assert backup["size"] == path.stat().st_size > 0
    assert backup["created"].endswith("Z")
    assert path.stat().st_mode & 0o777 == 0o600

    await change_everything(client, admin_token, db, posts)
    assert without_audit(await snapshot(db)) != without_audit(before)

    response = await restore(client, admin_token, backup["filename"])
    assert response.status == 200, await response.text()
    assert backup["filename"] in (await response.json())["message"]

    after = await snapshot(db)
    assert without_audit(after) == without_audit(before)
    # the audit log is the backup's plus the restore's own entry
    audit_docs, audit_indexes = after["audit_log"]
    assert audit_indexes == before["audit_log"][1]
    new = [d for d in audit_docs if d not in before["audit_log"][0]]
    assert [d["event_type"] for d in new] == ["backup_restored"]
    assert len(audit_docs) == len(before["audit_log"][0]) + 1

    # the restoring admin (signed in before the backup) is still signed in
    me = await client.get("/api/v1/auth/me", headers=bearer(admin_token))
    assert me.status == 200 and (await me.json())["email"] == ADMIN_EMAIL
    # and the API sees the old data
    assert (await client.get(records_path("posts", posts[1]["id"]))).status == 200
    assert (await client.get("/api/v1/collections/extra/records")).status == 404
    assert not [n for n in await db.list_collection_names() if n.startswith("_restore.")]


async def test_archive_has_the_mongodump_layout(client: Client, admin_token: str, db: Database, config: Config):
    await seed(client, admin_token, db)
    state = await snapshot(db)
    backup = await create_backup(client, admin_token)
    members = archive_members(config.backups_path / backup["filename"])

    root = config.mongodb_db
    expected = {f"{root}/{name}{suffix}" for name in state for suffix in (".bson", ".metadata.json")}
    assert set(members) == expected
    for name, (documents, indexes) in state.items():
        if name == "audit_log":
            continue
        stored = bson.decode_all(members[f"{root}/{name}.bson"],
                                 codec_options=db.codec_options)  # concatenated BSON documents
        assert sorted(stored, key=lambda d: str(d["_id"])) == sorted(documents, key=lambda d: str(d["_id"]))
        metadata = json_util.loads(members[f"{root}/{name}.metadata.json"])
        assert metadata["collectionName"] == name and metadata["uuid"] == "" and metadata["type"] == "collection"
        assert {spec["name"]: spec["key"] for spec in metadata["indexes"]} == {
            index_name: dict(info["key"]) for index_name, info in indexes.items()}
    chunks = bson.decode_all(members[f"{root}/fs.chunks.bson"])
    assert len(chunks[0]["data"]) == 2**20
    # canonical Extended JSON, as mongodump writes it
    assert b'"key": {"email": {"$numberInt": "1"}}' in members[f"{root}/admin_users.metadata.json"]


def _corrupt_bson(members: dict[str, bytes], root: str) -> dict[str, bytes]:
    # a document whose length is right but whose last byte is not the 0 terminator
    bad = (12).to_bytes(4, "little") + b"\x10a\x00" + (1).to_bytes(4, "little") + b"\x01"
    key = f"{root}/admin_users.bson"
    return {**members, key: members[key] + bad}


def _bad_utf8(members: dict[str, bytes], root: str) -> dict[str, bytes]:
    value = b"\xff\xfe\x00"
    element = b"\x02s\x00" + len(value).to_bytes(4, "little") + value
    bad = (4 + len(element) + 1).to_bytes(4, "little") + element + b"\x00"
    key = f"{root}/sessions.bson"
    return {**members, key: bad + members[key]}


def _symlink(tar: tarfile.TarFile) -> None:
    info = tarfile.TarInfo("db/link.bson")
    info.type = tarfile.SYMTYPE
    info.linkname = "/etc/passwd"
    tar.addfile(info)


TAMPERINGS: dict[str, Callable[[dict[str, bytes], str], dict[str, bytes]]] = {
    "dotdot-member": lambda m, root: {**m, f"{root}/../evil.bson": b""},
    "absolute-member": lambda m, root: {**m, "/tmp/evil.bson": b""},
    "corrupt-bson": _corrupt_bson,
    "invalid-utf8-in-bson": _bad_utf8,
    "length-past-end": lambda m, root: {
        **m, f"{root}/sessions.bson": m[f"{root}/sessions.bson"] + b"\xff\x00\x00\x00xx"},
    "metadata-not-json": lambda m, root: {**m, f"{root}/sessions.metadata.json": b"{not json"},
    "second-root": lambda m, root: {**m, "other/x.bson": b"", "other/x.metadata.json": b"{}"},
    "bson-without-metadata": lambda m, root: {k: v for k, v in m.items() if k != f"{root}/sessions.metadata.json"},
    "unknown-file": lambda m, root: {**m, f"{root}/notes.txt": b"hello"},
}


REASONS = {
    "dotdot-member": "unsafe path", "absolute-member": "absolute", "corrupt-bson": "corrupt BSON document",
    "invalid-utf8-in-bson": "corrupt BSON document", "length-past-end": "truncated",
    "metadata-not-json": "not valid JSON", "second-root": "more than one database",
    "bson-without-metadata": "lacks its", "unknown-file": "is not a <collection>.bson",
    "symlink-member": "not a regular file", "truncated": "corrupt or truncated", "not-gzip": "corrupt or truncated",
    "empty-archive": "no collections",
}


@pytest.mark.parametrize("how", REASONS)
async def test_bad_archive_is_refused_and_data_untouched(client: Client, admin_token: str, db: Database,
                                                         config: Config, clock: MovableClock, how: str):
    posts = await seed(client, admin_token, db)
    good = await create_backup(client, admin_token)
    good_path = config.backups_path / good["filename"]
    clock.advance(seconds=1)
    bad_path = config.backups_path / (await create_backup(client, admin_token))["filename"]
    members = archive_members(good_path)
    if how in TAMPERINGS:
        write_archive(bad_path, TAMPERINGS[how](members, config.mongodb_db))
    elif how == "symlink-member":
        write_archive(bad_path, members, extra=_symlink)
    elif how == "truncated":
        bad_path.write_bytes(good_path.read_bytes()[: good_path.stat().st_size * 2 // 3])
    elif how == "not-gzip":
        bad_path.write_bytes(b"this is not a gzip file" * 100)
    else:
        write_archive(bad_path, {})
    await change_everything(client, admin_token, db, posts)
    changed = await snapshot(db)

    response = await restore(client, admin_token, bad_path.name)
    body = await error_of(response, 400, "bad_request")
    assert REASONS[how] in body["detail"], body

    assert await snapshot(db) == changed
    # the intact backup still restores
    assert (await restore(client, admin_token, good["filename"])).status == 200


async def test_restore_restores_a_backup_that_the_api_wrote_and_survives_same_names(
        client: Client, admin_token: str, db: Database, config: Config):
    """Restoring twice in a row gives the same database (the staging collections do not linger)."""
    await seed(client, admin_token, db)
    backup = await create_backup(client, admin_token)
    assert (await restore(client, admin_token, backup["filename"])).status == 200
    first = without_audit(await snapshot(db))
    assert (await restore(client, admin_token, backup["filename"])).status == 200
    assert without_audit(await snapshot(db)) == first


# --- names, list, delete, roles, audit --------------------------------------------------------------


@pytest.mark.parametrize("filename", [
    "..%2F..%2Fsecret_key", "secret_key", "backup-20240101-000000.tar.gz.bak", ".backup-20240101-000000.tar.gz",
    "backup-20241301-000000.tar.gz", "backup-2024-01-01.tar.gz", "backup-20240101-000000.tar.gz%00",
])
async def test_malformed_filename_is_400(client: Client, admin_token: str, filename: str):
    await error_of(await restore(client, admin_token, filename), 400, "bad_request")
    await error_of(await client.delete(f"{BACKUPS}/{filename}", headers=bearer(admin_token)), 400, "bad_request")
    await error_of(await client.get(f"{BACKUPS}/{filename}", headers=bearer(admin_token)), 400, "bad_request")


async def test_unknown_backup_is_404(client: Client, admin_token: str):
    await error_of(await restore(client, admin_token, "backup-20240101-000000.tar.gz"), 404, "not_found")
    await error_of(await client.delete(f"{BACKUPS}/backup-20240101-000000.tar.gz", headers=bearer(admin_token)),
                   404, "not_found")
    await error_of(await client.get(f"{BACKUPS}/backup-20240101-000000.tar.gz", headers=bearer(admin_token)),
                   404, "not_found")


async def test_download_sends_the_archive_as_listed(client: Client, admin_token: str, config: Config):
    backup = await create_backup(client, admin_token)
    response = await client.get(f"{BACKUPS}/{backup['filename']}", headers=bearer(admin_token))
    assert response.status == 200
    assert response.headers["Content-Type"] == "application/gzip"
    assert response.headers["Content-Disposition"] == f'attachment; filename="{backup["filename"]}"'
    body = await response.read()
    assert len(body) == backup["size"]
    assert body == (config.backups_path / backup["filename"]).read_bytes()


async def test_list_newest_first_delete_and_same_second(client: Client, admin_token: str, config: Config,
                                                        clock: MovableClock):
    assert await (await client.get(BACKUPS, headers=bearer(admin_token))).json() == []
    made = []
    for _ in range(3):
        made.append(await create_backup(client, admin_token))
        clock.advance(seconds=61)
    again = await client.post(BACKUPS, headers=bearer(admin_token))
    assert again.status == 201
    made.append(await again.json())
    await error_of(await client.post(BACKUPS, headers=bearer(admin_token)), 400, "already_exists")
    # files that are not backups are not listed
    (config.backups_path / f".{made[0]['filename']}.1234.tmp").write_bytes(b"partial")
    (config.backups_path / "notes.txt").write_bytes(b"x")

    listed = await (await client.get(BACKUPS, headers=bearer(admin_token))).json()
    assert [b["filename"] for b in listed] == [b["filename"] for b in reversed(made)]
    assert listed == list(reversed(made))

    response = await client.delete(f"{BACKUPS}/{made[1]['filename']}", headers=bearer(admin_token))
    assert response.status == 204 and await response.read() == b""
    listed = await (await client.get(BACKUPS, headers=bearer(admin_token))).json()
    assert made[1]["filename"] not in [b["filename"] for b in listed] and len(listed) == 3
    assert not (config.backups_path / made[1]["filename"]).exists()


@pytest.mark.parametrize("method, path", [
    ("POST", BACKUPS), ("GET", BACKUPS), ("POST", f"{BACKUPS}/backup-20240101-000000.tar.gz/restore"),
    ("DELETE", f"{BACKUPS}/backup-20240101-000000.tar.gz"), ("GET", f"{BACKUPS}/backup-20240101-000000.tar.gz"),
])
async def test_admin_only(client: Client, user_token: str, config: Config, method: str, path: str):
    await error_of(await client.request(method, path, headers=bearer(user_token)), 403, "forbidden")
    await error_of(await client.request(method, path), 401, "unauthorized")
    assert not config.backups_path.exists() or not list(config.backups_path.iterdir())


async def test_backup_actions_are_audited(client: Client, admin_token: str, db: Database, services: Services):
    admin = await db.admin_users.find_one({"email": ADMIN_EMAIL})
    assert admin is not None

    async def check(event_type: str, severity: str) -> None:
        entry = await db.audit_log.find_one({"event_type": event_type})
        assert entry is not None, event_type
        assert entry["severity"] == severity
        assert entry["user_id"] == admin["_id"]
        assert entry["ip_address"] == "127.0.0.1"
        assert entry["user_agent"] == AGENT["User-Agent"]
        assert entry["details"]["filename"] == backup["filename"]

    backup = await create_backup(client, admin_token)
    await check("backup_created", "info")
    response = await client.get(f"{BACKUPS}/{backup['filename']}", headers={**bearer(admin_token), **AGENT})
    assert response.status == 200
    await check("backup_downloaded", "warning")
    # the restore brings back the audit log of backup time (without `backup_created`), plus its own entry
    assert (await restore(client, admin_token, backup["filename"])).status == 200
    await check("backup_restored", "critical")
    response = await client.delete(f"{BACKUPS}/{backup['filename']}", headers={**bearer(admin_token), **AGENT})
    assert response.status == 204
    await check("backup_deleted", "warning")


def test_backup_dir_from_environment(tmp_path: Path):
    env = {"MONGODB_URL": "mongodb://db:27017", "REDIS_URL": "redis://r:6379/0", "SECRET_KEY": "k" * 40}
    assert Config.from_env(env, data_dir=tmp_path).backups_path == tmp_path / "backups"
    assert Config.from_env({**env, "BACKUP_DIR": "/srv/backups"}, data_dir=tmp_path).backups_path == Path(
        "/srv/backups")


# --- CLI ---------------------------------------------------------------------------------------------


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        with pytest.raises(SystemExit) as exited:
            cli_main(list(argv))
    finally:  # the CLI points the root logger at this test's captured stderr, closed after it
        root.handlers[:] = handlers
        root.setLevel(level)
    out, err = capsys.readouterr()
    return int(exited.value.code or 0), out, err


def test_cli_create_list_restore_delete(config: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]):
    assert config.mongodb_url and config.redis_url
    monkeypatch.chdir(tmp_path)  # no stray .env
    for name, value in {"MONGODB_URL": config.mongodb_url, "REDIS_URL": config.redis_url,
                        "MONGODB_DB": config.mongodb_db, "SECRET_KEY": config.secret_key,
                        "BACKUP_DIR": str(tmp_path / "cli-backups")}.items():
        monkeypatch.setenv(name, value)
    sync: MongoClient[dict[str, Any]] = MongoClient(config.mongodb_url)
    try:
        sync[config.mongodb_db].notes.insert_one({"_id": "n1", "text": "kept"})
        status, out, err = _cli(capsys, "backup", "create")
        assert status == 0, err
        filename = NAME.search(out)
        assert filename, out
        assert (tmp_path / "cli-backups" / filename.group(0)).is_file()
        assert "dump" in err  # progress lines on stderr (not a terminal here)

        status, out, _ = _cli(capsys, "backup", "list")
        assert status == 0 and filename.group(0) in out

        sync[config.mongodb_db].notes.insert_one({"_id": "n2", "text": "dropped by the restore"})
        status, out, err = _cli(capsys, "backup", "restore", filename.group(0))
        assert status == 2 and "--yes" in err  # not a terminal: no prompt, refused
        status, out, err = _cli(capsys, "backup", "restore", filename.group(0), "--yes")
        assert status == 0, err
        assert list(sync[config.mongodb_db].notes.find()) == [{"_id": "n1", "text": "kept"}]

        status, _, err = _cli(capsys, "backup", "restore", "../secret_key", "--yes")
        assert status == 1 and "Invalid backup filename" in err
        status, _, _ = _cli(capsys, "backup", "delete", filename.group(0))
        assert status == 0
        status, out, _ = _cli(capsys, "backup", "list")
        assert status == 0 and filename.group(0) not in out
    finally:
        sync.drop_database(config.mongodb_db)
        sync.close()


def test_openapi_documents_the_backup_routes():
    from cms.api.openapi import openapi_document

    paths = openapi_document()["paths"]
    assert set(paths[BACKUPS]) == {"get", "post"}
    assert "post" in paths[BACKUPS + "/{filename}/restore"]
    assert set(paths[BACKUPS + "/{filename}"]) == {"get", "delete"}
    assert json.dumps(paths[BACKUPS]["post"]["responses"]["201"])


async def test_restore_moves_the_catalog_epoch_before_it_drops_what_the_backup_lacks(
        client: Client, admin_token: str, db: Database, services: Services, config: Config,
        mongo_commands: CommandLog, sync_db: Any, sync_cache: Any):
    """The order `Catalog.exists` relies on: the restore hooks (the catalog epoch
    among them) run once the backup's collections are live and before the others are dropped, so a
    create whose insert lands after a drop sees the moved epoch."""
    await create_collection(client, admin_token, "kept", [{"name": "title", "type": "text"}])
    backup = await create_backup(client, admin_token)
    extra = await create_collection(client, admin_token, "gone", [{"name": "title", "type": "text"}])
    await create_record(client, admin_token, "gone", {"title": "not in the backup"})
    gone = f"records_{extra['id'].replace('-', '')}"
    _, epoch = await services.catalog.by_name_and_epoch("kept")
    seen: dict[str, Any] = {}

    def watch(_: Command) -> None:  # just before the drop of `gone` is sent
        seen["names"] = set(sync_db.list_collection_names())
        seen["catalog"] = {c["name"] for c in sync_db["collections"].find({}, {"name": 1})}
        seen["epoch"] = counter_text(sync_cache.get(keys.catalog_epoch(config.mongodb_db)))

    mongo_commands.before(lambda c: c.name == "drop" and c.collection == gone, watch)
    assert (await restore(client, admin_token, backup["filename"])).status == 200
    assert "gone" not in seen["catalog"] and "kept" in seen["catalog"]  # the backup's catalog is live
    assert gone in seen["names"]  # and what it lacks is not dropped yet
    assert seen["epoch"] not in (None, epoch)  # but the epoch has moved already
    assert gone not in await db.list_collection_names()


async def test_a_restore_whose_epoch_bump_fails_leaves_records_collections_to_the_sweep(
        client: Client, admin_token: str, db: Database, services: Services, cache_server: ChildServer):
    await create_collection(client, admin_token, "kept", [{"name": "title", "type": "text"}])
    backup = await create_backup(client, admin_token)
    extra = await create_collection(client, admin_token, "gone", [{"name": "title", "type": "text"}])
    gone = f"records_{extra['id'].replace('-', '')}"
    await db["not_in_the_backup"].insert_one({"_id": 1})

    cache_server.stop()  # the cache Redis (the catalog epoch) is down; the queue's Redis is not
    assert (await restore(client, admin_token, backup["filename"])).status == 200
    names = await db.list_collection_names()
    assert gone in names and "not_in_the_backup" not in names  # only records collections wait
    assert (await client.get(records_path("gone"))).status == 404
    assert await services.collections.sweep_orphans(confirm_after_s=0) == (gone,)
