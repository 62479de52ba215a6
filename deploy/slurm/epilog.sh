#!/bin/sh
# faultline Slurm epilog (docs/slurm.md): the job no longer owns its GPUs
# and HCAs. slurm.conf: Epilog=/etc/slurm/faultline-epilog.sh
set -eu
dir="${FAULTLINE_JOB_DIR:-/run/faultline/jobs}"
job="${SLURM_JOB_ID:?SLURM_JOB_ID not set: run as a Slurm Epilog}"
case "$job" in *[!0-9_]*) exit 0 ;; esac
rm -f "$dir/$job" "$dir/.$job.tmp"
exit 0
