# mirrorgate container image.
#
#   docker build -t mirrorgate .
#   docker run --rm -p 127.0.0.1:9092-9093:9092-9093 -p 127.0.0.1:9180:9180 \
#     -e MIRRORGATE_ADMIN_TOKEN=... -v $PWD/my.yaml:/etc/mirrorgate/mirrorgate.yaml:ro mirrorgate
#
# docker-compose.yml builds it for the whole stack (run under podman by integration/compose-test,
# part of the test command). Keep the `cargo build` line a plain one-line RUN (checked statically).

# ---- build ------------------------------------------------------------------------------
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY vendor ./vendor
COPY src ./src
COPY benches ./benches
COPY integration/tests ./integration/tests
RUN cargo build --release --locked --bin mirrorgate

# ---- runtime ----------------------------------------------------------------------------
FROM debian:bookworm-slim AS runtime
RUN groupadd --system --gid 10001 mirrorgate \
 && useradd --system --uid 10001 --gid mirrorgate --home-dir /var/lib/mirrorgate \
      --no-create-home --shell /usr/sbin/nologin mirrorgate \
 && mkdir -p /etc/mirrorgate /var/lib/mirrorgate \
 && chown mirrorgate:mirrorgate /var/lib/mirrorgate
COPY --from=build /src/target/release/mirrorgate /usr/local/bin/mirrorgate
# The compose configuration is the image's default: listeners on every interface handing out
# 127.0.0.1, admin on 0.0.0.0:9180 with the token from MIRRORGATE_ADMIN_TOKEN, state in
# /var/lib/mirrorgate. Mount your own file over it.
COPY config/mirrorgate.compose.yaml /etc/mirrorgate/mirrorgate.yaml
USER mirrorgate:mirrorgate
WORKDIR /var/lib/mirrorgate
VOLUME ["/var/lib/mirrorgate"]
# client listener, mirror listener, admin API (/metrics, /healthz, /readyz)
EXPOSE 9092-9093 9192-9193 9180
# `mirrorgate status` asks GET /readyz and exits 0 only when the gateway is ready (no curl needed).
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
  CMD ["mirrorgate", "status", "--admin", "127.0.0.1:9180"]
ENTRYPOINT ["mirrorgate"]
CMD ["run", "--config", "/etc/mirrorgate/mirrorgate.yaml"]
