#!/usr/bin/env bash
# Idempotent set-up for a fresh Debian bookworm x86_64 machine (run as root).
# Installs everything faultline needs to build and test: Debian packages,
# the pinned nightly toolchain for the eBPF crate, bpf-linker, and the Python
# OpenTelemetry SDK for the OTLP end-to-end test (a venv in the target dir).
# Fast (< 2 s) when everything is already present.
set -euo pipefail

EBPF_TOOLCHAIN="nightly-2026-05-19"
BPF_LINKER_VERSION="0.13.0"
LLVM_MAJOR="22"
# Python OpenTelemetry SDK for collector/tests/it/otlp_python.rs, in a venv under
# the cargo target dir (where the test looks for it).
OTEL_PY_PACKAGES=(
  "opentelemetry-sdk==1.45.2"
  "opentelemetry-exporter-otlp-proto-grpc==1.45.2"
  "opentelemetry-exporter-otlp-proto-http==1.45.2"
)
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OTEL_VENV="${CARGO_TARGET_DIR:-$REPO_ROOT/target}/otlp-venv"
# Kubernetes OpenAPI schemas (kubernetes-validate ships them) and PyYAML for
# tests/tests/it/deploy_manifests.rs, in a venv under the target dir too.
DEPLOY_PY_PACKAGES=("kubernetes-validate==1.37.0" "pyyaml==6.0.3")
DEPLOY_VENV="${CARGO_TARGET_DIR:-$REPO_ROOT/target}/deploy-venv"

APT_PACKAGES=(
  # bpf-linker links against the same LLVM major as the eBPF nightly.
  "llvm-${LLVM_MAJOR}-dev" libzstd-dev zlib1g-dev
  # prost/tonic code generation at build time.
  protobuf-compiler
  # rdma-sys (bindgen + pkg-config) and the verbs headers.
  libibverbs-dev librdmacm-dev libclang-dev pkg-config
  # stand-in C libraries for tests (fake libcuda, libnvidia-ml, verbs provider).
  gcc libc6-dev make
  # loop devices and block I/O workloads in tests.
  util-linux e2fsprogs
  # the benchmarks' peer rows (`cargo xtask bench`: bpftrace count()/hist()).
  bpftrace
  # curl for /metrics checks.
  curl ca-certificates
  # the OTLP end-to-end test's venv (Python OpenTelemetry SDK).
  python3 python3-venv
  # promtool, for the /metrics format tests (`promtool check metrics`).
  prometheus
  # a real Slurm controller and node daemon with munge for
  # tests/tests/it/slurm_real.rs (the test starts its own, on its own ports).
  slurmctld slurmd slurm-client munge
  # dpkg-shlibdeps for cargo-deb's `depends = "$auto"` (`cargo xtask deb`,
  # tests/tests/it/deb_packages.rs).
  dpkg-dev
  # htpasswd (bcrypt hashes) for the web config file tests
  # (tests/tests/it/web_config.rs).
  apache2-utils
  # the unit hardening test: systemd-analyze security / syscall-filter, and
  # strace to check a real run stays inside the seccomp allowlist.
  systemd strace
  # the correlator's history (rusqlite links the system SQLite).
  libsqlite3-dev
  # the images test: a Debian root filesystem from Debian packages
  # (scripts/build-images.sh), imported and run by podman (runc: crun
  # refuses this sandbox's cgroup layout), or under unshare + chroot.
  mmdebstrap podman runc
  # the correlator's web UI test (headless chromium through chromedriver)
  # and its Alertmanager delivery test.
  chromium chromium-driver prometheus-alertmanager
  # the NATS JetStream transport's tests (tests/tests/it/scale_out.rs start
  # their own server on loopback ports).
  nats-server
  # GNU time: the correlator's own peak RSS (correlator/tests/it/file_inputs.rs;
  # a child's wait4 ru_maxrss starts at its parent's peak).
  time
)

log() { printf 'setup: %s\n' "$*" >&2; }

if [[ $(id -u) -ne 0 ]]; then
  log "must run as root (it installs Debian packages); re-run with sudo"
  exit 1
fi

missing=()
for p in "${APT_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# kubectl (real kustomize, for tests/tests/it/deploy_manifests.rs) comes with
# the machine image from Google's apt repository, which is not reachable
# from here: say so early rather than at the test.
if ! command -v kubectl >/dev/null; then
  log "warning: kubectl not found: tests/tests/it/deploy_manifests.rs needs 'kubectl kustomize' (install kubectl from your distribution or Kubernetes' packages)"
fi
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Only promtool is wanted from the prometheus package: its server, which
# the package enables and starts, is stopped and disabled.
if command -v systemctl >/dev/null && systemctl is-enabled --quiet prometheus 2>/dev/null; then
  log "stopping and disabling the prometheus server (only promtool is used)"
  systemctl disable --now prometheus >/dev/null 2>&1 || true
fi
# Likewise the Alertmanager daemon (and the node exporter it may bring):
# the tests start their own on loopback ports.
for svc in prometheus-alertmanager prometheus-node-exporter nats-server munge slurmctld slurmd; do
  if command -v systemctl >/dev/null && systemctl is-enabled --quiet "$svc" 2>/dev/null; then
    systemctl disable --now "$svc" >/dev/null 2>&1 || true
  fi
  if [[ -e "/etc/init.d/$svc" ]] && service "$svc" status >/dev/null 2>&1; then
    service "$svc" stop >/dev/null 2>&1 || true
  fi
done

if ! command -v rustup >/dev/null; then
  log "rustup not found: install Rust with rustup first (stable toolchain)"
  exit 1
fi

# Stable components used by the README's test command and CI.
installed_components=$(rustup component list --installed 2>/dev/null || true)
for c in rustfmt clippy; do
  if ! grep -q "^${c}" <<<"$installed_components"; then
    log "adding stable component $c"
    rustup component add "$c" >/dev/null
  fi
done

# Pinned nightly + rust-src for the eBPF crate (build-std=core), and its
# clippy (the eBPF crate is linted with the toolchain that builds it).
if ! rustup run "$EBPF_TOOLCHAIN" rustc --version >/dev/null 2>&1 ||
  ! rustup component list --toolchain "$EBPF_TOOLCHAIN" --installed 2>/dev/null | grep -q '^rust-src' ||
  ! rustup component list --toolchain "$EBPF_TOOLCHAIN" --installed 2>/dev/null | grep -q '^clippy'; then
  log "installing $EBPF_TOOLCHAIN with rust-src and clippy"
  rustup toolchain install "$EBPF_TOOLCHAIN" --profile minimal --component rust-src --component clippy >/dev/null
fi

# bpf-linker built against Debian's LLVM of the same major as the nightly.
CARGO_BIN="${CARGO_HOME:-$HOME/.cargo}/bin"
if ! "$CARGO_BIN/bpf-linker" --version 2>/dev/null | grep -q "$BPF_LINKER_VERSION"; then
  log "building bpf-linker $BPF_LINKER_VERSION against LLVM $LLVM_MAJOR (~2 min)"
  LLVM_PREFIX="/usr/lib/llvm-${LLVM_MAJOR}" cargo +stable install --locked --quiet \
    "bpf-linker@${BPF_LINKER_VERSION}" --no-default-features --features "llvm-${LLVM_MAJOR}"
fi

# cargo-deb (pinned) for the .deb packages (`cargo xtask deb`,
# tests/tests/it/deb_packages.rs), built with stable.
CARGO_DEB_VERSION="3.8.0"
if ! "$CARGO_BIN/cargo-deb" --version 2>/dev/null | grep -q "$CARGO_DEB_VERSION"; then
  log "building cargo-deb $CARGO_DEB_VERSION (~2 min)"
  cargo +stable install --locked --quiet "cargo-deb@${CARGO_DEB_VERSION}"
fi

# cargo-fuzz (pinned) for the fuzz targets under fuzz/ (`cargo xtask fuzz`,
# run for a bounded time by `cargo xtask test`), built with stable; the
# targets build with the pinned nightly above.
CARGO_FUZZ_VERSION="0.13.2"
if ! "$CARGO_BIN/cargo-fuzz" --version 2>/dev/null | grep -q "$CARGO_FUZZ_VERSION"; then
  log "building cargo-fuzz $CARGO_FUZZ_VERSION (~1 min)"
  cargo +stable install --locked --quiet "cargo-fuzz@${CARGO_FUZZ_VERSION}"
fi

# A venv under the target dir with `pip install FLAGS PACKAGES`: DIR, what
# it is for, pip flags (or ""), the pinned packages. A stamp file records
# the packages installed, so a re-run is instant.
pip_venv() {
  local dir="$1" what="$2" flags="$3"
  shift 3
  local want="$*"
  if [[ "$(cat "$dir/.faultline-stamp" 2>/dev/null)" != "$want" ]]; then
    log "installing $what into $dir"
    python3 -m venv "$dir"
    # shellcheck disable=SC2086 # flags: zero or more words
    "$dir/bin/pip" install --quiet --disable-pip-version-check $flags "$@"
    printf '%s' "$want" >"$dir/.faultline-stamp"
  fi
}

# The Python OpenTelemetry SDK for the OTLP end-to-end tests, kubernetes-validate
# for the deployment tests.
pip_venv "$OTEL_VENV" "the Python OpenTelemetry SDK" "" "${OTEL_PY_PACKAGES[@]}"
pip_venv "$DEPLOY_VENV" "kubernetes-validate" "" "${DEPLOY_PY_PACKAGES[@]}"

# NVIDIA's real user-space libraries from PyPI, as test fixtures (no GPU
# needed to load them): libcudart.so.12 runs over the stand-in driver
# (tests/tests/it/real_cudart.rs), the NCCL probes attach to the real
# libnccl.so.2 (tests/tests/it/nccl_probe.rs), and nvidia-ml-py is a second NVML
# reader for `cargo xtask gpu-check`. Pinned; --no-deps (the wheels are
# self-contained shared libraries). The NCCL wheel is ~350 MB once.
NVIDIA_PY_PACKAGES=(
  "nvidia-cuda-runtime-cu12==12.9.79"
  "nvidia-nccl-cu12==2.32.3"
  "nvidia-ml-py==13.615.71"
)
NVIDIA_VENV="${CARGO_TARGET_DIR:-$REPO_ROOT/target}/nvidia-venv"
pip_venv "$NVIDIA_VENV" "NVIDIA's CUDA runtime, NCCL and nvidia-ml-py wheels (~350 MB)" --no-deps \
  "${NVIDIA_PY_PACKAGES[@]}"

# The Python OpenTelemetry SDK's OTLP/HTTP JSON exporter (pinned) for
# collector/tests/it/otlp_python.rs (`http/json`, plain and gzip), in its own
# venv under the target dir: it pins other versions of packages that the
# protobuf exporters in otlp-venv pin too, so the two cannot share one.
OTEL_JSON_PY_PACKAGES=(
  "opentelemetry-sdk==1.45.2"
  "opentelemetry-exporter-otlp-json-http==0.66b1"
)
OTEL_JSON_VENV="${CARGO_TARGET_DIR:-$REPO_ROOT/target}/otlp-json-venv"
pip_venv "$OTEL_JSON_VENV" "the Python OpenTelemetry OTLP/JSON exporter" "" "${OTEL_JSON_PY_PACKAGES[@]}"

# aya attaches tracepoints through tracefs.
if [[ ! -e /sys/kernel/tracing/events ]]; then
  mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || log "could not mount tracefs at /sys/kernel/tracing"
fi
log "ok"
