#!/usr/bin/env bash
# record-samples.sh - record real sacct/squeue output from the running dev cluster into this folder
# (files named sacct-<slurm version>-*.txt). Run as root after scripts/slurm/start-cluster.sh;
# takes ~90 s because of the TIMEOUT job. The columns must match hpceval.backends.slurm.records.SACCT_FIELDS.
# shellcheck disable=SC2016  # single-quoted --wrap scripts are meant to expand inside the job
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
V=$(sinfo -V | awk '{print $2}' | cut -d. -f1,2)
F=JobID,JobName,State,ExitCode,Reason,Start,End,Elapsed,NodeList,Submit,Partition
S() { sacct --parsable2 --noheader -o "$F" "$@"; }
sub() { sbatch --parsable -o /dev/null "$@"; }
echo "recording Slurm $V samples"

ok=$(sub -J ok --wrap 'echo ok')
fail=$(sub -J fail --wrap 'exit 3')
canc=$(sub -J canc --wrap 'sleep 300')
arr=$(sub -J arr --array=0-5%2 --wrap 'sleep 3; [ "$SLURM_ARRAY_TASK_ID" = 2 ] && exit 5; exit 0')
mn=$(sub -J mn -N 2 --wrap 'srun sleep 2')
gpu=$(sub -J gpu --gpus-per-node=2 --wrap 'echo "$CUDA_VISIBLE_DEVICES"')
held=$(sub -J held --hold --wrap true)
dep=$(sub -J dep --dependency="afterok:$canc" --wrap true)
k9=$(sub -J k9 --wrap 'kill -9 $$')
tmo=$(sub -J tmo --time=1 --wrap 'sleep 300')
all="$ok,$fail,$canc,$arr,$mn,$gpu,$held,$dep,$k9"

# Poll until every job has its real row (8 jobs + 2 running array tasks + the pending range row).
# Until then slurmdbd may list stand-in rows (empty Partition, JobName "allocation", state taken
# from the batch step): the snapshot with the most of them is kept as sacct-<v>-placeholders.txt.
# Racy: some runs show none, and then the file from an earlier run stays.
most=0
for _ in $(seq 100); do
  snap=$(S -X -j "$all")
  n=$(grep -c '|$' <<<"$snap" || true)
  if [ "$n" -gt 0 ]; then
    if [ "$n" -gt "$most" ]; then most=$n; echo "$snap" > "sacct-$V-placeholders.txt"; fi
  elif [ "$(grep -c . <<<"$snap")" -ge 11 ]; then
    break
  fi
  sleep 0.1
done
echo "$snap" > "sacct-$V-early.txt"
S -j "$arr,$mn" > "sacct-$V-steps.txt"
scancel "$canc"
sleep 4
S -X -j "$all" > "sacct-$V-later.txt"
squeue --noheader --array --states=all --format '%i|%T|%r|%N' --jobs "$all" > "squeue-$V.txt"

rq=$(sub -J rq --wrap 'sleep 30')
rqh=$(sub -J rqhold --wrap 'sleep 30')
sleep 2; scontrol requeue "$rq"; scontrol requeuehold "$rqh"; sleep 5  # new rows lag ~4 s
S -X --duplicates -j "$rq,$rqh" > "sacct-$V-requeue-duplicates.txt"
squeue --noheader --states=all --format '%i|%T|%r|%N' --jobs "$rq,$rqh" >> "squeue-$V.txt"
scancel "$held" "$dep" "$rq" "$rqh" "$arr"

for _ in $(seq 150); do
  S -X -j "$tmo" | grep -q TIMEOUT && break
  sleep 1
done
S -X -j "$tmo" > "sacct-$V-timeout.txt"
wc -l ./*"-$V"*.txt
