# The cronlease operator image: Debian bookworm's Python 3.11, the operator and its declared
# dependencies; no shell, no package manager, nonroot (65532), fine with a read-only root.
#   docker build -t cronlease:0.2.0 .     (from the public images named below)
#   make image                            (buildah, with local stand-ins for them: hack/image/)
ARG BUILD_IMAGE=python:3.11-slim-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/python3-debian12:nonroot

# The project and its declared runtime dependencies as wheels. `make image` replaces this stage
# with wheels it built outside (--build-context wheels=DIR): its builds have no network.
FROM ${BUILD_IMAGE} AS wheels
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY operator ./operator
RUN python3 -m pip wheel --no-cache-dir --wheel-dir /wheels .

# Installed from those wheels alone, so an import the project does not declare fails in the image.
# No console script: its interpreter line would name this stage's Python, not the runtime's.
FROM ${BUILD_IMAGE} AS install
COPY --from=wheels /wheels /wheels
RUN python3 -m pip install --no-cache-dir --no-index --find-links /wheels --root-user-action=ignore \
      --target /app cronlease \
 && rm -rf /app/bin

FROM ${RUNTIME_IMAGE}
ARG VERSION=0.2.0
LABEL org.opencontainers.image.title=cronlease \
      org.opencontainers.image.description="Kubernetes operator: Jobs on a schedule, exactly once, fenced" \
      org.opencontainers.image.version=${VERSION} \
      org.opencontainers.image.licenses=Apache-2.0
ENV PYTHONPATH=/app PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY --from=install /app /app
# The chart mounts an emptyDir at /tmp and keeps the root filesystem read-only.
USER 65532:65532
EXPOSE 8080 8081
# Python 3.11 by name: the cp311 wheels installed above need it, whatever python3 points to.
ENTRYPOINT ["/usr/bin/python3.11", "-m", "cronlease"]
