//! Multi-threaded batch inference (feature `std`): the batch is split into chunks of up to
//! `Model::group_images` images, handed out to the threads in turn, each thread with its own
//! working slice of the arena (one working area per image of a chunk). A batch smaller than
//! the thread count (one image: latency) instead runs each image on every thread, op by op,
//! each op split between them ([`run_split_with`]). The threads stay between calls (`pool`).
//! No allocation besides the threads themselves. The single-threaded [`Model::run`] stays the
//! reference: the bytes are identical.

use core::sync::atomic::{AtomicUsize, Ordering};

mod barrier;
mod pool;
mod signal;

use barrier::Barrier;
use pool::on_threads;

use crate::interpreter::{check_arena, Share, SharedArea, ThreadPart};
use crate::kernels::{Kernels, Resolved};
use crate::{as_i8, Model, Result, RuntimeError};

/// Arena [`run_parallel_with`] needs with `kernels`: `align16(batch·out_len) + t · g ·
/// working_bytes(kernels)` with `t = min(threads, batch)` threads and
/// `g = min(group_images(kernels), ⌈batch / t⌉)` working areas per thread (each thread runs
/// its images in groups of `g`, op by op) (saturating); or, when
/// the batch is smaller than `threads` and the model large enough to split each image
/// ([`SPLIT_MIN_MACS`]), [`arena_bytes_split`].
pub fn arena_bytes_parallel(
    model: &Model,
    kernels: Kernels,
    batch: usize,
    threads: usize,
) -> usize {
    if splits(model, batch, threads) {
        return arena_bytes_split(model, kernels, batch, threads);
    }
    let t = threads.clamp(1, batch.max(1));
    model.logits_bytes(batch).saturating_add(
        t.saturating_mul(areas(model, kernels, batch, t))
            .saturating_mul(model.working_bytes(kernels)),
    )
}

/// The kernels resolved and the batch, or the error for no threads, unavailable kernels or a
/// pixel count that is not a whole number of images.
fn checked(
    model: &Model,
    kernels: Kernels,
    pixels: &[u8],
    threads: usize,
) -> Result<(Resolved, usize)> {
    if threads == 0 {
        return Err(RuntimeError::BadThreads);
    }
    Ok((kernels.resolve()?, model.batch_of(pixels.len())?))
}

/// `arena` (at least `needed` bytes, else `ArenaTooSmall`) split into the logits of `batch`
/// images and the working areas after them.
fn split_arena<'b>(
    model: &Model,
    arena: &'b mut [u8],
    batch: usize,
    needed: usize,
) -> Result<(&'b mut [u8], &'b mut [u8])> {
    check_arena(arena, needed)?;
    Ok(arena.split_at_mut(model.logits_bytes(batch)))
}

/// The first `n` bytes of `outs` as the logits returned.
fn logits_of(outs: &mut [u8], n: usize) -> &[i8] {
    let outs: &[u8] = outs;
    as_i8(&outs[..n])
}

/// Multiply-adds per image from which a batch smaller than the thread count runs each image
/// on all threads ([`run_split_with`]): below, starting a thread and meeting after every op
/// cost more than half the image (LeNet's 0.4 M run on one thread). Measured on two cores of
/// an AMD EPYC (AVX-512 VNNI; `benches/mlperf_tiny.rs`, batch 1), since the x86 depthwise
/// convs split by rows too: DS-CNN (2.7 M) runs in 0.89× the time split, MobileNet v1 0.25
/// (7.5 M) in 0.96×, ResNet-8 (12.5 M) in 0.62×. (With the depthwise convs whole on one
/// thread, on a Xeon: DS-CNN 1.26×, MobileNet 1.14×.)
pub const SPLIT_MIN_MACS: u64 = 1_000_000;

/// Output pixels from which threads sharing an image split a conv by bands of rows rather than
/// by output channels (where the kernels allow): with fewer, a band is a pass or two of the
/// kernel, and the channel split reads each weight once instead of once per thread.
pub const SPLIT_ROWS_MIN_PIXELS: usize = 256;

/// [`SPLIT_ROWS_MIN_PIXELS`] for a conv with packed weights (the packed product runs a pixel at a
/// time, so a band costs no more per pixel than the whole; the channel split copies its
/// channels into place).
pub const SPLIT_PACKED_ROWS_MIN_PIXELS: usize = 64;

/// Whether [`run_parallel_with`] splits each image between the threads.
fn splits(model: &Model, batch: usize, threads: usize) -> bool {
    threads > 1 && batch < threads && model.macs_per_image() >= SPLIT_MIN_MACS
}

/// Arena [`run_split_with`] needs with `kernels`: `align16(batch·out_len) + (1 + t)·
/// working_bytes(kernels)`, t = min(threads, 64): the shared working area and one per thread
/// (its scratch and the channels it computes) (saturating).
pub fn arena_bytes_split(model: &Model, kernels: Kernels, batch: usize, threads: usize) -> usize {
    let t = threads.clamp(1, MAX_THREADS);
    model
        .logits_bytes(batch)
        .saturating_add((t + 1).saturating_mul(model.working_bytes(kernels)))
}

/// Threads `run_parallel` starts at most.
const MAX_THREADS: usize = 64;

/// Bytes the threads share (the logits; the split path's working area), each thread writing
/// only bytes no other touches meanwhile (every use says why).
#[derive(Clone, Copy)]
struct SharedPtr(*mut u8);

impl SharedPtr {
    fn get(self) -> *mut u8 {
        self.0
    }
}

// SAFETY: the pointer is only used for disjoint writes, or while the other threads wait.
unsafe impl Send for SharedPtr {}
// SAFETY: as above.
unsafe impl Sync for SharedPtr {}

/// Working areas per thread.
fn areas(model: &Model, kernels: Kernels, batch: usize, t: usize) -> usize {
    batch.div_ceil(t).clamp(1, model.group_images(kernels))
}

/// Runs `pixels` (a batch of images) on up to `threads` threads with the fastest kernels;
/// returns the `batch · output_len()` logits at the start of `arena`.
pub fn run_parallel<'b>(
    model: &Model,
    pixels: &[u8],
    arena: &'b mut [u8],
    threads: usize,
) -> Result<&'b [i8]> {
    run_parallel_with(model, Kernels::Auto, pixels, arena, threads)
}

/// [`run_parallel`] with the chosen kernels.
pub fn run_parallel_with<'b>(
    model: &Model,
    kernels: Kernels,
    pixels: &[u8],
    arena: &'b mut [u8],
    threads: usize,
) -> Result<&'b [i8]> {
    let (k, batch) = checked(model, kernels, pixels, threads)?;
    if splits(model, batch, threads) {
        return run_split_with(model, kernels, pixels, arena, threads);
    }
    let needed = arena_bytes_parallel(model, kernels, batch, threads);
    let (outs, works) = split_arena(model, arena, batch, needed)?;
    let (n_in, n_out) = (model.input_len(), model.output_len());
    if batch == 0 {
        return Ok(&[]);
    }
    // Chunks of one group of images each, handed out in turn: a thread slowed down (another
    // process on its core) takes fewer, and every chunk runs op by op over its group.
    let t0 = threads.min(batch);
    let per = areas(model, kernels, batch, t0);
    let chunks = batch.div_ceil(per);
    let t = t0.min(chunks).min(MAX_THREADS);
    let work_len = per * model.working_bytes(kernels);
    let next = AtomicUsize::new(0);
    let out_ptr = SharedPtr(outs.as_mut_ptr());
    let worker = |_: usize, work: &mut [u8]| -> Result<()> {
        loop {
            let c = next.fetch_add(1, Ordering::Relaxed);
            if c >= chunks {
                return Ok(());
            }
            let (i0, i1) = (c * per, ((c + 1) * per).min(batch));
            // SAFETY: the counter gives chunk c to exactly one thread, so these output bytes
            // (within `outs[..batch·n_out]`, not otherwise used during the scope) have one writer.
            let out = unsafe {
                core::slice::from_raw_parts_mut(out_ptr.get().add(i0 * n_out), (i1 - i0) * n_out)
            };
            model.run_images(k, &pixels[i0 * n_in..i1 * n_in], work, out)?;
        }
    };
    on_threads(works, work_len, t, &worker)?;
    Ok(logits_of(outs, batch * n_out))
}

/// Runs `pixels` image by image, each on `threads` threads at once: every op's output channels
/// (conv), outputs (fully connected) or elements (add) split between them, pooling on one, a
/// barrier after each op. For latency (batch 1). `arena` holds at least
/// [`arena_bytes_split`] bytes; returns the `batch · output_len()` logits at its start.
pub fn run_split_with<'b>(
    model: &Model,
    kernels: Kernels,
    pixels: &[u8],
    arena: &'b mut [u8],
    threads: usize,
) -> Result<&'b [i8]> {
    let (k, batch) = checked(model, kernels, pixels, threads)?;
    let needed = arena_bytes_split(model, kernels, batch, threads);
    let (outs, works) = split_arena(model, arena, batch, needed)?;
    let t = threads.min(MAX_THREADS);
    let (n_in, n_out, wb) = (
        model.input_len(),
        model.output_len(),
        model.working_bytes(kernels),
    );
    let scratch_start = model.scratch_offset();
    let (shared, owns) = works.split_at_mut(wb);
    let shared = SharedPtr(shared.as_mut_ptr());
    let logits = SharedPtr(outs.as_mut_ptr());
    let barrier = Barrier::new(t);
    let ops = model.num_ops() as u32;
    // Thread `part`: every image, every op's part; part 0 also loads the inputs and copies
    // the logits out while the others wait at the barrier.
    let worker = |part: usize, own: &mut [u8]| -> Result<()> {
        // A part that panics releases the others from the barrier (they would wait for it
        // forever); the pool reports the panic as an error.
        let _release = FailOnUnwind(&barrier);
        for i in 0..batch {
            if part == 0 {
                // SAFETY: the other threads wait at the barrier: nothing else touches `shared`.
                let work = unsafe { core::slice::from_raw_parts_mut(shared.get(), wb) };
                if let Err(e) = model.load_input(&pixels[i * n_in..(i + 1) * n_in], work) {
                    barrier.fail();
                    return Err(e);
                }
            }
            if !barrier.wait(part) {
                return Ok(());
            }
            // The split of the conv just run, when op j is a residual add of its output.
            let mut after_conv = None;
            for j in 0..ops {
                let this = ThreadPart {
                    k,
                    area: SharedArea {
                        ptr: shared.get(),
                        len: wb,
                    },
                    share: Share { part, parts: t },
                    scratch_start,
                };
                // SAFETY: between two barriers the threads run distinct parts of op j.
                let r = unsafe { model.exec_part(j, this, own, after_conv) };
                // A residual add right after its conv runs by the conv's split: each thread's
                // part of it reads only what the same thread just wrote (no barrier between).
                match r.and_then(|conv| model.add_after_conv(j + 1, conv)) {
                    Err(e) => {
                        barrier.fail();
                        return Err(e);
                    }
                    Ok(next) => after_conv = next,
                }
                if after_conv.is_none() && !barrier.wait(part) {
                    return Ok(());
                }
            }
            if part == 0 {
                // SAFETY: every op has finished (the last barrier); the other threads touch
                // `shared` again only after the next image's first barrier, and never the
                // logits (within `outs[..batch·n_out]`, written by part 0 alone).
                let (work, out) = unsafe {
                    (
                        core::slice::from_raw_parts(shared.get(), wb),
                        core::slice::from_raw_parts_mut(logits.get().add(i * n_out), n_out),
                    )
                };
                match model.output_of(work) {
                    Ok(o) => out.copy_from_slice(o),
                    Err(e) => {
                        barrier.fail();
                        return Err(e);
                    }
                }
            }
        }
        Ok(())
    };
    on_threads(owns, wb, t, &worker)?;
    Ok(logits_of(outs, batch * n_out))
}

/// Fails the barrier when dropped by a panicking thread.
struct FailOnUnwind<'a>(&'a Barrier);

impl Drop for FailOnUnwind<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.fail();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A part that panics between two barriers releases the part waiting for it.
    #[test]
    fn a_panicking_part_releases_the_barrier() {
        let barrier = Barrier::new(2);
        std::thread::scope(|s| {
            let waiter = s.spawn(|| barrier.wait(0));
            let panicking = s.spawn(|| {
                let _release = FailOnUnwind(&barrier);
                panic!("a kernel's bug");
            });
            assert!(panicking.join().is_err());
            assert!(!waiter.join().unwrap());
        });
    }
}
