# PostgreSQL 15 from Debian's packages: a stand-in for the official `postgres:15-bookworm` image
# where no container registry is reachable (docs/docker.md, "Without a registry").
#
#   scripts/docker-build postgres               (tags relaydesk/postgres:dev)
#
# The interface Compose uses from the official image: POSTGRES_PASSWORD (required on the first
# start), POSTGRES_USER (default postgres), POSTGRES_DB (default: the user's name),
# POSTGRES_INITDB_ARGS; the cluster in /var/lib/postgresql/data (PGDATA), port 5432 on every
# interface, passwords (scram-sha-256) over the network, trust on the container's own socket;
# `pg_isready`, `psql` and `pg_dump` on PATH. It runs as postgres (uid 999, as there), never
# root: a bind-mounted data directory must belong to uid 999. Scripts in
# /docker-entrypoint-initdb.d are not run.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
ENV DEBIAN_FRONTEND=noninteractive
# The user first, with the official image's ids, so the packages adopt it; no cluster from the
# packages (the entrypoint makes one in PGDATA); every interface in new clusters' settings.
RUN groupadd --system --gid 999 postgres \
    && useradd --system --uid 999 --gid postgres --home-dir /var/lib/postgresql \
        --shell /bin/bash postgres \
    && apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends postgresql-common >/dev/null \
    && sed -ri 's/#(create_main_cluster) .*$/\1 = false/' \
        /etc/postgresql-common/createcluster.conf \
    && apt-get install -y -qq --no-install-recommends postgresql-15 >/dev/null \
    && rm -rf /var/lib/apt/lists/* \
    && sed -ri "s!^#?(listen_addresses)\s*=\s*\S+.*!\1 = '*'!" \
        /usr/share/postgresql/15/postgresql.conf.sample \
    && grep -q "^listen_addresses = '\*'" /usr/share/postgresql/15/postgresql.conf.sample \
    && install -d -o postgres -g postgres -m 3777 /var/run/postgresql \
    && install -d -o postgres -g postgres -m 0700 /var/lib/postgresql/data
COPY docker/postgres-entrypoint /usr/local/bin/docker-entrypoint
ENV PATH=/usr/lib/postgresql/15/bin:$PATH \
    PGDATA=/var/lib/postgresql/data
VOLUME ["/var/lib/postgresql/data"]
USER postgres:postgres
EXPOSE 5432
# SIGINT: PostgreSQL's fast shutdown (open transactions roll back, no recovery at next start).
STOPSIGNAL SIGINT
ENTRYPOINT ["docker-entrypoint"]
CMD ["postgres"]
