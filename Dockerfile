# One image for every Retsu role: api (default), migrate, worker run ..., dev.
#
# Docker cannot run on the machines this project is developed on, so this file is
# kept correct by reading; see docs/operations.md.

# --- build: a wheel and a virtualenv with everything it needs ----------------------
FROM python:3.11-slim-bookworm AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
COPY migrations ./migrations
RUN python -m venv /opt/retsu \
 && /opt/retsu/bin/pip install --upgrade pip \
 && /opt/retsu/bin/pip wheel --no-deps --wheel-dir /wheels . \
 && /opt/retsu/bin/pip install /wheels/retsu_server-*.whl \
 && find /opt/retsu -name '__pycache__' -prune -exec rm -rf {} + \
 && /opt/retsu/bin/python -m compileall -q /opt/retsu/lib

# --- runtime: the interpreter and the virtualenv, no build tools, no pip ------------
FROM python:3.11-slim-bookworm AS runtime
ENV PATH=/opt/retsu/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    RETSU_HTTP__BIND_ADDRESS=0.0.0.0 \
    RETSU_WORKER__MANAGEMENT__BIND_ADDRESS=0.0.0.0
RUN rm -rf /usr/local/lib/python3.11/site-packages/pip* /usr/local/bin/pip* \
 && groupadd --system --gid 65532 retsu \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin retsu
COPY --from=build /opt/retsu /opt/retsu
USER 65532:65532
WORKDIR /tmp
EXPOSE 2424 24247
ENTRYPOINT ["retsu"]
CMD ["api"]
