# Sourced by the scripts that run on the GPU host's CPU (bench/device_*.sh: the `run` device,
# no toolchain, no network), from the repository root:
# - `device_setup`: the CUDA libraries on the path, the CPU and its SIMD flags printed, the
#   peers' wheels (.whl) installed into /tmp/site for python3, target/ made;
# - `show`: criterion's mean of each benchmark id in its output, one line each;
# - `tflite_resnet18_rows PEER OUT.json`: TFLite's four ResNet-18 figures (1 and 2 threads,
#   batch 1 and 64) appended to OUT.json (bench/tflite_resnet18.py).
device_setup() {
  export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
  grep -m1 "model name" /proc/cpuinfo
  grep -o 'amx_int8\|avx512_vnni\|avx512vbmi\|avx_vnni' /proc/cpuinfo | sort | uniq -c
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl 2>&1 | tail -1
  export PYTHONPATH=/tmp/site
  mkdir -p target
}

show() { awk '/^[a-z0-9_-]+\//{n=$1} /^ +time:/{ if (n!="") {print n, $4, $5; n=""}}'; }

tflite_resnet18_rows() {
  local t b
  for t in 1 2; do for b in 1 64; do
    taskset -c 2,3 python3 bench/tflite_resnet18.py "$1" $t $b "$2" 2>&1 | grep -v INFO
  done; done
}
