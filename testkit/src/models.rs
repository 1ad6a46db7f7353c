//! A test-only `.o8` writer following runtime/FORMAT.md byte offset by byte offset,
//! independent of the runtime's reader (and of the exporter's writer), and the models the tests
//! run: LeNet, ResNets, and a depthwise-separable network with every op of the embedded set.

use octet_runtime::format::{
    INPUT_I8_HWC, INPUT_U8_CHW, NO_TENSOR, OP_ADD, OP_AVG_POOL, OP_CONV2D, OP_DEPTHWISE_CONV2D,
    OP_FULLY_CONNECTED, OP_MAX_POOL, OP_PAD, OP_RESHAPE, OP_SOFTMAX, OP_TFLITE_ADD,
    OP_TFLITE_AVG_POOL,
};
use octet_runtime::quantize_multiplier;

use crate::Rng;

#[derive(Clone, Debug)]
pub struct TensorSpec {
    pub c: u16,
    pub h: u16,
    pub w: u16,
    pub scale: f32,
    pub zp: i32,
    pub offset: u32,
}

/// An op record; `Default` is an op of kind 0 with no second input, no window, no clamp (the
/// full int8 range), no arrays and parameter 0, for the fields an op kind does not use.
#[derive(Clone, Debug)]
pub struct OpSpec {
    pub kind: u8,
    pub in0: u16,
    pub in1: u16,
    pub out: u16,
    /// kernel h, w; stride h, w; pad top, left, bottom, right; dilation h, w.
    pub window: [u8; 10],
    pub act_min: i32,
    pub act_max: i32,
    pub weights: Vec<i8>,
    pub bias: Vec<i32>,
    pub mult: Vec<i32>,
    pub shift: Vec<i32>,
    pub pad_values: Vec<i8>,
    pub param: i32,
}

impl Default for OpSpec {
    fn default() -> Self {
        OpSpec {
            kind: 0,
            in0: 0,
            in1: NO_TENSOR,
            out: 0,
            window: [0; 10],
            act_min: -128,
            act_max: 127,
            weights: Vec::new(),
            bias: Vec::new(),
            mult: Vec::new(),
            shift: Vec::new(),
            pad_values: Vec::new(),
            param: 0,
        }
    }
}

/// A k×k window with one stride and the same padding on every side, no dilation.
pub const fn square(k: u8, stride: u8, pad: u8) -> [u8; 10] {
    [k, k, stride, stride, pad, pad, pad, pad, 1, 1]
}

/// Output size along an axis of `n` values for kernel `k` (dilation `d`), stride `s` and
/// padding `before` + `after` (FORMAT.md, "Windows").
pub const fn out_size(n: u16, k: u8, s: u8, d: u8, before: u8, after: u8) -> u16 {
    let eff = (k as u16 - 1) * d as u16 + 1;
    (n + before as u16 + after as u16 - eff) / s as u16 + 1
}

/// A conv's or fc's constant arrays: weights, bias and per-channel multipliers and shifts.
pub struct Dense {
    pub weights: Vec<i8>,
    pub bias: Vec<i32>,
    pub mult: Vec<i32>,
    pub shift: Vec<i32>,
}

impl Dense {
    pub fn new(weights: Vec<i8>, bias: Vec<i32>, mult: Vec<i32>, shift: Vec<i32>) -> Dense {
        Dense {
            weights,
            bias,
            mult,
            shift,
        }
    }
}

impl OpSpec {
    /// An op of `kind` over the arrays of `d`, the other fields default.
    pub fn dense(kind: u8, d: Dense) -> OpSpec {
        OpSpec {
            kind,
            weights: d.weights,
            bias: d.bias,
            mult: d.mult,
            shift: d.shift,
            ..OpSpec::default()
        }
    }
}

pub struct Builder {
    pub input: (u16, u16, u16),
    pub tensors: Vec<TensorSpec>,
    pub ops: Vec<OpSpec>,
    pub arena: u32,
    pub rng: Rng,
    pub input_tensor: u16,
    pub output_tensor: Option<u16>,
    /// Header input encoding (`INPUT_*`).
    pub input_encoding: u8,
    /// Header rounding code (1 single, 2 double).
    pub rounding: u8,
}

pub fn align16(n: u32) -> u32 {
    (n + 15) & !15
}

impl Builder {
    /// A model whose input tensor (id 0) holds c×h×w pixels (raw u8, planar), single rounding.
    pub fn new(c: u16, h: u16, w: u16, seed: u64) -> Self {
        let mut b = Builder {
            input: (c, h, w),
            tensors: Vec::new(),
            ops: Vec::new(),
            arena: 0,
            rng: Rng::new(seed),
            input_tensor: 0,
            output_tensor: None,
            input_encoding: INPUT_U8_CHW,
            rounding: 1,
        };
        b.tensor_q(c, h, w, 1.0 / 255.0, -128);
        b
    }

    /// A model whose input tensor (id 0) is an int8 h×w×c tensor of `scale` and zero point
    /// `zp` (a TFLite model's input), double rounding.
    pub fn new_int8(c: u16, h: u16, w: u16, scale: f32, zp: i32, seed: u64) -> Self {
        let mut b = Builder::new(c, h, w, seed);
        b.tensors[0].scale = scale;
        b.tensors[0].zp = zp;
        b.input_encoding = INPUT_I8_HWC;
        b.rounding = 2;
        b
    }

    pub fn alloc(&mut self, bytes: u32) -> u32 {
        let off = align16(self.arena);
        self.arena = off + bytes;
        off
    }

    pub fn tensor_q(&mut self, c: u16, h: u16, w: u16, scale: f32, zp: i32) -> u16 {
        let offset = self.alloc(c as u32 * h as u32 * w as u32);
        self.tensors.push(TensorSpec {
            c,
            h,
            w,
            scale,
            zp,
            offset,
        });
        (self.tensors.len() - 1) as u16
    }

    /// A tensor with random scale and zero point.
    pub fn tensor(&mut self, c: u16, h: u16, w: u16) -> u16 {
        let scale = 0.01 + 0.1 * self.rng.unit() as f32;
        let zp = self.rng.range(-20, 20) as i32;
        self.tensor_q(c, h, w, scale, zp)
    }

    pub fn shape(&self, t: u16) -> (u16, u16, u16) {
        let s = &self.tensors[t as usize];
        (s.c, s.h, s.w)
    }

    /// Pushes an op; returns its output tensor.
    pub fn push(&mut self, op: OpSpec) -> u16 {
        let out = op.out;
        self.ops.push(op);
        out
    }

    /// The clamp of an op writing `out`: ReLU clamps at its zero point.
    pub fn clamp(&self, out: u16, relu: bool) -> (i32, i32) {
        if relu {
            (self.tensors[out as usize].zp.max(-128), 127)
        } else {
            (-128, 127)
        }
    }

    /// Random arrays of `n` outputs over `k` inputs, multipliers scaled so outputs stay in range.
    pub fn dense_params(&mut self, n: usize, k: usize) -> Dense {
        let weights: Vec<i8> = (0..n * k)
            .map(|_| self.rng.range(-127, 127) as i8)
            .collect();
        let sk = (k as f64).sqrt();
        let bias = (0..n)
            .map(|_| self.rng.range(-(2000.0 * sk) as i64, (2000.0 * sk) as i64) as i32)
            .collect();
        let mut mult = Vec::new();
        let mut shift = Vec::new();
        for _ in 0..n {
            let m = 0.008 / sk * (0.5 + 1.5 * self.rng.unit());
            let (m0, s) = quantize_multiplier(m).unwrap();
            mult.push(m0);
            shift.push(s);
        }
        Dense::new(weights, bias, mult, shift)
    }

    /// A conv or fc from `x` to `out` over the arrays `d`, clamped as `clamp` says.
    fn dense_op(&self, kind: u8, x: u16, out: u16, relu: bool, d: Dense) -> OpSpec {
        let (act_min, act_max) = self.clamp(out, relu);
        OpSpec {
            in0: x,
            out,
            act_min,
            act_max,
            ..OpSpec::dense(kind, d)
        }
    }

    pub fn conv(&mut self, x: u16, cout: u16, k: u8, stride: u8, pad: u8, relu: bool) -> u16 {
        let (c, h, w) = self.shape(x);
        let ho = (h + 2 * pad as u16 - k as u16) / stride as u16 + 1;
        let wo = (w + 2 * pad as u16 - k as u16) / stride as u16 + 1;
        let out = self.tensor(cout, ho, wo);
        let kk = k as usize * k as usize * c as usize;
        let dense = self.dense_params(cout as usize, kk);
        let pad_values = if pad > 0 && self.rng.next().is_multiple_of(2) {
            (0..c).map(|_| self.rng.range(-128, 127) as i8).collect()
        } else {
            Vec::new()
        };
        self.push(OpSpec {
            window: square(k, stride, pad),
            pad_values,
            ..self.dense_op(OP_CONV2D, x, out, relu, dense)
        })
    }

    /// A conv with any window: kernel (kh, kw), strides, pads (top, left, bottom, right),
    /// dilations; padded taps read the input zero point.
    pub fn conv_window(&mut self, x: u16, cout: u16, window: [u8; 10], relu: bool) -> u16 {
        let (c, h, w) = self.shape(x);
        let [kh, kw, sh, sw, pt, pl, pb, pr, dh, dw] = window;
        let out = self.tensor(
            cout,
            out_size(h, kh, sh, dh, pt, pb),
            out_size(w, kw, sw, dw, pl, pr),
        );
        let kk = kh as usize * kw as usize * c as usize;
        let dense = self.dense_params(cout as usize, kk);
        self.push(OpSpec {
            window,
            ..self.dense_op(OP_CONV2D, x, out, relu, dense)
        })
    }

    /// A depthwise conv with depth multiplier `dm` and any window; ReLU6-like clamps when
    /// `relu` (the clamp from the zero point to a random top).
    pub fn depthwise(&mut self, x: u16, dm: u16, window: [u8; 10], relu: bool) -> u16 {
        let (c, h, w) = self.shape(x);
        let [kh, kw, sh, sw, pt, pl, pb, pr, dh, dw] = window;
        let cout = c * dm;
        let out = self.tensor(
            cout,
            out_size(h, kh, sh, dh, pt, pb),
            out_size(w, kw, sw, dw, pl, pr),
        );
        let taps = kh as usize * kw as usize;
        // Dense draws [cout][taps]; the file holds [taps][cout].
        let d = self.dense_params(cout as usize, taps);
        let mut weights = vec![0i8; taps * cout as usize];
        for (oc, row) in d.weights.chunks_exact(taps).enumerate() {
            for (t, &v) in row.iter().enumerate() {
                weights[t * cout as usize + oc] = v;
            }
        }
        let (act_min, act_max) = if relu {
            let z = self.tensors[out as usize].zp.max(-128);
            (z, self.rng.range(z as i64, 127) as i32)
        } else {
            (-128, 127)
        };
        self.push(OpSpec {
            kind: OP_DEPTHWISE_CONV2D,
            in0: x,
            out,
            window,
            act_min,
            act_max,
            weights,
            bias: d.bias,
            mult: d.mult,
            shift: d.shift,
            ..OpSpec::default()
        })
    }

    /// TFLite's average pool with any window (no dilation); the output keeps the input's
    /// quantization.
    pub fn tflite_avg_pool(&mut self, x: u16, window: [u8; 10]) -> u16 {
        self.pool_window(OP_TFLITE_AVG_POOL, x, window)
    }

    /// A max pool with any window (no dilation).
    pub fn max_pool_window(&mut self, x: u16, window: [u8; 10]) -> u16 {
        self.pool_window(OP_MAX_POOL, x, window)
    }

    /// A pool of `kind` keeping the input's quantization, with any window (no dilation).
    fn pool_window(&mut self, kind: u8, x: u16, window: [u8; 10]) -> u16 {
        let (c, h, w) = self.shape(x);
        let [kh, kw, sh, sw, pt, pl, pb, pr, ..] = window;
        let (scale, zp) = (self.tensors[x as usize].scale, self.tensors[x as usize].zp);
        let out = self.tensor_q(
            c,
            out_size(h, kh, sh, 1, pt, pb),
            out_size(w, kw, sw, 1, pl, pr),
            scale,
            zp,
        );
        self.push(OpSpec {
            kind,
            in0: x,
            out,
            window,
            ..OpSpec::default()
        })
    }

    /// TFLite's softmax over the channels of `x` (input scale, β = 1), output scale 1/256 and
    /// zero point −128.
    pub fn softmax(&mut self, x: u16) -> u16 {
        let (c, h, w) = self.shape(x);
        let s = self.tensors[x as usize].scale as f64;
        let (m, left_shift) = quantize_multiplier(s * 2f64.powi(26)).unwrap();
        let radius = (31.0 * 2f64.powi(26) / 2f64.powi(left_shift)).floor() as i32;
        let out = self.tensor_q(c, h, w, 1.0 / 256.0, -128);
        self.push(OpSpec {
            kind: OP_SOFTMAX,
            in0: x,
            out,
            mult: vec![m],
            shift: vec![left_shift],
            param: -radius,
            ..OpSpec::default()
        })
    }

    /// `x`'s bytes as a c×h×w tensor.
    pub fn reshape(&mut self, x: u16, c: u16, h: u16, w: u16) -> u16 {
        let (scale, zp) = (self.tensors[x as usize].scale, self.tensors[x as usize].zp);
        let out = self.tensor_q(c, h, w, scale, zp);
        self.push(OpSpec {
            kind: OP_RESHAPE,
            in0: x,
            out,
            ..OpSpec::default()
        })
    }

    /// `x` padded by (top, left, bottom, right) with `value`.
    pub fn pad(&mut self, x: u16, pads: [u8; 4], value: i8) -> u16 {
        let (c, h, w) = self.shape(x);
        let (scale, zp) = (self.tensors[x as usize].scale, self.tensors[x as usize].zp);
        let [t, l, b, r] = pads;
        let out = self.tensor_q(
            c,
            h + t as u16 + b as u16,
            w + l as u16 + r as u16,
            scale,
            zp,
        );
        self.push(OpSpec {
            kind: OP_PAD,
            in0: x,
            out,
            window: [0, 0, 0, 0, t, l, b, r, 0, 0],
            param: value as i32,
            ..OpSpec::default()
        })
    }

    /// TFLite's add of `a` and `b` (its three multipliers from the scales, left shift 20).
    pub fn tflite_add(&mut self, a: u16, b: u16, relu: bool) -> u16 {
        let (c, h, w) = self.shape(a);
        assert_eq!(self.shape(b), (c, h, w));
        let out = self.tensor(c, h, w);
        let (s0, s1) = (
            self.tensors[a as usize].scale,
            self.tensors[b as usize].scale,
        );
        let so = self.tensors[out as usize].scale;
        let twice = 2.0 * s0.max(s1) as f64;
        let pair = |m: f64| quantize_multiplier(m).unwrap();
        let pairs = [
            pair(s0 as f64 / twice),
            pair(s1 as f64 / twice),
            pair(twice / ((1 << 20) as f64 * so as f64)),
        ];
        let (act_min, act_max) = self.clamp(out, relu);
        self.push(OpSpec {
            kind: OP_TFLITE_ADD,
            in0: a,
            in1: b,
            out,
            act_min,
            act_max,
            mult: pairs.iter().map(|p| p.0).collect(),
            shift: pairs.iter().map(|p| p.1).collect(),
            param: 20,
            ..OpSpec::default()
        })
    }

    pub fn fc(&mut self, x: u16, n: u16, relu: bool) -> u16 {
        let (c, h, w) = self.shape(x);
        let k = c as usize * h as usize * w as usize;
        let out = self.tensor(n, 1, 1);
        let dense = self.dense_params(n as usize, k);
        self.push(self.dense_op(OP_FULLY_CONNECTED, x, out, relu, dense))
    }

    pub fn max_pool(&mut self, x: u16, k: u8, stride: u8) -> u16 {
        let (c, h, w) = self.shape(x);
        let (scale, zp) = (self.tensors[x as usize].scale, self.tensors[x as usize].zp);
        let out = self.tensor_q(
            c,
            (h - k as u16) / stride as u16 + 1,
            (w - k as u16) / stride as u16 + 1,
            scale,
            zp,
        );
        self.push(OpSpec {
            kind: OP_MAX_POOL,
            in0: x,
            out,
            window: square(k, stride, 0),
            ..OpSpec::default()
        })
    }

    pub fn avg_pool(&mut self, x: u16, k: u8, stride: u8) -> u16 {
        let (c, h, w) = self.shape(x);
        let out = self.tensor(
            c,
            (h - k as u16) / stride as u16 + 1,
            (w - k as u16) / stride as u16 + 1,
        );
        let m = self.tensors[x as usize].scale as f64
            / (self.tensors[out as usize].scale as f64 * k as f64 * k as f64);
        let (m0, s) = quantize_multiplier(m).unwrap();
        self.push(OpSpec {
            kind: OP_AVG_POOL,
            in0: x,
            out,
            window: square(k, stride, 0),
            mult: vec![m0],
            shift: vec![s],
            ..OpSpec::default()
        })
    }

    pub fn add(&mut self, a: u16, b: u16, relu: bool) -> u16 {
        let (c, h, w) = self.shape(a);
        assert_eq!(self.shape(b), (c, h, w));
        let out = self.tensor(c, h, w);
        let so = self.tensors[out as usize].scale as f64;
        let r0 = self.tensors[a as usize].scale as f64 / so;
        let r1 = self.tensors[b as usize].scale as f64 / so;
        // n such that max(m0, m1) ∈ [2^30, 2^31).
        let mx = r0.max(r1);
        let mut n = 30i32;
        while mx * 2f64.powi(n) >= 2f64.powi(31) {
            n -= 1;
        }
        while mx * 2f64.powi(n) < 2f64.powi(30) {
            n += 1;
        }
        let m0 = (r0 * 2f64.powi(n)).round().min(i32::MAX as f64) as i32;
        let m1 = (r1 * 2f64.powi(n)).round().min(i32::MAX as f64) as i32;
        let (act_min, act_max) = self.clamp(out, relu);
        self.push(OpSpec {
            kind: OP_ADD,
            in0: a,
            in1: b,
            out,
            act_min,
            act_max,
            mult: vec![m0, m1],
            shift: vec![n],
            ..OpSpec::default()
        })
    }

    /// A residual block (ReLU after the add): two 3×3 convs, the shortcut a 1×1 conv when the
    /// block changes the shape, the identity otherwise.
    pub fn block(&mut self, x: u16, width: u16, stride: u8) -> u16 {
        let y = self.conv(x, width, 3, stride, 1, true);
        let y = self.conv(y, width, 3, 1, 1, false);
        let shortcut = if stride != 1 || self.shape(x).0 != width {
            self.conv(x, width, 1, stride, 0, false)
        } else {
            x
        };
        self.add(shortcut, y, true)
    }

    /// Replans the arena as the exporter plans it (`export/src/plan.rs`; the builder gives every
    /// tensor its own bytes): each tensor lives from the op writing it (the input: op 0) to the
    /// last op reading it (the output: past the end); largest first, each at the lowest
    /// 16-aligned offset clear of the tensors live at the same time.
    pub fn replan(&mut self) {
        let b = self;
        let n_ops = b.ops.len();
        let nt = b.tensors.len();
        let mut first = vec![usize::MAX; nt];
        let mut last = vec![0usize; nt];
        first[b.input_tensor as usize] = 0;
        for (i, op) in b.ops.iter().enumerate() {
            let out = op.out as usize;
            first[out] = first[out].min(i);
            last[out] = last[out].max(i);
            for t in [op.in0, op.in1] {
                if t != 0xFFFF {
                    last[t as usize] = last[t as usize].max(i);
                }
            }
        }
        let output = b.output_tensor.unwrap_or(b.ops[n_ops - 1].out) as usize;
        last[output] = n_ops;
        // (bytes, first op, last op) of each tensor.
        let bufs: Vec<(u32, usize, usize)> = b
            .tensors
            .iter()
            .enumerate()
            .map(|(t, s)| {
                let size = if first[t] == usize::MAX {
                    0
                } else {
                    s.c as u32 * s.h as u32 * s.w as u32
                };
                (size, first[t].min(n_ops), last[t])
            })
            .collect();
        let mut order: Vec<usize> = (0..bufs.len()).collect();
        order.sort_by_key(|&i| (std::cmp::Reverse(bufs[i].0), bufs[i].1, i));
        let mut offsets = vec![0u32; bufs.len()];
        let mut placed: Vec<usize> = Vec::new();
        let mut total = 0;
        for i in order {
            let (size, f, l) = bufs[i];
            if size == 0 {
                continue;
            }
            let mut live: Vec<(u32, u32)> = placed
                .iter()
                .filter(|&&j| bufs[j].1 <= l && f <= bufs[j].2)
                .map(|&j| (offsets[j], offsets[j] + bufs[j].0))
                .collect();
            live.sort_unstable();
            let mut at = 0;
            for (start, end) in live {
                if at + size <= start {
                    break;
                }
                at = at.max(align16(end));
            }
            offsets[i] = at;
            total = total.max(at + size);
            placed.push(i);
        }
        for (t, s) in b.tensors.iter_mut().enumerate() {
            s.offset = offsets[t];
        }
        b.arena = total;
    }

    /// Encodes the model (output = the last op's output unless set).
    pub fn encode(&self) -> Vec<u8> {
        let n_t = self.tensors.len() as u32;
        let n_o = self.ops.len() as u32;
        let op_off = 80 + 32 * n_t;
        let data_off = align16(op_off + 80 * n_o);
        let mut data: Vec<u8> = Vec::new();
        let mut put = |bytes: &[u8], align: usize| -> (u32, u32) {
            if bytes.is_empty() {
                return (0, 0);
            }
            while !data.len().is_multiple_of(align) {
                data.push(0);
            }
            let off = data.len() as u32;
            data.extend_from_slice(bytes);
            (off, bytes.len() as u32)
        };
        let i32b = |v: &[i32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
        let i8b = |v: &[i8]| -> Vec<u8> { v.iter().map(|&x| x as u8).collect() };
        let mut ops = Vec::new();
        for op in &self.ops {
            let mut r = vec![0u8; 80];
            r[0] = op.kind;
            r[2..4].copy_from_slice(&op.in0.to_le_bytes());
            r[4..6].copy_from_slice(&op.in1.to_le_bytes());
            r[6..8].copy_from_slice(&op.out.to_le_bytes());
            r[8..18].copy_from_slice(&op.window);
            r[20..24].copy_from_slice(&op.act_min.to_le_bytes());
            r[24..28].copy_from_slice(&op.act_max.to_le_bytes());
            let arrays = [
                put(&i8b(&op.weights), 16),
                put(&i32b(&op.bias), 4),
                put(&i32b(&op.mult), 4),
                put(&i32b(&op.shift), 4),
                put(&i8b(&op.pad_values), 16),
            ];
            for (i, (off, len)) in arrays.iter().enumerate() {
                r[28 + 8 * i..32 + 8 * i].copy_from_slice(&off.to_le_bytes());
                r[32 + 8 * i..36 + 8 * i].copy_from_slice(&len.to_le_bytes());
            }
            r[68..72].copy_from_slice(&op.param.to_le_bytes());
            ops.extend_from_slice(&r);
        }
        let out_t = self
            .output_tensor
            .unwrap_or_else(|| self.ops.last().unwrap().out);
        let out_spec = &self.tensors[out_t as usize];
        let in_spec = &self.tensors[self.input_tensor as usize];
        let file_len = data_off + data.len() as u32;
        let mut f = vec![0u8; 80];
        f[0..8].copy_from_slice(b"OCTET8\r\n");
        f[8..10].copy_from_slice(&octet_runtime::format::VERSION.to_le_bytes());
        f[10..12].copy_from_slice(&80u16.to_le_bytes());
        f[16..20].copy_from_slice(&file_len.to_le_bytes());
        f[20..24].copy_from_slice(&self.arena.to_le_bytes());
        f[24..26].copy_from_slice(&self.input.0.to_le_bytes());
        f[26..28].copy_from_slice(&self.input.1.to_le_bytes());
        f[28..30].copy_from_slice(&self.input.2.to_le_bytes());
        f[30..32].copy_from_slice(&self.input_tensor.to_le_bytes());
        f[32..34].copy_from_slice(&out_t.to_le_bytes());
        f[34] = self.input_encoding;
        f[35] = self.rounding;
        f[36..40].copy_from_slice(&n_t.to_le_bytes());
        f[40..44].copy_from_slice(&80u32.to_le_bytes());
        f[44..48].copy_from_slice(&n_o.to_le_bytes());
        f[48..52].copy_from_slice(&op_off.to_le_bytes());
        f[52..56].copy_from_slice(&data_off.to_le_bytes());
        f[56..60].copy_from_slice(&(data.len() as u32).to_le_bytes());
        f[60..64].copy_from_slice(&out_spec.scale.to_le_bytes());
        f[64..68].copy_from_slice(&out_spec.zp.to_le_bytes());
        f[68..72].copy_from_slice(&in_spec.scale.to_le_bytes());
        f[72..76].copy_from_slice(&in_spec.zp.to_le_bytes());
        for t in &self.tensors {
            let mut r = vec![0u8; 32];
            r[0..2].copy_from_slice(&t.c.to_le_bytes());
            r[2..4].copy_from_slice(&t.h.to_le_bytes());
            r[4..6].copy_from_slice(&t.w.to_le_bytes());
            r[8..12].copy_from_slice(&t.scale.to_le_bytes());
            r[12..16].copy_from_slice(&t.zp.to_le_bytes());
            r[16..20].copy_from_slice(&t.offset.to_le_bytes());
            let n = t.c as u32 * t.h as u32 * t.w as u32;
            r[20..24].copy_from_slice(&n.to_le_bytes());
            f.extend_from_slice(&r);
        }
        f.extend_from_slice(&ops);
        f.resize(data_off as usize, 0);
        f.extend_from_slice(&data);
        fix_crc(&mut f);
        f
    }
}

/// TFLite's ADD multipliers for input scales `s0`, `s1` and output scale `so`, written out here
/// from TFLite Micro's add_common.cc (independently of the exporter's): t = 2·max(s0, s1); s0/t,
/// s1/t and t/(2^20·so), each as (M0, shift).
pub fn tflite_add_pairs(s0: f32, s1: f32, so: f32) -> [(i32, i32); 3] {
    let twice = 2.0 * s0.max(s1) as f64;
    let pair = |m: f64| quantize_multiplier(m).unwrap();
    [
        pair(s0 as f64 / twice),
        pair(s1 as f64 / twice),
        pair(twice / ((1 << 20) as f64 * so as f64)),
    ]
}

/// Recomputes the header CRC.
pub fn fix_crc(f: &mut [u8]) {
    if f.len() >= octet_runtime::format::CRC_START {
        octet_runtime::format::seal(f);
    }
}

/// LeNet for 1×32×32: conv 5×5→6, max-pool 2, conv 5×5→16, max-pool 2, fc 400→120→84→10.
pub fn lenet(seed: u64) -> Builder {
    lenet_on(1, seed)
}

/// LeNet over `channels`×32×32 pixels (conv 5×5→6, max-pool 2, conv 5×5→16, max-pool 2,
/// fc 400→120→84→10), random weights from `seed`.
pub fn lenet_on(channels: u16, seed: u64) -> Builder {
    let mut b = Builder::new(channels, 32, 32, seed);
    let x = b.conv(0, 6, 5, 1, 0, true);
    let x = b.max_pool(x, 2, 2);
    let x = b.conv(x, 16, 5, 1, 0, true);
    let x = b.max_pool(x, 2, 2);
    let x = b.fc(x, 120, true);
    let x = b.fc(x, 84, true);
    b.fc(x, 10, false);
    b
}

/// A small ResNet: stem, an identity block, a downsampling block (1×1 shortcut), avg-pool, fc.
pub fn small_resnet(seed: u64) -> Builder {
    let mut b = Builder::new(3, 16, 16, seed);
    let s = b.conv(0, 16, 3, 1, 1, true);
    let s = b.block(s, 16, 1);
    let s = b.block(s, 32, 2);
    let p = b.avg_pool(s, 8, 8);
    b.fc(p, 10, false);
    b
}

/// Small late layers (4×4 and 2×2 outputs): a group of images shares each conv pass.
pub fn small_late_resnet(seed: u64) -> Builder {
    let mut b = Builder::new(3, 8, 8, seed);
    let s = b.conv(0, 16, 3, 1, 1, true);
    let s = b.block(s, 32, 2);
    let y = b.conv(s, 64, 3, 2, 1, true);
    let p = b.avg_pool(y, 2, 2);
    b.fc(p, 10, false);
    b
}

/// A 40-channel identity block on 8×8: convs whose output channels two threads split at an odd
/// multiple of 8 (packed convs split at whole blocks of 16), each followed by an add split the
/// same way.
pub fn wide_block_net(seed: u64) -> Builder {
    let mut b = Builder::new(3, 8, 8, seed);
    let s = b.conv(0, 40, 3, 1, 1, true);
    let s = b.block(s, 40, 1);
    let p = b.avg_pool(s, 8, 8);
    b.fc(p, 10, false);
    b
}

/// The hand-computed model (see `hand_computed_model` in `roundtrip.rs`).
pub fn hand_model() -> Builder {
    let mut b = Builder::new(1, 2, 2, 0);
    let t1 = b.tensor_q(1, 2, 2, 0.1, 0);
    // conv 3×3 of ones, pad 1 with pad value 5, m = 1/4 (M0 2^30, shift −1).
    b.push(OpSpec {
        out: t1,
        window: square(3, 1, 1),
        pad_values: vec![5],
        ..OpSpec::dense(
            OP_CONV2D,
            Dense::new(vec![1; 9], vec![0], vec![1 << 30], vec![-1]),
        )
    });
    let t2 = b.tensor_q(2, 1, 1, 0.5, 0);
    // fc: rows [1,1,1,1] (m = 1) and [1,0,−1,0] + bias 10 (m = 1/2).
    b.push(OpSpec {
        in0: t1,
        out: t2,
        ..OpSpec::dense(
            OP_FULLY_CONNECTED,
            Dense::new(
                vec![1, 1, 1, 1, 1, 0, -1, 0],
                vec![0, 10],
                vec![1 << 30, 1 << 30],
                vec![1, 0],
            ),
        )
    });
    b
}

/// CIFAR ResNet-18 (3×32×32, 64-128-256-512, two blocks per stage, avg-pool 4, fc 10).
pub fn resnet18(seed: u64) -> Builder {
    let mut b = Builder::new(3, 32, 32, seed);
    let mut x = b.conv(0, 64, 3, 1, 1, true);
    for (stage, &width) in [64u16, 128, 256, 512].iter().enumerate() {
        for block in 0..2 {
            let stride = if stage > 0 && block == 0 { 2 } else { 1 };
            x = b.block(x, width, stride);
        }
    }
    let p = b.avg_pool(x, 4, 4);
    b.fc(p, 10, false);
    b
}

/// A depthwise-separable network with every op of the embedded set, the way TFLite models hold
/// them (int8 input, double rounding): a stride-2 conv with TFLite's asymmetric SAME padding, a
/// depthwise conv (ReLU6-like clamp), a depth multiplier of 2 with dilation, a pointwise conv, a
/// TFLite add, a padded max pool, pad, TFLite's average pool, reshape, fully connected and
/// softmax. `rounding`: 1 single, 2 double.
pub fn embedded_net(rounding: u8, seed: u64) -> Builder {
    let mut b = Builder::new_int8(2, 13, 10, 0.05, 7, seed);
    b.rounding = rounding;
    // 13×10 → SAME with stride 2 and a 4×3 kernel: pads (1, 1, 2, 1) → 7×5.
    let x = b.conv_window(0, 8, [4, 3, 2, 2, 1, 1, 2, 1, 1, 1], true);
    let y = b.depthwise(x, 1, square(3, 1, 1), true);
    let y = b.conv(y, 8, 1, 1, 0, true);
    let x = b.tflite_add(x, y, false);
    let x = b.depthwise(x, 2, [3, 3, 1, 1, 2, 2, 2, 2, 2, 2], true);
    let x = b.max_pool_window(x, [2, 2, 2, 2, 0, 0, 1, 1, 1, 1]);
    let x = b.pad(x, [1, 0, 0, 1], 3);
    let (c, h, w) = b.shape(x);
    let x = b.tflite_avg_pool(x, [h as u8, w as u8, 1, 1, 0, 0, 0, 0, 1, 1]);
    let x = b.reshape(x, c, 1, 1);
    let x = b.fc(x, 12, false);
    b.softmax(x);
    b
}
