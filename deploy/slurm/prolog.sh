#!/bin/sh
# faultline Slurm prolog (docs/slurm.md): tells the node's collector which
# job and user own which GPUs and HCAs, so GPU series carry hpc_job/job and
# the job dashboard finds the job's HCAs, also for processes that carry no
# SLURM_* variable (containers, daemons the job starts, MPI launchers).
#
# slurm.conf:  Prolog=/etc/slurm/faultline-prolog.sh
#              Epilog=/etc/slurm/faultline-epilog.sh
# Runs as root on each allocated node before the job's first step (with
# PrologFlags=Alloc: at allocation). No SPANK plugin is needed.
#
# Slurm drains a node whose prolog exits non-zero. Labelling is not worth a
# drained node: on any failure of its own (no job id, unwritable job
# directory, missing sysfs) this script logs why (syslog via `logger`
# where it exists, and stderr) and exits 0; the job runs, only without
# faultline's job labels.
# Hence no `set -e`: every step that can fail is checked.
#
# GPUs: SLURM_JOB_GPUS (the GPU indices Slurm's gres/gpu allocated), else
# CUDA_VISIBLE_DEVICES. HCAs: FAULTLINE_JOB_HCAS if the site sets it (e.g.
# in prolog's environment via a wrapper), else the RDMA devices on the NUMA
# nodes of the job's GPUs (sysfs), else all RDMA devices of the node.

# To syslog (daemon.warning, tag faultline-prolog) where `logger` exists,
# and to stderr (slurmd's log at debug level; the terminal when run by hand).
log() {
  command -v logger >/dev/null 2>&1 &&
    logger -t faultline-prolog -p daemon.warning "$*" 2>/dev/null
  echo "faultline-prolog: $*" >&2
}

# Logs the failure and ends the prolog successfully.
give_up() {
  log "$*; job ${SLURM_JOB_ID:-?} runs without faultline's job labels on $(uname -n 2>/dev/null)"
  exit 0
}

# One line per value: a newline would start another key of the job file.
one_line() { printf '%s' "$1" | tr -d '\r\n'; }

dir="${FAULTLINE_JOB_DIR:-/run/faultline/jobs}"
sysfs="${FAULTLINE_SYSFS:-/sys}"
job="${SLURM_JOB_ID:-}"
user="$(one_line "${SLURM_JOB_USER:-}")"
gpus="$(one_line "${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-}}")"

[ -n "$job" ] || give_up "SLURM_JOB_ID not set (run it as a Slurm Prolog)"
case "$job" in *[!0-9_]*) give_up "odd job id '$(one_line "$job")'" ;; esac

# The NUMA node of an NVIDIA GPU by NVML index: NVML orders GPUs by PCI bus
# id, as `ls` orders the PCI addresses of the vendor 0x10de display/3D
# controllers.
gpu_numa() {
  i=0
  for d in "$sysfs"/bus/pci/devices/*; do
    [ "$(cat "$d/vendor" 2>/dev/null)" = "0x10de" ] || continue
    case "$(cat "$d/class" 2>/dev/null)" in 0x0300*|0x0302*) ;; *) continue ;; esac
    if [ "$i" = "$1" ]; then cat "$d/numa_node" 2>/dev/null; return; fi
    i=$((i + 1))
  done
}

hcas="$(one_line "${FAULTLINE_JOB_HCAS:-}")"
if [ -z "$hcas" ] && [ -d "$sysfs/class/infiniband" ]; then
  numas=""
  for g in $(echo "$gpus" | tr ',' ' '); do
    case "$g" in *[!0-9]*) continue ;; esac
    n="$(gpu_numa "$g")"
    [ -n "$n" ] && numas="$numas $n"
  done
  for h in "$sysfs"/class/infiniband/*; do
    [ -e "$h" ] || continue
    name="$(basename "$h")"
    if [ -n "$numas" ]; then
      n="$(cat "$h/device/numa_node" 2>/dev/null || echo -1)"
      case " $numas " in *" $n "*) ;; *) continue ;; esac
    fi
    hcas="${hcas:+$hcas,}$name"
  done
fi

err="$(mkdir -p "$dir" 2>&1 && chmod 0755 "$dir" 2>&1)" ||
  give_up "cannot create job directory $dir: $(one_line "$err")"
tmp="$dir/.$job.tmp"
err="$( (printf 'job=%s\nuser=%s\ngpus=%s\nhcas=%s\n' "$job" "$user" "$gpus" "$hcas" >"$tmp") 2>&1)" || {
  rm -f "$tmp" 2>/dev/null
  give_up "cannot write $tmp: $(one_line "$err")"
}
err="$(mv -f "$tmp" "$dir/$job" 2>&1)" || {
  rm -f "$tmp" 2>/dev/null
  give_up "cannot rename $tmp to $dir/$job: $(one_line "$err")"
}
exit 0
