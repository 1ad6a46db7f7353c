//! Host emulation of the GPU path, for machines without a GPU (the GPU tests check the real
//! thing). `conv2d_dp4a` is a line-by-line transliteration of kernels.cu (blocks, the two
//! phases between `__syncthreads`, the 4×4 thread tiles), checked against the scalar reference
//! on random shapes and windows in both roundings: the kernels' index math, packing, padding
//! and epilogue. `forward` runs a whole model's lowered steps (lower.rs) over one activation
//! buffer laid out by plan.rs, each step as its kernel computes it (`fc_warp` at small batches,
//! an add fused into the conv before it as the tensor-core epilogue computes it, one output
//! value per thread for the element-wise kernels), checked against the scalar `Model::run` on
//! the test models, every op kind, in both roundings: the lowering's offsets, parameters and
//! fusion decisions. The double rounding's arithmetic is requant.rs's here (the kernels'
//! transliteration of it is checked on the GPU).

use super::lower::{
    pack_weights, rq_words, Dense, DenseConsts, Depthwise, Pad, Pool, PoolKind, Residual, Softmax,
    Step, TfliteAdd,
};
use super::{launch::FC_WARP_MAX_BATCH, plan};
use crate::kernels::{
    scalar, ConvParams, I32Array, Kernels, OutputQuant, Placement, Shape, SoftmaxParams,
};
use crate::requant::{requantize_double, AddRequant, Rounding};
use crate::Model;
use proptest::prelude::*;

fn dp4a(a: i32, b: i32, c: i32) -> i32 {
    let (a, b) = (a.to_le_bytes(), b.to_le_bytes());
    (0..4).fold(c, |s, i| {
        s.wrapping_add(a[i] as i8 as i32 * b[i] as i8 as i32)
    })
}

fn pack4(b: [i32; 4]) -> i32 {
    i32::from_le_bytes([b[0] as u8, b[1] as u8, b[2] as u8, b[3] as u8])
}

/// The kernels' `requant`: acc · M0 · 2^(shift − 31) with n = 31 − shift, in `rounding`
/// (single: not yet saturated).
fn requant(acc: i32, m0: i32, n: i32, rounding: Rounding) -> i64 {
    match rounding {
        Rounding::Single => (acc as i64 * m0 as i64 + (1i64 << (n - 1))) >> n,
        Rounding::Double => requantize_double(acc, m0, 31 - n) as i64,
    }
}

fn finish(sum: i32, r: &[i32], q: OutputQuant) -> i8 {
    let acc = sum.wrapping_add(r[0]);
    q.clamp64(requant(acc, r[1], r[2], q.rounding) + q.zero_point as i64)
}

struct Geom {
    m: usize,
    h: usize,
    w: usize,
    cin: usize,
    ho: usize,
    wo: usize,
    cout: usize,
    kh: usize,
    kw: usize,
    /// Strides, top/left padding, dilations.
    sh: usize,
    sw: usize,
    pt: usize,
    pl: usize,
    dh: usize,
    dw: usize,
    cin_words: usize,
}

#[allow(clippy::needless_range_loop)]
fn conv2d_dp4a(
    x: &[i8],
    y: &mut [i8],
    w: &[i32],
    rq: &[i32],
    padv: &[i8],
    g: &Geom,
    q: OutputQuant,
) {
    const BM: usize = 64;
    const BN: usize = 64;
    const BKW: usize = 8;
    let kwords = g.kh * g.kw * g.cin_words;
    for bx in 0..g.m.div_ceil(BM) {
        for by in 0..g.cout.div_ceil(BN) {
            let (m0, n0) = (bx * BM, by * BN);
            let mut acc = [[[0i32; 4]; 4]; 256];
            let mut k0 = 0;
            while k0 < kwords {
                let mut a_s = [[0i32; BM]; BKW];
                let mut b_s = [[0i32; BN]; BKW];
                for tid in 0..256 {
                    let am = tid & (BM - 1);
                    let ak = tid >> 6;
                    let gm = m0 + am;
                    let row_ok = gm < g.m;
                    let (mut b, mut oy, mut ox) = (0, 0, 0);
                    if row_ok {
                        ox = gm % g.wo;
                        let t = gm / g.wo;
                        oy = t % g.ho;
                        b = t / g.ho;
                    }
                    let iy0 = (oy * g.sh) as isize - g.pt as isize;
                    let ix0 = (ox * g.sw) as isize - g.pl as isize;
                    for s in 0..2 {
                        let kk = ak + 4 * s;
                        let gk = k0 + kk;
                        let mut v = 0;
                        if row_ok && gk < kwords {
                            let tap = gk / g.cin_words;
                            let c = (gk - tap * g.cin_words) * 4;
                            let (ky, kx) = (tap / g.kw, tap % g.kw);
                            let (iy, ix) = (iy0 + (ky * g.dh) as isize, ix0 + (kx * g.dw) as isize);
                            let get = |src: &dyn Fn(usize) -> i8, j: usize| {
                                if c + j < g.cin {
                                    src(j) as i32
                                } else {
                                    0
                                }
                            };
                            if iy >= 0 && iy < g.h as isize && ix >= 0 && ix < g.w as isize {
                                let base =
                                    ((b * g.h + iy as usize) * g.w + ix as usize) * g.cin + c;
                                let src = |j: usize| x[base + j];
                                v = pack4([get(&src, 0), get(&src, 1), get(&src, 2), get(&src, 3)]);
                            } else {
                                let src = |j: usize| padv[c + j];
                                v = pack4([get(&src, 0), get(&src, 1), get(&src, 2), get(&src, 3)]);
                            }
                        }
                        a_s[kk][am] = v;
                    }
                    let bk = tid & (BKW - 1);
                    let bn = tid >> 3;
                    for s in 0..2 {
                        let nn = bn + 32 * s;
                        let (gn, gk) = (n0 + nn, k0 + bk);
                        b_s[bk][nn] = if gn < g.cout && gk < kwords {
                            w[gn * kwords + gk]
                        } else {
                            0
                        };
                    }
                }
                for tid in 0..256 {
                    let (tx, ty) = (tid & 15, tid >> 4);
                    for kk in 0..BKW {
                        for i in 0..4 {
                            for j in 0..4 {
                                acc[tid][i][j] = dp4a(
                                    a_s[kk][ty + 16 * i],
                                    b_s[kk][tx + 16 * j],
                                    acc[tid][i][j],
                                );
                            }
                        }
                    }
                }
                k0 += BKW;
            }
            for tid in 0..256 {
                let (tx, ty) = (tid & 15, tid >> 4);
                for i in 0..4 {
                    let m = m0 + ty + 16 * i;
                    if m >= g.m {
                        continue;
                    }
                    for j in 0..4 {
                        let n = n0 + tx + 16 * j;
                        if n < g.cout {
                            y[m * g.cout + n] = finish(acc[tid][i][j], &rq[4 * n..4 * n + 4], q);
                        }
                    }
                }
            }
        }
    }
}

fn le(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A random window over an h×w input: kernel, strides, four paddings, dilations; `None` when
/// the padded input is smaller than the dilated kernel.
#[derive(Clone, Copy, Debug)]
struct Window {
    k: (usize, usize),
    s: (usize, usize),
    /// top, left, bottom, right.
    pad: [usize; 4],
    d: (usize, usize),
}

impl Window {
    /// Output (h, w) over an h×w input (FORMAT.md, "Windows").
    fn out(&self, h: usize, w: usize) -> Option<(usize, usize)> {
        let axis = |n: usize, k: usize, s: usize, d: usize, before: usize, after: usize| {
            let e = (k - 1) * d + 1;
            (n + before + after >= e).then(|| (n + before + after - e) / s + 1)
        };
        let [pt, pl, pb, pr] = self.pad;
        Some((
            axis(h, self.k.0, self.s.0, self.d.0, pt, pb)?,
            axis(w, self.k.1, self.s.1, self.d.1, pl, pr)?,
        ))
    }
}

fn windows() -> impl Strategy<Value = Window> {
    let k = (1usize..=4, 1usize..=4);
    let s = (1usize..=3, 1usize..=3);
    let pad = [0usize..=2, 0usize..=2, 0usize..=2, 0usize..=2];
    let d = (1usize..=2, 1usize..=2);
    (k, s, pad, d).prop_map(|(k, s, pad, d)| Window { k, s, pad, d })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn emulated_conv_matches_scalar(
        seed in any::<u64>(), batch in 1usize..=3,
        cin in 1usize..=9, h in 1usize..=9, w in 1usize..=9, cout in 1usize..=70,
        win in windows(), with_pad in any::<bool>(), zin in -128i32..=127, zout in -128i32..=127,
        relu in any::<bool>(), double in any::<bool>(), zero_m0 in any::<bool>(),
    ) {
        let Some((ho, wo)) = win.out(h, w) else { return Ok(()) };
        let mut r = Lcg(seed | 1);
        let ((kh, kw), k) = (win.k, win.k.0 * win.k.1 * cin);
        let weights: Vec<i8> = (0..cout * k).map(|_| ((r.next() % 255) as i32 - 127) as i8).collect();
        let bias: Vec<i32> = (0..cout).map(|_| (r.next() % 20001) as i32 - 10000).collect();
        let m0s: Vec<i32> = (0..cout)
            .map(|c| if zero_m0 && c % 3 == 0 { 0 } else { (1 << 30) + (r.next() % (1 << 30)) as i32 })
            .collect();
        let shifts: Vec<i32> = (0..cout).map(|_| -((r.next() % 12) as i32) - 6).collect();
        let pad_values: Vec<i8> = if with_pad { (0..cin).map(|_| r.next() as i8).collect() } else { Vec::new() };
        let x: Vec<i8> = (0..batch * h * w * cin).map(|_| r.next() as i8).collect();
        let rounding = if double { Rounding::Double } else { Rounding::Single };
        let act_min = if relu { zout } else { -128 };
        let q = OutputQuant { zero_point: zout, act_min, act_max: 127, rounding };
        let (bb, mb, sb) = (le(&bias), le(&m0s), le(&shifts));
        let p = ConvParams {
            input: Shape { c: cin, h, w },
            output: Shape { c: cout, h: ho, w: wo },
            window: Placement {
                kernel_h: kh, kernel_w: kw, stride_h: win.s.0, stride_w: win.s.1,
                pad_top: win.pad[0], pad_left: win.pad[1], dilation_h: win.d.0, dilation_w: win.d.1,
            },
            weights: &weights,
            bias: I32Array::new(&bb), multiplier: I32Array::new(&mb), shift: I32Array::new(&sb),
            pad_values: &pad_values, input_zero_point: zin, out: q,
            packed: crate::kernels::Packed::NONE,
        };
        let img_in = h * w * cin;
        let img_out = ho * wo * cout;
        let mut want = vec![0i8; batch * img_out];
        for b in 0..batch {
            scalar::conv2d(&p, &x[b * img_in..][..img_in], &mut want[b * img_out..][..img_out]);
        }
        let (wp, cin_words) = pack_weights(&weights, cout, kh * kw, cin);
        let rq: Vec<i32> = (0..cout).flat_map(|c| rq_words(bias[c], m0s[c], shifts[c])).collect();
        let padv: Vec<i8> = (0..cin).map(|c| p.pad_value(c)).collect();
        let g = Geom {
            m: batch * ho * wo, h, w, cin, ho, wo, cout, kh, kw,
            sh: win.s.0, sw: win.s.1, pt: win.pad[0], pl: win.pad[1], dh: win.d.0, dw: win.d.1,
            cin_words,
        };
        let mut got = vec![0i8; batch * img_out];
        conv2d_dp4a(&x, &mut got, &wp, &rq, &padv, &g, q);
        prop_assert_eq!(got, want);
    }
}

/// xorshift for the emulation test.
pub(crate) struct Lcg(pub u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// One step's bytes of `batch` images: region `off` of `acts`, `len` bytes per image.
fn region(acts: &[i8], off: usize, len: usize, batch: usize) -> &[i8] {
    &acts[off..off + len * batch]
}

/// Element `i` of a batch-major HWC tensor of `ho × wo × c` per image: (image, y, x, channel).
fn at(i: usize, ho: usize, wo: usize, c: usize) -> (usize, usize, usize, usize) {
    let (ch, t) = (i % c, i / c);
    (t / wo / ho, (t / wo) % ho, t % wo, ch)
}

/// Row `iy`, column `ix` of a window's tap, or `None` in the padding.
fn inside(iy: isize, ix: isize, h: usize, w: usize) -> Option<(usize, usize)> {
    (iy >= 0 && ix >= 0 && (iy as usize) < h && (ix as usize) < w)
        .then_some((iy as usize, ix as usize))
}

/// `input_u8_to_hwc` (planar u8 pixels, q = pixel − 128) or `input_hwc` (HWC, flipped by 0x80
/// for u8 values, as is for the int8 tensor), as the model's encoding says.
fn input_to_hwc(model: &Model, px: &[u8], x: &mut [i8]) {
    use crate::format::InputEncoding;
    let (c, h, w) = model.input_shape();
    for (i, v) in x.iter_mut().enumerate() {
        *v = match model.input_encoding() {
            InputEncoding::PixelsU8Chw => {
                let (ch, t) = (i % c, i / c);
                let (p, b) = (t % (h * w), t / (h * w));
                (px[(b * c + ch) * h * w + p] ^ 0x80) as i8
            }
            InputEncoding::U8Hwc => (px[i] ^ 0x80) as i8,
            InputEncoding::I8Hwc => px[i] as i8,
        };
    }
}

/// `fc_warp`: one dp4a reduction per (image, output) over the packed weight row.
fn fc_warp(x: &[i8], y: &mut [i8], d: &Dense<DenseConsts>, batch: usize) {
    let (k, n, kw) = (d.g.cin as usize, d.g.cout as usize, d.cin_words as usize);
    for b in 0..batch {
        let xr = &x[b * k..][..k];
        for o in 0..n {
            let acc = (0..kw).fold(0, |acc, i| {
                let c = 4 * i;
                let v = pack4([0, 1, 2, 3].map(|j| xr.get(c + j).map_or(0, |&q| q as i32)));
                dp4a(v, d.consts.w[o * kw + i], acc)
            });
            y[b * n + o] = finish(acc, &d.consts.rq[4 * o..4 * o + 4], d.q);
        }
    }
}

/// A conv/fc as the GEMM kernels compute it.
fn dense_gemm(x: &[i8], y: &mut [i8], d: &Dense<DenseConsts>, batch: usize) {
    let u = |v: i32| v as usize;
    let g = Geom {
        m: batch * u(d.g.ho * d.g.wo),
        h: u(d.g.h),
        w: u(d.g.w),
        cin: u(d.g.cin),
        ho: u(d.g.ho),
        wo: u(d.g.wo),
        cout: u(d.g.cout),
        kh: u(d.g.kh),
        kw: u(d.g.kw),
        sh: u(d.g.sh),
        sw: u(d.g.sw),
        pt: u(d.g.pt),
        pl: u(d.g.pl),
        dh: u(d.g.dh),
        dw: u(d.g.dw),
        cin_words: u(d.cin_words),
    };
    let c = &d.consts;
    conv2d_dp4a(x, y, &c.w, &c.rq, &c.padv, &g, d.q);
}

/// `max_pool` / `avg_pool` / `tflite_avg_pool`: one output value per thread, over the
/// window's taps inside the input (octet's avg_pool has no padding).
fn pool(x: &[i8], y: &mut [i8], p: &Pool) {
    let g = &p.g;
    let u = |v: i32| v as usize;
    let (h, w, c) = (u(g.h), u(g.w), u(g.cin));
    let (pt, pl) = match p.kind {
        PoolKind::Avg => (0, 0),
        PoolKind::Max | PoolKind::TfliteAvg => (g.pt as isize, g.pl as isize),
    };
    for (i, out) in y.iter_mut().enumerate() {
        let (b, oy, ox, ch) = at(i, u(g.ho), u(g.wo), c);
        let (iy0, ix0) = ((oy * u(g.sh)) as isize - pt, (ox * u(g.sw)) as isize - pl);
        let taps: Vec<i32> = (0..g.kh as isize)
            .flat_map(|ky| (0..g.kw as isize).map(move |kx| (iy0 + ky, ix0 + kx)))
            .filter_map(|(iy, ix)| inside(iy, ix, h, w))
            .map(|(iy, ix)| x[((b * h + iy) * w + ix) * c + ch] as i32)
            .collect();
        let sum: i32 = taps.iter().sum();
        let v = match p.kind {
            PoolKind::Max => taps.iter().fold(-128, |m, &q| m.max(q)) as i64,
            PoolKind::Avg => {
                let acc = sum - p.zin * taps.len() as i32;
                requant(acc, p.m0, p.n, p.q.rounding) + p.q.zero_point as i64
            }
            PoolKind::TfliteAvg => {
                let count = (taps.len() as i32).max(1);
                let half = if sum > 0 { count / 2 } else { -(count / 2) };
                ((sum + half) / count) as i64
            }
        };
        *out = p.q.clamp64(v);
    }
}

/// `depthwise_conv2d`: one output value per thread over the packed `[taps][ld]` weight bytes.
fn depthwise(x: &[i8], y: &mut [i8], d: &Depthwise<DenseConsts>) {
    let (g, u) = (&d.g, |v: i32| v as usize);
    let (h, w, cin, cout, ld) = (u(g.h), u(g.w), u(g.cin), u(g.cout), u(d.ld));
    let bytes: Vec<i8> = d
        .consts
        .w
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .map(|b| b as i8)
        .collect();
    for (i, out) in y.iter_mut().enumerate() {
        let (b, oy, ox, oc) = at(i, u(g.ho), u(g.wo), cout);
        let ic = oc / u(d.dm);
        let mut acc = 0i32;
        for ky in 0..u(g.kh) {
            for kx in 0..u(g.kw) {
                let iy = (oy * u(g.sh) + ky * u(g.dh)) as isize - g.pt as isize;
                let ix = (ox * u(g.sw) + kx * u(g.dw)) as isize - g.pl as isize;
                let v = match inside(iy, ix, h, w) {
                    Some((iy, ix)) => x[((b * h + iy) * w + ix) * cin + ic],
                    None => d.consts.padv[ic],
                };
                acc = acc.wrapping_add(v as i32 * bytes[(ky * u(g.kw) + kx) * ld + oc] as i32);
            }
        }
        *out = finish(acc, &d.consts.rq[4 * oc..4 * oc + 4], d.q);
    }
}

/// `tflite_add`: three requantizations per byte, each saturated to int32.
fn tflite_add(a: &[i8], b: &[i8], t: &TfliteAdd) -> Vec<i8> {
    let rq = |acc: i32, (m0, n): (i32, i32)| {
        let v = requant(acc, m0, n, t.q.rounding);
        v.clamp(i32::MIN as i64, i32::MAX as i64) as i32
    };
    let side = |q: i8, z: i32, r| rq((q as i32 - z).wrapping_shl(t.ls as u32), r);
    a.iter()
        .zip(b)
        .map(|(&qa, &qb)| {
            let sum = side(qa, t.z[0], t.rq[0]).wrapping_add(side(qb, t.z[1], t.rq[1]));
            t.q.clamp64(rq(sum, t.rq[2]) as i64 + t.q.zero_point as i64)
        })
        .collect()
}

/// `softmax`: one thread per row; its fixed-point arithmetic is the scalar kernel's, run here
/// with the step's parameters (M0, the shift back from n, diff_min) and the model's rounding.
fn softmax(x: &[i8], y: &mut [i8], s: &Softmax, rounding: Rounding) {
    let p = SoftmaxParams {
        depth: s.depth as usize,
        input_multiplier: s.m0,
        input_left_shift: 31 - s.n,
        diff_min: s.diff_min,
        rounding,
    };
    scalar::softmax(&p, x, y);
}

/// `pad_hwc`: the input byte at (oy − pt, ox − pl), the value outside.
fn pad(x: &[i8], y: &mut [i8], p: &Pad) {
    let (g, u) = (&p.g, |v: i32| v as usize);
    for (i, out) in y.iter_mut().enumerate() {
        let (b, oy, ox, ch) = at(i, u(g.ho), u(g.wo), u(g.cin));
        let (iy, ix) = (oy as isize - g.pt as isize, ox as isize - g.pl as isize);
        *out = match inside(iy, ix, u(g.h), u(g.w)) {
            Some((iy, ix)) => x[((b * u(g.h) + iy) * u(g.w) + ix) * u(g.cin) + ch],
            None => p.value as i8,
        };
    }
}

/// `add_byte`: `(q0 − z0)·m0 + (q1 − z1)·m1`, shifted, offset and clamped.
fn add_byte(rq: &AddRequant, q0: i8, q1: i8) -> i8 {
    let t = (q0 as i64 - rq.z0 as i64) * rq.m0 as i64 + (q1 as i64 - rq.z1 as i64) * rq.m1 as i64;
    let v = ((t + (1i64 << (rq.n - 1))) >> rq.n) + rq.out.zero_point as i64;
    v.max(rq.out.act_min as i64).min(rq.out.act_max as i64) as i8
}

/// Whether byte ranges `a` and `b` of the activation buffer share no byte.
fn disjoint(a: (usize, usize), b: (usize, usize)) -> bool {
    a.0 + a.1 <= b.0 || b.0 + b.1 <= a.0
}

/// `lower`'s steps. (Its error is not formatted: that would call into the driver library,
/// which this test binary must not need.)
fn lowered(model: &Model, layout: &plan::Layout, batch: usize) -> Vec<Step<DenseConsts>> {
    let Ok(steps) = super::lower::lower(model, layout, batch) else {
        panic!("lowering failed");
    };
    steps
}

/// A step other than a conv/fc or octet's add over `acts` for `batch` images: where its
/// output goes and its bytes.
fn element_step(
    acts: &[i8],
    step: &Step<DenseConsts>,
    batch: usize,
    rounding: Rounding,
) -> (usize, Vec<i8>) {
    let len = |g: &super::lower::Geom| (g.h * g.w * g.cin) as usize;
    let out_len = |g: &super::lower::Geom, c: i32| (g.ho * g.wo * c) as usize * batch;
    match step {
        Step::Dense(_) | Step::Add(_) => unreachable!("forward runs these itself"),
        Step::Depthwise(d) => {
            let mut y = vec![0; out_len(&d.g, d.g.cout)];
            depthwise(region(acts, d.x, len(&d.g), batch), &mut y, d);
            (d.y, y)
        }
        Step::Pool(p) => {
            let mut y = vec![0; out_len(&p.g, p.g.cin)];
            pool(region(acts, p.x, len(&p.g), batch), &mut y, p);
            (p.y, y)
        }
        Step::TfliteAdd(t) => {
            let (a, b) = (
                region(acts, t.a, t.len, batch),
                region(acts, t.b, t.len, batch),
            );
            (t.y, tflite_add(a, b, t))
        }
        Step::Softmax(s) => {
            let n = s.rows * s.depth as usize;
            let mut y = vec![0; n * batch];
            softmax(region(acts, s.x, n, batch), &mut y, s, rounding);
            (s.y, y)
        }
        Step::Pad(p) => {
            let mut y = vec![0; out_len(&p.g, p.g.cin)];
            pad(region(acts, p.x, len(&p.g), batch), &mut y, p);
            (p.y, y)
        }
        Step::Reshape(r) => (r.y, region(acts, r.x, r.len, batch).to_vec()),
    }
}

/// The GPU forward of `batch` images on the host: `model` lowered for exactly `batch` images,
/// with the adds fused where launch.rs fuses them on the tensor cores (`fuse`: C_out % 16 == 0)
/// or never; returns the logits.
fn forward(model: &Model, pixels: &[u8], batch: usize, fuse: bool) -> Vec<i8> {
    let layout = plan::plan(model, batch).unwrap();
    let steps = lowered(model, &layout, batch);
    let mut acts = vec![0i8; layout.total];
    let off = |t: u16| layout.offsets[t as usize].unwrap();
    let input = off(model.input_tensor());
    let n_in = model.input_len();
    input_to_hwc(model, pixels, &mut acts[input..input + n_in * batch]);
    let mut fused = false;
    for (i, step) in steps.iter().enumerate() {
        match step {
            Step::Dense(d) => {
                let (n_x, n_y) = (d.g.h * d.g.w * d.g.cin, d.g.ho * d.g.wo * d.g.cout);
                let (n_x, n_y) = (n_x as usize, n_y as usize);
                let x = region(&acts, d.x, n_x, batch).to_vec();
                let mut y = vec![0i8; n_y * batch];
                let warp = d.fc && batch <= FC_WARP_MAX_BATCH;
                if warp {
                    fc_warp(&x, &mut y, d, batch);
                } else {
                    dense_gemm(&x, &mut y, d, batch);
                }
                let add = match steps.get(i + 1) {
                    Some(Step::Add(a)) if fuse && !warp && d.g.cout % 16 == 0 => {
                        a.fusable.as_ref().map(|r| (a, r))
                    }
                    _ => None,
                };
                fused = add.is_some();
                let (at, out) = match add {
                    Some((a, r)) => (a.y, fused_add(&acts, &y, a, r, (d.x, n_x), batch)),
                    None => (d.y, y),
                };
                acts[at..at + out.len()].copy_from_slice(&out);
            }
            Step::Add(_) if fused => fused = false,
            Step::Add(a) => {
                let y: Vec<i8> = (0..a.len * batch)
                    .map(|j| add_byte(&a.rq, acts[a.a + j], acts[a.b + j]))
                    .collect();
                acts[a.y..a.y + y.len()].copy_from_slice(&y);
            }
            step => {
                let (at, y) = element_step(&acts, step, batch, model.rounding());
                acts[at..at + y.len()].copy_from_slice(&y);
            }
        }
    }
    let out = off(model.output_tensor());
    acts[out..out + model.output_len() * batch].to_vec()
}

/// The conv epilogue's fused add: the conv's int8 output `conv` as one input, the residual
/// read from `acts`; the add's output region must not overlap the conv's input `x` (offset,
/// bytes per image) or the residual, which other blocks still read.
fn fused_add(
    acts: &[i8],
    conv: &[i8],
    a: &super::lower::Add,
    r: &Residual,
    x: (usize, usize),
    batch: usize,
) -> Vec<i8> {
    let y = (a.y, a.len * batch);
    assert!(disjoint(y, (x.0, x.1 * batch)) && disjoint(y, (r.at, a.len * batch)));
    let rq = AddRequant {
        z0: r.z,
        m0: r.m,
        z1: r.conv_z,
        m1: r.conv_m,
        ..a.rq
    };
    let res = region(acts, r.at, a.len, batch);
    res.iter()
        .zip(conv)
        .map(|(&q0, &q1)| add_byte(&rq, q0, q1))
        .collect()
}

/// The test models in both roundings: octet's (conv, fc, max/avg pool, add; u8 pixels), the
/// embedded net (every op of the TFLite set, int8 input) and a LeNet over u8 HWC input.
fn test_models() -> Vec<(String, Vec<u8>)> {
    use octet_testkit::{embedded_net, hand_model, lenet, lenet_on, small_resnet};
    let mut models = Vec::new();
    for rounding in [1u8, 2] {
        let mut octets = [
            ("hand", hand_model()),
            ("lenet", lenet(1)),
            ("small_resnet", small_resnet(2)),
        ];
        for (name, b) in octets.iter_mut() {
            b.rounding = rounding;
            models.push((format!("{name} r{rounding}"), b.encode()));
        }
        for seed in [3, 4] {
            let name = format!("embedded_net({rounding}, {seed})");
            models.push((name, embedded_net(rounding, seed).encode()));
        }
        let mut hwc = lenet_on(3, 5);
        (hwc.rounding, hwc.input_encoding) = (rounding, crate::format::INPUT_U8_HWC);
        models.push((format!("lenet u8-hwc r{rounding}"), hwc.encode()));
    }
    models
}

#[test]
fn emulated_forward_matches_the_cpu() {
    let mut fused_any = false;
    for (mi, (name, bytes)) in test_models().iter().enumerate() {
        let model = Model::parse(bytes).unwrap();
        for batch in [1, FC_WARP_MAX_BATCH + 1] {
            let mut r = Lcg(0x9e37 + (mi * 16 + batch) as u64);
            let pixels: Vec<u8> = (0..batch * model.input_len())
                .map(|_| r.next() as u8)
                .collect();
            let mut arena = vec![0u8; model.arena_bytes_for(Kernels::Scalar, batch)];
            let want = model
                .run_with(Kernels::Scalar, &pixels, &mut arena)
                .unwrap()
                .to_vec();
            for fuse in [false, true] {
                let got = forward(&model, &pixels, batch, fuse);
                assert_eq!(got, want, "{name}, batch {batch}, fused adds {fuse}");
            }
        }
        let layout = plan::plan(&model, 1).unwrap();
        let steps = lowered(&model, &layout, 1);
        fused_any |= steps
            .iter()
            .any(|s| matches!(s, Step::Add(a) if a.fusable.is_some()));
    }
    assert!(fused_any, "no test model has an add that the GPU may fuse");
}
