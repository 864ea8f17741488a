# One relaydesk desktop per container (`kind: docker`): Xvfb, openbox, x11vnc, a session D-Bus
# with the accessibility bus, PulseAudio, fonts and a terminal. No Python, no listening port.
#
#   scripts/docker-build desktop               (tags relaydesk/desktop:dev)
#
# The relay runs it (relay/desktops/docker/launch.py): as a non-root user, with no network
# unless the relay's settings give one, CPU and memory limits, a read-only root file system and
# one bind mount, the desktop's directory on the relay's host, through whose sockets the relay
# reaches the display, the VNC server, the session bus and the sound server
# (docker/desktop-session, docs/docker.md "Desktops in containers").
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${BASE_IMAGE}
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends \
        tini xvfb x11vnc openbox xterm autocutsel \
        dbus-daemon dbus-session-bus-common at-spi2-core libatk-adaptor \
        pulseaudio pulseaudio-utils fonts-dejavu-core >/dev/null \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --gid 10001 desktop \
    && useradd --uid 10001 --gid desktop --no-create-home --home-dir /tmp/home \
        --shell /bin/bash desktop \
    && mv /etc/passwd /etc/passwd.image && mv /etc/group /etc/group.image \
    && ln -s /tmp/passwd /etc/passwd && ln -s /tmp/group /etc/group
COPY docker/desktop-session /usr/local/bin/relaydesk-desktop-session
# The relay names the user it runs the container as (--user): the uid that owns the desktop's
# directory on its host. This one is for running the image by hand. The user lists are written
# by the session into the (read-only root's) /tmp, so they name whichever uid it runs as.
USER desktop:desktop
# tini is PID 1: it reaps what the session's programs leave; when the session script exits
# (Xvfb or x11vnc ended, or the relay's heartbeat is too old) the container ends with it.
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/relaydesk-desktop-session"]
