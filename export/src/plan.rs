//! Arena planning: every activation tensor gets an offset in one working arena. Greedy by size,
//! largest first, each at the lowest offset that does not overlap a placed buffer whose lifetime
//! overlaps its own (TFLite Micro's greedy planner). Scratch is not planned here: each kernel
//! set states its own when the model is prepared (runtime/FORMAT.md, "Arena").

/// Offsets are aligned to this (SIMD loads; the arena itself starts 16-aligned in the runtime).
pub const ALIGN: usize = 16;

/// A buffer live from op `first` to op `last` inclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Buffer {
    pub size: usize,
    pub first: usize,
    pub last: usize,
}

impl Buffer {
    pub fn overlaps_in_time(&self, o: &Buffer) -> bool {
        self.first <= o.last && o.first <= self.last
    }
}

fn align_up(x: usize, a: usize) -> usize {
    x.div_ceil(a) * a
}

/// Places `buffers`; returns each offset (multiples of `align`) and the exact end of the highest.
pub fn plan(buffers: &[Buffer], align: usize) -> (Vec<usize>, usize) {
    let align = align.max(1);
    let mut order: Vec<usize> = (0..buffers.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(buffers[i].size), buffers[i].first, i));
    let mut offsets = vec![0usize; buffers.len()];
    let mut placed: Vec<usize> = Vec::new();
    let mut total = 0;
    for i in order {
        let b = buffers[i];
        if b.size == 0 {
            continue;
        }
        let mut live: Vec<(usize, usize)> = placed
            .iter()
            .filter(|&&j| buffers[j].overlaps_in_time(&b))
            .map(|&j| (offsets[j], offsets[j] + buffers[j].size))
            .collect();
        live.sort_unstable();
        let mut at = 0;
        for (start, end) in live {
            if at + b.size <= start {
                break;
            }
            at = at.max(align_up(end, align));
        }
        offsets[i] = at;
        total = total.max(at + b.size);
        placed.push(i);
    }
    (offsets, total)
}

/// Where every tensor of a model lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArenaPlan {
    pub tensor_offsets: Vec<usize>,
    /// Exact end of the highest tensor: the header's arena_bytes.
    pub arena_bytes: usize,
}

/// Plans tensors of `sizes` bytes whose lifetimes come from `ops` (each op's input tensors and
/// its output, in execution order): a tensor lives from the op writing it (the input: op 0) to
/// the last op reading it (the output: to the end); an op's output overlaps its inputs in time,
/// so it never shares their bytes. Tensors no op writes and that are not the input get no room.
pub fn plan_tensors(
    sizes: &[usize],
    ops: &[(Vec<usize>, usize)],
    input: usize,
    output: usize,
) -> ArenaPlan {
    let n_ops = ops.len();
    let nt = sizes.len();
    let mut first = vec![usize::MAX; nt];
    let mut last = vec![0usize; nt];
    first[input] = 0;
    for (i, (inputs, out)) in ops.iter().enumerate() {
        first[*out] = first[*out].min(i);
        last[*out] = last[*out].max(i);
        for &t in inputs {
            last[t] = last[t].max(i);
        }
    }
    last[output] = n_ops;
    let buffers: Vec<Buffer> = (0..nt)
        .map(|t| Buffer {
            size: if first[t] == usize::MAX { 0 } else { sizes[t] },
            first: first[t].min(n_ops),
            last: last[t],
        })
        .collect();
    let (offsets, arena_bytes) = plan(&buffers, ALIGN);
    ArenaPlan {
        tensor_offsets: offsets,
        arena_bytes,
    }
}

/// [`plan_tensors`] for a quantized model.
pub fn plan_model(model: &crate::qmodel::QModel) -> ArenaPlan {
    let sizes: Vec<usize> = model.tensors.iter().map(|t| t.shape.len()).collect();
    let ops: Vec<(Vec<usize>, usize)> = model
        .ops
        .iter()
        .map(|op| (op.inputs.clone(), op.output))
        .collect();
    plan_tensors(&sizes, &ops, model.input, model.output)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn check(buffers: &[Buffer], align: usize) -> Result<(), TestCaseError> {
        let (off, total) = plan(buffers, align);
        let sum: usize = buffers.iter().map(|b| align_up(b.size, align)).sum();
        prop_assert!(total <= sum, "{total} > {sum}");
        for (i, a) in buffers.iter().enumerate() {
            prop_assert_eq!(off[i] % align, 0);
            prop_assert!(off[i] + a.size <= total);
            for (j, b) in buffers.iter().enumerate().skip(i + 1) {
                if a.size > 0 && b.size > 0 && a.overlaps_in_time(b) {
                    let disjoint = off[i] + a.size <= off[j] || off[j] + b.size <= off[i];
                    prop_assert!(disjoint, "{i} {a:?}@{} and {j} {b:?}@{}", off[i], off[j]);
                }
            }
        }
        Ok(())
    }

    fn buffers() -> impl Strategy<Value = Vec<Buffer>> {
        proptest::collection::vec((0usize..5000, 0usize..30, 0usize..12), 0..40).prop_map(|v| {
            v.into_iter()
                .map(|(size, first, len)| Buffer {
                    size,
                    first,
                    last: first + len,
                })
                .collect()
        })
    }

    proptest! {
        #[test]
        fn live_buffers_never_overlap(b in buffers()) {
            check(&b, 1)?;
            check(&b, ALIGN)?;
        }
    }

    #[test]
    fn dead_buffers_are_reused() {
        // A chain: each buffer is live with its neighbours only → two slots suffice.
        let b: Vec<Buffer> = (0..6)
            .map(|i| Buffer {
                size: 100,
                first: i,
                last: i + 1,
            })
            .collect();
        let (_, total) = plan(&b, 1);
        assert_eq!(total, 200);
    }
}
