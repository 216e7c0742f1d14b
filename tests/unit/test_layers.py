"""The layers of STYLE.md's Layout, read from the imports of every module under cms/ (the code, not
comments or logger names): services never reach up to HTTP, the admin UI never imports the API,
only cms/app.py puts the API and the admin UI together, and the driver stays in cms/store."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CMS = Path(__file__).resolve().parents[2] / "cms"

KNOWN_DRIVER_IMPORTS_OUTSIDE_STORE = frozenset({
    "cms/infra.py",             # opens the process's one AsyncMongoClient
    "cms/runtime/embedded.py",  # pings the embedded SecantusDB child with a sync MongoClient
    "cms/api/middlewares.py",   # maps pymongo's ConnectionFailure to 503
})
"""Modules that import pymongo/bson outside cms/store today (STYLE: only cms/store should). The list
may only shrink; a new module importing the driver fails `test_only_the_store_imports_the_driver`."""


def imported_modules(source: str, package: str) -> set[str]:
    """Every module `source` (a module of `package`) imports: `import a.b` gives `a.b`; `from a
    import b` gives `a` and `a.b` (b may be a module); relative imports resolve against `package`."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def modules_under(folder: str) -> list[Path]:
    return sorted((CMS / folder).rglob("*.py")) if folder else sorted(CMS.rglob("*.py"))


def name_of(path: Path) -> str:
    return path.relative_to(CMS.parent).as_posix()


def offenders(paths: list[Path], forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    """The modules among `paths` that import one of `forbidden` (a package or any module in it)."""
    found = {}
    for path in paths:
        package = ".".join(path.relative_to(CMS.parent).parts[:-1])
        imported = imported_modules(path.read_text(), package)
        bad = sorted(m for m in imported if any(m == f or m.startswith(f + ".") for f in forbidden))
        if bad:
            found[name_of(path)] = bad
    return found


@pytest.mark.parametrize("folder, forbidden", [
    ("services", ("cms.api", "cms.admin_ui", "cms.web", "cms.app", "aiohttp.web")),
    ("admin_ui", ("cms.api",)),
    ("web", ("cms.api", "cms.admin_ui", "cms.app")),
    ("store", ("cms.api", "cms.admin_ui", "cms.web", "cms.services", "aiohttp.web")),
    ("observability", ("cms.services", "cms.store", "cms.api", "cms.admin_ui", "cms.web", "cms.app", "cms.wiring",
                       "cms.infra")),
], ids=["services-not-http", "admin-ui-not-api", "web-below-both", "store-at-the-bottom",
        "observability-below-services"])
def test_a_layer_never_imports_the_layers_above(folder: str, forbidden: tuple[str, ...]) -> None:
    assert offenders(modules_under(folder), forbidden) == {}


def test_only_the_app_puts_the_api_and_the_admin_ui_together() -> None:
    outside = [p for p in modules_under("") if not name_of(p).startswith(("cms/api/", "cms/admin_ui/"))
               and name_of(p) != "cms/app.py"]
    assert offenders(outside, ("cms.api", "cms.admin_ui")) == {}


def test_only_the_store_imports_the_driver() -> None:
    outside = [p for p in modules_under("") if not name_of(p).startswith("cms/store/")]
    assert set(offenders(outside, ("pymongo", "bson", "gridfs"))) <= KNOWN_DRIVER_IMPORTS_OUTSIDE_STORE


def test_the_key_names_are_imported_from_below_services() -> None:
    """Every Redis key name is in cms/redis_keys.py; the old address under services is gone."""
    assert not (CMS / "services" / "caching" / "keys.py").exists()
    assert offenders(modules_under(""), ("cms.services.caching.keys",)) == {}


def test_the_scan_sees_each_form_of_import() -> None:
    source = "import cms.api.routes\nfrom aiohttp import web\nfrom cms import admin_ui\nfrom ..web import x\n"
    found = imported_modules(source, "cms.services")
    assert {"cms.api.routes", "aiohttp.web", "cms.admin_ui", "cms.web", "cms.web.x"} <= found


BYTE_READS = frozenset({"list_body", "get_body"})
"""The record reads that answer the API's cached bytes; the admin UI takes `list_json` / `get_json`."""


def test_the_admin_ui_never_reads_the_api_bytes_of_records() -> None:
    """The admin UI renders records as the representation's dicts (RecordReads.list_json /
    get_json); it never decodes the cached bytes the API sends."""
    found = {name_of(path): sorted(BYTE_READS & {node.attr for node in ast.walk(ast.parse(path.read_text()))
                                                 if isinstance(node, ast.Attribute)})
             for path in modules_under("admin_ui")}
    assert {name: reads for name, reads in found.items() if reads} == {}


ENGINE_BACK_ENDS = ("cms.filters.conditions", "cms.filters.mongo", "cms.filters.predicate", "cms.filters.values")
"""The engine's tree and back ends (STYLE rule 4: one engine decides access, through `Access`)."""
ENGINE_DOOR = "cms/services/access/"


def test_only_access_reaches_the_engine() -> None:
    """No module but cms/services/access/ (and the engine itself) builds a condition, a query
    from client text or an in-memory decision: every rule and filter goes through `Access`.
    `fields.py` names the resolved-field type its resolver returns."""
    paths = [p for p in modules_under("") if not name_of(p).startswith("cms/filters/")]
    found = {name: bad for name, bad in offenders(paths, ENGINE_BACK_ENDS).items()
             if not name.startswith(ENGINE_DOOR)}
    assert found == {"cms/services/content/fields.py": ["cms.filters.conditions",
                                                        "cms.filters.conditions.ResolvedField"]}
