# The validation pass (tools/validate) on a lent NVIDIA GPU. Prepare here first, once:
#   (mkdir -p .gpu/vvl && cd .gpu/vvl && apt-get -oAPT::Architecture=amd64 \
#      -oDir::State::Lists=/tmp/amd64-lists download vulkan-validationlayers)
# then run this with .gpu carried.
source benchmarks/gpu_setup.sh >/dev/null 2>&1 || exit 1
dpkg -x .gpu/vvl/vulkan-validationlayers_*.deb / && ldconfig
export VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
python3 -m pyvkgrad info | head -1
tools/validate -q -x
