# faultline collector image (multi-stage). Sites with a registry build it:
#   podman build -f deploy/images/collector.Dockerfile -t faultline/collector .
# On machines that reach only Debian's archive, scripts/build-images.sh
# builds the same runtime stage from Debian packages with mmdebstrap.
# The base image, pinned by digest: Debian's bookworm-20260918-slim (its
# multi-arch index). Both stages use it, so one digest covers the build.
# Refresh where a registry is reachable:
#   skopeo inspect --format '{{.Digest}}' docker://docker.io/library/debian:bookworm-YYYYMMDD-slim
# and update BASE here and in the other Dockerfile (tests/tests/it/images.rs checks both agree).
ARG BASE=docker.io/library/debian:bookworm-20260918-slim@sha256:3783cc01769c7b2b1b83a5c5ad96c815348e28ed7da68e2e3687004faa906251
FROM ${BASE} AS build
# scripts/setup.sh installs the toolchain: stable Rust, the pinned nightly
# and bpf-linker for the eBPF crate, LLVM, protoc, the verbs headers.
RUN apt-get update && apt-get install -y --no-install-recommends \
      ca-certificates curl sudo git build-essential && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN bash scripts/setup.sh && . "$HOME/.cargo/env" && \
    cargo build --release -p collector --bin faultline-collector

FROM ${BASE}
ARG VERSION=0.1.0
ARG REVISION=unknown
# OCI image labels; scripts/build-images.sh sets the same ones (from these lines).
LABEL org.opencontainers.image.title="faultline-collector"
LABEL org.opencontainers.image.description="faultline node agent: eBPF probes on CUDA, block I/O and RDMA, NVML and InfiniBand counters, windows streamed to the correlator"
LABEL org.opencontainers.image.version="${VERSION}"
LABEL org.opencontainers.image.revision="${REVISION}"
LABEL org.opencontainers.image.licenses="Apache-2.0"
LABEL org.opencontainers.image.vendor="faultline"
LABEL org.opencontainers.image.base.name="docker.io/library/debian:bookworm-20260918-slim"
LABEL org.opencontainers.image.base.digest="sha256:3783cc01769c7b2b1b83a5c5ad96c815348e28ed7da68e2e3687004faa906251"
# libibverbs for the RDMA device facts and async events, its providers, the
# loader cache tools (the CUDA library search reads `ldconfig -p`).
RUN apt-get update && apt-get install -y --no-install-recommends \
      libibverbs1 ibverbs-providers ca-certificates && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/faultline-collector /usr/local/bin/faultline-collector
COPY deploy/collector.toml /etc/faultline/collector.toml
# Root in the pod, bounded to the capabilities the DaemonSet grants.
USER 0
ENTRYPOINT ["/usr/local/bin/faultline-collector"]
CMD ["--config", "/etc/faultline/collector.toml"]
