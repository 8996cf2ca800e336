# splitpoint container image (docs/deployment.md).
#
#   docker build -t splitpoint:0.1.0 .
#   docker run --rm -p 6432:6432 -p 9930:9930 \
#     -v "$PWD/splitpoint.yaml:/etc/splitpoint/splitpoint.yaml:ro" splitpoint:0.1.0
#
# The build stage runs the same scripts as tests/run (deploy/install-deps, then
# deploy/build), so the sources and optimisation the tests built are what ships (without
# their debug info: see the build stage). The runtime stage installs only
# the shared libraries `ldd splitpoint` names; tests/integration/test_deploy_files.sh
# fails when the binary needs a library whose package is missing from the list below.

# ---------------------------------------------------------------- build
FROM debian:12 AS build
WORKDIR /src
# Packages first, so that editing a source file does not re-install them.
COPY deploy/install-deps deploy/install-deps
RUN ./deploy/install-deps --for build --clean
COPY . .
# Compile jobs (deploy/image passes --build-arg JOBS=2); empty: nproc. The tests'
# optimisation (-O2) without debug info, which the image would strip anyway: -g is a
# quarter of the compile time (docs/running.md, "Build time").
ARG JOBS=
RUN BUILD_DIR=/build BUILD_TYPE=Release BUILD_TARGET=splitpoint ./deploy/build -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" \
 && install -D -m 0755 /build/splitpoint /out/splitpoint \
 && strip --strip-debug /out/splitpoint \
 && /out/splitpoint --version

# ---------------------------------------------------------------- runtime
FROM debian:12-slim
# Runtime libraries of the binary (package of each `ldd` line, via `dpkg -S`), plus curl
# for the HEALTHCHECK. Keep this one apt-get line: the deploy test reads it. `apt-get
# clean` drops the downloaded .debs and apt's package caches (/var/cache/apt/*.bin) on a
# base without Debian's docker-clean apt hook (deploy/image's debootstrapped one: 89 MB).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      curl libc6 libcom-err2 libffi8 libfmt9 libgcc-s1 libgmp10 libgnutls30 libgssapi-krb5-2 libhogweed6 libicu72 \
      libidn2-0 libk5crypto3 libkeyutils1 libkrb5-3 libkrb5support0 libldap-2.5-0 libnettle8 libp11-kit0 libpq5 \
      libpqxx-6.4 libprometheus-cpp-core1.0 libsasl2-2 libspdlog1.10 libssl3 libstdc++6 libtasn1-6 libunistring2 \
      libyaml-cpp0.7 \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/*
# A fixed numeric uid, so Kubernetes' runAsNonRoot can verify it without runAsUser.
RUN groupadd --system --gid 10001 splitpoint \
 && useradd --system --uid 10001 --gid splitpoint --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin splitpoint \
 && install -d -m 0755 /etc/splitpoint
COPY --from=build /out/splitpoint /usr/local/bin/splitpoint
# Fails the image build if a library is missing from the list above.
RUN ! ldd /usr/local/bin/splitpoint | grep -F 'not found' && /usr/local/bin/splitpoint --version

# Mount the configuration here (a file, or a ConfigMap/Secret volume at /etc/splitpoint).
ENV SPLITPOINT_CONFIG=/etc/splitpoint/splitpoint.yaml
USER 10001:10001
# 6432: PostgreSQL clients (`listen`); 9930: /metrics, /healthz, /readyz (`metrics_listen`).
# The config must listen on 0.0.0.0 (not the 127.0.0.1 default) to be reachable from
# outside the container; the HEALTHCHECK needs metrics_listen on 0.0.0.0 or 127.0.0.1.
EXPOSE 6432 9930
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD curl -fsS -o /dev/null http://127.0.0.1:9930/healthz || exit 1
# SIGTERM (docker stop, Kubernetes) drains for up to timeouts.shutdown (default 30s):
# give the container a longer stop timeout (docker stop -t 40, terminationGracePeriodSeconds).
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/splitpoint"]
