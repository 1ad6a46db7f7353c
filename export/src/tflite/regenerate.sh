#!/bin/sh
# Regenerates schema_generated.rs (the TFLite flatbuffer reader/builder) from schema.fbs.
#
# schema.fbs is TensorFlow Lite's schema, unchanged, from
#   github.com/tensorflow/tflite-micro @ 90b983c2b3f1480642e040bbd2ddb37b998f3424
#   path tensorflow/compiler/mlir/lite/schema/schema.fbs
# Refresh it with: git --git-dir=<tflite-micro>.git show <commit>:tensorflow/compiler/mlir/lite/schema/schema.fbs
#
# flatc 2.0.8 (Debian 12's flatbuffers-compiler; the crate `flatbuffers` 2.1 matches it) does
# not accept the `(deprecated)` attribute on enum and union values, which the schema puts on two
# (REDUCE_WINDOW, ReduceWindowOptions); the attribute is documentation only (the wire format is
# the same), so it is dropped before compiling. The output is rustfmt-ed so `cargo fmt` leaves it.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed -E 's/^(\s*[A-Za-z_]+( = [0-9]+)?) \(deprecated\),/\1,/' "$here/schema.fbs" > "$tmp/schema.fbs"
flatc --rust -o "$tmp" "$tmp/schema.fbs"
rustfmt --edition 2021 "$tmp/schema_generated.rs"
mv "$tmp/schema_generated.rs" "$here/schema_generated.rs"
