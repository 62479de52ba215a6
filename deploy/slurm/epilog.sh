#!/bin/sh
# faultline Slurm epilog (docs/slurm.md): the job no longer owns its GPUs
# and HCAs. slurm.conf: Epilog=/etc/slurm/faultline-epilog.sh
# Removes the prolog's job file and the job's line from every
# dcgm-exporter job mapping file (a file left with no job is removed), so
# neither exporter labels the GPUs with a finished job.
# Like the prolog, it never fails the epilog (Slurm drains a node whose
# epilog exits non-zero or outlives PrologEpilogTimeout): a failure of its
# own is logged and it exits 0, and its one wait (the lock) is bounded.
# To syslog (daemon.warning, tag faultline-epilog) where `logger` exists,
# and to stderr (slurmd's log at debug level; the terminal when run by hand).
log() {
  command -v logger >/dev/null 2>&1 &&
    logger -t faultline-epilog -p daemon.warning "$*" 2>/dev/null
  echo "faultline-epilog: $*" >&2
}
one_line() { printf '%s' "$1" | tr -d '\r\n'; }

# The prolog's defaults file (see prolog.sh), never sourced.
defaults="${FAULTLINE_SLURM_DEFAULTS:-/etc/default/faultline-slurm}"
if [ -r "$defaults" ]; then
  while IFS='=' read -r k v || [ -n "$k" ]; do
    v="${v#\"}" && v="${v%\"}"
    case "$k" in
      FAULTLINE_JOB_DIR) [ -n "${FAULTLINE_JOB_DIR+x}" ] || FAULTLINE_JOB_DIR="$v" ;;
      DCGM_HPC_JOB_MAPPING_DIR) [ -n "${DCGM_HPC_JOB_MAPPING_DIR+x}" ] || DCGM_HPC_JOB_MAPPING_DIR="$v" ;;
    esac
  done <"$defaults"
fi

dir="${FAULTLINE_JOB_DIR:-/run/faultline/jobs}"
map="${DCGM_HPC_JOB_MAPPING_DIR-/run/faultline/hpc-job-mapping}"
job="${SLURM_JOB_ID:-}"
case "$job" in
  "") log "SLURM_JOB_ID not set (run it as a Slurm Epilog)"; exit 0 ;;
  *[!0-9_]*) log "odd job id; nothing removed"; exit 0 ;;
esac
err="$(rm -f "$dir/$job" "$dir/.$job.tmp" 2>&1)" ||
  log "cannot remove $dir/$job: $(one_line "$err") (a stale job file: remove it by hand)"

# One mapping file without the job's line; removed when no job is left.
unmap_one() {
  f="$1"
  grep -q -x -e "$job" "$f" 2>/dev/null || return 0
  tmp="$map/.$(basename "$f").$job.tmp"
  err="$( (grep -v -x -e "$job" -e 0 -e '' "$f" >"$tmp"; [ $? -le 1 ]) 2>&1)" || {
    rm -f "$tmp" 2>/dev/null
    log "cannot rewrite $f: $(one_line "$err") (job $job stays in it: remove the line by hand)"
    return 1
  }
  if [ -s "$tmp" ]; then
    err="$(mv -f "$tmp" "$f" 2>&1)"
  else
    err="$(rm -f "$tmp" "$f" 2>&1)"
  fi || {
    rm -f "$tmp" 2>/dev/null
    log "cannot update $f: $(one_line "$err") (job $job stays in it: remove the line by hand)"
    return 1
  }
}

# Every GPU's file, not only SLURM_JOB_GPUS's: a file the prolog wrote under
# CUDA_VISIBLE_DEVICES, or by hand, is cleaned too.
unmap_all() {
  for f in "$map"/*; do
    case "$(basename "$f")" in *[!0-9.]* | .*) continue ;; esac
    [ -f "$f" ] && unmap_one "$f"
  done
}

# Under flock(1) on the prolog's lock where possible (see prolog.sh). The
# outer subshell: a failed redirection may end it, never the epilog.
if [ -n "$map" ] && [ -d "$map" ]; then
  if ! command -v flock >/dev/null 2>&1; then
    unmap_all
  elif ( : >>"$map/.lock" ) 2>/dev/null; then
    ( (
      flock -w 10 9 || log "no lock on $map/.lock in 10 s; cleaning without it"
      unmap_all
    ) 9>>"$map/.lock" )
  else
    log "cannot open $map/.lock; cleaning without the lock"
    unmap_all
  fi
fi
exit 0
