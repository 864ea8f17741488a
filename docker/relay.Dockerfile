# relaydesk relay that runs virtual desktops inside its container: Xvfb, openbox, x11vnc,
# websockify, a private D-Bus with AT-SPI, PulseAudio, fonts and a terminal.
#
#   scripts/docker-build relay             (relaydesk/relay:dev)
#   scripts/docker-build relay-browser     (relaydesk/relay:dev-browser: WITH_BROWSER=1, which
#                                           adds Firefox ESR; run it with --shm-size 512m)
#
# It dials out to the server and publishes no ports. Token: RELAYDESK_RELAY_TOKEN, or a file
# named by RELAYDESK_RELAY_TOKEN_FILE (e.g. a Docker secret); server: RELAYDESK_SERVER_URL.
# The relay stops its desktops when the container stops (--stop-desktops-on-exit).
ARG BASE_IMAGE=debian:bookworm-slim

# ---------------------------------------------------------------------------- python
# The same layers as docker/server.Dockerfile up to the extras, so the two builds share them.
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
COPY pyproject.toml constraints.txt README.md /opt/relaydesk/
WORKDIR /opt/relaydesk
RUN python3 -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' > /tmp/requirements.txt \
    && /opt/venv/bin/pip install -q -c constraints.txt -r /tmp/requirements.txt
ARG EXTRAS=
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
# Then what only building needed goes: pip and setuptools, numpy's tests, the debugging
# symbols of the wheels' extension modules (the vendored libraries in *.libs/ are left alone:
# they are patched by auditwheel, and strip breaks them).
RUN /opt/venv/bin/pip install -q --no-deps -c constraints.txt -e . \
    && /opt/venv/bin/python -m compileall -q /opt/relaydesk \
    && /opt/venv/bin/pip uninstall -q -y pip setuptools \
    && rm -rf /opt/relaydesk/build /opt/venv/lib/python3.11/site-packages/numpy/*/tests \
        /opt/venv/lib/python3.11/site-packages/numpy/tests \
    && find /opt/venv -name '*.so' -type f -not -path '*.libs/*' \
        -exec strip --strip-unneeded {} +

# ---------------------------------------------------------------------------- noVNC tree
# Each desktop's websockify serves a noVNC tree with vnc.html (what the watchdog probes):
# Debian's, taken out of its package without the package's Node.js and Python dependencies.
FROM ${BASE_IMAGE} AS novnc
RUN apt-get update -qq \
    && cd /tmp && apt-get download -qq novnc \
    && dpkg-deb -x novnc_*.deb /tmp/novnc \
    && test -f /tmp/novnc/usr/share/novnc/vnc.html

# ---------------------------------------------------------------------------- runtime
FROM ${BASE_IMAGE}
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends \
        python3 tini procps \
        xvfb x11vnc openbox xterm autocutsel x11-utils \
        dbus-daemon dbus-session-bus-common at-spi2-core libatk-adaptor python3-gi \
        pulseaudio pulseaudio-utils libopus0 \
        fonts-dejavu-core >/dev/null \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --gid 10001 relaydesk \
    && useradd --uid 10001 --gid relaydesk --no-create-home --home-dir /var/lib/relaydesk \
        --shell /bin/bash relaydesk \
    && install -d -o relaydesk -g relaydesk -m 0700 /var/lib/relaydesk \
    && install -d -m 1777 /tmp/.X11-unix
# The browser is a layer of its own after the common packages. WITH_BROWSER is declared only
# here, so no layer above depends on it: both builds share them, and the image with the
# browser costs only its packages and the copies below.
ARG WITH_BROWSER=0
RUN if [ "$WITH_BROWSER" = 1 ]; then \
        apt-get update -qq \
        && apt-get install -y -qq --no-install-recommends firefox-esr >/dev/null \
        && rm -rf /var/lib/apt/lists/*; \
    fi
COPY --from=novnc /tmp/novnc/usr/share/novnc /usr/share/novnc
COPY --from=python-build /opt/venv /opt/venv
COPY --from=python-build /opt/relaydesk /opt/relaydesk
# openbox, woken while it settles: a start-up window would otherwise wait ~20 s (the script).
COPY docker/openbox-awake /usr/local/bin/relaydesk-openbox
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/var/lib/relaydesk \
    RELAYDESK_DATA_DIR=/var/lib/relaydesk \
    RELAYDESK_NOVNC_DIR=/usr/share/novnc \
    RELAYDESK_DESKTOP_PROFILE=minimal \
    RELAYDESK_WINDOW_MANAGER="/usr/local/bin/relaydesk-openbox --sm-disable"
VOLUME ["/var/lib/relaydesk"]
WORKDIR /var/lib/relaydesk
USER relaydesk:relaydesk
# tini is PID 1: it forwards SIGTERM to the relay, which stops its desktops and exits, and it
# reaps every process a desktop leaves behind, so no zombie outlives its desktop.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/bin/tini", "--", "relaydesk", "relay", "--stop-desktops-on-exit"]
