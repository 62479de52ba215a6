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
# GPUs: SLURM_JOB_GPUS (the GPU indices Slurm's gres/gpu allocated), else
# CUDA_VISIBLE_DEVICES. HCAs: FAULTLINE_JOB_HCAS if the site sets it (e.g.
# in prolog's environment via a wrapper), else the RDMA devices on the NUMA
# nodes of the job's GPUs (sysfs), else all RDMA devices of the node.
set -eu
dir="${FAULTLINE_JOB_DIR:-/run/faultline/jobs}"
sysfs="${FAULTLINE_SYSFS:-/sys}"
job="${SLURM_JOB_ID:?SLURM_JOB_ID not set: run as a Slurm Prolog}"
user="${SLURM_JOB_USER:-}"
gpus="${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-}}"

case "$job" in *[!0-9_]*) echo "faultline prolog: odd job id $job" >&2; exit 0 ;; esac

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

hcas="${FAULTLINE_JOB_HCAS:-}"
if [ -z "$hcas" ] && [ -d "$sysfs/class/infiniband" ]; then
  numas=""
  for g in $(echo "$gpus" | tr ',' ' '); do
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

mkdir -p "$dir"
chmod 0755 "$dir"
tmp="$dir/.$job.tmp"
printf 'job=%s\nuser=%s\ngpus=%s\nhcas=%s\n' "$job" "$user" "$gpus" "$hcas" >"$tmp"
mv -f "$tmp" "$dir/$job"
exit 0
