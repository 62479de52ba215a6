# faultline collector image (multi-stage). Sites with a registry build it:
#   podman build -f deploy/images/collector.Dockerfile -t faultline/collector .
# On machines that reach only Debian's archive, scripts/build-images.sh
# builds the same runtime stage from Debian packages with mmdebstrap.
FROM docker.io/library/debian:bookworm AS build
# scripts/setup.sh installs the toolchain: stable Rust, the pinned nightly
# and bpf-linker for the eBPF crate, LLVM, protoc, the verbs headers.
RUN apt-get update && apt-get install -y --no-install-recommends \
      ca-certificates curl sudo git build-essential && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN bash scripts/setup.sh && . "$HOME/.cargo/env" && \
    cargo build --release -p collector --bin faultline-collector

FROM docker.io/library/debian:bookworm-slim
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
