# cronlease operator image: a slim Python runtime, no build tools, running as a non-root user.
# (This machine has no Docker engine; the chart's e2e runs the same package as a process.)
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN pip install --no-cache-dir --root-user-action=ignore --prefix=/install .

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY --from=build /install /usr/local
# The chart mounts an emptyDir at /tmp and keeps the root filesystem read-only.
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["cronlease"]
