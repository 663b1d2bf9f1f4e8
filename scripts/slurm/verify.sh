#!/usr/bin/env bash
# shellcheck disable=SC2016  # single-quoted --wrap scripts are meant to expand inside the job
# verify.sh - check that the local dev cluster (start-cluster.sh) does what hpceval's tests rely on:
# jobs run, sacct reports COMPLETED / FAILED 3:0 / CANCELLED, arrays get one row per task, fake
# GPUs set CUDA_VISIBLE_DEVICES, and a 2-node job runs `srun` on both nodes.
#
#   verify.sh [--with-timeout] [WORKDIR]
#
# Prints PASS/FAIL per check and exits 1 if any check failed. About 10-15 s; --with-timeout adds
# a --time=1 job that must end as TIMEOUT (Slurm checks limits every ~30 s: 60-90 s more).
set -uo pipefail
WITH_TIMEOUT=0
if [ "${1:-}" = --with-timeout ]; then WITH_TIMEOUT=1; shift; fi
# on the site's shared scratch (node-tmp.sh): each node's /tmp is its own
W=${1:-$(mktemp -d "${SLURM_SCRATCH:-/srv/scratch}/hpceval-slurm-verify.XXXXXX")}
mkdir -p "$W" && cd "$W" || exit 1
T_START=$(date +%s)
NFAIL=0
pass() { echo "PASS  $*"; }
fail() { echo "FAIL  $*"; NFAIL=$((NFAIL + 1)); }
# submit ARGS...: sbatch --parsable with output in the work dir; prints the job id
submit() { sbatch --parsable -o "$W/slurm-%j.out" "$@"; }
# row JOBID: "State|ExitCode" of a job or array task as sacct reports it (empty while sacct lags)
row() { sacct -X -n -P -o JobID,State,ExitCode -j "${1%%_*}" 2>/dev/null | awk -F'|' -v id="$1" '$1 == id {print $2 "|" $3}'; }
# wait_final JOBID [timeout_s]: wait until sacct shows a terminal state for the job (or task)
wait_final() {
  local end=$(( $(date +%s) + ${2:-30} )) r
  while [ "$(date +%s)" -lt "$end" ]; do
    r=$(row "$1")
    case "$r" in ''|PENDING*|RUNNING*|REQUEUED*|COMPLETING*|CONFIGURING*|SUSPENDED*) sleep 0.3 ;; *) echo "$r"; return 0 ;; esac
  done
  echo "timeout (last: ${r:-no row})"
  return 1
}
# expect WHAT ACTUAL PATTERN: PASS if ACTUAL matches the extended regex PATTERN
expect() { if [[ $2 =~ $3 ]]; then pass "$1: $2"; else fail "$1: got '$2', want /$3/"; fi; }

command -v sbatch >/dev/null || { echo "FAIL  sbatch not found: run scripts/slurm/start-cluster.sh"; exit 1; }
echo "verify.sh in $W ($(sinfo -V))"
expect "nodes idle" "$(sinfo -h -N -p debug -o '%N=%T' | sort | paste -sd' ' -)" '^node1=(idle|mixed) node2=(idle|mixed)'

ok=$(submit --wrap 'hostname')
bad=$(submit --wrap 'exit 3')
canc=$(submit --wrap 'sleep 300')
arr=$(submit --array=0-3%2 --wrap 'sleep 1; [ "$SLURM_ARRAY_TASK_ID" = 2 ] && exit 5; exit 0')
gpu=$(submit --gpus-per-node=2 --wrap 'echo "CVD=$CUDA_VISIBLE_DEVICES"')
multi=$(submit -N 2 --wrap 'srun -N2 hostname | sort | paste -sd" " -')
[ "$WITH_TIMEOUT" = 1 ] && tmo=$(submit --time=1 --wrap 'sleep 300')
rejected=$(sbatch --parsable --gpus-per-node=5 --wrap true 2>&1)
expect "too many GPUs rejected at submit" "$rejected" 'not available'

for _ in $(seq 50); do [ "$(row "$canc")" = "RUNNING|0:0" ] && break; sleep 0.2; done
scancel "$canc"

expect "exit 0 job" "$(wait_final "$ok")" '^COMPLETED\|0:0$'
expect "exit 3 job" "$(wait_final "$bad")" '^FAILED\|3:0$'
expect "scancel'd job" "$(wait_final "$canc")" '^CANCELLED by [0-9]+\|'
for t in 0 1 2 3; do
  want='^COMPLETED\|0:0$'; [ "$t" = 2 ] && want='^FAILED\|5:0$'
  expect "array task ${arr}_$t" "$(wait_final "${arr}_$t" 40)" "$want"
done
expect "gpu job" "$(wait_final "$gpu")" '^COMPLETED'
expect "gpu job sees 2 GPUs" "$(cat "$W/slurm-$gpu.out" 2>/dev/null)" '^CVD=[0-9],[0-9]$'
expect "2-node job" "$(wait_final "$multi")" '^COMPLETED'
expect "2-node srun hostnames" "$(cat "$W/slurm-$multi.out" 2>/dev/null)" '^node1 node2$'
expect "2-node NodeList" "$(sacct -X -n -P -o NodeList -j "$multi")" '^node\[1-2\]$'
if [ "$WITH_TIMEOUT" = 1 ]; then
  expect "--time=1 job" "$(wait_final "$tmo" 150)" '^TIMEOUT'
fi

echo "verify.sh: $NFAIL failed check(s) in $(( $(date +%s) - T_START )) s"
[ "$NFAIL" = 0 ]
