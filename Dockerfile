# faultstream worker / connector image: `docker build -t faultstream .`
# Used by docker-compose.yml (worker, topics, connectors). Runs as an unprivileged user; state
# (cursors, Faust tables) under /data.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY pyproject.toml README.md ./
COPY schemas ./schemas
COPY connectors ./connectors
COPY correlators ./correlators
COPY streams ./streams
COPY sinks ./sinks
COPY transport ./transport
RUN pip install . \
    && useradd --create-home --uid 10001 faultstream \
    && mkdir -p /data && chown faultstream /data
COPY examples ./examples

USER faultstream
WORKDIR /data
ENTRYPOINT ["faultstream"]
CMD ["--help"]
