# shellcheck shell=bash
# Sourced by bench/mcu.sh, bench/mcu_peer.sh and capi/run_examples.sh: the one generator of the
# microcontroller benchmarks' inputs, runtime/examples/mcu_inputs.rs (model.o8, images.bin,
# expected.bin, ops.txt per model; built in the root workspace, no candle), and the MODELS spec
# they all take.
#
#   mcu_inputs_build TARGET_DIR               builds it; sets MCU_INPUTS_BIN
#   mcu_inputs_make WORK "MODELS" IMAGES BASE one directory WORK/NAME per NAME=SPEC of MODELS
#                                             (SPEC: a name runtime/examples/mcu_inputs.rs
#                                             builds, MCU_BUILT_MODELS, or an .o8 path,
#                                             relative paths against BASE); sets MCU_MODEL_NAMES and
#                                             MCU_MODEL_SPECS (arrays, in order; .o8 paths
#                                             made absolute)
mcu_inputs_repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The models mcu_inputs builds itself (its usage line): LeNets in octet's single rounding and in
# TensorFlow Lite's double one, and the embedded op set (int8 input, double rounding).
MCU_BUILT_MODELS="lenet1 lenet3 lenet1-double lenet3-double embedded"

mcu_inputs_build() {
  CARGO_TARGET_DIR=$1 cargo build --release -q --manifest-path "$mcu_inputs_repo/Cargo.toml" \
    -p octet-runtime --example mcu_inputs
  MCU_INPUTS_BIN=$1/release/examples/mcu_inputs
}

mcu_inputs_make() {
  local work=$1 models=$2 images=$3 base=$4 m name spec seen=" "
  [ -n "${MCU_INPUTS_BIN:-}" ] || { echo "mcu_inputs_make: call mcu_inputs_build first" >&2; return 1; }
  MCU_MODEL_NAMES=()
  MCU_MODEL_SPECS=()
  for m in $models; do
    name=${m%%=*}
    spec=${m#*=}
    if [ "$name" = "$m" ] || [ -z "$spec" ] || ! [[ $name =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]*$ ]]; then
      echo "MODELS: '$m' is not NAME=SPEC (NAME of letters, digits, '_', '.', '-', not starting with '.' or '-'; SPEC one of $MCU_BUILT_MODELS or FILE.o8)" >&2
      return 1
    fi
    case $seen in *" $name "*)
      echo "MODELS: the name '$name' is given twice" >&2
      return 1
      ;;
    esac
    seen+="$name "
    case " $MCU_BUILT_MODELS " in
      *" $spec "*) ;;
      *)
        [[ $spec = /* ]] || spec=$base/$spec
        [ -f "$spec" ] || { echo "MODELS: $name=${m#*=}: no such file ($spec)" >&2; return 1; }
        ;;
    esac
    rm -rf "${work:?}/$name"
    "$MCU_INPUTS_BIN" "$work/$name" "$spec" "$images" >&2
    MCU_MODEL_NAMES+=("$name")
    MCU_MODEL_SPECS+=("$spec")
  done
  [ ${#MCU_MODEL_NAMES[@]} -gt 0 ] || { echo "MODELS is empty" >&2; return 1; }
}
