#!/bin/bash
# The exporter's bytes, for telling two builds apart: trains the demo LeNet (2 epochs, bundled
# data) unless CKPT_DIR holds checkpoints already, exports it with several flag sets (and a
# ResNet-18 checkpoint, when CKPT_DIR/resnet/last.safetensors exists) and prints each .o8's
# sha256. Run it with the old and the new binary on the same CKPT_DIR and compare.
#
#   bash bench/export_identity.sh OCTET_BINARY OUTDIR [CKPT_DIR]
set -euo pipefail
B=$1; D=$2; C=${3:-}
mkdir -p "$D"
if [ -z "$C" ]; then
  "$B" demo --epochs 2 --out "$D/demo" > "$D/demo.log" 2>&1
  "$B" train --model resnet18 --data bundled --epochs 1 --stop-after 1 --out "$D/resnet" --no-augment > "$D/resnet.log" 2>&1 || true
  C=$D
fi
E="--test-images 64 --calibration-images 128 --no-plots"
"$B" export "$C/demo/last.safetensors" -o "$D/lenet_default.o8" $E --report "$D/r1" > /dev/null 2>&1
"$B" export "$C/demo/last.safetensors" -o "$D/lenet_pt_sym.o8" --weights per-tensor --symmetric-activations --calibration minmax $E --report "$D/r2" > /dev/null 2>&1
"$B" export "$C/demo/last.safetensors" -o "$D/lenet_mse.o8" --calibration mse $E --report "$D/r3" > /dev/null 2>&1
if [ -f "$C/resnet/last.safetensors" ]; then
  "$B" export "$C/resnet/last.safetensors" -o "$D/resnet_default.o8" $E --report "$D/r4" > /dev/null 2>&1
fi
sha256sum "$D"/*.o8 "$D"/demo/*.o8 2>/dev/null | sed "s|$D/||"
