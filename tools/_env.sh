# Sourced by tools/demo and tools/test: make this checkout runnable, installing only what is
# missing, so that a second run costs well under a second. Steps:
#   1. Debian packages (lavapipe, Vulkan loader/headers/validation layer, glslang, SPIR-V tools,
#      and what building kp needs); as root they are installed, otherwise the apt-get line is shown.
#   2. A virtual environment in .venv.
#   3. kp 0.9.0 built offline from its sdist with tools/kp-0.9.0.patch applied;
#      the wheel is cached in $PYVKGRAD_CACHE (default ~/.cache/pyvkgrad) outside the repository.
#   4. pyvkgrad installed in editable mode with its test extras.
# Set PYVKGRAD_QUIET=1 to hide progress lines.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${PYVKGRAD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pyvkgrad}"
KP_VERSION=0.9.0
DEBIAN_PACKAGES="mesa-vulkan-drivers libvulkan1 libvulkan-dev vulkan-validationlayers \
glslang-tools spirv-tools cmake make g++ patch libfmt-dev pybind11-dev python3-venv python3-dev"

_say() { [ "${PYVKGRAD_QUIET:-0}" = 1 ] || echo "[pyvkgrad setup] $*" >&2; }

_missing_debs() {
  local p
  for p in $DEBIAN_PACKAGES; do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || echo "$p"
  done
}

_ensure_debs() {
  command -v dpkg-query >/dev/null || { _say "not a Debian system: install the equivalents of: $DEBIAN_PACKAGES"; return 0; }
  local missing
  missing="$(_missing_debs | tr '\n' ' ')"
  [ -z "${missing// }" ] && return 0
  if [ "$(id -u)" != 0 ]; then
    echo "pyvkgrad needs these Debian packages; run as root:" >&2
    echo "  apt-get update && apt-get install -y --no-install-recommends $missing" >&2
    exit 1
  fi
  _say "installing Debian packages: $missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $missing >/dev/null
}

_ensure_venv() {
  if [ ! -x "$ROOT/.venv/bin/python" ]; then
    _say "creating $ROOT/.venv"
    "${PYTHON:-python3}" -m venv "$ROOT/.venv"
  fi
  # Activated (not just PATH): kp's setup.py loses -DPYTHON_EXECUTABLE, so CMake must find
  # the venv's python itself (../shared/kompute.md).
  # shellcheck disable=SC1091
  . "$ROOT/.venv/bin/activate"
}

_kp_wheel_tag() {
  # The cached wheel is named after the patch's hash, so a changed patch rebuilds it.
  echo "$(sha256sum "$ROOT/tools/kp-$KP_VERSION.patch" | cut -c1-12)-$(python -c 'import sys; print("cp%d%d" % sys.version_info[:2])')"
}

_ensure_kp() {
  python -c 'import sys, kp; sys.exit(getattr(kp, "pyvkgrad_patch", 0) < 3)' 2>/dev/null && return 0
  local tag wheeldir
  tag="$(_kp_wheel_tag)"
  wheeldir="$CACHE/wheels/kp-$KP_VERSION-$tag"
  if ! ls "$wheeldir"/kp-*.whl >/dev/null 2>&1; then
    _say "building kp $KP_VERSION from its sdist (about 2 minutes on 2 cores, once)"
    local work
    work="$(mktemp -d)"
    python -m pip download -q --no-deps --no-binary :all: -d "$work" "kp==$KP_VERSION"
    tar -xzf "$work/kp-$KP_VERSION.tar.gz" -C "$work"
    patch -s -p1 -d "$work/kp-$KP_VERSION" < "$ROOT/tools/kp-$KP_VERSION.patch"
    python -m pip install -q setuptools wheel
    # Offline build: system Vulkan headers, fmt and pybind11 instead of CMake downloads.
    # Debug layers are off in kp so that validation runs only when we ask for it
    # (tools/test sets VK_INSTANCE_LAYERS for its validation pass).
    (
      export KOMPUTE_OPT_INSTALL=OFF KOMPUTE_OPT_USE_BUILT_IN_VULKAN_HEADER=OFF \
             KOMPUTE_OPT_USE_BUILT_IN_FMT=OFF KOMPUTE_OPT_USE_BUILT_IN_PYBIND11=OFF \
             KOMPUTE_OPT_DISABLE_VULKAN_VERSION_CHECK=ON KOMPUTE_OPT_DISABLE_VK_DEBUG_LAYERS=ON
      unset KOMPUTE_PYTHON_NUM_PARALLEL_THREADS
      python -m pip wheel -q --no-deps --no-build-isolation -w "$work/out" "$work/kp-$KP_VERSION" \
        > "$work/build.log" 2>&1 || { tail -40 "$work/build.log" >&2; exit 1; }
    )
    mkdir -p "$wheeldir"
    cp "$work"/out/kp-*.whl "$wheeldir/"
    rm -rf "$work"
  fi
  python -m pip install -q --force-reinstall --no-deps "$wheeldir"/kp-*.whl
}

_ensure_package() {
  local stamp="$ROOT/.venv/.pyvkgrad-installed"
  local want
  want="$(sha256sum "$ROOT/pyproject.toml" | cut -c1-16)"
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || ! python -c 'import pyvkgrad' 2>/dev/null; then
    _say "installing pyvkgrad (editable) and its test dependencies"
    python -m pip install -q -e "$ROOT[test]"
    echo "$want" > "$stamp"
  fi
}

# The PyTorch bridge's tests (tests/test_torch_*.py) need torch, and scikit-learn for the
# digits example (matplotlib for its plot). tools/test calls this: it installs them when CI=true,
# or when a CPU build of torch $TORCH_VERSION is at hand (pip's find-links or a local index: no
# download), and never otherwise, since a default PyPI torch pulls gigabytes of CUDA libraries.
# Without torch the bridge tests skip, naming the install command; in CI they must run.
TORCH_VERSION=2.13.0
_ensure_torch() {
  local have ci=0
  case "$(echo "${CI:-}" | tr '[:upper:]' '[:lower:]')" in 1|true|yes) ci=1 ;; esac
  have="$(python -c 'import importlib.metadata as m
for d in ("torch", "scikit-learn", "matplotlib"):
    try: print(d, m.version(d))
    except m.PackageNotFoundError: pass' 2>/dev/null || true)"
  if grep -q '^torch ' <<<"$have"; then
    grep -q '^scikit-learn ' <<<"$have" && grep -q '^matplotlib ' <<<"$have" && return 0
    if [ "$ci" = 1 ] || python -m pip install -q --dry-run --no-index scikit-learn matplotlib \
        >/dev/null 2>&1; then
      _say "installing scikit-learn and matplotlib (the digits example's tests)"
      python -m pip install -q scikit-learn matplotlib
    fi
    return 0
  fi
  # A CPU build at hand: pip resolves it without any index (find-links), version +cpu.
  local report
  report="$(python -m pip install -q --dry-run --ignore-installed --no-index --no-deps \
      --report - "torch==$TORCH_VERSION" 2>/dev/null || true)"
  if grep -q "\"version\": \"$TORCH_VERSION+cpu\"" <<<"$report"; then
    _say "installing the CPU build of torch $TORCH_VERSION at hand, scikit-learn, matplotlib"
    python -m pip install -q "torch==$TORCH_VERSION" scikit-learn matplotlib
  elif [ "$ci" = 1 ]; then
    _say "CI: installing torch $TORCH_VERSION (CPU build, from download.pytorch.org), scikit-learn, matplotlib"
    python -m pip install -q "torch==$TORCH_VERSION" --index-url https://download.pytorch.org/whl/cpu \
      --extra-index-url https://pypi.org/simple
    python -m pip install -q scikit-learn matplotlib
  else
    _say "no CPU build of torch $TORCH_VERSION at hand: the PyTorch bridge tests will skip" \
         "(pip install 'torch==$TORCH_VERSION' --index-url https://download.pytorch.org/whl/cpu" \
         "scikit-learn matplotlib)"
  fi
}

_ensure_debs
_ensure_venv
_ensure_kp
_ensure_package
cd "$ROOT"
