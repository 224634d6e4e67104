# topodra node agent image: docker build -t topodra:dev .
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
# The core only: the agent needs no simulator, plotting or CEL packages (pyproject.toml extras).
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER 0
ENTRYPOINT ["topodra"]
CMD ["agent", "--config", "/etc/topodra/config.yaml"]
