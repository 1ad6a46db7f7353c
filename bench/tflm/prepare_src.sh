#!/usr/bin/env bash
# Lays out a TensorFlow Lite Micro source tree, with the third-party code its
# Makefile would download, from local bare git mirrors (this machine reaches no
# download site). Each dependency is taken at the commit TFLM's own download
# rules pin and patched the way they patch it, so the Makefile finds
# tensorflow/lite/micro/tools/make/downloads/* present and downloads nothing.
#
# Usage: bench/tflm/prepare_src.sh MIRROR_DIR TFLM_SRC_DIR
#   MIRROR_DIR holds bare repositories as MIRROR_DIR/<owner>+<name>/repo
#   (google+flatbuffers, google+gemmlowp, google+ruy, mborgerding+kissfft,
#   tensorflow+tflite-micro; with CMSIS=1 also ARM-software+CMSIS_6,
#   ARM-software+Cortex_DFP and ARM-software+CMSIS-NN). TFLM_SRC_DIR must not exist yet.
#   CMSIS=1: also CMSIS 6, Cortex_DFP and CMSIS-NN at the commits TFLM pins, for the
#   cortex_m_generic target with OPTIMIZED_KERNEL_DIR=cmsis_nn (bench/tflm_mcu.sh).
set -euo pipefail

# The TFLM commit these scripts were validated with (2026-08-20).
TFLM_COMMIT=90b983c2b3f1480642e040bbd2ddb37b998f3424
# Pins from tensorflow/lite/micro/tools/make/third_party_downloads.inc and
# flatbuffers_download.sh at TFLM_COMMIT.
GEMMLOWP_COMMIT=719139ce755a0f31cbf1c37f7f98adcc7fc9f425
RUY_COMMIT=d37128311b445e758136b8602d1bbd2a755e115d
FLATBUFFERS_REF=v25.9.23
KISSFFT_REF=v130

if [ $# -ne 2 ]; then
  echo "usage: $0 MIRROR_DIR TFLM_SRC_DIR" >&2
  exit 2
fi
mirror=$1
src=$2
if [ -e "$src" ]; then
  echo "error: $src already exists; give a new directory (nothing was changed)" >&2
  exit 1
fi

# extract REPO REF DEST: the tree of REF in MIRROR_DIR/REPO/repo, into DEST.
extract() {
  local git_dir="$mirror/$1/repo"
  if ! git --git-dir="$git_dir" rev-parse --verify -q "$2^{commit}" >/dev/null; then
    echo "error: $git_dir lacks $2; fetch github:${1/+//} first" >&2
    exit 1
  fi
  mkdir -p "$3"
  git --git-dir="$git_dir" archive "$2" | tar x -C "$3"
  # As download_and_extract.sh does: BUILD files would confuse Bazel.
  find "$3" -type f \( -name BUILD -o -name BUILD.bazel \) -delete
}

tmp="$src.partial"
rm -rf "$tmp"
extract tensorflow+tflite-micro "$TFLM_COMMIT" "$tmp"
dl="$tmp/tensorflow/lite/micro/tools/make/downloads"
extract google+gemmlowp "$GEMMLOWP_COMMIT" "$dl/gemmlowp"
extract google+ruy "$RUY_COMMIT" "$dl/ruy"
extract google+flatbuffers "$FLATBUFFERS_REF" "$dl/flatbuffers"
patch -s -p1 -d "$dl/flatbuffers" <"$tmp/tensorflow/lite/micro/tools/make/flatbuffers.patch"
extract mborgerding+kissfft "$KISSFFT_REF" "$dl/kissfft"
patch -s -p1 -d "$dl/kissfft" <"$tmp/third_party/kissfft/kissfft.patch"
if [ "${CMSIS:-0}" = 1 ]; then
  # Pins from tensorflow/lite/micro/tools/make/ext_libs/cmsis_download.sh and
  # cmsis_nn_download.sh at TFLM_COMMIT.
  extract ARM-software+CMSIS_6 5782d6f8057906d360f4b95ec08a2354afe5c9b9 "$dl/cmsis"
  extract ARM-software+Cortex_DFP c2c70a97a20fb355815e2ead3d4a40e35a4a3cdf "$dl/cmsis/Cortex_DFP"
  extract ARM-software+CMSIS-NN 4ab83cc3cc98fb85ed6dafb55e8ca02f1628dcae "$dl/cmsis_nn"
fi
# Pigweed (googlesource, not GitHub) serves only TFLM's unit tests; the
# library and our runner never include it. An empty directory makes the
# Makefile's parse-time pigweed_download.sh skip its git clone.
mkdir -p "$dl/pigweed"
echo "$TFLM_COMMIT" >"$tmp/TFLM_COMMIT"
mv "$tmp" "$src"
echo "prepared $src (TFLM $TFLM_COMMIT)"
