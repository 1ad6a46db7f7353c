//! Float reference executor of the folded graph (candle, on the CPU or a GPU), with optional
//! fake-quantization of weights, biases and activations: calibration and the ablation rows run
//! through it.

use candle_core::{DType, Device, Tensor};

use crate::graph::{Graph, OpKind};
use crate::progress::{Progress, Quiet};
use crate::quantize::QParams;
use crate::{ExportError, Result};

/// What to replace by its quantized value. `None` everywhere: the float model.
#[derive(Debug, Clone, Default)]
pub struct FakeQuant {
    /// Per op: the dequantized int8 weights (same layout as the graph's); `None`: float.
    pub weights: Option<Vec<Vec<f32>>>,
    /// Per op: the dequantized int32 biases; `None`: float.
    pub biases: Option<Vec<Vec<f32>>>,
    /// Per tensor: every op output is rounded and clamped to its int8 grid.
    pub activations: Option<Vec<QParams>>,
}

struct Prepared {
    /// conv: (C_out, C_in, kh, kw); fc: (K, N).
    weight: Option<Tensor>,
    /// conv: (1, C_out, 1, 1); fc: (1, N).
    bias: Option<Tensor>,
    /// conv with pad values: subtracted from the input so candle's zero padding pads with them.
    pad_shift: Option<Tensor>,
}

/// A graph ready to run batches.
pub struct Executor<'g> {
    graph: &'g Graph,
    prepared: Vec<Prepared>,
    activations: Option<Vec<QParams>>,
    /// For each tensor, the last op reading it (values are dropped after).
    last_use: Vec<usize>,
    device: Device,
}

impl<'g> Executor<'g> {
    /// On the CPU.
    pub fn new(graph: &'g Graph, fq: &FakeQuant) -> Result<Self> {
        Self::on(graph, fq, &Device::Cpu)
    }

    /// On `device`; the weights and biases are prepared on the host and copied there once.
    pub fn on(graph: &'g Graph, fq: &FakeQuant, device: &Device) -> Result<Self> {
        let device = device.clone();
        let mut prepared = Vec::with_capacity(graph.ops.len());
        for (i, op) in graph.ops.iter().enumerate() {
            if !op.kind.has_weights() {
                prepared.push(Prepared {
                    weight: None,
                    bias: None,
                    pad_shift: None,
                });
                continue;
            }
            let w = fq.weights.as_ref().map_or(&op.weight, |w| &w[i]);
            let mut b = fq.biases.as_ref().map_or(&op.bias, |b| &b[i]).clone();
            let cin = graph.tensors[op.inputs[0]].shape.c;
            let cout = op.out_channels();
            let p = match op.kind {
                OpKind::Conv2d { kh, kw, .. } => {
                    let weight = Tensor::from_slice(w, (cout, cin, kh, kw), &device)?;
                    // conv(pad_p(x)) = conv(pad_0(x − p)) + Σ w·p: fold the pad values into the
                    // bias and shift the input.
                    let pad_shift = match &op.pad_values {
                        Some(pv) => {
                            let pv: Vec<f32> = match &fq.activations {
                                Some(a) => {
                                    let qp = a[op.inputs[0]];
                                    pv.iter().map(|&v| qp.dequantize(qp.quantize(v))).collect()
                                }
                                None => pv.clone(),
                            };
                            let k = kh * kw;
                            for (o, bo) in b.iter_mut().enumerate() {
                                let mut s = 0f64;
                                for (c, v) in pv.iter().enumerate() {
                                    let row = &w[(o * cin + c) * k..(o * cin + c + 1) * k];
                                    s += row.iter().map(|&x| x as f64).sum::<f64>() * *v as f64;
                                }
                                *bo = (*bo as f64 + s) as f32;
                            }
                            Some(Tensor::from_vec(pv, (1, cin, 1, 1), &device)?)
                        }
                        None => None,
                    };
                    Prepared {
                        weight: Some(weight),
                        bias: Some(Tensor::from_vec(b, (1, cout, 1, 1), &device)?),
                        pad_shift,
                    }
                }
                OpKind::DepthwiseConv2d { kh, kw, .. } => Prepared {
                    // candle's grouped convolution, one group per input channel.
                    weight: Some(Tensor::from_slice(w, (cout, 1, kh, kw), &device)?),
                    bias: Some(Tensor::from_vec(b, (1, cout, 1, 1), &device)?),
                    pad_shift: None,
                },
                _ => {
                    let k = graph.tensors[op.inputs[0]].shape.len();
                    let weight = Tensor::from_slice(w, (cout, k), &device)?
                        .t()?
                        .contiguous()?;
                    Prepared {
                        weight: Some(weight),
                        bias: Some(Tensor::from_vec(b, (1, cout), &device)?),
                        pad_shift: None,
                    }
                }
            };
            prepared.push(p);
        }
        let mut last_use = vec![0; graph.tensors.len()];
        for (i, op) in graph.ops.iter().enumerate() {
            for &t in &op.inputs {
                last_use[t] = i;
            }
        }
        last_use[graph.output] = usize::MAX;
        Ok(Self {
            graph,
            prepared,
            activations: fq.activations.clone(),
            last_use,
            device,
        })
    }

    /// Bytes per input image.
    pub fn input_len(&self) -> usize {
        self.graph.tensors[self.graph.input].shape.len()
    }

    /// The device it runs on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Runs `n` images of u8 pixels (NCHW) and returns the logits `(n, classes)`. `observe` sees
    /// every tensor `(n, C, H, W)` as it is produced (the input first).
    pub fn run_batch(
        &self,
        pixels: &[u8],
        n: usize,
        observe: &mut dyn FnMut(usize, &Tensor) -> Result<()>,
    ) -> Result<Tensor> {
        let g = self.graph;
        let s = g.tensors[g.input].shape;
        if pixels.len() != n * s.len() {
            return Err(ExportError::BadInput(format!(
                "{} pixel bytes for {n} images of {s}",
                pixels.len()
            )));
        }
        let x = Tensor::from_slice(pixels, (n, s.c, s.h, s.w), &self.device)?
            .to_dtype(DType::F32)?
            .affine(1.0 / 255.0, 0.0)?;
        let mut vals: Vec<Option<Tensor>> = vec![None; g.tensors.len()];
        observe(g.input, &x)?;
        vals[g.input] = Some(x);
        for (i, (op, p)) in g.ops.iter().zip(&self.prepared).enumerate() {
            let get = |t: usize| {
                vals[t].clone().ok_or_else(|| {
                    ExportError::BadInput(format!("tensor {t} used before it is produced"))
                })
            };
            let x = get(op.inputs[0])?;
            let mut y = match op.kind {
                OpKind::Conv2d { stride, pad, .. } => {
                    let x = match &p.pad_shift {
                        Some(ps) => x.broadcast_sub(ps)?,
                        None => x,
                    };
                    let w = p.weight.as_ref().expect("prepared conv");
                    x.conv2d(w, pad, stride, 1, 1)?
                        .broadcast_add(p.bias.as_ref().expect("prepared conv"))?
                }
                OpKind::DepthwiseConv2d { stride, pad, .. } => {
                    let w = p.weight.as_ref().expect("prepared depthwise conv");
                    x.conv2d(w, pad, stride, 1, x.dim(1)?)?
                        .broadcast_add(p.bias.as_ref().expect("prepared depthwise conv"))?
                }
                OpKind::FullyConnected => {
                    // The runtime reads its input in HWC order.
                    let x = x.permute((0, 2, 3, 1))?.flatten_from(1)?;
                    let y = x
                        .matmul(p.weight.as_ref().expect("prepared fc"))?
                        .broadcast_add(p.bias.as_ref().expect("prepared fc"))?;
                    y.reshape((n, op.out_channels(), 1, 1))?
                }
                OpKind::MaxPool { k, stride } => x.max_pool2d_with_stride(k, stride)?,
                OpKind::AvgPool { k, stride } => x.avg_pool2d_with_stride(k, stride)?,
                OpKind::Add => (x + get(op.inputs[1])?)?,
            };
            if op.relu6 {
                y = y.clamp(0f32, 6f32)?;
            } else if op.relu {
                y = y.relu()?;
            }
            if let Some(a) = &self.activations {
                y = fake_quantize(&y, a[op.output])?;
            }
            observe(op.output, &y)?;
            for &t in &op.inputs {
                if self.last_use[t] == i {
                    vals[t] = None;
                }
            }
            vals[op.output] = Some(y);
        }
        let out = vals[g.output]
            .take()
            .ok_or_else(|| ExportError::BadInput("graph has no output".into()))?;
        Ok(out.flatten_from(1)?)
    }

    /// Runs every image in batches; returns the logits, `n × classes` row-major.
    pub fn run_all(
        &self,
        pixels: &[u8],
        batch: usize,
        observe: &mut dyn FnMut(usize, &Tensor) -> Result<()>,
    ) -> Result<Vec<f32>> {
        self.run_all_counted(pixels, batch, observe, &Quiet)
    }

    /// [`Executor::run_all`], telling `progress` of each batch done.
    pub fn run_all_counted(
        &self,
        pixels: &[u8],
        batch: usize,
        observe: &mut dyn FnMut(usize, &Tensor) -> Result<()>,
        progress: &dyn Progress,
    ) -> Result<Vec<f32>> {
        let len = self.graph.tensors[self.graph.input].shape.len();
        let mut out = Vec::new();
        for chunk in pixels.chunks(batch.max(1) * len) {
            let n = chunk.len() / len;
            let y = self.run_batch(chunk, n, observe)?;
            out.extend(values(&y)?);
            progress.advance(n);
        }
        Ok(out)
    }
}

/// A tensor's values, flattened.
pub(crate) fn values(t: &Tensor) -> Result<Vec<f32>> {
    Ok(t.flatten_all()?.to_vec1::<f32>()?)
}

/// Round to the int8 grid of `qp` and back.
pub fn fake_quantize(y: &Tensor, qp: QParams) -> Result<Tensor> {
    let (s, z) = (qp.scale as f64, qp.zero_point as f64);
    Ok(y.affine(1.0 / s, 0.0)?
        .round()?
        .affine(1.0, z)?
        .clamp(-128f32, 127f32)?
        .affine(s, -z * s)?)
}

/// Index of the largest value of each row of `logits` (`n × classes`); ties to the first.
pub fn argmax_rows<T: PartialOrd + Copy>(logits: &[T], classes: usize) -> Vec<usize> {
    logits
        .chunks(classes.max(1))
        .map(|r| {
            let mut best = 0;
            for (i, v) in r.iter().enumerate() {
                if *v > r[best] {
                    best = i;
                }
            }
            best
        })
        .collect()
}
