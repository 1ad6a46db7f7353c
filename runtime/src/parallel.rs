//! Multi-threaded batch inference (feature `std`): the batch is split into chunks of up to
//! `GROUP_IMAGES` images, handed out to the threads in turn, each thread with its own working
//! slice of the arena (one working area per image of a chunk). No allocation besides the
//! threads themselves. The single-threaded [`Model::run`] stays the reference: the bytes are
//! identical.

use core::sync::atomic::{AtomicUsize, Ordering};

use crate::kernels::{Kernels, GROUP_IMAGES};
use crate::{align16, as_i8, Model, Result, RuntimeError};

/// Arena [`run_parallel`] needs: `align16(batch·out_len) + t · g · working_bytes` with
/// `t = min(threads, batch)` threads and `g = min(GROUP_IMAGES, ⌈batch / t⌉)` working areas
/// per thread (each thread runs its images in groups of `g`, op by op) (saturating).
pub fn arena_bytes_parallel(model: &Model, batch: usize, threads: usize) -> usize {
    let t = threads.clamp(1, batch.max(1));
    align16(
        batch
            .saturating_mul(model.output_len())
            .min(usize::MAX - 16),
    )
    .saturating_add(
        t.saturating_mul(areas(batch, t))
            .saturating_mul(model.working_bytes()),
    )
}

/// Threads `run_parallel` starts at most.
const MAX_THREADS: usize = 64;

/// The output bytes, shared by the threads (each writes only the chunks it takes).
#[derive(Clone, Copy)]
struct OutPtr(*mut u8);

impl OutPtr {
    fn get(self) -> *mut u8 {
        self.0
    }
}

// SAFETY: the pointer is only used to write disjoint chunks, one thread per chunk.
unsafe impl Send for OutPtr {}
// SAFETY: as above.
unsafe impl Sync for OutPtr {}

/// Working areas per thread.
fn areas(batch: usize, t: usize) -> usize {
    batch.div_ceil(t).clamp(1, GROUP_IMAGES)
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
    if threads == 0 {
        return Err(RuntimeError::BadThreads);
    }
    let k = kernels.resolve()?;
    let batch = model.batch_of(pixels.len())?;
    let needed = arena_bytes_parallel(model, batch, threads);
    if arena.len() < needed {
        return Err(RuntimeError::ArenaTooSmall {
            needed,
            len: arena.len(),
        });
    }
    let (n_in, n_out) = (model.input_len(), model.output_len());
    let n_total = batch * n_out;
    let (outs, works) = arena.split_at_mut(align16(n_total));
    if batch == 0 {
        return Ok(&[]);
    }
    // Chunks of one group of images each, handed out in turn: a thread slowed down (another
    // process on its core) takes fewer, and every chunk runs op by op over its group.
    let t0 = threads.min(batch);
    let per = areas(batch, t0);
    let chunks = batch.div_ceil(per);
    let t = t0.min(chunks).min(MAX_THREADS);
    let work_len = per * model.working_bytes();
    let next = AtomicUsize::new(0);
    let out_ptr = OutPtr(outs.as_mut_ptr());
    let worker = |work: &mut [u8]| -> Result<()> {
        loop {
            let c = next.fetch_add(1, Ordering::Relaxed);
            if c >= chunks {
                return Ok(());
            }
            let (i0, i1) = (c * per, ((c + 1) * per).min(batch));
            // SAFETY: the counter gives chunk c to exactly one thread, so these output bytes
            // (within `outs[..n_total]`, not otherwise used during the scope) have one writer.
            let out = unsafe {
                core::slice::from_raw_parts_mut(out_ptr.get().add(i0 * n_out), (i1 - i0) * n_out)
            };
            model.run_images(k, &pixels[i0 * n_in..i1 * n_in], work, out)?;
        }
    };
    let result = std::thread::scope(|s| {
        let mut areas = works.chunks_exact_mut(work_len).take(t);
        let Some(first) = areas.next() else {
            return Err(RuntimeError::BadThreads);
        };
        let mut handles = [const { None }; MAX_THREADS];
        for (h, work) in handles.iter_mut().zip(areas) {
            let worker = &worker;
            *h = Some(s.spawn(move || worker(work)));
        }
        let mut result = worker(first);
        for h in handles.iter_mut().filter_map(Option::take) {
            result = result.and(h.join().unwrap_or(Err(RuntimeError::BadThreads)));
        }
        result
    });
    result?;
    let outs: &'b [u8] = outs;
    Ok(as_i8(&outs[..n_total]))
}
