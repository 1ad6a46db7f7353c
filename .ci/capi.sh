#!/usr/bin/env bash
# CI for the C API (capi/, its own workspace): formatting, lints, its Rust tests (the committed
# header included), the bare-metal builds, then the C examples on the host and on QEMU
# (capi/run_examples.sh: any logit differing from the host runtime's fails).
set -euo pipefail
cd "$(dirname "$0")/../capi"

# shellcheck source=.ci/lib.sh
. ../.ci/lib.sh
need=()
command -v cc >/dev/null || need+=(gcc)
command -v arm-none-eabi-gcc >/dev/null || need+=(gcc-arm-none-eabi)
[ -e /usr/lib/arm-none-eabi/newlib ] || need+=(libnewlib-arm-none-eabi)
command -v qemu-system-arm >/dev/null || need+=(qemu-system-arm)
apt_install "${need[@]}"
rustup_targets thumbv7em-none-eabihf thumbv7m-none-eabi
rustup component add rustfmt clippy >/dev/null 2>&1 || true

cargo fmt -- --check
cargo clippy --release --all-targets -- -D warnings
cargo clippy --release --lib --target thumbv7em-none-eabihf -- -D warnings
cargo build --release --lib --target thumbv7m-none-eabi
cargo test --release
./run_examples.sh
