# syntax=docker/dockerfile:1
# One image for every process: web (`cms serve`, the default) and worker (`cms worker`).
# It carries no embedded servers: MONGODB_URL, REDIS_URL and SECRET_KEY must be set (docker-compose.yml).
# tests/test_install.py runs the two pip steps below in a clean venv; keep them in step.

# --- build: the project's wheel and a wheel of every dependency ------------------------------
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md mkdocs.yml ./
COPY docs ./docs
COPY cms ./cms
COPY workers ./workers
# The docs site, built into the package: `cms serve` serves it at /docs/guide/. The build tools stay in this stage.
RUN pip install --no-cache-dir 'mkdocs>=1.6,<2' 'mkdocs-material>=9.5' 'neoteroi-mkdocs>=1.1' \
    && mkdocs build --strict -d cms/static/guide
# The `tracing` extra: OpenTelemetry, off unless OTEL_EXPORTER_OTLP_ENDPOINT is set (docs/operations/traces.md).
RUN pip wheel --no-cache-dir --wheel-dir /wheels '.[tracing]'

# --- run: install from those wheels only, run as a non-root user -----------------------------
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 CMS_DATA_DIR=/data
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links /wheels 'cms[tracing]' \
    && useradd --system --uid 10001 --create-home cms \
    && mkdir -p /data/backups && chown -R cms /data
USER cms
WORKDIR /home/cms
VOLUME /data
EXPOSE 8090
# The worker serves no API (only its metrics on METRICS_PORT, docs/operations/metrics.md); docker-compose.yml
# gives it its own check (arq's health-check key).
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8090/health', timeout=4).status != 200)"]
# SIGTERM: in-flight requests get SHUTDOWN_TIMEOUT_S (default 10) seconds; give the container more (stop_grace_period).
STOPSIGNAL SIGTERM
CMD ["cms", "serve", "--host", "0.0.0.0", "--port", "8090"]
