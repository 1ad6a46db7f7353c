//! Upload: the lowered steps' constants copied to the device once, and the device memory a
//! model needs, checked against what is free before anything is allocated.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};

use crate::Model;

use super::lower::{Dense, DenseConsts, Depthwise, Step};
use super::plan::Layout;
use super::Result;

/// A conv's constants on the device (see [`DenseConsts`]), with their addresses.
pub(super) struct DeviceConsts {
    /// Owns the memory behind the pointers below.
    _buffers: (CudaSlice<i32>, CudaSlice<i32>, CudaSlice<i8>),
    /// Device addresses of the packed weights, `{bias, M0, n, 0}` rows and pad bytes.
    pub w: u64,
    pub rq: u64,
    pub padv: u64,
    /// `w` and `padv` start on 16-byte boundaries (driver allocations do): the direct
    /// tensor-core tiles read 16-byte pieces of them.
    pub aligned16: bool,
}

/// A step ready to launch.
pub(super) type DeviceStep = Step<DeviceConsts>;

/// Device memory `model` needs for `max_batch` images (an upper bound, bytes): activations,
/// pixels, constants.
pub(super) fn device_bytes(model: &Model, layout: &Layout, max_batch: usize) -> usize {
    let mut const_bytes = 0usize;
    for o in model.ops() {
        const_bytes += o.weights.len() + 3 + 16 * o.bias.len() + 4 * 256;
    }
    layout.total + model.input_len() * max_batch + const_bytes
}

/// Copies every conv's and depthwise conv's constants to the device (weights, pad bytes,
/// requantization rows, op by op); the other steps carry no constants.
pub(super) fn upload(
    stream: &Arc<CudaStream>,
    steps: Vec<Step<DenseConsts>>,
) -> Result<Vec<DeviceStep>> {
    steps
        .into_iter()
        .map(|step| {
            Ok(match step {
                Step::Dense(d) => Step::Dense(Dense {
                    consts: upload_consts(stream, d.consts)?,
                    fc: d.fc,
                    x: d.x,
                    y: d.y,
                    g: d.g,
                    cin_words: d.cin_words,
                    q: d.q,
                }),
                Step::Depthwise(d) => Step::Depthwise(Depthwise {
                    consts: upload_consts(stream, d.consts)?,
                    x: d.x,
                    y: d.y,
                    g: d.g,
                    dm: d.dm,
                    ld: d.ld,
                    q: d.q,
                }),
                Step::Pool(p) => Step::Pool(p),
                Step::Add(a) => Step::Add(a),
                Step::TfliteAdd(a) => Step::TfliteAdd(a),
                Step::Softmax(s) => Step::Softmax(s),
                Step::Pad(p) => Step::Pad(p),
                Step::Reshape(r) => Step::Reshape(r),
            })
        })
        .collect()
}

fn upload_consts(stream: &Arc<CudaStream>, c: DenseConsts) -> Result<DeviceConsts> {
    let (w, padv) = (stream.clone_htod(&c.w)?, stream.clone_htod(&c.padv)?);
    let rq = stream.clone_htod(&c.rq)?;
    // The model's stream is the only one using these buffers, and event tracking is off: the
    // addresses are all a launch needs.
    let ptr = |p: (u64, _)| p.0;
    let (w_ptr, rq_ptr) = (ptr(w.device_ptr(stream)), ptr(rq.device_ptr(stream)));
    let padv_ptr = ptr(padv.device_ptr(stream));
    Ok(DeviceConsts {
        w: w_ptr,
        rq: rq_ptr,
        padv: padv_ptr,
        aligned16: (w_ptr | padv_ptr) % 16 == 0,
        _buffers: (w, rq, padv),
    })
}
