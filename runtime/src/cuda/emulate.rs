//! Host emulation of the GPU path, for machines without a GPU (the GPU tests check the real
//! thing). `conv2d_dp4a` is a line-by-line transliteration of kernels.cu (blocks, the two
//! phases between `__syncthreads`, the 4×4 thread tiles), checked against the scalar reference
//! on random shapes: the kernels' index math, packing, padding and epilogue. `forward` runs a
//! whole model's lowered steps (lower.rs) over one activation buffer laid out by plan.rs, each
//! step as its kernel computes it (`fc_warp` at small batches, an add fused into the conv
//! before it as the tensor-core epilogue computes it), checked against `Model::run` on the
//! bundled test models: the lowering's offsets, parameters and fusion decisions.

use super::lower::{pack_weights, rq_words, Dense, DenseConsts, Pool, Residual, Step};
use super::{launch::FC_WARP_MAX_BATCH, plan};
use crate::kernels::{scalar, ConvParams, I32Array, OutputQuant, Shape};
use crate::requant::AddRequant;
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

fn finish(sum: i32, r: &[i32], q: OutputQuant) -> i8 {
    let acc = sum.wrapping_add(r[0]) as i64;
    let v = ((acc * r[1] as i64 + (1i64 << (r[2] - 1))) >> r[2]) + q.zero_point as i64;
    q.clamp64(v)
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
    stride: usize,
    pad: usize,
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
                    let iy0 = (oy * g.stride) as isize - g.pad as isize;
                    let ix0 = (ox * g.stride) as isize - g.pad as isize;
                    for s in 0..2 {
                        let kk = ak + 4 * s;
                        let gk = k0 + kk;
                        let mut v = 0;
                        if row_ok && gk < kwords {
                            let tap = gk / g.cin_words;
                            let c = (gk - tap * g.cin_words) * 4;
                            let (ky, kx) = (tap / g.kw, tap % g.kw);
                            let (iy, ix) = (iy0 + ky as isize, ix0 + kx as isize);
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

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn emulated_conv_matches_scalar(
        seed in any::<u64>(), batch in 1usize..=3,
        cin in 1usize..=9, h in 1usize..=9, w in 1usize..=9, cout in 1usize..=70,
        kh in 1usize..=4, kw in 1usize..=4, stride in 1usize..=3, pad in 0usize..=2,
        with_pad in any::<bool>(), zin in -128i32..=127, zout in -128i32..=127,
        relu in any::<bool>(),
    ) {
        prop_assume!(h + 2 * pad >= kh && w + 2 * pad >= kw);
        let mut r = Lcg(seed | 1);
        let ho = (h + 2 * pad - kh) / stride + 1;
        let wo = (w + 2 * pad - kw) / stride + 1;
        let k = kh * kw * cin;
        let weights: Vec<i8> = (0..cout * k).map(|_| ((r.next() % 255) as i32 - 127) as i8).collect();
        let bias: Vec<i32> = (0..cout).map(|_| (r.next() % 20001) as i32 - 10000).collect();
        let m0s: Vec<i32> = (0..cout).map(|_| (1 << 30) + (r.next() % (1 << 30)) as i32).collect();
        let shifts: Vec<i32> = (0..cout).map(|_| -((r.next() % 12) as i32) - 6).collect();
        let pad_values: Vec<i8> = if with_pad { (0..cin).map(|_| r.next() as i8).collect() } else { Vec::new() };
        let x: Vec<i8> = (0..batch * h * w * cin).map(|_| r.next() as i8).collect();
        let q = OutputQuant { zero_point: zout, act_min: if relu { zout } else { -128 }, act_max: 127 };
        let (bb, mb, sb) = (le(&bias), le(&m0s), le(&shifts));
        let p = ConvParams {
            input: Shape { c: cin, h, w },
            output: Shape { c: cout, h: ho, w: wo },
            kernel_h: kh, kernel_w: kw, stride, pad,
            weights: &weights,
            bias: I32Array::new(&bb), multiplier: I32Array::new(&mb), shift: I32Array::new(&sb),
            pad_values: &pad_values, input_zero_point: zin, out: q,
        };
        let img_in = h * w * cin;
        let img_out = ho * wo * cout;
        let mut want = vec![0i8; batch * img_out];
        for b in 0..batch {
            scalar::conv2d(&p, &x[b * img_in..][..img_in], &mut want[b * img_out..][..img_out]);
        }
        let (wp, cin_words) = pack_weights(&weights, cout, kh * kw, cin);
        let rq: Vec<i32> = (0..cout).flat_map(|c| rq_words(bias[c], m0s[c], shifts[c])).collect();
        let padv: Vec<i8> = (0..cin).map(|c| pad_values.get(c).copied().unwrap_or(zin as i8)).collect();
        let g = Geom { m: batch * ho * wo, h, w, cin, ho, wo, cout, kh, kw, stride, pad, cin_words };
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

/// `input_u8_to_hwc`: planar u8 pixels to int8 HWC (q = pixel − 128).
fn input_to_hwc(px: &[u8], (c, h, w): (usize, usize, usize), x: &mut [i8]) {
    for (i, v) in x.iter_mut().enumerate() {
        let (ch, t) = (i % c, i / c);
        let (p, b) = (t % (h * w), t / (h * w));
        *v = (px[(b * c + ch) * h * w + p] ^ 0x80) as i8;
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
        stride: u(d.g.stride),
        pad: u(d.g.pad),
        cin_words: u(d.cin_words),
    };
    let c = &d.consts;
    conv2d_dp4a(x, y, &c.w, &c.rq, &c.padv, &g, d.q);
}

/// `max_pool` / `avg_pool`: one output value per thread.
fn pool(x: &[i8], y: &mut [i8], p: &Pool) {
    let g = &p.g;
    let (h, w, c) = (g.h as usize, g.w as usize, g.cin as usize);
    let (ho, wo, s) = (g.ho as usize, g.wo as usize, g.stride as usize);
    for (i, out) in y.iter_mut().enumerate() {
        let (ch, t) = (i % c, i / c);
        let (ox, oy, b) = (t % wo, (t / wo) % ho, t / wo / ho);
        let taps = (0..g.kh as usize).flat_map(|ky| (0..g.kw as usize).map(move |kx| (ky, kx)));
        let vals =
            taps.map(|(ky, kx)| x[((b * h + oy * s + ky) * w + ox * s + kx) * c + ch] as i32);
        let v = if p.avg {
            let acc = vals.map(|q| q - p.zin).sum::<i32>() as i64;
            ((acc * p.m0 as i64 + (1i64 << (p.n - 1))) >> p.n) + p.q.zero_point as i64
        } else {
            vals.fold(-128, i32::max) as i64
        };
        *out = v.max(p.q.act_min as i64).min(p.q.act_max as i64) as i8;
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
    input_to_hwc(
        pixels,
        model.input_shape(),
        &mut acts[input..input + n_in * batch],
    );
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
            Step::Pool(p) => {
                let n_x = (p.g.h * p.g.w * p.g.cin) as usize;
                let x = region(&acts, p.x, n_x, batch).to_vec();
                let mut y = vec![0i8; (p.g.ho * p.g.wo * p.g.cin) as usize * batch];
                pool(&x, &mut y, p);
                acts[p.y..p.y + y.len()].copy_from_slice(&y);
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

#[test]
fn emulated_forward_matches_the_cpu() {
    let models: [&[u8]; 4] = [
        include_bytes!("../../fuzz/corpus/parse/hand.o8"),
        include_bytes!("../../fuzz/corpus/parse/lenet.o8"),
        include_bytes!("../../fuzz/corpus/parse/small_resnet.o8"),
        include_bytes!("../../fuzz/corpus/parse/all_ops.o8"),
    ];
    let mut fused_any = false;
    for (mi, bytes) in models.iter().enumerate() {
        let model = Model::parse(bytes).unwrap();
        for batch in [1, FC_WARP_MAX_BATCH + 1] {
            let mut r = Lcg(0x9e37 + (mi * 16 + batch) as u64);
            let pixels: Vec<u8> = (0..batch * model.input_len())
                .map(|_| r.next() as u8)
                .collect();
            let mut arena = vec![0u8; model.arena_bytes_for(batch)];
            let want = model.run(&pixels, &mut arena).unwrap().to_vec();
            for fuse in [false, true] {
                let got = forward(&model, &pixels, batch, fuse);
                assert_eq!(got, want, "model {mi}, batch {batch}, fused adds {fuse}");
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
