# shellcheck shell=bash
# Sourced by capi/run_examples.sh and bench/mcu_peer.sh: how the Cortex-M4F programs are built,
# run and measured, the same for octet and for its peer.
#
#   mcu_cc OUT.o SRC [CFLAGS...]     compile C or .S (-Wall -Wextra -Werror for C)
#   mcu_link OUT.elf OBJS/LIBS...   link with the examples' startup, board and linker script
#   mcu_run ELF > LOG               run on QEMU mps2-an386, instructions counted (-icount shift=0)
#   mcu_sizes ELF                   JSON: flash and RAM bytes by section
fw_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

MCU_ARCH=(-mcpu=cortex-m4 -mfpu=fpv4-sp-d16 -mfloat-abi=hard -mthumb)
MCU_CFLAGS=("${MCU_ARCH[@]}" -O2 -std=c11 -ffunction-sections -fdata-sections -g)

mcu_check_tools() {
  local t missing=()
  for t in arm-none-eabi-gcc arm-none-eabi-size qemu-system-arm; do
    command -v "$t" >/dev/null || missing+=("$t")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "missing ${missing[*]}: apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm" >&2
    return 1
  fi
}

mcu_cc() {
  local out=$1 src=$2
  shift 2
  case $src in
    *.S) arm-none-eabi-gcc "${MCU_ARCH[@]}" -x assembler-with-cpp -c "$src" -o "$out" "$@" ;;
    *) arm-none-eabi-gcc "${MCU_CFLAGS[@]}" -Wall -Wextra -Werror -I "$fw_dir" -c "$src" -o "$out" "$@" ;;
  esac
}

mcu_link() {
  local out=$1
  shift
  local dir
  dir=$(dirname "$out")
  mcu_cc "$dir/board.o" "$fw_dir/board.c"
  mcu_cc "$dir/startup.o" "$fw_dir/startup.c"
  # newlib-nano for memcpy/memset only: no C start files, no system calls.
  arm-none-eabi-gcc "${MCU_ARCH[@]}" -nostartfiles --specs=nano.specs -T "$fw_dir/mps2_an386.ld" \
    -Wl,--gc-sections -Wl,-z,noexecstack -Wl,-Map="${out%.elf}.map" "$dir/startup.o" "$dir/board.o" "$@" -o "$out"
}

mcu_run() {
  # Semihosting carries the output and the exit status; a hung program ends after 10 minutes.
  timeout 600 qemu-system-arm -M mps2-an386 -cpu cortex-m4 -nographic -monitor none \
    -serial none -chardev stdio,id=sh0 -semihosting-config enable=on,target=native,chardev=sh0 \
    -icount shift=0 -kernel "$1"
}

mcu_sizes() {
  arm-none-eabi-size -A "$1" | awk '
    $1 ~ /^\./ { s[$1] = $2 }
    END {
      flash = s[".vectors"] + s[".text"] + s[".rodata"] + s[".ARM.exidx"] + s[".data"]
      printf "{\"text\": %d, \"rodata\": %d, \"data\": %d, \"bss\": %d, \"flash\": %d, \"static_ram\": %d}\n", \
        s[".vectors"] + s[".text"], s[".rodata"] + s[".ARM.exidx"], s[".data"], s[".bss"], flash, s[".data"] + s[".bss"]
    }'
}
