//! The SGD update of every parameter in one CUDA kernel launch (instead of some six candle
//! ops per parameter, each a launch and a fresh tensor): d = g + λ·p; b = μ·b + d;
//! p = p − lr·b, updating p and b in place. Rounded operation by operation exactly as the
//! candle ops of the CPU path compute it (including their `x·a + 0` affine), so CPU and GPU
//! steps agree bit for bit. The parameters stay separate tensors: the launch takes a table
//! of their addresses as its argument (PyTorch's multi-tensor apply does the same), so a
//! step is one launch per [`TABLE`] parameters. The kernel is `train-ops/kernels/fused_sgd.cu`,
//! loaded through the training ops' one loader ([`FUSED_SGD`]).

use candle_core::cuda_backend::cudarc::driver::{
    DevicePtr, DeviceRepr, LaunchConfig, PushKernelArg,
};
use candle_core::{bail, DType, Result, Storage, Tensor};
use octet_train_ops::kernels::FUSED_SGD;

/// Parameters per launch. The table is the kernel's by-value argument and must stay under
/// CUDA's 4 KiB of kernel parameters: 64 entries take 2,056 bytes. ResNet-18 has 62.
pub(crate) const TABLE: usize = 64;

/// Elements one thread block updates.
const CHUNK: usize = 4096;
const THREADS: u32 = 256;

/// The kernel's `Table`.
#[repr(C)]
#[derive(Clone, Copy)]
struct Table {
    p: [u64; TABLE],
    buf: [u64; TABLE],
    g: [u64; TABLE],
    n: [i32; TABLE],
    first_block: [i32; TABLE + 1],
    count: i32,
}

// SAFETY: plain old data laid out as the kernel's struct (repr(C): three arrays of 8-byte
// pointers, then 4-byte ints; 2,056 bytes, no padding).
unsafe impl DeviceRepr for Table {}

const _: () = assert!(std::mem::size_of::<Table>() == 2056 && std::mem::size_of::<Table>() <= 4096);

/// Whether [`step`] takes this parameter: f32 tensors on a CUDA device, of one shape.
pub(crate) fn supports(param: &Tensor, velocity: &Tensor, grad: &Tensor) -> bool {
    param.device().is_cuda()
        && [param.dtype(), velocity.dtype(), grad.dtype()] == [DType::F32; 3]
        && param.shape() == velocity.shape()
        && param.shape() == grad.shape()
}

/// One parameter's update: the parameter and its momentum buffer (both updated in place,
/// both contiguous, as `Var`s are) and its gradient.
pub(crate) struct Update<'a> {
    pub param: &'a Tensor,
    pub velocity: &'a Tensor,
    pub grad: &'a Tensor,
}

/// The factors of one step, as candle's affine ops take them: f32 (`T::from_f64`).
#[derive(Clone, Copy)]
struct Factors {
    lr: f32,
    momentum: f32,
    weight_decay: f32,
    decay: i32,
    use_momentum: i32,
}

/// One SGD step of every update in `updates` (each passed [`supports`]), all on one CUDA
/// device. `momentum == 0` leaves the buffers untouched (the update is then `d`), like the
/// CPU path.
pub(crate) fn step(
    updates: &[Update<'_>],
    lr: f64,
    momentum: f64,
    weight_decay: f64,
) -> Result<()> {
    let f = Factors {
        lr: lr as f32,
        momentum: momentum as f32,
        weight_decay: weight_decay as f32,
        decay: i32::from(weight_decay != 0.0),
        use_momentum: i32::from(momentum != 0.0),
    };
    let grads = updates
        .iter()
        .map(|u| u.grad.contiguous())
        .collect::<Result<Vec<_>>>()?;
    let all: Vec<(&Tensor, &Tensor, &Tensor)> = updates
        .iter()
        .zip(&grads)
        .filter(|(u, _)| u.param.elem_count() > 0)
        .map(|(u, g)| (u.param, u.velocity, g))
        .collect();
    for part in all.chunks(TABLE) {
        launch(part, f)?;
    }
    Ok(())
}

/// One launch over at most [`TABLE`] non-empty updates.
fn launch(part: &[(&Tensor, &Tensor, &Tensor)], f: Factors) -> Result<()> {
    let guards: Vec<_> = part
        .iter()
        .flat_map(|(p, v, g)| [p, v, g])
        .map(|t| t.storage_and_layout())
        .collect();
    let mut dev = None;
    let mut views = Vec::with_capacity(guards.len());
    for (i, (s, l)) in guards.iter().enumerate() {
        let what = ["parameter", "momentum buffer", "gradient"][i % 3];
        let Storage::Cuda(cs) = &**s else {
            bail!("fused SGD: a {what} is not on a CUDA device")
        };
        let Some((a, b)) = l.contiguous_offsets() else {
            bail!("fused SGD: a {what} is not contiguous")
        };
        let d = dev.get_or_insert_with(|| cs.device.clone());
        if d.id() != cs.device.id() {
            bail!("fused SGD: parameters on more than one CUDA device")
        }
        views.push(cs.as_cuda_slice::<f32>()?.slice(a..b));
    }
    let Some(dev) = dev else { return Ok(()) };
    let (stream, func) = FUSED_SGD.func(&dev, "sgd_step")?;
    let ptrs: Vec<_> = views.iter().map(|v| v.device_ptr(&stream)).collect();
    let mut t = Table {
        p: [0; TABLE],
        buf: [0; TABLE],
        g: [0; TABLE],
        n: [0; TABLE],
        first_block: [0; TABLE + 1],
        count: part.len() as i32,
    };
    let mut ranges = Vec::with_capacity(views.len());
    let mut blocks = 0usize;
    for (k, v) in views.chunks(3).enumerate() {
        let n = v[0].len();
        if v[1].len() != n || v[2].len() != n {
            bail!("fused SGD: parameter, momentum and gradient differ in size")
        }
        let Ok(ni) = i32::try_from(n) else {
            bail!("fused SGD: {n} elements (at most {})", i32::MAX)
        };
        let [p, b, g] = [ptrs[3 * k].0, ptrs[3 * k + 1].0, ptrs[3 * k + 2].0];
        (t.p[k], t.buf[k], t.g[k], t.n[k]) = (p, b, g, ni);
        t.first_block[k] = blocks as i32;
        blocks += n.div_ceil(CHUNK);
        let bytes = (n * 4) as u64;
        ranges.extend([
            (p, p + bytes, true),
            (b, b + bytes, true),
            (g, g + bytes, false),
        ]);
    }
    let Ok(grid) = i32::try_from(blocks) else {
        bail!(
            "fused SGD: {blocks} blocks in one launch (at most {})",
            i32::MAX
        )
    };
    t.first_block[part.len()] = grid;
    if !writes_disjoint(&ranges) {
        bail!("fused SGD: a parameter or momentum buffer shares memory with another operand")
    }
    let cfg = LaunchConfig {
        grid_dim: (grid as u32, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut b = stream.launch_builder(&func);
    b.arg(&t).arg(&f.lr).arg(&f.momentum).arg(&f.weight_decay);
    b.arg(&f.decay).arg(&f.use_momentum);
    // SAFETY: argument types and counts match sgd_step; every table entry holds n[k] f32s
    // in each of its three ranges. The kernel writes parameters and momentum buffers through
    // addresses taken from read guards: sound because no write range overlaps any other
    // range (checked above), all device work of the process is ordered on this one stream,
    // and the optimiser owns the buffers (checkpoints read them only between steps), as an
    // in-place op would.
    unsafe { b.launch(cfg)? };
    drop(ptrs);
    Ok(())
}

/// Whether every written range `(start, end, true)` overlaps no other range: written
/// ranges are disjoint among themselves (adjacent once sorted), and each read range meets
/// at most the one written range that starts last before its end.
fn writes_disjoint(ranges: &[(u64, u64, bool)]) -> bool {
    let mut writes: Vec<(u64, u64)> = ranges.iter().filter(|r| r.2).map(|r| (r.0, r.1)).collect();
    writes.sort_unstable();
    if writes.windows(2).any(|w| w[1].0 < w[0].1) {
        return false;
    }
    ranges.iter().filter(|r| !r.2).all(|&(a, b, _)| {
        let before = writes.partition_point(|w| w.0 < b);
        before == 0 || writes[before - 1].1 <= a
    })
}

#[cfg(test)]
mod tests {
    use super::{step, writes_disjoint, Update, CHUNK, TABLE};
    use candle_core::{Device, Result, Tensor};
    use proptest::prelude::*;

    /// The update of one element as the CPU path rounds it (Rust never fuses `a * b + c`).
    fn reference(p: f32, b: f32, g: f32, lr: f32, m: f32, wd: f32) -> (f32, f32) {
        let mut d = g;
        if wd != 0.0 {
            d += p * wd + 0.0;
        }
        let mut b = b;
        if m != 0.0 {
            d += b * m + 0.0;
            b = d;
        }
        (p - (d * lr + 0.0), b)
    }

    fn bits(t: &Tensor) -> Result<Vec<u32>> {
        let v = t.to_device(&Device::Cpu)?.to_vec1::<f32>()?;
        Ok(v.iter().map(|x| x.to_bits()).collect())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(12))]

        /// Many tensors (more than one table, so more than one launch), sizes around the
        /// block's chunk and empty ones, one gradient shared by two parameters: bit for bit
        /// the CPU path's rounding. Skips where there is no CUDA device.
        #[test]
        fn multi_tensor_step_is_the_reference(
            sizes in proptest::collection::vec(
                prop_oneof![Just(0usize), 1..9usize, (CHUNK - 2)..(CHUNK + 3), 1..3 * CHUNK],
                TABLE + 1..2 * TABLE + 20,
            ),
            seed in any::<u64>(),
            lr in 1e-4f32..1.0,
            momentum in prop_oneof![Just(0.0f32), 0.5f32..0.99],
            wd in prop_oneof![Just(0.0f32), 1e-5f32..1e-2],
        ) {
            let Ok(dev) = Device::new_cuda(0) else {
                println!("skipping: no CUDA device");
                return Ok(());
            };
            let mut state = seed | 1;
            let mut rand = |n: usize, scale: f32| -> Vec<f32> {
                (0..n).map(|_| {
                    state ^= state << 13; state ^= state >> 7; state ^= state << 17;
                    ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * scale
                }).collect()
            };
            let host: Vec<[Vec<f32>; 3]> = sizes
                .iter()
                .map(|&n| [rand(n, 2.0), rand(n, 1.0), rand(n, 4.0)])
                .collect();
            let up = |v: &[f32]| Tensor::from_slice(v, v.len(), &dev);
            let tensors = host
                .iter()
                .map(|[p, b, g]| Ok([up(p)?, up(b)?, up(g)?]))
                .collect::<Result<Vec<_>>>()?;
            // Parameters 0 and 1 of one size read one gradient tensor.
            let shared = sizes[0] == sizes[1];
            let updates: Vec<Update> = tensors
                .iter()
                .enumerate()
                .map(|(i, [p, b, g])| Update {
                    param: p,
                    velocity: b,
                    grad: if shared && i == 1 { &tensors[0][2] } else { g },
                })
                .collect();
            step(&updates, lr as f64, momentum as f64, wd as f64)?;
            for (i, ([p, b, g], [tp, tb, _])) in host.iter().zip(&tensors).enumerate() {
                let g = if shared && i == 1 { &host[0][2] } else { g };
                let (want_p, want_b): (Vec<u32>, Vec<u32>) = (0..p.len())
                    .map(|j| {
                        let (p, b) = reference(p[j], b[j], g[j], lr, momentum, wd);
                        (p.to_bits(), b.to_bits())
                    })
                    .unzip();
                prop_assert!(bits(tp)? == want_p, "tensor {} (n = {}): parameter", i, p.len());
                prop_assert!(bits(tb)? == want_b, "tensor {} (n = {}): momentum", i, p.len());
            }
        }
    }

    #[test]
    fn overlapping_writes_are_refused() {
        // Disjoint: two written, one read between them, one read shared by nobody.
        let ok = [
            (0, 10, true),
            (20, 30, true),
            (10, 20, false),
            (40, 50, false),
        ];
        assert!(writes_disjoint(&ok));
        // Reads may overlap reads (two parameters with one gradient tensor).
        assert!(writes_disjoint(&[
            (0, 10, true),
            (20, 30, false),
            (20, 30, false)
        ]));
        // A write inside a write, a read over a write, a read starting inside a write.
        assert!(!writes_disjoint(&[(0, 100, true), (40, 50, true)]));
        assert!(!writes_disjoint(&[(40, 50, true), (0, 100, false)]));
        assert!(!writes_disjoint(&[
            (0, 50, true),
            (60, 70, true),
            (45, 55, false)
        ]));
        assert!(!writes_disjoint(&[(0, 10, true), (0, 10, false)]));
    }
}
