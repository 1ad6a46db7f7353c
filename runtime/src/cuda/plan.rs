//! Device activation layout: every tensor the model reads or writes gets one region holding
//! `max_batch` images (batch-major, HWC per image), placed first-fit so that tensors whose
//! lifetimes overlap never share memory (the same rule the exporter's arena plan follows, minus
//! the scratch the GPU kernels do not need). Lifetimes are op indices: from the op that writes a
//! tensor (−1 for the model input) to the last op that reads it (`n_ops` for the model output).
//! The input of a conv/fc directly followed by an add of its output lives until that add: the
//! GPU may fuse the add into the conv's epilogue, which then writes the add's output while
//! other blocks still read the conv's input.

use crate::{Model, OpKind};

/// Alignment of each region (bytes): keeps 4-byte loads of HWC rows with C_in % 4 = 0 aligned.
pub(crate) const REGION_ALIGN: usize = 256;

/// Where each tensor lives in the device activation buffer.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    /// Byte offset per tensor id (`None` for tensors the model never touches).
    pub offsets: Vec<Option<usize>>,
    /// Buffer size in bytes.
    pub total: usize,
}

/// Plans the layout for `max_batch` images. `None` when a size overflows `usize`.
pub(crate) fn plan(model: &Model, max_batch: usize) -> Option<Layout> {
    let n_t = model.num_tensors();
    let n_ops = model.num_ops() as i64;
    // (first, last) op index of each tensor's lifetime.
    let mut life: Vec<Option<(i64, i64)>> = vec![None; n_t];
    life[model.input_tensor() as usize] = Some((-1, -1));
    for o in model.ops() {
        let j = o.index as i64;
        for t in [Some(o.input0), o.input1].into_iter().flatten() {
            if let Some((_, last)) = life.get_mut(t as usize).and_then(|l| l.as_mut()) {
                *last = (*last).max(j);
            }
        }
        if let Some(l) = life.get_mut(o.output as usize) {
            *l = Some((j, j));
        }
    }
    if let Some(Some((_, last))) = life.get_mut(model.output_tensor() as usize) {
        *last = n_ops;
    }
    let ops: Vec<_> = model.ops().collect();
    for pair in ops.windows(2) {
        let (d, a) = (&pair[0], &pair[1]);
        let dense = matches!(d.kind, OpKind::Conv2d | OpKind::FullyConnected);
        if dense && a.kind == OpKind::Add && (a.input0 == d.output || a.input1 == Some(d.output)) {
            if let Some(Some((_, last))) = life.get_mut(d.input0 as usize) {
                *last = (*last).max(a.index as i64);
            }
        }
    }
    let mut offsets: Vec<Option<usize>> = vec![None; n_t];
    let mut placed: Vec<(usize, usize, i64, i64)> = Vec::new(); // start, end, first, last
    let mut total = 0usize;
    // Place in order of definition (the input first), as the tensors come to life.
    let mut order: Vec<usize> = (0..n_t).filter(|&t| life[t].is_some()).collect();
    order.sort_by_key(|&t| life[t].map(|l| l.0));
    for t in order {
        let (first, last) = life[t]?;
        let bytes = model.tensor(t as u16)?.len();
        let size = bytes
            .checked_mul(max_batch)?
            .checked_add(REGION_ALIGN - 1)?
            & !(REGION_ALIGN - 1);
        let mut busy: Vec<(usize, usize)> = placed
            .iter()
            .filter(|p| p.2 <= last && first <= p.3)
            .map(|p| (p.0, p.1))
            .collect();
        busy.sort_unstable();
        let mut at = 0usize;
        for (s, e) in busy {
            if at.checked_add(size)? <= s {
                break;
            }
            at = at.max(e);
        }
        let end = at.checked_add(size)?;
        placed.push((at, end, first, last));
        offsets[t] = Some(at);
        total = total.max(end);
    }
    Some(Layout { offsets, total })
}
