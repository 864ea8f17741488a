# Redis 7 from Debian's packages: a stand-in for the official `redis:7-bookworm` image where no
# container registry is reachable (docs/docker.md, "Without a registry").
#
#   scripts/docker-build redis                  (tags relaydesk/redis:dev)
#
# As there: `redis-server` on port 6379 of every interface, without protected mode (only the
# networks the container is attached to reach it), working directory and volume /data,
# `redis-cli` on PATH, user redis (uid 999), never root.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
ENV DEBIAN_FRONTEND=noninteractive
RUN groupadd --system --gid 999 redis \
    && useradd --system --uid 999 --gid redis --home-dir /data --no-create-home \
        --shell /usr/sbin/nologin redis \
    && apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends redis-server >/dev/null \
    && rm -rf /var/lib/apt/lists/* \
    && install -d -o redis -g redis -m 0750 /data
COPY docker/redis-entrypoint /usr/local/bin/docker-entrypoint
VOLUME ["/data"]
WORKDIR /data
USER redis:redis
EXPOSE 6379
ENTRYPOINT ["docker-entrypoint"]
CMD ["redis-server"]
