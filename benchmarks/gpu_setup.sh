# Source from the project root on a lent NVIDIA machine (../shared/gpu/README.md), instead of
# .gpu/remote-env.sh alone: builds kp with pyvkgrad's OpMemoryBarrier patch into /tmp/site
# first (remote-env.sh would build stock kp), then sources remote-env.sh.
for f in .gpu/debs/*.deb; do dpkg -x "$f" /; done; ldconfig
if ! PYTHONPATH=/tmp/site python3 -c 'import sys, kp; sys.exit(getattr(kp, "pyvkgrad_patch", 0) < 3)' 2>/dev/null; then
  rm -rf /tmp/site /tmp/kp-src && mkdir -p /tmp/kp-src
  tar -xzf .gpu/kp-0.9.0.tar.gz -C /tmp/kp-src
  patch -s -p1 -d /tmp/kp-src/kp-0.9.0 < tools/kp-0.9.0.patch
  export KOMPUTE_OPT_INSTALL=OFF KOMPUTE_OPT_USE_BUILT_IN_VULKAN_HEADER=OFF \
         KOMPUTE_OPT_USE_BUILT_IN_FMT=OFF KOMPUTE_OPT_USE_BUILT_IN_PYBIND11=OFF \
         KOMPUTE_OPT_DISABLE_VULKAN_VERSION_CHECK=ON KOMPUTE_OPT_DISABLE_VK_DEBUG_LAYERS=ON
  export CMAKE_PREFIX_PATH=$(python3 -m pybind11 --cmakedir)
  python3 -m pip install -q --no-build-isolation --no-deps --no-index --target /tmp/site \
      /tmp/kp-src/kp-0.9.0 > /tmp/kp-build.log 2>&1 || { tail -40 /tmp/kp-build.log; return 1; }
fi
source .gpu/remote-env.sh
