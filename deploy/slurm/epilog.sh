#!/bin/sh
# faultline Slurm epilog (docs/slurm.md): the job no longer owns its GPUs
# and HCAs. slurm.conf: Epilog=/etc/slurm/faultline-epilog.sh
# Like the prolog, it never fails the epilog (Slurm drains a node whose
# epilog exits non-zero): a failure of its own is logged and it exits 0.
# To syslog (daemon.warning, tag faultline-epilog) where `logger` exists,
# and to stderr (slurmd's log at debug level; the terminal when run by hand).
log() {
  command -v logger >/dev/null 2>&1 &&
    logger -t faultline-epilog -p daemon.warning "$*" 2>/dev/null
  echo "faultline-epilog: $*" >&2
}
dir="${FAULTLINE_JOB_DIR:-/run/faultline/jobs}"
job="${SLURM_JOB_ID:-}"
case "$job" in
  "") log "SLURM_JOB_ID not set (run it as a Slurm Epilog)"; exit 0 ;;
  *[!0-9_]*) log "odd job id; nothing removed"; exit 0 ;;
esac
err="$(rm -f "$dir/$job" "$dir/.$job.tmp" 2>&1)" ||
  log "cannot remove $dir/$job: $(printf '%s' "$err" | tr -d '\r\n') (a stale job file: remove it by hand)"
exit 0
