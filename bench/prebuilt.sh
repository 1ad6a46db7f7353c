# Sourced by the CPU benchmark scripts. `bench NAME [ARGS]` runs criterion bench NAME from
# source (cargo), or on a machine without a toolchain (the GPU host) from a prebuilt binary:
# BENCH_BIN_DIR holds it as NAME (`cargo bench --bench NAME --no-run`, copied) and COMMIT names
# the commit it was built from. ARGS go to criterion (a filter, --measurement-time, ...).
bench() {
  local name=$1
  shift
  if [ -n "${BENCH_BIN_DIR:-}" ]; then
    "$BENCH_BIN_DIR/$name" --bench "$@"
  else
    cargo bench --bench "$name" -- "$@"
  fi
}

# Builds bench NAME first (nothing to build with a prebuilt one).
bench_build() {
  [ -n "${BENCH_BIN_DIR:-}" ] || cargo bench --bench "$1" --no-run
}

# The commit the figures come from.
bench_commit() {
  echo "${COMMIT:-$(git describe --always --dirty --abbrev=12)}"
}
