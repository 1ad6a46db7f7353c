//! Launching: how the lowered steps run on the GPU. Per step, the kernel (for a conv/fc: the
//! warp kernel, a tensor-core tile or the dp4a GEMM), its grid and its arguments, in the
//! order of the kernels' signatures in kernels.cu and conv_mma.cu. Every launch is queued on
//! the model's stream; nothing here synchronises.

use cudarc::driver::{result, sys, CudaEvent, CudaFunction, LaunchConfig, PushKernelArg};

use crate::format::InputEncoding;
use crate::requant::{OutputQuant, Rounding};

use super::kernels::MmaTile;
use super::lower::{
    Add, Dense, Depthwise, Pad, Pool, PoolKind, Reshape, Residual, Softmax, TfliteAdd,
};
use super::upload::{DeviceConsts, DeviceStep};
use super::{CudaModel, Result};

/// fully_connected uses the warp-per-output kernel up to this batch, the GEMM above it.
pub const FC_WARP_MAX_BATCH: usize = 8;

/// Threads per block of the element-wise kernels.
const THREADS: u32 = 256;
/// Grid cap of the grid-stride kernels.
const MAX_BLOCKS: u64 = 1 << 20;
/// GEMM tile (must match BM, BN in kernels.cu).
const TILE_M: usize = 64;
const TILE_N: usize = 64;

/// Labels and end events of the launches of one profiled run.
pub(super) type Marks = Vec<(String, CudaEvent)>;

fn grid_stride(total: usize) -> LaunchConfig {
    let blocks = (total as u64).div_ceil(THREADS as u64).clamp(1, MAX_BLOCKS) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// The tensor-core kernels' fused-add arguments, in their order: the residual's address
/// (0: no add), the residual's and the conv side's (zero point, multiplier), then the add's
/// shift, output zero point and clamp.
struct Epilogue {
    res: u64,
    residual: (i32, i32),
    conv: (i32, i32),
    n: i32,
    out: OutputQuant,
}

impl Epilogue {
    /// No fused add.
    const NONE: Epilogue = Epilogue {
        res: 0,
        residual: (0, 0),
        conv: (0, 0),
        n: 1,
        out: OutputQuant {
            zero_point: 0,
            act_min: -128,
            act_max: 127,
            // octet's add has its own arithmetic: no rounding of the model's applies.
            rounding: Rounding::Single,
        },
    };

    /// `add` in the epilogue, its residual `r` read from the activations at `base`.
    fn of(add: &Add, r: &Residual, base: u64) -> Epilogue {
        Epilogue {
            res: base + r.at as u64,
            residual: (r.z, r.m),
            conv: (r.conv_z, r.conv_m),
            n: add.rq.n,
            out: add.rq.out,
        }
    }
}

impl CudaModel {
    /// Launches the input conversion and every op for `batch` images (no synchronisation).
    /// With `marks`, records a timing event after each launch.
    pub(super) fn enqueue(&self, batch: usize, mut marks: Option<&mut Marks>) -> Result<()> {
        let timed = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let mut mark = |label: &dyn Fn() -> String| -> Result<()> {
            if let Some(m) = marks.as_mut() {
                m.push((label(), self.stream.record_event(timed)?));
            }
            Ok(())
        };
        self.launch_input(batch)?;
        mark(&|| format!("input {} -> hwc", self.input_encoding.name()))?;
        let mut fused_add = false;
        for (i, step) in self.steps.iter().enumerate() {
            match step {
                DeviceStep::Dense(d) => {
                    let next_add = match self.steps.get(i + 1) {
                        Some(DeviceStep::Add(a)) if self.fuse_adds => {
                            a.fusable.as_ref().map(|r| (a, r))
                        }
                        _ => None,
                    };
                    let (kernel, fused) = self.launch_dense(d, batch, next_add)?;
                    fused_add = fused;
                    mark(&|| dense_label(d, kernel, fused))?;
                }
                DeviceStep::Add(_) if fused_add => fused_add = false,
                DeviceStep::Add(a) => {
                    self.launch_add(a, batch)?;
                    mark(&|| "add".into())?;
                }
                DeviceStep::Depthwise(d) => {
                    self.launch_depthwise(d, batch)?;
                    mark(&|| "depthwise_conv2d".into())?;
                }
                DeviceStep::Pool(p) => {
                    self.launch_pool(p, batch)?;
                    mark(&|| p.kind.name().into())?;
                }
                DeviceStep::TfliteAdd(a) => {
                    self.launch_tflite_add(a, batch)?;
                    mark(&|| "tflite_add".into())?;
                }
                DeviceStep::Softmax(s) => {
                    self.launch_softmax(s, batch)?;
                    mark(&|| "softmax".into())?;
                }
                DeviceStep::Pad(p) => {
                    self.launch_pad(p, batch)?;
                    mark(&|| "pad".into())?;
                }
                DeviceStep::Reshape(r) => {
                    self.launch_reshape(r, batch)?;
                    mark(&|| "reshape".into())?;
                }
            }
        }
        Ok(())
    }

    /// The address of activation offset `off`.
    fn act(&self, off: usize) -> u64 {
        self.acts_ptr + off as u64
    }

    /// The input as the model's encoding says → the int8 HWC input tensor: planar u8 pixels
    /// transposed (q = pixel − 128), HWC u8 values flipped (q = u − 128), or the int8 tensor
    /// copied as it is.
    fn launch_input(&self, batch: usize) -> Result<()> {
        let (c, h, w) = self.input_chw;
        let total = (batch * self.input_len) as i64;
        let x = self.act(self.input_off);
        let flip: i32 = match self.input_encoding {
            InputEncoding::PixelsU8Chw => {
                let (c, hw) = (c as i32, (h * w) as i32);
                let mut l = self.stream.launch_builder(&self.kernels.input);
                l.arg(&self.pixels_ptr).arg(&x).arg(&total).arg(&c).arg(&hw);
                // SAFETY: pointers and sizes come from the plan (regions hold max_batch ≥
                // batch images); the kernel's signature matches these arguments.
                unsafe { l.launch(grid_stride(total as usize)) }?;
                return Ok(());
            }
            InputEncoding::U8Hwc => 0x80,
            InputEncoding::I8Hwc => 0,
        };
        let mut l = self.stream.launch_builder(&self.kernels.input_hwc);
        l.arg(&self.pixels_ptr).arg(&x).arg(&total).arg(&flip);
        // SAFETY: as above.
        unsafe { l.launch(grid_stride(total as usize)) }?;
        Ok(())
    }

    fn launch_pool(&self, p: &Pool, batch: usize) -> Result<()> {
        let (x, y) = (self.act(p.x), self.act(p.y));
        let g = &p.g;
        let total = (batch * g.ho as usize * g.wo as usize * g.cin as usize) as i64;
        let f = match p.kind {
            PoolKind::Max => &self.kernels.max_pool,
            PoolKind::Avg => &self.kernels.avg_pool,
            PoolKind::TfliteAvg => &self.kernels.tflite_avg_pool,
        };
        let mut l = self.stream.launch_builder(f);
        l.arg(&x).arg(&y).arg(&total);
        l.arg(&g.h).arg(&g.w).arg(&g.cin).arg(&g.ho).arg(&g.wo);
        l.arg(&g.kh).arg(&g.kw).arg(&g.sh).arg(&g.sw);
        if p.kind == PoolKind::Avg {
            // octet's average pool has no padding.
            l.arg(&p.zin).arg(&p.m0).arg(&p.n).arg(&p.q.zero_point);
        } else {
            l.arg(&g.pt).arg(&g.pl);
        }
        l.arg(&p.q.act_min).arg(&p.q.act_max);
        // SAFETY: as in `launch_input`.
        unsafe { l.launch(grid_stride(total as usize)) }?;
        Ok(())
    }

    fn launch_depthwise(&self, d: &Depthwise<DeviceConsts>, batch: usize) -> Result<()> {
        let (x, y, c, g) = (self.act(d.x), self.act(d.y), &d.consts, &d.g);
        let total = (batch * g.ho as usize * g.wo as usize * g.cout as usize) as i64;
        let mut l = self.stream.launch_builder(&self.kernels.depthwise);
        l.arg(&x)
            .arg(&y)
            .arg(&c.w)
            .arg(&c.rq)
            .arg(&c.padv)
            .arg(&total);
        l.arg(&g.h)
            .arg(&g.w)
            .arg(&g.cin)
            .arg(&g.ho)
            .arg(&g.wo)
            .arg(&g.cout);
        l.arg(&g.kh)
            .arg(&g.kw)
            .arg(&g.sh)
            .arg(&g.sw)
            .arg(&g.pt)
            .arg(&g.pl);
        l.arg(&g.dh).arg(&g.dw).arg(&d.dm).arg(&d.ld);
        l.arg(&d.q.zero_point).arg(&d.q.act_min).arg(&d.q.act_max);
        // SAFETY: as in `launch_input`; the constants are this step's uploads.
        unsafe { l.launch(grid_stride(total as usize)) }?;
        Ok(())
    }

    fn launch_tflite_add(&self, a: &TfliteAdd, batch: usize) -> Result<()> {
        let (x0, x1, y) = (self.act(a.a), self.act(a.b), self.act(a.y));
        let total = (batch * a.len) as i64;
        let mut l = self.stream.launch_builder(&self.kernels.tflite_add);
        l.arg(&x0).arg(&x1).arg(&y).arg(&total);
        l.arg(&a.z[0]).arg(&a.z[1]).arg(&a.ls);
        for (m0, n) in &a.rq {
            l.arg(m0).arg(n);
        }
        l.arg(&a.q.zero_point).arg(&a.q.act_min).arg(&a.q.act_max);
        // SAFETY: as in `launch_input`.
        unsafe { l.launch(grid_stride(total as usize)) }?;
        Ok(())
    }

    fn launch_softmax(&self, s: &Softmax, batch: usize) -> Result<()> {
        let (x, y) = (self.act(s.x), self.act(s.y));
        let rows = (batch * s.rows) as i64;
        let mut l = self.stream.launch_builder(&self.kernels.softmax);
        l.arg(&x).arg(&y).arg(&rows).arg(&s.depth);
        l.arg(&s.m0).arg(&s.n).arg(&s.diff_min);
        // SAFETY: as in `launch_input`.
        unsafe { l.launch(grid_stride(rows as usize)) }?;
        Ok(())
    }

    fn launch_pad(&self, p: &Pad, batch: usize) -> Result<()> {
        let (x, y, g) = (self.act(p.x), self.act(p.y), &p.g);
        let total = (batch * g.ho as usize * g.wo as usize * g.cin as usize) as i64;
        let mut l = self.stream.launch_builder(&self.kernels.pad);
        l.arg(&x).arg(&y).arg(&total);
        l.arg(&g.h).arg(&g.w).arg(&g.cin).arg(&g.ho).arg(&g.wo);
        l.arg(&g.pt).arg(&g.pl).arg(&p.value);
        // SAFETY: as in `launch_input`.
        unsafe { l.launch(grid_stride(total as usize)) }?;
        Ok(())
    }

    /// A reshape: images are contiguous in both regions, so one copy of `batch · len` bytes.
    fn launch_reshape(&self, r: &Reshape, batch: usize) -> Result<()> {
        let (x, y) = (self.act(r.x), self.act(r.y));
        // SAFETY: both regions hold max_batch ≥ batch images of `len` bytes and do not overlap
        // (the plan keeps the input alive while the output is written); queued on the model's
        // stream like the kernels (a copy node when captured into a graph).
        unsafe { result::memcpy_dtod_async(y, x, batch * r.len, self.stream.cu_stream()) }?;
        Ok(())
    }

    fn launch_add(&self, a: &Add, batch: usize) -> Result<()> {
        let (x0, x1, y) = (self.act(a.a), self.act(a.b), self.act(a.y));
        let total = (batch * a.len) as i64;
        let rq = &a.rq;
        let mut l = self.stream.launch_builder(&self.kernels.add);
        l.arg(&x0).arg(&x1).arg(&y).arg(&total);
        l.arg(&rq.z0).arg(&rq.m0).arg(&rq.z1).arg(&rq.m1).arg(&rq.n);
        l.arg(&rq.out.zero_point)
            .arg(&rq.out.act_min)
            .arg(&rq.out.act_max);
        // SAFETY: as in `launch_input` (16-byte steps: regions are REGION_ALIGN-aligned).
        unsafe { l.launch(grid_stride((total as usize).div_ceil(16))) }?;
        Ok(())
    }

    /// The tensor-core tile for a conv/fc of `m` output pixels, or `None` for the dp4a kernel
    /// (tensor cores off or absent). C_in % 16 == 0 loads 16-byte pieces of taps directly;
    /// other channel counts gather words. Of the tiles that fit C_out, the largest whose grid
    /// has at least one block per two multiprocessors, else the smallest. (H100, ResNet-18 at
    /// b256: a 128×128 grid of 128 blocks on 132 SMs still ran the 512-channel convs 2.7×
    /// faster than 128×64 tiles: the larger tile's reuse outweighs the idle SMs.)
    fn mma_tile(&self, d: &Dense<DeviceConsts>, m: usize) -> Option<&(MmaTile, CudaFunction)> {
        if !self.tensor_cores {
            return None;
        }
        let gather = d.g.cin % 16 != 0 || !d.consts.aligned16;
        if let Some(t) = self.forced_tile.and_then(|i| self.kernels.mma.get(i)) {
            if t.0.gather == gather {
                return Some(t);
            }
        }
        let n = d.g.cout as usize;
        let mut pick = None;
        for t in self.kernels.mma.iter() {
            if t.0.gather != gather || (t.0.bn > 64 && n <= 64) {
                continue;
            }
            pick = Some(t);
            if 2 * m.div_ceil(t.0.bm) * n.div_ceil(t.0.bn) >= self.sms {
                break;
            }
        }
        pick
    }

    /// Launches one conv/fc, with the add `add` that follows it fused into its epilogue where
    /// the kernel can (a tensor-core tile, C_out % 16 == 0); returns the kernel's name and
    /// whether the add was fused.
    fn launch_dense(
        &self,
        d: &Dense<DeviceConsts>,
        batch: usize,
        add: Option<(&Add, &Residual)>,
    ) -> Result<(&'static str, bool)> {
        if d.fc && batch <= FC_WARP_MAX_BATCH {
            self.launch_fc_warp(d, batch)?;
            return Ok(("fc_warp", false));
        }
        let g = &d.g;
        let m = batch * (g.ho * g.wo) as usize; // ≤ 2^31 − 1: checked against max_batch
        let m32 = m as i32;
        let tile = self.mma_tile(d, m);
        let fuse = add.filter(|_| tile.is_some() && g.cout % 16 == 0);
        let (name, f, cfg) = match tile {
            Some((t, f)) => (
                t.name,
                f,
                gemm_grid(m, g.cout, (t.bm, t.bn), t.threads, t.smem()),
            ),
            None => (
                "conv2d_dp4a",
                &self.kernels.conv,
                gemm_grid(m, g.cout, (TILE_M, TILE_N), THREADS, 0),
            ),
        };
        // Both kernels take the same arguments.
        let mut l = self.stream.launch_builder(f);
        let (x, y) = (self.act(d.x), self.act(fuse.map_or(d.y, |(a, _)| a.y)));
        let c = &d.consts;
        l.arg(&x).arg(&y).arg(&c.w).arg(&c.rq).arg(&c.padv);
        l.arg(&m32)
            .arg(&g.h)
            .arg(&g.w)
            .arg(&g.cin)
            .arg(&g.ho)
            .arg(&g.wo)
            .arg(&g.cout);
        l.arg(&g.kh).arg(&g.kw).arg(&g.sh).arg(&g.sw);
        l.arg(&g.pt).arg(&g.pl).arg(&g.dh).arg(&g.dw);
        l.arg(&d.cin_words);
        l.arg(&d.q.zero_point).arg(&d.q.act_min).arg(&d.q.act_max);
        let e = match fuse {
            Some((a, r)) => Epilogue::of(a, r, self.acts_ptr),
            None => Epilogue::NONE,
        };
        if tile.is_some() {
            l.arg(&e.res).arg(&e.residual.0).arg(&e.residual.1);
            l.arg(&e.conv.0).arg(&e.conv.1).arg(&e.n);
            l.arg(&e.out.zero_point)
                .arg(&e.out.act_min)
                .arg(&e.out.act_max);
        }
        // SAFETY: pointers and sizes come from the plan and the uploaded constants; the mma
        // kernels' 16-byte loads need C_in % 16 == 0 (checked by `mma_tile`), 16-byte aligned
        // regions (REGION_ALIGN) and constants (driver allocations are 256-byte aligned).
        unsafe { l.launch(cfg) }?;
        Ok((name, fuse.is_some()))
    }

    /// fully_connected with one warp per (image, output).
    fn launch_fc_warp(&self, d: &Dense<DeviceConsts>, batch: usize) -> Result<()> {
        let b = batch as i32;
        let warps = batch as u64 * d.g.cout as u64;
        let blocks = (warps * 32).div_ceil(THREADS as u64) as u32;
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let (x, y, c) = (self.act(d.x), self.act(d.y), &d.consts);
        let mut l = self.stream.launch_builder(&self.kernels.fc_warp);
        l.arg(&x).arg(&y).arg(&c.w).arg(&c.rq);
        l.arg(&b).arg(&d.g.cin).arg(&d.cin_words).arg(&d.g.cout);
        l.arg(&d.q.zero_point).arg(&d.q.act_min).arg(&d.q.act_max);
        // SAFETY: pointers and sizes come from the plan and the uploaded constants.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }
}

/// The grid of a GEMM kernel over `m` output pixels × `cout` channels in `(bm, bn)` tiles.
fn gemm_grid(
    m: usize,
    cout: i32,
    (bm, bn): (usize, usize),
    threads: u32,
    smem: u32,
) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (
            m.div_ceil(bm) as u32,
            (cout as usize).div_ceil(bn) as u32,
            1,
        ),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: smem,
    }
}

/// A conv/fc step's profile label: shape, fused add, kernel.
fn dense_label(d: &Dense<DeviceConsts>, kernel: &str, fused: bool) -> String {
    let kind = if d.fc { "fc" } else { "conv" };
    let add = if fused { " + add" } else { "" };
    let g = &d.g;
    let stride = if g.sh == g.sw {
        g.sh.to_string()
    } else {
        format!("{}x{}", g.sh, g.sw)
    };
    format!(
        "{kind} {}x{} s{stride} {}->{} {}x{}{add} [{kernel}]",
        g.kh, g.kw, g.cin, g.cout, g.ho, g.wo
    )
}
