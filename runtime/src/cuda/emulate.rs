//! Host emulation of `conv2d_dp4a` and `fc_warp` (a line-by-line transliteration of
//! kernels.cu: blocks, the two phases between `__syncthreads`, the 4×4 thread tiles), checked
//! against the scalar reference on random shapes. It tests the kernels' index math, packing,
//! padding and epilogue on machines without a GPU; the GPU tests check the real thing.

use super::lower::{pack_weights, rq_words};
use crate::kernels::{scalar, ConvParams, I32Array, OutputQuant, Shape};
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
