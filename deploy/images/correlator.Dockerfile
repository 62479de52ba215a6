# faultline correlator image (multi-stage). Sites with a registry build it:
#   podman build -f deploy/images/correlator.Dockerfile -t faultline/correlator .
# scripts/build-images.sh builds the same runtime stage from Debian packages.
# The base image, pinned by digest: Debian's bookworm-20260918-slim (its
# multi-arch index). Both stages use it, so one digest covers the build.
# Refresh where a registry is reachable:
#   skopeo inspect --format '{{.Digest}}' docker://docker.io/library/debian:bookworm-YYYYMMDD-slim
# and update BASE here and in the other Dockerfile (tests/tests/it/images.rs checks both agree).
ARG BASE=docker.io/library/debian:bookworm-20260918-slim@sha256:3783cc01769c7b2b1b83a5c5ad96c815348e28ed7da68e2e3687004faa906251
FROM ${BASE} AS build
RUN apt-get update && apt-get install -y --no-install-recommends \
      ca-certificates curl sudo git build-essential && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN bash scripts/setup.sh && . "$HOME/.cargo/env" && \
    cargo build --release -p correlator --bin faultline-correlator

FROM ${BASE}
ARG VERSION=0.1.0
ARG REVISION=unknown
# OCI image labels; scripts/build-images.sh sets the same ones (from these lines).
LABEL org.opencontainers.image.title="faultline-correlator"
LABEL org.opencontainers.image.description="faultline correlator: ingests collectors' windows, compares peers and history, streams root-cause incidents"
LABEL org.opencontainers.image.version="${VERSION}"
LABEL org.opencontainers.image.revision="${REVISION}"
LABEL org.opencontainers.image.licenses="Apache-2.0"
LABEL org.opencontainers.image.vendor="faultline"
LABEL org.opencontainers.image.base.name="docker.io/library/debian:bookworm-20260918-slim"
LABEL org.opencontainers.image.base.digest="sha256:3783cc01769c7b2b1b83a5c5ad96c815348e28ed7da68e2e3687004faa906251"
RUN apt-get update && apt-get install -y --no-install-recommends \
      libsqlite3-0 ca-certificates && rm -rf /var/lib/apt/lists/* && \
    groupadd -g 65532 faultline && useradd -u 65532 -g 65532 -M -d /var/lib/faultline faultline && \
    install -d -o 65532 -g 65532 /var/lib/faultline
COPY --from=build /src/target/release/faultline-correlator /usr/local/bin/faultline-correlator
USER 65532:65532
EXPOSE 50051 8080
ENTRYPOINT ["/usr/local/bin/faultline-correlator"]
# Authenticated by default: mTLS with a PKI mounted at /etc/faultline/tls
# (`faultline-correlator certs --out DIR --host H…` writes one; docs/security.md).
# Without it the correlator refuses to start; plaintext only when asked for
# (`serve --insecure`). The Kubernetes base passes its own arguments
# (deploy/kubernetes/correlator.yaml). scripts/build-images.sh copies this line.
# The web UI on :8080: /healthz and /metrics open for probes and scrapers;
# the pages and /api/* only for loopback clients until `[web] token_file`
# (a viewer token, `--config`) is set, and only for Host headers naming this
# address, localhost or `[web] allowed_hosts` (docs/web.md).
CMD ["serve", "--listen", "0.0.0.0:50051", "--tls-cert", "/etc/faultline/tls/server.pem", "--tls-key", "/etc/faultline/tls/server.key", "--client-ca", "/etc/faultline/tls/ca.pem", "--web", "0.0.0.0:8080"]
