//! Host ↔ device copies: the pixels in (pageable, or through page-locked staging), the
//! logits out.

use cudarc::driver::result;

use super::{CudaError, CudaModel, Result};

/// Bytes per chunk of the staged host→device pixel copy.
const STAGE_CHUNK: usize = 1 << 18;

impl CudaModel {
    /// Turns the page-locked staging of the pixel copy on or off (the default: a plain
    /// pageable copy, which measured as fast): for benchmarks and hosts where DMA bound.
    pub fn set_pinned_staging(&mut self, on: bool) -> Result<()> {
        if on && self.staging.is_none() {
            let ctx = self.stream.context();
            // SAFETY: the staging buffer is only written by `copy_in` before its copies are
            // queued, and every run ends with a stream synchronisation.
            self.staging =
                Some(unsafe { ctx.alloc_pinned::<u8>((self.input_len * self.max_batch).max(1)) }?);
        } else if !on {
            self.staging = None;
        }
        Ok(())
    }

    /// Queues the copy of `pixels` (checked: `batch` images) to the device.
    pub(super) fn copy_in(&mut self, pixels: &[u8], batch: usize) -> Result<()> {
        let too_large = CudaError::BatchTooLarge {
            batch,
            max: self.max_batch,
        };
        if pixels.len() > self.pixels.len() {
            return Err(too_large);
        }
        let Some(staging) = self.staging.as_mut() else {
            let mut dst = self.pixels.try_slice_mut(..pixels.len()).ok_or(too_large)?;
            self.stream.memcpy_htod(pixels, &mut dst)?;
            return Ok(());
        };
        if pixels.len() > staging.len() {
            return Err(too_large);
        }
        // Waits for the staging buffer's last use (none in flight: every run synchronises).
        let host = &mut staging.as_mut_slice()?[..pixels.len()];
        for (i, (src, dst)) in pixels
            .chunks(STAGE_CHUNK)
            .zip(host.chunks_mut(STAGE_CHUNK))
            .enumerate()
        {
            dst.copy_from_slice(src);
            let off = (i * STAGE_CHUNK) as u64;
            // SAFETY: `dst` is page-locked, written above and not touched again before the
            // run's final synchronisation; the device region holds `pixels.len()` bytes. The
            // chunk's DMA overlaps the writing of the next chunk. (Four threads writing the
            // staging buffer were no faster on an H100 host.)
            unsafe {
                result::memcpy_htod_async(self.pixels_ptr + off, dst, self.stream.cu_stream())
            }?;
        }
        Ok(())
    }

    /// Queues the copy of the logits (`out.len()` bytes) to `out`.
    pub(super) fn copy_out(&mut self, out: &mut [i8]) -> Result<()> {
        let src = self
            .acts
            .try_slice(self.output_off..self.output_off + out.len())
            .ok_or(CudaError::OutputLength {
                expected: out.len(),
                got: out.len(),
            })?;
        self.stream.memcpy_dtoh(&src, out)?;
        Ok(())
    }

    /// Fills the first `n` bytes of the model's host logits buffer with `fill` (which also
    /// needs the model, hence the buffer is lent out meanwhile) and returns them.
    pub(super) fn fill_host_out(
        &mut self,
        n: usize,
        fill: impl FnOnce(&mut Self, &mut [i8]) -> Result<()>,
    ) -> Result<&[i8]> {
        let mut out = std::mem::take(&mut self.host_out);
        let r = fill(self, &mut out[..n]);
        self.host_out = out;
        r?;
        Ok(&self.host_out[..n])
    }
}
