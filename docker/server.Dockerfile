# relaydesk server: HTTP API, web UI with the pinned noVNC, relay endpoint.
#
#   scripts/docker-build                        (tags relaydesk/server:dev)
#   docker build -f docker/server.Dockerfile -t relaydesk/server:dev .
#
# Configuration only through RELAYDESK_* variables (docs/configuration.md); data (SQLite
# database, signing key) in the volume /var/lib/relaydesk. Migrates the database on start
# unless RELAYDESK_MIGRATE_ON_START=0. Admin commands: `docker exec CONTAINER relaydesk admin …`.
ARG BASE_IMAGE=debian:bookworm-slim

# ---------------------------------------------------------------------------- web assets
# noVNC exactly as web/package-lock.json pins it, installed by npm at build time.
FROM ${BASE_IMAGE} AS web-build
ARG BUILD_CA_CERTS=
ENV DEBIAN_FRONTEND=noninteractive NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt
RUN apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends ca-certificates npm >/dev/null \
    && rm -rf /var/lib/apt/lists/* \
    && if [ -n "$BUILD_CA_CERTS" ]; then \
        printf '%s\n' "$BUILD_CA_CERTS" > /usr/local/share/ca-certificates/build-host.crt \
        && update-ca-certificates >/dev/null; fi
COPY web/package.json web/package-lock.json /build/web/
RUN cd /build/web \
    && npm ci --omit=dev --no-audit --no-fund --loglevel=error \
    && rm -rf /build/web/node_modules/.package-lock.json /root/.npm

# ---------------------------------------------------------------------------- python
# The same layers as docker/relay.Dockerfile up to the extras, so the two builds share them.
FROM ${BASE_IMAGE} AS python-build
# BUILD_CA_CERTS: PEM certificates the build host trusts besides Debian's (a TLS-inspecting
# proxy's, for example); scripts/docker-build passes the host's local ones. Build stages only.
ARG BUILD_CA_CERTS=
ENV DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 \
    PIP_NO_INPUT=1 PIP_ROOT_USER_ACTION=ignore PIP_USE_PEP517=1 \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt
RUN apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends ca-certificates python3 python3-venv \
        binutils >/dev/null \
    && rm -rf /var/lib/apt/lists/* \
    && if [ -n "$BUILD_CA_CERTS" ]; then \
        printf '%s\n' "$BUILD_CA_CERTS" > /usr/local/share/ca-certificates/build-host.crt \
        && update-ca-certificates >/dev/null; fi \
    && python3 -m venv /opt/venv
# Dependencies first (pinned by constraints.txt, like every other install of relaydesk), so a
# change of relaydesk's own code rebuilds only the layers after them.
COPY pyproject.toml constraints.txt README.md /opt/relaydesk/
WORKDIR /opt/relaydesk
RUN python3 -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' > /tmp/requirements.txt \
    && /opt/venv/bin/pip install -q -c constraints.txt -r /tmp/requirements.txt
ARG EXTRAS=postgres,redis
RUN python3 -c 'import sys, tomllib; extras = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]; print("\n".join(d for e in sys.argv[1].split(",") if e for d in extras[e]))' "$EXTRAS" > /tmp/extras.txt \
    && /opt/venv/bin/pip install -q -c constraints.txt -r /tmp/extras.txt
COPY wire /opt/relaydesk/wire
COPY server /opt/relaydesk/server
COPY relay /opt/relaydesk/relay
COPY host_helper /opt/relaydesk/host_helper
COPY relaydesk /opt/relaydesk/relaydesk
COPY migrations /opt/relaydesk/migrations
# The client's package, which the server distribution carries (`relaydesk desktops`, `mcp`).
COPY clients/python/relaydesk_client /opt/relaydesk/clients/python/relaydesk_client
# Editable, so the code stays at /opt/relaydesk beside web/ where the server looks for it.
# Then what only building or other databases need goes: pip and setuptools, numpy's tests,
# C headers and f2py, type stubs, SQLAlchemy's MySQL, Oracle and SQL Server dialects, the debugging
# symbols of the wheels' extension modules (the vendored libraries in *.libs/ are left alone:
# they are patched by auditwheel, and strip breaks them).
RUN /opt/venv/bin/pip install -q --no-deps -c constraints.txt -e . \
    && /opt/venv/bin/python -m compileall -q /opt/relaydesk \
    && /opt/venv/bin/pip uninstall -q -y pip setuptools \
    && cd /opt/venv/lib/python3.11/site-packages \
    && rm -rf /opt/relaydesk/build numpy/*/tests numpy/tests numpy/f2py numpy/_core/include \
        numpy/core/include numpy/_pyinstaller sqlalchemy/dialects/mssql \
        sqlalchemy/dialects/oracle sqlalchemy/dialects/mysql numpy/random/_examples \
        alembic/templates \
    && find . -name '*.pyi' -type f -delete \
    && find /opt/venv -name '*.so' -type f -not -path '*.libs/*' \
        -exec strip --strip-unneeded {} +

# ---------------------------------------------------------------------------- bytecode
# What the server never loads goes first: Pillow's AVIF codec (libavif, 5 MB; the server
# decodes no images), numpy's test-only extension modules (_simd and the *_tests),
# numpy.distutils and numpy.random (imported lazily, never by the server), SQLAlchemy's test
# support, the libraries' own tests and Cython sources. Then bytecode only for what the server,
# the admin CLI and the health check import (found by importing them and migrating a scratch
# database); the rest of the libraries stays source and compiles on the rare first use. Keeps
# ~25 MB of unused bytecode out of the image. /tmp/stdlib-used lists the standard library's
# modules they import: the runtime stage keeps bytecode for those only (Debian compiles all
# of it, 12 MB). `relaydesk db upgrade` sets a umask of 077, so what it compiled is made
# readable for the server's user (uid 10001), who otherwise compiled SQLAlchemy, aiosqlite and
# more from source at every start.
FROM python-build AS server-python
# The viewer's noVNC, as pinned: the server checks it at start (create_app below does too) and
# refuses to run without it.
COPY web/package.json web/package-lock.json /opt/relaydesk/web/
COPY --from=web-build /build/web/node_modules /opt/relaydesk/web/node_modules
RUN cd /opt/venv/lib/python3.11/site-packages \
    && rm -rf PIL/_avif.*.so pillow.libs/libavif-*.so* numpy/_core/_simd.*.so \
        numpy/_core/_multiarray_tests.*.so numpy/_core/_umath_tests.*.so \
        numpy/_core/_rational_tests.*.so numpy/_core/_struct_ufunc_tests.*.so \
        numpy/_core/_operand_flag_tests.*.so numpy/distutils numpy/random sqlalchemy/testing \
    && find . -depth -type d -name tests -path './*/tests' -exec rm -rf {} + \
    && find . -type f \( -name '*.pyx' -o -name '*.pxd' \) -delete \
    && find /opt/venv/lib -name __pycache__ -type d -prune -exec rm -rf {} + \
    && RELAYDESK_DATA_DIR=/tmp/warm /opt/venv/bin/relaydesk db upgrade 2>/dev/null \
    && RELAYDESK_DATA_DIR=/tmp/warm /opt/venv/bin/python -c 'import relaydesk.admin_cli, \
        relaydesk.cli, relaydesk.run, server.app, uvloop, \
        uvicorn.protocols.http.httptools_impl, uvicorn.protocols.http.h11_impl, \
        uvicorn.protocols.websockets.websockets_impl, uvicorn.lifespan.on, \
        uvicorn.loops.uvloop, sqlalchemy.dialects.postgresql.asyncpg, \
        sqlalchemy.dialects.sqlite.aiosqlite, redis.asyncio, asyncpg, urllib.request, \
        importlib.metadata, encodings.idna, numpy, server.admin, server.db.store; \
        from server.config import Settings; \
        server.app.create_app(Settings.from_env()); import sys; \
        open("/tmp/stdlib-used", "w").write("".join(f"{m.__file__}\n" for m in \
        list(sys.modules.values()) if (getattr(m, "__file__", None) or "").startswith( \
        "/usr/lib/python3.11/") and m.__file__.endswith(".py")))' \
    && test -s /tmp/stdlib-used \
    && rm -rf /tmp/warm \
    && chmod -R a+rX /opt/venv /opt/relaydesk

# ---------------------------------------------------------------------------- runtime
FROM ${BASE_IMAGE}
ENV DEBIAN_FRONTEND=noninteractive
# Debian compiles the whole standard library on install: that bytecode goes, with pydoc's
# topics, the regression-test support and the C API test modules; what the server imports is
# compiled again below (/tmp/stdlib-used).
RUN apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends python3 tini >/dev/null \
    && rm -rf /var/lib/apt/lists/* /usr/lib/python3.11/pydoc_data /usr/lib/python3.11/test \
    && cd /usr/lib/python3.11/lib-dynload \
    && rm -f _test*.so _ctypes_test.*.so _xxtestfuzz.*.so xxlimited*.so xxsubtype.*.so \
    && cd / \
    && find /usr/lib/python3.11 -name __pycache__ -type d -prune -exec rm -rf {} + \
    && groupadd --gid 10001 relaydesk \
    && useradd --uid 10001 --gid relaydesk --no-create-home --home-dir /var/lib/relaydesk \
        --shell /usr/sbin/nologin relaydesk \
    && install -d -o relaydesk -g relaydesk -m 0700 /var/lib/relaydesk
COPY --from=server-python /opt/venv /opt/venv
COPY --from=server-python /opt/relaydesk /opt/relaydesk
COPY --from=server-python /tmp/stdlib-used /tmp/stdlib-used
RUN python3 -B -m compileall -q -i /tmp/stdlib-used && rm /tmp/stdlib-used
COPY web/app /opt/relaydesk/web/app
COPY web/viewer /opt/relaydesk/web/viewer
COPY docker/healthcheck.py /opt/relaydesk/docker/healthcheck.py
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    RELAYDESK_DATA_DIR=/var/lib/relaydesk \
    RELAYDESK_HOST=0.0.0.0 \
    RELAYDESK_PORT=8400
VOLUME ["/var/lib/relaydesk"]
WORKDIR /var/lib/relaydesk
USER relaydesk:relaydesk
EXPOSE 8400
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python3", "/opt/relaydesk/docker/healthcheck.py"]
# tini is PID 1: it forwards SIGTERM to the server (which stops accepting, closes relay and
# viewer connections and exits) and reaps whatever the server leaves. uvicorn ends a clean
# shutdown by re-raising the signal it got; `-e 143` makes that exit status 0.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/bin/tini", "-e", "143", "--"]
CMD ["relaydesk", "server"]
