"""What both flavours share: a request is described once as a `Call`, and an operation once as a `Flow`.

A flow is a generator that yields the calls it needs and gets each call's decoded answer back (or the
`CmsError`/`CmsNetworkError` thrown into it); it returns the operation's result. The async and the sync
client each drive flows with their own httpx client (`drive_async`, `drive_sync`), so the request
building, answer decoding and multi-step logic (paging, storing a login) exist once.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import quote

import httpx

from cms_client.auth_store import AuthStore
from cms_client.errors import CmsError, CmsNetworkError

T = TypeVar("T")

Expect = Literal["json", "bytes", "text", "none"]
"""How an answer's body is decoded: JSON, raw bytes, text, or ignored."""

Params = Mapping[str, str | int | bool | None]
"""Query parameters; None values are left out."""

FileArg = tuple[str, bytes, str]
"""A multipart file part: `(filename, content, content_type)`."""


@dataclass(frozen=True)
class Call(Generic[T]):
    """One HTTP request of the API, described: `path` from the base URL (`/api/v1/...`), the query, a JSON body
    (`json_body`, None for none) or multipart parts (`files` + `form`), extra `headers`, how the answer is decoded
    (`expect`) and whether the client's credentials go with it (`auth`; those calls are retried once after a
    refresh when the service answers 401). `T` is the type of the decoded answer."""

    method: str
    path: str
    params: Params | None = None
    json_body: Any = None
    files: Mapping[str, FileArg] | Sequence[tuple[str, FileArg]] | None = None
    form: Mapping[str, str] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    expect: Expect = "json"
    auth: bool = True


Flow = Generator[Call[Any], Any, T]
"""An operation: yields calls, receives their decoded answers, returns a `T`."""


def ask(call: Call[T]) -> Flow[T]:
    """The flow of one call: its decoded answer (use as `answer = yield from ask(call)`)."""
    answer: T = yield call
    return answer


def segment(value: str) -> str:
    """`value` escaped as one path segment (an id or a name never changes the path's shape)."""
    return quote(value, safe="")


def auth_headers(call: Call[Any], store: AuthStore, api_key: str | None) -> dict[str, str]:
    """The credential headers of `call`: the signed-in token (`Authorization: Bearer`), else the API key
    (`X-API-Key`), else none; none for a call without `auth`."""
    if not call.auth:
        return {}
    if store.token:
        return {"Authorization": f"Bearer {store.token}"}
    if api_key:
        return {"X-API-Key": api_key}
    return {}


def build_request(base_url: str, call: Call[Any], store: AuthStore, api_key: str | None,
                  timeout_s: float | None = None) -> httpx.Request:
    """The httpx request of `call` against `base_url` (no trailing slash), with the current credentials;
    `timeout_s` (seconds, for each of connect, read, write and pool) replaces the HTTP client's time-out."""
    params = {key: _param(value) for key, value in (call.params or {}).items() if value is not None}
    headers = {"Accept": "application/json", **call.headers, **auth_headers(call, store, api_key)}
    if call.files is not None:
        request = httpx.Request(call.method, base_url + call.path, params=params, headers=headers,
                                files=list(call.files.items()) if isinstance(call.files, Mapping)
                                else list(call.files), data=dict(call.form or {}))
    elif call.json_body is not None:
        request = httpx.Request(call.method, base_url + call.path, params=params, headers=headers,
                                json=call.json_body)
    else:
        request = httpx.Request(call.method, base_url + call.path, params=params, headers=headers)
    if timeout_s is not None:
        request.extensions["timeout"] = httpx.Timeout(timeout_s).as_dict()
    return request


def _param(value: str | int | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def error_from(response: httpx.Response) -> CmsError:
    """The typed error of an error answer: its `{detail, code, errors?}` body, or `http_<status>` and its text."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("code"), str):
        errors = body.get("errors")
        return CmsError(response.status_code, body["code"], str(body.get("detail", "")),
                        errors if isinstance(errors, dict) else None, body)
    return CmsError(response.status_code, f"http_{response.status_code}", response.text[:500])


def decode(call: Call[T], response: httpx.Response) -> T:
    """The answer of `call` decoded as its `expect` says. Raises CmsError for a status of 400 and above."""
    if response.status_code >= 400:
        raise error_from(response)
    result: Any
    if call.expect == "json":
        result = json.loads(response.content) if response.content else None
    elif call.expect == "bytes":
        result = response.content
    elif call.expect == "text":
        result = response.text
    else:
        result = None
    return result  # type: ignore[no-any-return]


def network_error(exc: httpx.TransportError, call: Call[Any]) -> CmsNetworkError:
    """The CmsNetworkError of a transport failure of `call` (its cause kept as `__cause__` by the raiser)."""
    return CmsNetworkError(f"{call.method} {call.path}: {type(exc).__name__}: {exc}")


def drive_sync(flow: Flow[T], send: Callable[[Call[Any]], Any]) -> T:
    """Run `flow`, sending each call it yields with `send`; the flow's result. Errors of a call are thrown
    into the flow (it may catch them); an error the flow lets through is raised here."""
    answer: Any = None
    failure: Exception | None = None
    while True:
        try:
            call = flow.throw(failure) if failure is not None else flow.send(answer)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        try:
            answer, failure = send(call), None
        except (CmsError, CmsNetworkError) as exc:
            answer, failure = None, exc


async def drive_async(flow: Flow[T], send: Callable[[Call[Any]], Awaitable[Any]]) -> T:
    """`drive_sync` for an async `send`."""
    answer: Any = None
    failure: Exception | None = None
    while True:
        try:
            call = flow.throw(failure) if failure is not None else flow.send(answer)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        try:
            answer, failure = await send(call), None
        except (CmsError, CmsNetworkError) as exc:
            answer, failure = None, exc
