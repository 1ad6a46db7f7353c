//! Threads sharing one image (batch smaller than the thread count: latency,
//! `parallel::run_split_with`): every op split into parts, one per thread, over the one shared
//! working area: a conv by bands of output rows or by groups of output channels, a depthwise
//! conv by bands of output rows (the x86 sets), a fully connected op by outputs, an add
//! (octet's or TFLite's) by elements (or, right after its conv, by that conv's split); every
//! other op runs whole on one thread.

use super::{exec, Carved};
use crate::kernels::{self, ConvParams, FcParams, Resolved, Shape};
use crate::model::{OpParams, Place, PreparedOp};
use crate::{as_i8, as_i8_mut, Model, Result};

/// An element-wise kernel over one span: (input 0, input 1, output).
type SpanKernel<'f> = dyn FnMut(&[i8], &[i8], &mut [i8]) + 'f;

/// How threads sharing an image split a conv ([`Model::exec_part`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ConvSplit {
    /// Bands of output rows, each written in place.
    Rows,
    /// Output channels in groups of this many (8, or a packed conv's blocks:
    /// `Packed::split_align`), each computed apart and copied into place; an add right after
    /// splits its channels the same way.
    Channels(usize),
    /// Not split: part 0 runs it whole.
    Whole,
}

/// One thread's share of an op: part `part` of `parts`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Share {
    /// This thread's part, `0..parts`.
    pub(crate) part: usize,
    /// Threads sharing the op.
    pub(crate) parts: usize,
}

impl Share {
    /// This part's items `[start, end)` of `n`, the parts cut at multiples of `align`.
    fn of(self, n: usize, align: usize) -> (usize, usize) {
        let per = n.div_ceil(self.parts).next_multiple_of(align);
        (n.min(self.part * per), n.min((self.part + 1) * per))
    }
}

/// The working area the threads share: `len` bytes at `ptr`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SharedArea {
    /// Start.
    pub(crate) ptr: *mut u8,
    /// Bytes.
    pub(crate) len: usize,
}

impl SharedArea {
    /// The tensor at `t`, read-only.
    ///
    /// # Safety
    /// `t` lies in the area, and no thread writes it while the view is used.
    unsafe fn tensor<'x>(self, t: Place) -> &'x [i8] {
        as_i8(core::slice::from_raw_parts(
            self.ptr.add(t.start),
            t.end - t.start,
        ))
    }

    /// Element 0 of the tensor at `t`.
    ///
    /// # Safety
    /// `t` lies in the area.
    unsafe fn at(self, t: Place) -> *mut i8 {
        self.ptr.add(t.start).cast::<i8>()
    }
}

/// One thread's part of the ops: the kernels, the working area the threads share, and which
/// share of each op is this thread's.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ThreadPart {
    /// The kernels.
    pub(crate) k: Resolved,
    /// The shared working area.
    pub(crate) area: SharedArea,
    /// This thread's share.
    pub(crate) share: Share,
    /// Where the scratch starts in a working area (the shared one and each thread's own): what
    /// follows the activations, to the area's end.
    pub(crate) scratch_start: usize,
}

impl Model<'_> {
    /// Part `t.share` of op `j` over the working area `t.area` the threads share, for threads
    /// sharing an image: a conv's band of output rows or output channels ([`conv_split`];
    /// channels in groups of 8, computed into `own`, this thread's working area, then copied
    /// into place), a fully connected op's outputs or an add's elements (octet's or TFLite's;
    /// for an add right after its conv, `after_conv`: that conv's split, from
    /// [`Model::add_after_conv`]); pooling runs whole in part 0. Returns a conv's split (for
    /// [`Model::add_after_conv`]).
    ///
    /// # Safety
    /// `t.area` is valid; while op `j` runs, it is accessed only by the calls for this op
    /// with distinct shares, whose writes are disjoint (their parts of the output tensor,
    /// which overlaps no input of op `j`: `check_data_flow`).
    pub(crate) unsafe fn exec_part(
        &self,
        j: u32,
        t: ThreadPart,
        own: &mut [u8],
        after_conv: Option<ConvSplit>,
    ) -> Result<Option<ConvSplit>> {
        self.with_op(j, |p| {
            let fits = |place: Place| place.end <= t.area.len;
            if !(fits(p.input) && fits(p.input1) && fits(p.output)) {
                return Err(p.layout_error());
            }
            match &p.params {
                OpParams::Conv2d(c) => {
                    let scratch = own.len().saturating_sub(t.scratch_start);
                    let split = conv_split(t.k, c, scratch, t.share.parts);
                    match split {
                        ConvSplit::Rows => t.rows(p, c.output, own, |x, y, s, r| {
                            kernels::conv2d_rows(t.k, c, x, y, s, r)
                        }),
                        ConvSplit::Channels(align) => t.conv_channels(p, c, own, align),
                        ConvSplit::Whole => t.whole(p),
                    }?;
                    return Ok(Some(split));
                }
                OpParams::FullyConnected(f) => t.fully_connected(p, f),
                OpParams::DepthwiseConv2d(d) => {
                    let scratch = own.len().saturating_sub(t.scratch_start);
                    let input = p.input.end - p.input.start;
                    if d.output.h >= t.share.parts
                        && kernels::depthwise_conv2d_rows_covered(t.k, d, input, scratch)
                    {
                        t.rows(p, d.output, own, |x, y, s, r| {
                            kernels::depthwise_conv2d_rows(t.k, d, x, y, s, r)
                        })?
                    } else {
                        t.whole(p)?
                    }
                }
                OpParams::Add(add, shape) => {
                    t.elementwise(p, *shape, after_conv, &mut |a, b, y| {
                        kernels::add(t.k, add, a, b, y)
                    })
                }
                OpParams::TfliteAdd(add, shape, packed) => {
                    // The tables once for all of this part's spans (one per pixel where the
                    // conv before was split by channels).
                    kernels::with_add_tables(t.k, add, packed, |tables| {
                        t.elementwise(p, *shape, after_conv, &mut |a, b, y| {
                            kernels::tflite_add_with(t.k, add, tables, a, b, y)
                        })
                    })
                }
                _ => t.whole(p)?,
            }
            Ok(None)
        })
    }

    /// For threads sharing an image: when op `j` is a residual add of the output of the conv
    /// just before it, which ran split by `conv` ([`Model::exec_part`]'s answer) between the
    /// threads by rows or channels, that split, so that each
    /// thread adds its own part right after computing it, with no barrier between the two ops
    /// (`parallel::run_split_with`). Requires that the add writes nothing the conv reads and
    /// the conv writes nothing the add reads besides its own output.
    pub(crate) fn add_after_conv(
        &self,
        j: u32,
        conv: Option<ConvSplit>,
    ) -> Result<Option<ConvSplit>> {
        let split = match conv {
            Some(split @ (ConvSplit::Rows | ConvSplit::Channels(_))) => split,
            _ => return Ok(None),
        };
        if j as usize >= self.num_ops() {
            return Ok(None);
        }
        self.with_op(j, |add| {
            if !matches!(add.params, OpParams::Add(..) | OpParams::TfliteAdd(..)) {
                return Ok(None);
            }
            self.with_op(j - 1, |conv| {
                let skip = if add.input.id == conv.output.id {
                    add.input1
                } else if add.input1.id == conv.output.id {
                    add.input
                } else {
                    return Ok(None);
                };
                let apart = |a: Place, b: Place| a.end <= b.start || b.end <= a.start;
                if !apart(add.output, conv.input) || !apart(conv.output, skip) {
                    return Ok(None);
                }
                Ok(Some(split))
            })
        })
    }
}

/// How threads sharing an image split conv `p` (with `scratch` bytes of scratch): by bands of
/// output rows (each builds only the input copy its rows read and writes its rows in place)
/// where the kernels have a band kernel and there are many pixels (at least
/// [`crate::parallel::SPLIT_ROWS_MIN_PIXELS`], [`crate::parallel::SPLIT_PACKED_ROWS_MIN_PIXELS`]
/// for packed weights, and a row per part); else by output channels (groups of 8, one per
/// part at least); else not at all.
fn conv_split(k: Resolved, p: &ConvParams, scratch: usize, parts: usize) -> ConvSplit {
    let (h, w) = (p.output.h, p.output.w);
    let packed = [kernels::Layout::VnniFc, kernels::Layout::VnniConv];
    let min = if packed.iter().any(|&l| p.packed.of(l).is_some()) {
        crate::parallel::SPLIT_PACKED_ROWS_MIN_PIXELS
    } else {
        crate::parallel::SPLIT_ROWS_MIN_PIXELS
    };
    if h * w >= min && h >= parts && kernels::conv2d_rows_covered(k, p, scratch) {
        ConvSplit::Rows
    } else if p.output.c >= 8 * parts {
        ConvSplit::Channels(p.packed.split_align(8))
    } else {
        ConvSplit::Whole
    }
}

impl ThreadPart {
    /// Op `p` whole, in part 0 only.
    ///
    /// # Safety
    /// As [`Model::exec_part`]: the other parts of this op touch nothing.
    unsafe fn whole(self, p: &PreparedOp) -> Result<()> {
        let (k, area, share) = (self.k, self.area, self.share);
        if share.part != 0 {
            return Ok(());
        }
        let scratch = self.scratch_start.min(area.len)..area.len;
        exec(
            k,
            p,
            core::slice::from_raw_parts_mut(area.ptr, area.len),
            scratch,
        )
    }

    /// The scratch of this thread's own working area `own`.
    fn own_scratch(self, own: &[u8]) -> core::ops::Range<usize> {
        self.scratch_start.min(own.len())..own.len()
    }

    /// This part's band of output rows of an op whose output is `shape` (HWC), written in
    /// place by `band` (input, the band's output rows, scratch in `own`, the rows): a conv's
    /// or a depthwise conv's band kernel.
    ///
    /// # Safety
    /// As [`Model::exec_part`]: rows of the output are this part's; no part writes the input.
    unsafe fn rows(
        self,
        p: &PreparedOp,
        shape: Shape,
        own: &mut [u8],
        band: impl FnOnce(&[i8], &mut [i8], &mut [u8], core::ops::Range<usize>) -> bool,
    ) -> Result<()> {
        let (area, share) = (self.area, self.share);
        let x = area.tensor(p.input);
        let (r0, r1) = share.of(shape.h, 1);
        let row = shape.w * shape.c;
        let scratch = self.own_scratch(own);
        let carved = Carved::new(own, p.output.range(), scratch).ok_or(p.layout_error())?;
        let out = core::slice::from_raw_parts_mut(area.at(p.output).add(r0 * row), (r1 - r0) * row);
        if r0 < r1 && !band(x, out, carved.scratch, r0..r1) {
            return Err(p.layout_error());
        }
        Ok(())
    }

    /// This part's output channels of conv `p`, computed into `own` and copied into place.
    ///
    /// # Safety
    /// As [`Model::exec_part`]: those channels of the output are this part's; no part writes the
    /// input.
    unsafe fn conv_channels(
        self,
        p: &PreparedOp,
        c: &ConvParams,
        own: &mut [u8],
        align: usize,
    ) -> Result<()> {
        let (k, area, share) = (self.k, self.area, self.share);
        let x = area.tensor(p.input);
        let (c0, c1) = share.of(c.output.c, align);
        if c0 == c1 {
            return Ok(());
        }
        let sub = c.channels(c0, c1);
        let npix = c.output.h * c.output.w;
        let scratch = self.own_scratch(own);
        let carved = Carved::new(own, p.output.range(), scratch).ok_or(p.layout_error())?;
        let Carved { out, scratch, .. } = carved;
        let tmp = as_i8_mut(&mut out[..npix * (c1 - c0)]);
        kernels::conv2d(k, &sub, x, tmp, scratch);
        scatter_channels(tmp, area.at(p.output).add(c0), c1 - c0, c.output.c);
        Ok(())
    }

    /// This part's outputs of fully connected op `p`.
    ///
    /// # Safety
    /// As [`Model::exec_part`]: those outputs are this part's; no part writes the input.
    unsafe fn fully_connected(self, p: &PreparedOp, f: &FcParams) {
        let (k, area, share) = (self.k, self.area, self.share);
        let (n0, n1) = share.of(f.n, f.packed.split_align(4));
        if n0 < n1 {
            let out = core::slice::from_raw_parts_mut(area.at(p.output).add(n0), n1 - n0);
            kernels::fully_connected(k, &f.outputs(n0, n1), area.tensor(p.input), out, &mut []);
        }
    }

    /// This part's elements of add `p` (octet's or TFLite's; output `shape`), each span through
    /// `kernel` (input 0, input 1, output): by `after_conv`'s split, the rows or channels this
    /// thread just computed of the conv before, else by elements.
    ///
    /// # Safety
    /// As [`Model::exec_part`]. Elements e0..e1 (in bounds) of the output are this part's, and of
    /// the inputs either no part writes them or this part just did (a conv's output,
    /// [`Model::add_after_conv`]): only those are viewed.
    unsafe fn elementwise(
        self,
        p: &PreparedOp,
        shape: Shape,
        after_conv: Option<ConvSplit>,
        kernel: &mut SpanKernel,
    ) {
        let (area, share) = (self.area, self.share);
        let (y, x0, x1) = (area.at(p.output), area.at(p.input), area.at(p.input1));
        let mut elements = |e0: usize, e1: usize| {
            let n = e1 - e0;
            let out = core::slice::from_raw_parts_mut(y.add(e0), n);
            let a = core::slice::from_raw_parts(x0.add(e0), n);
            let b = core::slice::from_raw_parts(x1.add(e0), n);
            kernel(a, b, out);
        };
        let (c, row, len) = (shape.c, shape.w * shape.c, shape.len());
        match after_conv {
            Some(ConvSplit::Rows) => {
                let (r0, r1) = share.of(shape.h, 1);
                if r0 < r1 {
                    elements(r0 * row, r1 * row);
                }
            }
            Some(ConvSplit::Channels(align)) => {
                let (c0, c1) = share.of(c, align);
                if c0 < c1 {
                    (0..len / c).for_each(|px| elements(px * c + c0, px * c + c1));
                }
            }
            _ => {
                let (e0, e1) = share.of(len, 64);
                if e0 < e1 {
                    elements(e0, e1);
                }
            }
        }
    }
}

/// Copies the HWC tensor `src` of `n` channels into channels `0..n` of the HWC tensor of
/// `cout` channels at `dst` (a thread's share of a conv's channels), 16 bytes at a time when
/// `n` allows (a call to `memcpy` per pixel would cost more than the copy).
///
/// # Safety
/// `dst` is valid for writes at `px·cout .. px·cout + n` for every pixel of `src`.
unsafe fn scatter_channels(src: &[i8], dst: *mut i8, n: usize, cout: usize) {
    if n.is_multiple_of(16) {
        for (px, row) in src.chunks_exact(n).enumerate() {
            let d = dst.add(px * cout);
            for i in (0..n).step_by(16) {
                let v = (row.as_ptr().add(i) as *const [u8; 16]).read_unaligned();
                (d.add(i) as *mut [u8; 16]).write_unaligned(v);
            }
        }
    } else {
        for (px, row) in src.chunks_exact(n).enumerate() {
            core::ptr::copy_nonoverlapping(row.as_ptr(), dst.add(px * cout), n);
        }
    }
}
