"""Traces (decisions.md, Traces; issue 30 item 2): OpenTelemetry's SDK and its maintained instrumentations,
on only when an OTLP endpoint is configured.

`start(environ)` turns tracing on when `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
is set: spans go through a BatchSpanProcessor to the OTLP/HTTP exporter, which, like the sampler
(`OTEL_TRACES_SAMPLER`), the propagators and the resource (`OTEL_SERVICE_NAME`, default `cms`), reads the
standard variables itself. `configure(exporter=...)` is the same without the environment check, for tests
(the SDK's InMemorySpanExporter). Either instruments, once per process:

- aiohttp server: the middleware `server_middlewares()` gives `create_app`; one SERVER span per request,
  named `METHOD /route/{template}` (just `METHOD` when no route matched), never a path with ids;
- aiohttp client: the process's one ClientSession (webhook deliveries, OAuth), through the trace config
  `client_trace_configs()` gives cms.infra (not every ClientSession of the process, as the instrumentor
  would: a test's or a library's own sessions stay untouched);
- pymongo: command monitoring of every `AsyncMongoClient` created after this; statements are not captured;
- redis (redis.asyncio, so arq's pool too): statements are reduced to `COMMAND ? ?` by the instrumentation;
- arq jobs: `job_span` (the worker's job wrapper) opens one CONSUMER span per job, named by the job function,
  whose parent is the span that was current where the job was enqueued (`carrier()`, which cms.jobs sends
  with the job): a job continues the trace of the request that queued it.

What spans may not carry (passwords, tokens, secrets, request bodies): none of the instrumentations records a
body or (as configured here) a database statement. Query strings may hold tokens (`/_/verify-email?token=...`),
so every span's URL attributes keep the names of the query parameters but not their values
(`_ScrubbingProcessor`), outgoing requests are recorded by origin only (webhook URLs may hold secrets in their
path or query), and captured headers (only when an operator opts in with OTEL_INSTRUMENTATION_HTTP_CAPTURE_...)
that carry credentials are redacted.

Client spans (MongoDB, Redis, HTTP) that would start a trace of their own are not sampled (`_NoRootClients`):
the worker's queue polls, the realtime hub's stream reads and the health checks would otherwise send several
traces a second of a single command each. Commands inside a request or a job are traced.

"No cost when off": nothing here imports OpenTelemetry until tracing is turned on; off, `server_middlewares()`
and `client_trace_configs()` are empty, `carrier()` empty and `job_span` a shared null context.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import threading
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode

from cms.config import ConfigError

if TYPE_CHECKING:
    import aiohttp
    from aiohttp.typedefs import Middleware
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span, Tracer

log = logging.getLogger("cms.observability.tracing")

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
"""Tracing is on when one of these is set (and not empty)."""
PROTOCOL_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
"""The OTLP protocol, the first one set; only `http/protobuf` (the default) is shipped."""
DEFAULT_SERVICE_NAME = "cms"
"""`service.name` unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES names one."""
REDACTED = "REDACTED"
"""What replaces a query parameter's value or a credential header's value in a span attribute."""
URL_ATTRIBUTES = ("http.url", "url.full", "http.target")
"""Span attributes holding a URL or a path with its query string (old and new semantic conventions)."""
QUERY_ATTRIBUTES = ("url.query",)
"""Span attributes holding a query string alone."""
CREDENTIAL_HEADER_WORDS = ("authorization", "cookie", "api_key", "apikey", "token", "secret", "password",
                           "last_event_id", "last-event-id")
"""A captured header attribute (`http.request.header.<name>`) whose name holds one of these is redacted
(`Last-Event-ID` carries a realtime client id, a secret)."""


@dataclass(frozen=True)
class _Tracing:
    """The process's tracing, once on: its provider, the tracer of job spans, the server middleware."""

    provider: TracerProvider
    tracer: Tracer
    middleware: Middleware


_state: _Tracing | None = None
_lock = threading.Lock()
_NULL_CONTEXT: contextlib.nullcontext[None] = contextlib.nullcontext()


def enabled(environ: Mapping[str, str]) -> bool:
    """Whether `environ` turns tracing on: an OTLP endpoint variable (ENDPOINT_VARIABLES) is set."""
    return any(environ.get(name) for name in ENDPOINT_VARIABLES)


def active() -> bool:
    """Whether tracing is on in this process (`start` or `configure` ran)."""
    return _state is not None


def check(environ: Mapping[str, str]) -> None:
    """Raise ConfigError (naming the variable) when `environ` turns tracing on with an OTLP protocol
    other than `http/protobuf`, the one exporter cms ships; a command calls this before it starts anything."""
    if not enabled(environ):
        return
    for name in PROTOCOL_VARIABLES:
        protocol = environ.get(name, "").strip().lower()
        if protocol:
            if protocol != "http/protobuf":
                raise ConfigError(f"{name} must be http/protobuf (the OTLP exporter cms ships), not {protocol}")
            return


def start(environ: Mapping[str, str]) -> bool:
    """Turn tracing on in this process if `environ` asks for it (`enabled`); returns whether it is on.

    `environ` is what the command read (the process environment over `.env`, cms.commands.environment);
    its OTEL_* variables that the process environment lacks are copied into it, because the SDK reads
    `os.environ`. Idempotent. Raises ConfigError as `check` does."""
    if _state is not None:
        return True
    if not enabled(environ):
        return False
    check(environ)
    for name, value in environ.items():
        if name.startswith("OTEL_"):
            os.environ.setdefault(name, value)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    configure(exporter=OTLPSpanExporter())
    log.info("tracing on: spans go to %s", os.environ.get(ENDPOINT_VARIABLES[1]) or os.environ[ENDPOINT_VARIABLES[0]])
    return True


def configure(*, exporter: SpanExporter) -> TracerProvider:
    """Turn tracing on with spans going to `exporter` through a BatchSpanProcessor, and instrument
    aiohttp's server, pymongo and redis (aiohttp's client: `client_trace_configs`); returns the process's
    TracerProvider (also made the global one). The test seam: pass the SDK's InMemorySpanExporter and
    call `flush()` before reading it.

    Instrumentation is global and happens once: when tracing is already on, `exporter` is added beside
    the earlier ones. Clients (AsyncMongoClient, cms.infra's ClientSession) and apps (`create_app`) created
    before the first call are not traced."""
    global _state
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    with _lock:
        if _state is None:
            _state = _instrument()
        _state.provider.add_span_processor(BatchSpanProcessor(exporter))
        return _state.provider


def _instrument() -> _Tracing:
    """Build the provider (resource, sampler from the environment, wrapped by _NoRootClients; the
    scrubber) and instrument the libraries with it."""
    from aiohttp import web
    from opentelemetry import trace
    from opentelemetry.instrumentation.aiohttp_server import (
        AioHttpServerInstrumentor,
        create_aiohttp_middleware,
    )
    from opentelemetry.instrumentation.pymongo import PymongoInstrumentor
    from opentelemetry.instrumentation.redis import RedisInstrumentor
    from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
    from opentelemetry.sdk.trace import TracerProvider

    from cms import __version__

    resource = Resource.create({})
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    if SERVICE_VERSION not in resource.attributes:
        resource = resource.merge(Resource({SERVICE_VERSION: __version__}))
    provider = TracerProvider(resource=resource)  # the sampler: OTEL_TRACES_SAMPLER(_ARG), read by the SDK
    provider.sampler = _no_root_clients(provider.sampler)  # before any tracer exists: each keeps its sampler
    provider.add_span_processor(_scrubbing_processor())
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        trace.set_tracer_provider(provider)

    # The server instrumentor sets up its module (excluded URLs, meters) and swaps web.Application for a
    # subclass that adds its middleware to every app, the admin UI sub-app included (a second server span
    # per request) and the tests' receivers. create_app adds the middleware itself instead.
    application = web.Application
    with warnings.catch_warnings():  # aiohttp discourages the subclass the instrumentor makes (and we drop)
        warnings.simplefilter("ignore", DeprecationWarning)
        AioHttpServerInstrumentor().instrument(tracer_provider=provider)
    web.Application = application  # type: ignore[misc]
    PymongoInstrumentor().instrument(tracer_provider=provider, capture_statement=False)
    RedisInstrumentor().instrument(tracer_provider=provider)
    return _Tracing(provider=provider, tracer=provider.get_tracer("cms.jobs", __version__),
                    middleware=create_aiohttp_middleware(tracer_provider=provider))


def server_middlewares() -> list[Middleware]:
    """The aiohttp middleware that opens each request's server span, first in `create_app`'s list;
    empty when tracing is off."""
    return [_state.middleware] if _state is not None else []


def client_trace_configs() -> list[aiohttp.TraceConfig]:
    """The trace configs of an outgoing aiohttp.ClientSession (cms.infra's): one CLIENT span per request,
    its URL attribute the origin only, the trace context sent on in `traceparent`; empty when off."""
    if _state is None:
        return []
    from opentelemetry.instrumentation.aiohttp_client import create_trace_config

    return [create_trace_config(url_filter=_origin_only, tracer_provider=_state.provider)]


def carrier() -> dict[str, str]:
    """The W3C trace context (`traceparent`, and `tracestate` if any) of the current span, for a job to
    carry; empty when tracing is off or no span is current."""
    if _state is None:
        return {}
    from opentelemetry.propagate import inject

    headers: dict[str, str] = {}
    inject(headers)
    return headers


def detached_context() -> contextvars.Context:
    """A fresh `contextvars.Context` for background work started on a request's behalf (the group
    commit's insert task): it carries none of the request's state (transaction, request scope), only
    the current trace context when tracing is on, so the work's spans and the jobs it queues
    continue the request's trace."""
    fresh = contextvars.Context()
    if _state is not None:
        from opentelemetry import context as otel_context

        fresh.run(otel_context.attach, otel_context.get_current())
    return fresh


def job_span(name: str, trace_context: Mapping[str, str] | None, *, job_id: str | None = None,
             job_try: int | None = None, queue_name: str | None = None) -> contextlib.AbstractContextManager[Any]:
    """A context manager around one run of the job function `name` (its arq name): the current CONSUMER
    span named `name`, whose parent is the span `trace_context` (a `carrier()` sent with the job) names,
    or a new trace for a job queued without one. Attributes: the queue, the arq job id and try. An
    exception leaving the block is recorded and marks the span an error. A null context when off."""
    if _state is None:
        return _NULL_CONTEXT
    return _job_span(_state.tracer, name, trace_context, job_id=job_id, job_try=job_try, queue_name=queue_name)


@contextlib.contextmanager
def _job_span(tracer: Tracer, name: str, trace_context: Mapping[str, str] | None, *, job_id: str | None,
              job_try: int | None, queue_name: str | None) -> Iterator[Span]:
    from opentelemetry.propagate import extract
    from opentelemetry.trace import SpanKind

    attributes: dict[str, str | int] = {"messaging.system": "arq", "messaging.operation.type": "process",
                                        "messaging.operation.name": name}
    if queue_name:
        attributes["messaging.destination.name"] = queue_name
    if job_id:
        attributes["messaging.message.id"] = job_id
    if job_try is not None:
        attributes["arq.job_try"] = job_try
    parent = extract(dict(trace_context)) if trace_context else None
    with tracer.start_as_current_span(name, context=parent, kind=SpanKind.CONSUMER,
                                      attributes=attributes) as span:
        yield span


def flush(timeout_ms: int = 30_000) -> bool:
    """Export every ended span now (waits up to `timeout_ms` milliseconds); True when all went out
    or tracing is off."""
    return _state.provider.force_flush(timeout_ms) if _state is not None else True


def shutdown() -> None:
    """Export what is left and stop exporting (end of a process). The instrumentations stay: a process
    does not turn tracing on again."""
    if _state is not None:
        _state.provider.shutdown()


def scrub_url(value: str) -> str:
    """`value` (a URL, a path or a query string after `?`) with every query parameter's value replaced by
    REDACTED, names and order kept: `/_/verify-email?token=abc&x=` -> `/_/verify-email?token=REDACTED&x=REDACTED`.
    The fragment is dropped."""
    base, _, query = value.partition("#")[0].partition("?")
    if not query:
        return base
    return f"{base}?{_scrub_query(query)}"


def _scrub_query(query: str) -> str:
    return urlencode([(name, REDACTED) for name, _ in parse_qsl(query, keep_blank_values=True)], safe="")


def _origin_only(url: Any) -> str:
    """The aiohttp client instrumentation's url_filter: scheme, host and port of a yarl URL, no path,
    query or credentials (a webhook URL may hold a secret anywhere after the host)."""
    return str(url.origin())


def _scrubbing_processor() -> Any:
    """The span processor that scrubs URL and captured-header attributes when a span starts (the
    instrumentations set them then)."""
    from opentelemetry.sdk.trace import SpanProcessor

    class _ScrubbingProcessor(SpanProcessor):
        """Rewrites the attributes a query string or a credential could be in; exports nothing."""

        def on_start(self, span: Any, parent_context: Any = None) -> None:
            """Scrub `span`'s attributes in place (it is still writable here)."""
            attributes = span.attributes or {}
            for key in URL_ATTRIBUTES:
                value = attributes.get(key)
                if isinstance(value, str) and ("?" in value or "#" in value):
                    span.set_attribute(key, scrub_url(value))
            for key in QUERY_ATTRIBUTES:
                value = attributes.get(key)
                if isinstance(value, str) and value:
                    span.set_attribute(key, _scrub_query(value))
            for key in attributes:
                if key.startswith(("http.request.header.", "http.response.header.")) and any(
                        word in key.lower() for word in CREDENTIAL_HEADER_WORDS):
                    span.set_attribute(key, [REDACTED])

    return _ScrubbingProcessor()


def _no_root_clients(inner: Any) -> Any:
    """A sampler that drops CLIENT spans without a parent span and asks `inner` about every other one."""
    from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
    from opentelemetry.trace import SpanKind, get_current_span

    class _NoRootClients(Sampler):
        """Drops a client span that would start a trace; the rest as `inner` decides."""

        def should_sample(self, parent_context: Any, trace_id: int, name: str, kind: Any = None,
                          attributes: Any = None, links: Any = None, trace_state: Any = None) -> SamplingResult:
            """DROP for a root CLIENT span, else `inner`'s decision."""
            if kind == SpanKind.CLIENT and not get_current_span(parent_context).get_span_context().is_valid:
                return SamplingResult(Decision.DROP)
            decision: SamplingResult = inner.should_sample(parent_context, trace_id, name, kind, attributes, links,
                                                           trace_state)
            return decision

        def get_description(self) -> str:
            """`NoRootClients{<inner's description>}`."""
            return f"NoRootClients{{{inner.get_description()}}}"

    return _NoRootClients()
