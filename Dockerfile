# One image, both programs: the broker StatefulSet runs `jsbroker`, the operator Deployment `jsoperator run`.
#
#   docker build -t jetstream-kopf .                      # the usual way: dependencies from PyPI
#   docker build --build-arg BASE_IMAGE=... --build-arg OFFLINE=1 -t jetstream-kopf .
#                                                         # no network: wheels from docker/wheelhouse/
# BASE_IMAGE must provide python3 (>= 3.11) with its venv module at the same path in both stages.
ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS build
ARG OFFLINE=0
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY docker/wheelhouse/ /wheelhouse/
COPY pyproject.toml setup.py README.md ./
COPY broker/ broker/
COPY operator/ operator/
COPY spark/ spark/
# OFFLINE=1 installs the project's wheel and its dependencies from the wheelhouse alone (the tests build
# it on the host, its hot path compiled there); otherwise the sources are built, which compiles jsbroker's
# hot path with mypyc (setup.py; a C compiler in this stage only, the final image has none), and the
# dependencies come from PyPI as usual. $what is split on purpose (an option and a requirement, or a path).
# hadolint ignore=SC2086,DL3008
RUN if [ "$OFFLINE" != "1" ] && ! command -v cc >/dev/null; then \
        apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev && rm -rf /var/lib/apt/lists/*; \
    fi \
    && python3 -m venv /opt/jetstream-kopf \
    && if [ "$OFFLINE" = "1" ]; then what="--no-index jetstream-kopf"; else what="."; fi \
    && /opt/jetstream-kopf/bin/pip install --find-links /wheelhouse $what \
    && /opt/jetstream-kopf/bin/pip uninstall -y pip \
    && /opt/jetstream-kopf/bin/python -m compileall -q /opt/jetstream-kopf

FROM ${BASE_IMAGE}
ARG VERSION=0.1.0
ARG SOURCE=""
LABEL org.opencontainers.image.title="jetstream-kopf" \
      org.opencontainers.image.description="jsbroker (a pure-Python NATS + JetStream server) and jsoperator (a kopf operator for Stream and Consumer resources)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/jetstream-kopf /opt/jetstream-kopf
# The store lives on the data volume; nothing else is written, so the root filesystem can be read-only.
RUN mkdir -p /data && chown 10001:10001 /data
ENV PATH=/opt/jetstream-kopf/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 10001:10001
VOLUME ["/data"]
EXPOSE 4222 8222
CMD ["jsbroker", "--store_dir", "/data", "--http_port", "8222"]
