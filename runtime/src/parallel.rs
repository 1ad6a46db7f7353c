//! Multi-threaded batch inference (feature `std`): the batch is split into contiguous chunks,
//! one per thread, each thread with its own working slice of the arena. No allocation besides
//! the threads themselves. The single-threaded [`Model::run`] stays the reference: the bytes
//! are identical.

use crate::kernels::Kernels;
use crate::{align16, as_i8, Model, Result, RuntimeError};

/// Arena [`run_parallel`] needs: `align16(batch·out_len) + min(threads, batch) · working_bytes`
/// (saturating).
pub fn arena_bytes_parallel(model: &Model, batch: usize, threads: usize) -> usize {
    let t = threads.clamp(1, batch.max(1));
    align16(
        batch
            .saturating_mul(model.output_len())
            .min(usize::MAX - 16),
    )
    .saturating_add(t.saturating_mul(model.working_bytes()))
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
    let t = threads.min(batch);
    let (n_in, n_out, work_len) = (model.input_len(), model.output_len(), model.working_bytes());
    let n_total = batch * n_out;
    let (outs, works) = arena.split_at_mut(align16(n_total));
    let per = batch.div_ceil(t);
    let result = std::thread::scope(|s| {
        let mut handles = [const { None }; 64];
        let mut rest_out = &mut outs[..n_total];
        let mut rest_work = &mut works[..];
        let mut rest_px = pixels;
        let mut first: Option<(&[u8], &mut [u8], &mut [u8])> = None;
        let mut spawned = 0;
        let mut results_inline: Result<()> = Ok(());
        let mut i = 0;
        while !rest_px.is_empty() {
            let imgs = per.min(rest_px.len() / n_in);
            let (px, rp) = rest_px.split_at(imgs * n_in);
            let (out, ro) = core::mem::take(&mut rest_out).split_at_mut(imgs * n_out);
            let (work, rw) = core::mem::take(&mut rest_work).split_at_mut(work_len);
            rest_px = rp;
            rest_out = ro;
            rest_work = rw;
            if i == 0 {
                first = Some((px, work, out));
            } else if spawned < handles.len() {
                handles[spawned] = Some(s.spawn(move || model.run_images(k, px, work, out)));
                spawned += 1;
            } else {
                // More chunks than thread slots: run on this thread.
                results_inline = results_inline.and(model.run_images(k, px, work, out));
            }
            i += 1;
        }
        if let Some((px, work, out)) = first {
            results_inline = results_inline.and(model.run_images(k, px, work, out));
        }
        for h in handles.iter_mut().take(spawned) {
            if let Some(h) = h.take() {
                let r = h.join().unwrap_or(Err(RuntimeError::BadThreads));
                results_inline = results_inline.and(r);
            }
        }
        results_inline
    });
    result?;
    let outs: &'b [u8] = outs;
    Ok(as_i8(&outs[..n_total]))
}
