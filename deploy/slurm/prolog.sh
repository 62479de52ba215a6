#!/bin/sh
# shellcheck disable=SC2317 # map_all and map_one run through locked "$1"
# faultline Slurm prolog (docs/slurm.md): tells the node's collector which
# job and user own which GPUs and HCAs, so GPU series carry hpc_job even for
# processes that carry no SLURM_* variable (containers, daemons the job
# starts, MPI launchers), and keeps dcgm-exporter's --hpc-job-mapping-dir
# files, so one prolog serves both exporters.
#
# slurm.conf:  Prolog=/etc/slurm/faultline-prolog.sh
#              Epilog=/etc/slurm/faultline-epilog.sh
# Runs as root on each allocated node before the job's first step (with
# PrologFlags=Alloc: at allocation). No SPANK plugin is needed.
#
# Writes (each independently of the other):
#  - the job file $FAULTLINE_JOB_DIR/<job> (default /run/faultline/jobs):
#    job=, user=, gpus=, hcas=
#  - dcgm-exporter's mapping $DCGM_HPC_JOB_MAPPING_DIR/<gpu index> (default
#    /run/faultline/hpc-job-mapping; set it empty to skip): the job id as a
#    line of each of the job's GPUs' files, other jobs' lines kept.
# Both paths can also be set in /etc/default/faultline-slurm (KEY=value
# lines; FAULTLINE_SLURM_DEFAULTS names another file); the environment wins.
#
# Slurm drains a node whose prolog exits non-zero, and requeues and holds
# the batch job. Labelling is not worth a drained node: on any failure of
# its own (no job id, unwritable directory, missing sysfs) this script logs
# why (syslog via `logger` where it exists, and stderr) and exits 0; the job
# runs, only without the labels. Slurm also drains a node whose prolog
# outlives PrologEpilogTimeout, so every wait is bounded (the lock: 10 s).
# Hence no `set -e`: every step that can fail is checked.
#
# GPUs: SLURM_JOB_GPUS (the GPU indices Slurm's gres/gpu allocated), else
# CUDA_VISIBLE_DEVICES. HCAs: FAULTLINE_JOB_HCAS if the site sets it, else
# the RDMA devices on the NUMA nodes of the job's GPUs (sysfs), else all
# RDMA devices of the node.

# To syslog (daemon.warning, tag faultline-prolog) where `logger` exists,
# and to stderr (slurmd's log at debug level; the terminal when run by hand).
log() {
  command -v logger >/dev/null 2>&1 &&
    logger -t faultline-prolog -p daemon.warning "$*" 2>/dev/null
  echo "faultline-prolog: $*" >&2
}

# One line per value: a newline would start another key of the job file.
one_line() { printf '%s' "$1" | tr -d '\r\n'; }

# KEY=value lines of the site's defaults file, for the keys below only and
# only where the environment has not set them (never sourced: a typo there
# must not end the prolog).
defaults="${FAULTLINE_SLURM_DEFAULTS:-/etc/default/faultline-slurm}"
if [ -r "$defaults" ]; then
  while IFS='=' read -r k v || [ -n "$k" ]; do
    v="${v#\"}" && v="${v%\"}"
    case "$k" in
      FAULTLINE_JOB_DIR) [ -n "${FAULTLINE_JOB_DIR+x}" ] || FAULTLINE_JOB_DIR="$v" ;;
      DCGM_HPC_JOB_MAPPING_DIR) [ -n "${DCGM_HPC_JOB_MAPPING_DIR+x}" ] || DCGM_HPC_JOB_MAPPING_DIR="$v" ;;
      FAULTLINE_JOB_HCAS) [ -n "${FAULTLINE_JOB_HCAS+x}" ] || FAULTLINE_JOB_HCAS="$v" ;;
    esac
  done <"$defaults"
fi

dir="${FAULTLINE_JOB_DIR:-/run/faultline/jobs}"
map="${DCGM_HPC_JOB_MAPPING_DIR-/run/faultline/hpc-job-mapping}"
sysfs="${FAULTLINE_SYSFS:-/sys}"
job="${SLURM_JOB_ID:-}"
user="$(one_line "${SLURM_JOB_USER:-}")"
gpus="$(one_line "${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-}}")"
host="$(uname -n 2>/dev/null)"

if [ -z "$job" ]; then
  log "SLURM_JOB_ID not set (run it as a Slurm Prolog); nothing written on $host"
  exit 0
fi
case "$job" in *[!0-9_]*)
  log "odd job id '$(one_line "$job")'; nothing written on $host"
  exit 0 ;;
esac

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

job_hcas() {
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
  printf '%s' "$hcas"
}

# faultline's job file, written to a temporary name and renamed.
write_job_file() {
  why="job $job runs without faultline's job labels on $host"
  err="$(mkdir -p "$dir" 2>&1 && chmod 0755 "$dir" 2>&1)" || {
    log "cannot create job directory $dir: $(one_line "$err"); $why"
    return 1
  }
  tmp="$dir/.$job.tmp"
  err="$( (printf 'job=%s\nuser=%s\ngpus=%s\nhcas=%s\n' "$job" "$user" "$gpus" "$(job_hcas)" >"$tmp") 2>&1)" || {
    rm -f "$tmp" 2>/dev/null
    log "cannot write $tmp: $(one_line "$err"); $why"
    return 1
  }
  err="$(mv -f "$tmp" "$dir/$job" 2>&1)" || {
    rm -f "$tmp" 2>/dev/null
    log "cannot rename $tmp to $dir/$job: $(one_line "$err"); $why"
    return 1
  }
}

# One GPU's mapping file with the job's line added (other jobs' lines kept,
# the "no job" placeholder 0 and empty lines dropped), replaced by rename.
map_one() {
  f="$map/$1"
  tmp="$map/.$1.$job.tmp"
  err="$( ({ [ -f "$f" ] && grep -v -x -e "$job" -e 0 -e '' "$f"; printf '%s\n' "$job"; } >"$tmp") 2>&1)" &&
    err="$(mv -f "$tmp" "$f" 2>&1)" && return 0
  rm -f "$tmp" 2>/dev/null
  log "cannot write $f: $(one_line "$err"); $2"
  return 1
}

# dcgm-exporter's --hpc-job-mapping-dir: a file per GPU index, a job id a
# line. Under a lock, since two jobs sharing a GPU (gres/shard, MPS) run
# their prologs at once.
write_mapping() {
  [ -n "$map" ] || return 0
  why="job $job's GPUs carry no hpc_job in dcgm-exporter on $host"
  # A site's existing directory keeps its mode.
  [ -d "$map" ] || err="$(mkdir -p "$map" 2>&1 && chmod 0755 "$map" 2>&1)" || {
    log "cannot create dcgm-exporter job mapping directory $map: $(one_line "$err"); $why"
    return 1
  }
  locked map_all "writing"
}

# Runs "$1" under flock(1) on $map/.lock where flock exists and the lock
# file opens, else without the lock (logged). The outer subshell: a shell
# that cannot open a compound command's redirection may exit, and only that
# subshell may.
locked() {
  if ! command -v flock >/dev/null 2>&1; then
    "$1"
  elif ( : >>"$map/.lock" ) 2>/dev/null; then
    ( (
      flock -w 10 9 || log "no lock on $map/.lock in 10 s; $2 without it"
      "$1"
    ) 9>>"$map/.lock" )
  else
    log "cannot open $map/.lock; $2 without the lock"
    "$1"
  fi
}

map_all() {
  for g in $(echo "$gpus" | tr ',' ' '); do
    case "$g" in
      *[!0-9.]* | .* | *. | *.*.*)
        log "GPU '$g' of job $job is not an index; not in $map" ;;
      *) map_one "$g" "$why" ;;
    esac
  done
}

write_job_file
write_mapping
exit 0
