//! What the inference benches share.

use octet_runtime::{Kernels, Model, PreparedOp};

/// `model` prepared for kernel set `k` as `octet run` prepares it: each op's parameters once,
/// and its weights packed in that set's layouts (each set timed over its own). The table and
/// the packed region live as long as the bench process.
pub fn prepared<'a>(model: Model<'a>, k: Kernels) -> Model<'a> {
    let table: &'a mut [PreparedOp<'a>] =
        Box::leak(vec![PreparedOp::EMPTY; model.num_ops()].into_boxed_slice());
    let packed: &'a mut [u8] =
        Box::leak(vec![0u8; model.packed_bytes(k).expect("packed")].into_boxed_slice());
    model.prepare_packed(table, packed, k).expect("prepare")
}
