# Sourced by tools/demo, tools/test and tools/test_wheel: make this checkout runnable, installing
# only what is missing, so that a second run costs well under a second. Steps:
#   1. Debian packages: what building and running pyvkgrad need ($DEBIAN_RUN, $DEBIAN_BUILD) and,
#      for tools/test (PYVKGRAD_TOOL=test), what the tests need ($DEBIAN_TEST: the validation
#      layer, glslang, SPIR-V tools). As root they are installed, otherwise the apt-get line is
#      shown.
#   2. A virtual environment in .venv with pyvkgrad's requirements (numpy; pytest and hypothesis
#      for tools/test) and its build requirements (scikit-build-core, pybind11, ninja), read from
#      pyproject.toml.
#   3. The runtime, pyvkgrad._kompute, built through pyvkgrad's own wheel (`pip wheel` of this
#      checkout: kp 0.9.0 + tools/kp-0.9.0.patch, CMakeLists.txt), the one way it is built. The
#      wheel is cached in $PYVKGRAD_CACHE (default ~/.cache/pyvkgrad, outside the repository)
#      under a hash of the files that go into it, the runtime under a hash of what affects it
#      (CMakeLists.txt, pyproject.toml, the patch, tools/kp_source.py) and the Python version;
#      the runtime is copied into pyvkgrad/ (gitignored).
#   4. The checkout on the venv's sys.path (a .pth file), so edited .py files are used as they
#      are: nothing is installed in editable mode, nothing rebuilt for a .py change.
# Set PYVKGRAD_QUIET=1 to hide progress lines. tools/build_wheel sources it with
# PYVKGRAD_ENV_FUNCTIONS_ONLY=1: the functions only, none of the steps.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${PYVKGRAD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pyvkgrad}"
KP_VERSION=0.9.0
PYVKGRAD_TOOL="${PYVKGRAD_TOOL:-demo}"
# Debian packages by what needs them: running (lavapipe, the Vulkan loader, venv), building the
# runtime (a compiler, CMake, the Vulkan headers, Python's headers), testing.
DEBIAN_RUN="mesa-vulkan-drivers libvulkan1 python3-venv"
DEBIAN_BUILD="g++ cmake libvulkan-dev python3-dev"
DEBIAN_TEST="vulkan-validationlayers glslang-tools spirv-tools"

_say() { [ "${PYVKGRAD_QUIET:-0}" = 1 ] || echo "[pyvkgrad setup] $*" >&2; }
# pip, without the warnings this machine's pip configuration may print about index locations.
_pip() { python -m pip "$@" 2> >(grep -v "is ignored: it is neither" >&2); }

_debian_packages() {
  echo "$DEBIAN_RUN $DEBIAN_BUILD"
  [ "$PYVKGRAD_TOOL" != test ] || echo "$DEBIAN_TEST"
}

_ensure_debs() {
  local wanted missing="" p
  wanted="$(_debian_packages | tr '\n' ' ')"
  command -v dpkg-query >/dev/null || { _say "not a Debian system: install the equivalents of: $wanted"; return 0; }
  for p in $wanted; do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing="$missing $p"
  done
  [ -z "$missing" ] && return 0
  if [ "$(id -u)" != 0 ]; then
    echo "pyvkgrad needs these Debian packages; run as root:" >&2
    echo "  apt-get update && apt-get install -y --no-install-recommends$missing" >&2
    exit 1
  fi
  _say "installing Debian packages:$missing"
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
  # Not bin/activate: it names the path the venv was made at, and a moved or copied checkout
  # would then install into some other venv.
  export VIRTUAL_ENV="$ROOT/.venv" PATH="$ROOT/.venv/bin:$PATH"
  unset PYTHONHOME
  # This Python's wheel tag, site-packages and prefix, in one call.
  local prefix
  read -r PYTAG SITE prefix < <(python -c 'import os, sys, sysconfig
print("cp%d%d" % sys.version_info[:2], sysconfig.get_path("purelib"), os.path.realpath(sys.prefix))')
  if [ "$prefix" != "$(realpath "$ROOT/.venv")" ]; then
    echo "$ROOT/.venv is not a usable virtual environment here (its Python's prefix is" \
         "$prefix); remove it and run again" >&2
    exit 1
  fi
}

_ensure_requirements() {
  local stamp="$ROOT/.venv/.pyvkgrad-requirements" groups="run build" want have
  [ "$PYVKGRAD_TOOL" != test ] || groups="run build test"
  want="$(cat "$ROOT/pyproject.toml" "$ROOT/tools/_requirements.py" | sha256sum | cut -c1-16)"
  have="$(cat "$stamp" 2>/dev/null || true)"
  [ "$have" = "$want $groups" ] || [ "$have" = "$want run build test" ] && return 0
  # A .venv from before the runtime moved into pyvkgrad holds a stock kp wheel and an editable
  # pyvkgrad; the checkout is on sys.path through a .pth file now.
  if compgen -G "$SITE/kp-*.dist-info" >/dev/null || compgen -G "$SITE/pyvkgrad-*.dist-info" >/dev/null; then
    python -m pip uninstall -q -y kp pyvkgrad >/dev/null 2>&1 || true
  fi
  _say "installing into .venv: pyvkgrad's requirements ($groups)"
  # shellcheck disable=SC2046
  _pip install -q $(python "$ROOT/tools/_requirements.py" $groups | grep -vx pip) ninja
  echo "$want $groups" > "$stamp"
}

_ensure_checkout_on_path() {
  [ "$(cat "$SITE/pyvkgrad-checkout.pth" 2>/dev/null)" = "$ROOT" ] || echo "$ROOT" > "$SITE/pyvkgrad-checkout.pth"
}

_hash_files() {  # sha256 (16 hex digits) over the given files' names and contents
  local f
  for f in "$@"; do echo "== $f"; cat "$ROOT/$f"; done | sha256sum | cut -c1-16
}

_native_key() {  # what the runtime depends on
  _hash_files CMakeLists.txt pyproject.toml "tools/kp-$KP_VERSION.patch" tools/kp_source.py
}

_wheel_key() {  # everything that goes into the wheel
  local files
  if git -C "$ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    files="$(git -C "$ROOT" ls-files -co --exclude-standard -- pyvkgrad | sort)"
  else
    files="$(cd "$ROOT" && find pyvkgrad -type f ! -name '_kompute*' ! -name '.kompute-key' \
             ! -path '*/__pycache__/*' | sort)"
  fi
  # shellcheck disable=SC2086
  _hash_files CMakeLists.txt pyproject.toml README.md LICENSE "tools/kp-$KP_VERSION.patch" \
    tools/kp_source.py $files
}

_ensure_sdist() {  # kp's sdist, fetched once into the cache; the build checks its sha256
  KP_SDIST="$CACHE/sdist/kp-$KP_VERSION.tar.gz"
  [ -f "$KP_SDIST" ] && return 0
  _say "fetching the kp $KP_VERSION sdist (pyvkgrad's runtime is built from it)"
  mkdir -p "$CACHE/sdist"
  # Where pip's configuration says (tools/kp_source.py), without building its metadata.
  python3 "$ROOT/tools/kp_source.py" --fetch "$KP_SDIST.part" && mv "$KP_SDIST.part" "$KP_SDIST"
}

_progress() {  # $1: pid of a build, $2: its log; shows its steps until it ends, returns its status
  local pid=$1 log=$2 start=$SECONDS shown="" shown_at=$SECONDS step elapsed
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    step="$(grep -aoE '\[[0-9]+/[0-9]+\] [A-Za-z]+ [A-Za-z+]+ [a-z]+ .*' "$log" 2>/dev/null | tail -1 \
            | sed -E 's#^(\[[0-9]+/[0-9]+\]) ([A-Za-z]+) .* ([^ ]*/)?([^ /]+)$#\1 \2 \4#' || true)"
    [ -n "$step" ] || step="$(grep -aqE -- '-- Configuring|-- pyvkgrad' "$log" 2>/dev/null \
                              && echo configuring || echo "preparing the build")"
    elapsed=$((SECONDS - start))
    if [ "$step" != "$shown" ] || [ $((SECONDS - shown_at)) -ge 30 ]; then
      _say "  $(printf '%d:%02d' $((elapsed / 60)) $((elapsed % 60)))  $step"
      shown="$step" shown_at=$SECONDS
    fi
  done
  wait "$pid"
}

_build_wheel() {  # $1: python, $2: directory for the wheel, $3: its wheel tag (cp311)
  local py=$1 dir=$2 pytag=$3 out log args=() status=0 t0=$SECONDS
  _ensure_sdist
  mkdir -p "$CACHE/logs"
  log="$CACHE/logs/build-$pytag-$(date +%Y%m%d-%H%M%S).log"
  out="$(mktemp -d)"
  if [ "$py" = "$ROOT/.venv/bin/python" ]; then
    # The .venv has the build requirements: no isolated build environment, and a build
    # directory kept in build/ (gitignored), so a rebuild after a .py change compiles nothing.
    local bdir="$ROOT/build/$pytag"
    [ "$(cat "$bdir/.checkout" 2>/dev/null)" = "$ROOT" ] || { rm -rf "$bdir"; mkdir -p "$bdir"; echo "$ROOT" > "$bdir/.checkout"; }
    args=(--no-build-isolation -C "build-dir=$bdir")
  fi
  _say "building pyvkgrad's wheel for $pytag with its Kompute runtime (kp $KP_VERSION +" \
       "tools/kp-$KP_VERSION.patch): minutes the first time; log: $log"
  PYVKGRAD_KP_SDIST="$KP_SDIST" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
    "$py" -m pip wheel -v --no-deps "${args[@]}" -w "$out" "$ROOT" > "$log" 2>&1 &
  _progress $! "$log" || status=$?
  if [ "$status" != 0 ] || ! ls "$out"/pyvkgrad-*.whl >/dev/null 2>&1; then
    grep -av "is ignored: it is neither\|Link requires\|Found link\|Skipping link" "$log" | tail -30 >&2
    echo "pyvkgrad's wheel build failed; the full build log: $log" >&2
    rm -rf "$out"
    exit 1
  fi
  mkdir -p "$dir"
  mv "$out"/pyvkgrad-*.whl "$dir/"
  rm -rf "$out"
  _say "built $(basename "$dir"/pyvkgrad-*.whl) in $((SECONDS - t0)) s"
  # Keep the ten newest wheels.
  ls -1dt "$CACHE"/wheels/pyvkgrad-*/ 2>/dev/null | tail -n +11 | xargs -r rm -rf
}

_wheel_for() {  # $1: python. Prints the path of pyvkgrad's wheel built from this checkout for it.
  local py=$1 pytag dir
  pytag="$("$py" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')"
  dir="$CACHE/wheels/pyvkgrad-$(_wheel_key)-$pytag"
  ls "$dir"/pyvkgrad-*.whl >/dev/null 2>&1 || _build_wheel "$py" "$dir" "$pytag"
  ls "$dir"/pyvkgrad-*.whl | head -1
}

_ensure_runtime() {
  local key dir wheel
  key="$(_native_key)-$PYTAG"
  if [ "$(cat "$ROOT/pyvkgrad/.kompute-key" 2>/dev/null)" = "$key" ] \
     && ls "$ROOT"/pyvkgrad/_kompute.*.so >/dev/null 2>&1; then
    return 0
  fi
  dir="$CACHE/runtime/$key"
  if ! ls "$dir"/_kompute.*.so >/dev/null 2>&1; then
    wheel="$(_wheel_for "$ROOT/.venv/bin/python")"
    mkdir -p "$dir"
    python - "$wheel" "$dir" <<'PY'
import sys, zipfile
from pathlib import Path
with zipfile.ZipFile(sys.argv[1]) as z:
    for name in z.namelist():
        if name.startswith("pyvkgrad/_kompute."):
            (Path(sys.argv[2]) / Path(name).name).write_bytes(z.read(name))
PY
  fi
  rm -f "$ROOT"/pyvkgrad/_kompute.*.so
  cp "$dir"/_kompute.*.so "$ROOT/pyvkgrad/"
  echo "$key" > "$ROOT/pyvkgrad/.kompute-key"
  _say "runtime: pyvkgrad/$(basename "$dir"/_kompute.*.so) (from $dir)"
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

# tools/build_wheel uses the functions above and sets up nothing.
[ "${PYVKGRAD_ENV_FUNCTIONS_ONLY:-0}" = 1 ] && return 0

_ensure_debs
_ensure_venv
_ensure_requirements
_ensure_checkout_on_path
_ensure_runtime
cd "$ROOT"
