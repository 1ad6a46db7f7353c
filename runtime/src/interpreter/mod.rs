//! The interpreter (TensorFlow Lite Micro's Eval): runs a validated [`Model`]'s ops in order
//! over a working arena, each op's kernel chosen by [`Kernels`], its parameters from the
//! model's prepared table ([`Model::prepare`]) or prepared just before it runs.
//!
//! Images run one at a time (hot caches), or, where a batched kernel pays off, in groups op by
//! op (`group`); threads sharing one image run each op in parts (`split`, with `std`). Every
//! path writes the same bytes as the scalar reference.

mod carve;
mod group;
#[cfg(feature = "std")]
mod split;

use carve::Carved;
#[cfg(feature = "std")]
pub(crate) use split::{Share, SharedArea, ThreadPart};

use core::ops::Range;

use crate::format::InputEncoding;
use crate::kernels::{self, Kernels, Resolved};
use crate::model::{OpParams, PreparedOp};
use crate::{as_i8, as_i8_mut, Model, Result, RuntimeError};

/// `ArenaTooSmall` unless `arena` holds `needed` bytes.
pub(crate) fn check_arena(arena: &[u8], needed: usize) -> Result<()> {
    if arena.len() < needed {
        return Err(RuntimeError::ArenaTooSmall {
            needed,
            len: arena.len(),
        });
    }
    Ok(())
}

/// The error of a working area that does not hold the model's input or output tensor.
const LAYOUT: RuntimeError = RuntimeError::BadParam {
    op: u32::MAX,
    what: "arena layout",
};

impl<'a> Model<'a> {
    /// Runs the model on `pixels` (a batch of inputs in the model's input encoding, one after
    /// another: u8 images planar C×H×W for octet's exports, the int8 tensors for imported
    /// models) with the fastest kernels; returns `batch · output_len()` outputs at the start of
    /// `arena`, which must hold at least `arena_bytes_for(Kernels::Auto, batch)` bytes; room
    /// for more working areas (up to `group_images(kernels)`) runs the inputs in groups, op by op
    /// (faster, the same bytes). No allocation.
    pub fn run<'b>(&self, pixels: &[u8], arena: &'b mut [u8]) -> Result<&'b [i8]> {
        self.run_with(Kernels::Auto, pixels, arena)
    }

    /// [`Model::run`] with the chosen kernels (`Scalar` is the reference).
    pub fn run_with<'b>(
        &self,
        kernels: Kernels,
        pixels: &[u8],
        arena: &'b mut [u8],
    ) -> Result<&'b [i8]> {
        let (k, batch) = self.start(kernels, pixels, arena)?;
        let n_out = batch * self.output_len();
        let (outs, work) = arena.split_at_mut(self.logits_bytes(batch));
        let areas = self.working_areas(k, work.len(), batch);
        self.run_images(
            k,
            pixels,
            &mut work[..areas * self.work_bytes(k)],
            &mut outs[..n_out],
        )?;
        let outs: &'b [u8] = outs;
        Ok(as_i8(&outs[..n_out]))
    }

    /// The kernels resolved and the batch of a single-threaded run, or the error for
    /// unavailable kernels, a pixel count that is not a whole number of images, or an arena
    /// smaller than `arena_bytes_for(kernels, batch)`.
    fn start(&self, kernels: Kernels, pixels: &[u8], arena: &[u8]) -> Result<(Resolved, usize)> {
        let k = kernels.resolve()?;
        let batch = self.batch_of(pixels.len())?;
        check_arena(arena, self.arena_bytes_for(k.kernels(), batch))?;
        Ok((k, batch))
    }

    /// One working area's bytes with the resolved set `k` (`Model::working_bytes`).
    pub(crate) fn work_bytes(&self, k: Resolved) -> usize {
        self.working_bytes(k.kernels())
    }

    /// The scratch of a working area of `len` bytes: what follows the activations.
    pub(crate) fn scratch_range(&self, len: usize) -> Range<usize> {
        self.scratch_offset().min(len)..len
    }

    /// Working areas that fit `len` bytes, at least 1 and at most `min(batch, group)`
    /// (`group_images`).
    pub(crate) fn working_areas(&self, k: Resolved, len: usize, batch: usize) -> usize {
        let fit = len.checked_div(self.work_bytes(k)).unwrap_or(usize::MAX);
        fit.min(batch).clamp(1, self.group_images(k.kernels()))
    }

    /// Runs every image of `pixels` through `work` (a whole number of working areas), writing
    /// each image's logits to consecutive `output_len()` chunks of `outs`. With several working
    /// areas the images run in groups, op by op, so that a conv sees the whole group at once.
    pub(crate) fn run_images(
        &self,
        k: Resolved,
        pixels: &[u8],
        work: &mut [u8],
        outs: &mut [u8],
    ) -> Result<()> {
        let (n_in, n_out, wb) = (self.input_len(), self.output_len(), self.work_bytes(k));
        let areas = work
            .len()
            .checked_div(wb)
            .unwrap_or(1)
            .clamp(1, self.group_images(k.kernels()));
        // Groups pay off only through the batched conv; otherwise image by image (hot caches).
        if areas == 1 || !self.groups_help(k) {
            for (img, out) in pixels.chunks_exact(n_in).zip(outs.chunks_exact_mut(n_out)) {
                self.run_one(k, img, &mut work[..wb], out)?;
            }
            return Ok(());
        }
        for (imgs, out) in pixels
            .chunks(areas * n_in)
            .zip(outs.chunks_mut(areas * n_out))
        {
            self.run_group(k, imgs, work, out)?;
        }
        Ok(())
    }

    /// Runs the images of `imgs` (at most one per working area of `work`) op by op.
    fn run_group(&self, k: Resolved, imgs: &[u8], work: &mut [u8], outs: &mut [u8]) -> Result<()> {
        let work = self.load_group(k, imgs, work)?;
        for j in 0..self.num_ops() as u32 {
            self.exec_areas(k, j, work)?;
        }
        for (w, out) in work
            .chunks_exact(self.work_bytes(k))
            .zip(outs.chunks_exact_mut(self.output_len()))
        {
            out.copy_from_slice(self.output_of(w)?);
        }
        Ok(())
    }

    /// Loads the images of `imgs` into the first working areas of `work`; returns those areas.
    fn load_group<'w>(&self, k: Resolved, imgs: &[u8], work: &'w mut [u8]) -> Result<&'w mut [u8]> {
        let (n_in, wb) = (self.input_len(), self.work_bytes(k));
        let work = &mut work[..imgs.len() / n_in * wb];
        for (img, w) in imgs.chunks_exact(n_in).zip(work.chunks_exact_mut(wb)) {
            self.load_input(img, w)?;
        }
        Ok(work)
    }

    /// Op `j` over every working area of `work`: at once where a batched kernel covers it,
    /// else area by area, every other op backwards (it starts with the image the op before
    /// finished with, still in cache).
    fn exec_areas(&self, k: Resolved, j: u32, work: &mut [u8]) -> Result<()> {
        let back = j % 2 == 1;
        self.with_op(j, |p| {
            if self.exec_group(k, p, work, back)? {
                return Ok(());
            }
            let wb = self.work_bytes(k);
            let scratch = self.scratch_range(wb);
            let areas = work.chunks_exact_mut(wb);
            if back {
                areas.rev().try_for_each(|w| exec(k, p, w, scratch.clone()))
            } else {
                areas
                    .into_iter()
                    .try_for_each(|w| exec(k, p, w, scratch.clone()))
            }
        })
    }

    /// Converts one input into the input tensor as the model's input encoding says: planar u8
    /// pixels into HWC with q = pixel − 128, HWC u8 with q = u − 128, or the int8 tensor as is.
    pub(crate) fn load_input(&self, img: &[u8], work: &mut [u8]) -> Result<()> {
        let tin = self.tensor(self.input_tensor()).ok_or(LAYOUT)?;
        let dst = work.get_mut(tin.range()).ok_or(LAYOUT)?;
        let (c, h, w) = self.input_shape();
        let hw = h * w;
        match self.input_encoding() {
            InputEncoding::I8Hwc => {
                dst.copy_from_slice(img.get(..dst.len()).ok_or(LAYOUT)?);
                return Ok(());
            }
            InputEncoding::U8Hwc => {
                for (d, &p) in dst.iter_mut().zip(img) {
                    *d = p ^ 0x80;
                }
                return Ok(());
            }
            InputEncoding::PixelsU8Chw => {}
        }
        if c == 1 {
            for (d, &p) in dst.iter_mut().zip(img) {
                *d = p ^ 0x80;
            }
        } else if c == 3 {
            // RGB: one pixel's three bytes at a time (the general loop's strided stores are
            // several times slower).
            let (r, rest) = img.split_at(hw);
            let (g, b) = rest.split_at(hw);
            for (((d, &r), &g), &b) in dst.chunks_exact_mut(3).zip(r).zip(g).zip(b) {
                d.copy_from_slice(&[r ^ 0x80, g ^ 0x80, b ^ 0x80]);
            }
        } else {
            for (ch, plane) in img.chunks_exact(hw).enumerate() {
                for (i, &p) in plane.iter().enumerate() {
                    dst[i * c + ch] = p ^ 0x80;
                }
            }
        }
        Ok(())
    }

    /// The logits of the working area `work` (after every op ran).
    pub(crate) fn output_of<'w>(&self, work: &'w [u8]) -> Result<&'w [u8]> {
        let tout = self.tensor(self.output_tensor()).ok_or(LAYOUT)?;
        work.get(tout.range()).ok_or(LAYOUT)
    }

    fn run_one(&self, k: Resolved, img: &[u8], work: &mut [u8], out: &mut [u8]) -> Result<()> {
        self.load_input(img, work)?;
        let scratch = self.scratch_range(work.len());
        for j in 0..self.num_ops() as u32 {
            self.with_op(j, |p| exec(k, p, work, scratch.clone()))?;
        }
        out.copy_from_slice(self.output_of(work)?);
        Ok(())
    }

    /// Profiling aid: runs `pixels` like [`Model::run_with`] (in groups when `arena` has room
    /// for several working areas), adding each op's time in seconds by `clock` to `times[j]`.
    #[doc(hidden)]
    pub fn run_timed(
        &self,
        kernels: Kernels,
        pixels: &[u8],
        arena: &mut [u8],
        times: &mut [f64],
        clock: fn() -> f64,
    ) -> Result<()> {
        let (k, batch) = self.start(kernels, pixels, arena)?;
        let work = &mut arena[self.logits_bytes(batch)..];
        let areas = self.working_areas(k, work.len(), batch);
        let work = &mut work[..areas * self.work_bytes(k)];
        for imgs in pixels.chunks(areas * self.input_len()) {
            let work = self.load_group(k, imgs, work)?;
            for j in 0..self.num_ops() as u32 {
                let t = clock();
                self.exec_areas(k, j, work)?;
                if let Some(s) = times.get_mut(j as usize) {
                    *s += clock() - t;
                }
            }
        }
        Ok(())
    }
}

/// Runs prepared op `p` with kernels `k` on one working area: carves its output and the
/// scratch (`scratch`, the area past the activations) out of `work` and dispatches to the op's
/// kernel.
fn exec(k: Resolved, p: &PreparedOp, work: &mut [u8], scratch: Range<usize>) -> Result<()> {
    let layout = p.layout_error();
    let carved = Carved::new(work, p.output.range(), scratch).ok_or(layout)?;
    let x = as_i8(carved.input(p.input.range()).ok_or(layout)?);
    let x1 = match p.params {
        OpParams::Add(..) | OpParams::TfliteAdd(..) => {
            as_i8(carved.input(p.input1.range()).ok_or(layout)?)
        }
        _ => &[],
    };
    let Carved {
        out: y, scratch, ..
    } = carved;
    let y = as_i8_mut(y);
    match &p.params {
        OpParams::Conv2d(c) => kernels::conv2d(k, c, x, y, scratch),
        OpParams::FullyConnected(f) => kernels::fully_connected(k, f, x, y, scratch),
        OpParams::MaxPool(pool) => kernels::max_pool(k, pool, x, y),
        OpParams::AvgPool(pool) => kernels::avg_pool(k, pool, x, y),
        OpParams::Add(add, _) => kernels::add(k, add, x, x1, y),
        OpParams::DepthwiseConv2d(d) => kernels::depthwise_conv2d(k, d, x, y, scratch),
        OpParams::TfliteAvgPool(pool) => kernels::tflite_avg_pool(k, pool, x, y),
        OpParams::Softmax(s) => kernels::softmax(k, s, x, y),
        OpParams::Reshape => kernels::reshape(k, x, y),
        OpParams::Pad(pad) => kernels::pad(k, pad, x, y),
        OpParams::TfliteAdd(add, _, packed) => {
            kernels::tflite_add(k, add, packed, x, x1, y, scratch)
        }
    }
    Ok(())
}
