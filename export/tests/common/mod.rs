//! Helpers shared by the integration tests: random-weight models, Fashion-MNIST, and a
//! hand-written reader of the `.o8` layout (independent of the writer's code).
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::Read;

use candle_core::{Device, Tensor};
use octet_models::{ModelKind, Network};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A freshly initialised model whose batch norms get random (non-trivial) statistics, and its
/// tensors by name.
pub fn random_model(
    kind: ModelKind,
    cin: usize,
    classes: usize,
    seed: u64,
) -> (Box<dyn Network>, HashMap<String, Tensor>) {
    let dev = Device::Cpu;
    let net = octet_models::build(kind, cin, classes, seed, &dev).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
    let mut map = HashMap::new();
    for p in net.params().iter() {
        let t = p.var.as_tensor().clone();
        let n = t.elem_count();
        let mut draw = |lo: f32, hi: f32| {
            let v: Vec<f32> = (0..n).map(|_| rng.random_range(lo..hi)).collect();
            Tensor::from_vec(v, t.shape(), &dev).unwrap()
        };
        let t = if p.name.ends_with("running_var") {
            draw(0.5, 2.0)
        } else if p.name.ends_with("running_mean") {
            draw(-0.2, 0.2)
        } else if p.name.contains("bn") || p.name.contains("shortcut.1") {
            if p.name.ends_with("weight") {
                draw(0.5, 1.5)
            } else {
                draw(-0.2, 0.2)
            }
        } else {
            t.copy().unwrap()
        };
        map.insert(p.name.clone(), t);
    }
    net.params().load(|n| map.get(n).cloned()).unwrap();
    (net, map)
}

pub fn random_pixels(n: usize, len: usize, seed: u64) -> Vec<u8> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n * len).map(|_| rng.random()).collect()
}

fn gunzip(path: &str) -> Vec<u8> {
    let f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut v = Vec::new();
    flate2::read::GzDecoder::new(f).read_to_end(&mut v).unwrap();
    v
}

/// The bundled Fashion-MNIST subset's test split: up to `n` images centred in 32×32, labels.
pub fn fashion_test(n: usize) -> (Vec<u8>, Vec<u8>) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../data/fashion-mnist-subset");
    let images = gunzip(&format!("{dir}/t10k-images-idx3-ubyte.gz"));
    let labels = gunzip(&format!("{dir}/t10k-labels-idx1-ubyte.gz"));
    let count = (u32::from_be_bytes(images[4..8].try_into().unwrap()) as usize).min(n);
    let mut px = vec![0u8; count * 32 * 32];
    for i in 0..count {
        for y in 0..28 {
            let src = &images[16 + i * 784 + y * 28..][..28];
            px[i * 1024 + (y + 2) * 32 + 2..][..28].copy_from_slice(src);
        }
    }
    (px, labels[8..8 + count].to_vec())
}

pub const FASHION_MEAN: [f32; 1] = [0.2860];
pub const FASHION_STD: [f32; 1] = [0.3530];

fn u16_at(b: &[u8], o: usize) -> usize {
    u16::from_le_bytes(b[o..o + 2].try_into().unwrap()) as usize
}
fn u32_at(b: &[u8], o: usize) -> usize {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap()) as usize
}
fn i32_at(b: &[u8], o: usize) -> i32 {
    i32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}
fn f32_at(b: &[u8], o: usize) -> f32 {
    f32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}

/// What the hand-written reader found.
#[derive(Debug)]
pub struct Parsed {
    pub arena_bytes: usize,
    pub input: (usize, usize, usize),
    pub n_tensors: usize,
    pub n_ops: usize,
    /// (c, h, w, scale, zp, offset, bytes)
    pub tensors: Vec<(usize, usize, usize, f32, i32, usize, usize)>,
    pub kinds: Vec<u8>,
}

/// Parses and checks a `.o8` file against FORMAT.md, byte by byte; panics on any violation.
pub fn check_o8(b: &[u8]) -> Parsed {
    assert_eq!(&b[0..8], b"OCTET8\r\n");
    assert_eq!(u16_at(b, 8), 3);
    assert_eq!(u16_at(b, 10), 80);
    assert_eq!(u32_at(b, 16), b.len());
    assert_eq!(u32_at(b, 12) as u32, octet_runtime::format::crc32(&b[16..]));
    let arena = u32_at(b, 20);
    let input = (u16_at(b, 24), u16_at(b, 26), u16_at(b, 28));
    let (in_id, out_id) = (u16_at(b, 30), u16_at(b, 32));
    // Raw u8 pixels in; a rounding recorded.
    assert_eq!(b[34], 1);
    assert!([1, 2].contains(&b[35]));
    let nt = u32_at(b, 36);
    assert_eq!(u32_at(b, 40), 80);
    let no = u32_at(b, 44);
    let op_off = u32_at(b, 48);
    assert_eq!(op_off, 80 + 32 * nt);
    let data_off = u32_at(b, 52);
    assert_eq!(data_off % 16, 0);
    assert!(data_off >= op_off + 80 * no && data_off < op_off + 80 * no + 16);
    let data_len = u32_at(b, 56);
    assert_eq!(data_off + data_len, b.len());
    assert!(b[76..80].iter().all(|&x| x == 0));
    let mut tensors = Vec::new();
    for i in 0..nt {
        let r = &b[80 + 32 * i..80 + 32 * (i + 1)];
        let (c, h, w) = (u16_at(r, 0), u16_at(r, 2), u16_at(r, 4));
        let (scale, zp, off, bytes) = (f32_at(r, 8), i32_at(r, 12), u32_at(r, 16), u32_at(r, 20));
        assert!(c * h * w > 0 && bytes == c * h * w, "tensor {i}");
        assert!(
            scale.is_finite() && scale > 0.0 && (-128..=127).contains(&zp),
            "tensor {i}"
        );
        assert!(off + bytes <= arena, "tensor {i} leaves the arena");
        assert!(r[24..32].iter().all(|&x| x == 0) && r[6..8].iter().all(|&x| x == 0));
        tensors.push((c, h, w, scale, zp, off, bytes));
    }
    assert_eq!(
        (tensors[in_id].0, tensors[in_id].1, tensors[in_id].2),
        input
    );
    assert_eq!(tensors[in_id].3, 1.0 / 255.0);
    assert_eq!(tensors[in_id].4, -128);
    assert_eq!(
        (f32_at(b, 68), i32_at(b, 72)),
        (tensors[in_id].3, tensors[in_id].4)
    );
    assert_eq!(f32_at(b, 60), tensors[out_id].3);
    assert_eq!(i32_at(b, 64), tensors[out_id].4);
    let data = &b[data_off..];
    let mut kinds = Vec::new();
    let mut last_out = usize::MAX;
    for i in 0..no {
        let r = &b[op_off + 80 * i..op_off + 80 * (i + 1)];
        let kind = r[0];
        kinds.push(kind);
        // octet's exports: conv, fc, max pool, avg pool, depthwise conv, and the add (octet's,
        // or TFLite's for the double rounding).
        assert!((1..=6).contains(&kind) || kind == 11);
        let add = kind == 5 || kind == 11;
        let (i0, i1, o) = (u16_at(r, 2), u16_at(r, 4), u16_at(r, 6));
        assert!(i0 < nt && o < nt);
        if add {
            assert!(i1 < nt);
        } else {
            assert_eq!(i1, 0xFFFF);
        }
        // The window: square, one stride, the same padding on every side, no dilation.
        let w = &r[8..18];
        let (kh, kw, stride, pad) = (w[0] as usize, w[1] as usize, w[2] as usize, w[4] as usize);
        if w.iter().any(|&x| x != 0) {
            assert_eq!(
                (w[3], w[5], w[6], w[7], w[8], w[9]),
                (w[2], w[4], w[4], w[4], 1, 1)
            );
        }
        assert!(r[1] == 0 && r[18..20] == [0, 0] && r[72..80].iter().all(|&x| x == 0));
        assert_eq!(i32_at(r, 68), if kind == 11 { 20 } else { 0 });
        let (amin, amax) = (i32_at(r, 20), i32_at(r, 24));
        assert!(-128 <= amin && amin <= amax && amax <= 127);
        let arr = |j: usize| (u32_at(r, 28 + 8 * j), u32_at(r, 32 + 8 * j));
        let (ti, to) = (tensors[i0], tensors[o]);
        let (cin, cout) = (ti.0, to.0);
        // Output must not alias the inputs.
        for t in [i0, if add { i1 } else { i0 }] {
            let a = tensors[t];
            assert!(
                a.5 + a.6 <= to.5 || to.5 + to.6 <= a.5,
                "op {i}: output aliases input"
            );
        }
        let expect: [usize; 5] = match kind {
            1 => {
                assert!(kh >= 1 && kw >= 1 && stride >= 1);
                assert_eq!(to.1, (ti.1 + 2 * pad - kh) / stride + 1);
                assert_eq!(to.2, (ti.2 + 2 * pad - kw) / stride + 1);
                assert!(kh * kw * cin <= 65536);
                let pv = arr(4).1;
                assert!(pv == 0 || pv == cin);
                [cout * kh * kw * cin, 4 * cout, 4 * cout, 4 * cout, pv]
            }
            6 => {
                assert!(kh >= 1 && kw >= 1 && stride >= 1);
                assert_eq!(to.1, (ti.1 + 2 * pad - kh) / stride + 1);
                assert_eq!(to.2, (ti.2 + 2 * pad - kw) / stride + 1);
                assert_eq!(cout % cin, 0, "depth multiplier");
                assert_eq!(arr(4).1, 0, "depthwise convs pad with z_in");
                [cout * kh * kw, 4 * cout, 4 * cout, 4 * cout, 0]
            }
            2 => {
                let k = ti.6;
                assert_eq!((to.1, to.2), (1, 1));
                assert_eq!((kh, kw, stride, pad), (0, 0, 0, 0));
                [cout * k, 4 * cout, 4 * cout, 4 * cout, 0]
            }
            3 | 4 => {
                assert_eq!(pad, 0);
                assert_eq!(to.0, ti.0);
                assert_eq!(to.1, (ti.1 - kh) / stride + 1);
                if kind == 3 {
                    assert_eq!(
                        (to.3, to.4),
                        (ti.3, ti.4),
                        "max-pool keeps its input's scale"
                    );
                    [0, 0, 0, 0, 0]
                } else {
                    [0, 0, 4, 4, 0]
                }
            }
            5 => {
                assert_eq!((ti.0, ti.1, ti.2), (to.0, to.1, to.2));
                [0, 0, 8, 4, 0]
            }
            _ => {
                assert_eq!((ti.0, ti.1, ti.2), (to.0, to.1, to.2));
                [0, 0, 12, 12, 0]
            }
        };
        for (j, want) in expect.into_iter().enumerate() {
            let (off, len) = arr(j);
            assert_eq!(len, want, "op {i} array {j}");
            if len > 0 {
                assert!(off + len <= data.len());
                assert_eq!(
                    off % if j == 0 || j == 4 { 16 } else { 4 },
                    0,
                    "op {i} array {j} alignment"
                );
            }
        }
        // Multipliers and shifts.
        let (moff, mlen) = arr(2);
        let (soff, _) = arr(3);
        if kind == 5 {
            let (m0, m1, n) = (
                i32_at(data, moff),
                i32_at(data, moff + 4),
                i32_at(data, soff),
            );
            assert!((1..=62).contains(&n));
            assert!((1 << 30..=i32::MAX).contains(&m0.max(m1)) && m0.min(m1) >= 0);
        } else {
            for k in 0..mlen / 4 {
                let (m0, shift) = (i32_at(data, moff + 4 * k), i32_at(data, soff + 4 * k));
                assert!(m0 >= 1 << 30 || m0 == 0, "op {i}: M0 {m0}");
                assert!((1..=62).contains(&(31 - shift)), "op {i}: shift {shift}");
            }
        }
        if kind == 1 || kind == 2 {
            let (woff, wlen) = arr(0);
            assert!(
                data[woff..woff + wlen].iter().all(|&x| x as i8 != -128),
                "weights in [−127, 127]"
            );
        }
        last_out = o;
    }
    assert_eq!(
        last_out, out_id,
        "the output tensor is what the last op writes"
    );
    Parsed {
        arena_bytes: arena,
        input,
        n_tensors: nt,
        n_ops: no,
        tensors,
        kinds,
    }
}
