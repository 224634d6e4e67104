# topodra node agent image. Build and push (docs/deploy.md):
#   docker build -t REGISTRY/topodra:0.1.0 . && docker push REGISTRY/topodra:0.1.0
# The base image is pinned to one Python release and one Debian release, so a rebuild gets the
# same interpreter; pass --build-arg BASE=python:3.11.14-slim-bookworm@sha256:... to pin the
# exact bytes as well (`docker buildx imagetools inspect` prints the digest).
ARG BASE=python:3.11.14-slim-bookworm

FROM ${BASE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
# The core only: the agent needs no simulator, plotting or CEL packages (pyproject.toml extras).
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM ${BASE}
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
# Root, with every capability dropped by the DaemonSet: the files the agent must open are owned
# by root on the host with owner-only modes (the NRI socket, the kubelet's plugin and registration
# sockets, the container cgroups' cpuset files it writes under `nri.delivery: replies`), and uid 0
# reaches them through the owner bits, without CAP_DAC_OVERRIDE or a privileged container.
USER 0
ENTRYPOINT ["topodra"]
CMD ["agent", "--config", "/etc/topodra/config.yaml"]
