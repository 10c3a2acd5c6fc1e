# Source from the project root on an offline NVIDIA machine (no network; Python 3, numpy,
# scikit-build-core, pybind11 >= 2.12, CMake, ninja and g++ present; no Vulkan loader):
#     source benchmarks/gpu_setup.sh && python3 -m pyvkgrad info
# It unpacks the Vulkan loader and headers, points the loader at the NVIDIA driver, builds
# pyvkgrad's wheel offline (its Kompute runtime, kp 0.9.0 + tools/kp-0.9.0.patch; about a minute
# on 16 cores, once per machine) and copies the runtime into pyvkgrad/ as tools/_env.sh does, so
# the checkout itself is the package (python3 -m pytest / -m pyvkgrad / benchmarks all use it).
# Bring along .gpu/ (ignored by git), prepared once on a Debian 12 machine with network:
#     mkdir -p .gpu/debs && (cd .gpu/debs && apt-get download libvulkan1 libvulkan-dev \
#         libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)      # amd64 packages
#     python3 -m pip download --no-deps --no-binary :all: -d .gpu kp==0.9.0
for f in .gpu/debs/*.deb; do [ -e "$f" ] && dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export VK_ICD_FILENAMES=$VK_DRIVER_FILES
# The runtime's key, as tools/_env.sh computes it: what the runtime depends on, and the Python.
_key="$(for f in CMakeLists.txt pyproject.toml tools/kp-0.9.0.patch tools/kp_source.py; do
  echo "== $f"; cat "$f"; done | sha256sum | cut -c1-16)-$(python3 -c 'import sys; print("cp%d%d" % sys.version_info[:2])')"
if [ "$(cat pyvkgrad/.kompute-key 2>/dev/null)" != "$_key" ]; then
  rm -rf /tmp/pyvkgrad-wheel
  PYVKGRAD_KP_SDIST="$PWD/.gpu/kp-0.9.0.tar.gz" python3 -m pip wheel --no-build-isolation \
      --no-deps --no-index -w /tmp/pyvkgrad-wheel . > /tmp/pyvkgrad-build.log 2>&1 \
    || { tail -40 /tmp/pyvkgrad-build.log; echo "build log: /tmp/pyvkgrad-build.log"; return 1; }
  rm -f pyvkgrad/_kompute.*.so
  python3 -c 'import sys, zipfile, glob
z = zipfile.ZipFile(glob.glob("/tmp/pyvkgrad-wheel/pyvkgrad-*.whl")[0])
[z.extract(n, ".") for n in z.namelist() if n.startswith("pyvkgrad/_kompute.")]' || return 1
  echo "$_key" > pyvkgrad/.kompute-key
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
