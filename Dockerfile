# One image, run as web (`cms serve`) or worker (`cms worker`); docker-compose.yml adds MongoDB and Redis.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 CMS_DATA_DIR=/data
WORKDIR /app
COPY pyproject.toml README.md ./
COPY cms ./cms
COPY workers ./workers
RUN pip install --no-cache-dir . \
    && useradd --system --create-home cms \
    && mkdir -p /data && chown cms /data
USER cms
VOLUME /data
EXPOSE 8090
HEALTHCHECK --interval=30s --timeout=5s CMD python -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8090/health', timeout=4).status != 200)"
CMD ["cms", "serve", "--host", "0.0.0.0", "--port", "8090"]
