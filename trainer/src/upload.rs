//! A batch's pixels and labels to the device.
//!
//! On CUDA they pass through a ring of pinned host buffers, so the copy is queued behind the
//! previous step's kernels like any other work and the host goes on. A copy from ordinary
//! (pageable) memory has to be staged by the driver, which holds the host whenever its staging
//! space is still queued behind kernels: the host then cannot run ahead of the device, and in
//! a data-parallel job every such stall becomes a wait for the other ranks.

use candle_core::{DType, Device, Result, Tensor};

/// Pinned buffers in the ring: more than the steps the host may queue between two read-backs
/// of the loss, so a buffer's previous copy has always finished when it is reused.
#[cfg(feature = "cuda")]
const RING: usize = crate::readback::READBACK_STEPS + 4;

pub struct Uploader {
    #[cfg(feature = "cuda")]
    ring: Vec<pinned::Slot>,
    #[cfg(feature = "cuda")]
    next: usize,
}

impl Uploader {
    pub fn new() -> Uploader {
        Uploader {
            #[cfg(feature = "cuda")]
            ring: Vec::new(),
            #[cfg(feature = "cuda")]
            next: 0,
        }
    }

    /// `images` (n×c×h×w u8) and `labels` (n, as u32) on `dev`.
    pub fn upload(
        &mut self,
        images: Vec<u8>,
        labels: Vec<u8>,
        shape: (usize, usize, usize, usize),
        dev: &Device,
    ) -> Result<(Tensor, Tensor)> {
        match dev {
            #[cfg(feature = "cuda")]
            Device::Cuda(cd) => {
                if self.ring.len() < RING {
                    self.ring.push(pinned::Slot::default());
                }
                let i = self.next % self.ring.len();
                let slot = &mut self.ring[i];
                self.next = self.next.wrapping_add(1);
                let both = slot.upload(cd, &[&images, &labels])?;
                let x = both.narrow(0, 0, images.len())?.reshape(shape)?;
                let y = both
                    .narrow(0, images.len(), labels.len())?
                    .to_dtype(DType::U32)?;
                Ok((x, y))
            }
            _ => {
                let n = labels.len();
                Ok((
                    Tensor::from_vec(images, shape, dev)?,
                    Tensor::from_vec(labels, n, dev)?.to_dtype(DType::U32)?,
                ))
            }
        }
    }
}

impl Default for Uploader {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(feature = "cuda")]
mod pinned {
    use candle_core::cuda_backend::cudarc::driver::{
        result, CudaEvent, DevicePtrMut, PinnedHostSlice,
    };
    use candle_core::cuda_backend::CudaDevice;
    use candle_core::{CpuStorage, CudaStorage, CustomOp1, Layout, Result, Shape, Tensor};

    /// One pinned buffer and the event after its last copy.
    #[derive(Default)]
    pub(super) struct Slot {
        buf: Option<PinnedHostSlice<u8>>,
        done: Option<CudaEvent>,
        /// A one-byte tensor naming the device for the copy op.
        anchor: Option<Tensor>,
    }

    impl Drop for Slot {
        fn drop(&mut self) {
            // The DMA may still read the buffer (a step that failed half-way).
            if let Some(e) = self.done.take() {
                let _ = crate::device::wait_event(&e);
            }
        }
    }

    impl Slot {
        /// The concatenation of `parts` as a u8 tensor on `dev`, copied through this slot.
        pub(super) fn upload(&mut self, dev: &CudaDevice, parts: &[&[u8]]) -> Result<Tensor> {
            let len: usize = parts.iter().map(|p| p.len()).sum();
            // The previous copy out of this buffer must be over before it is rewritten or freed.
            if let Some(e) = self.done.take() {
                crate::device::wait_event(&e)?;
            }
            if self.buf.as_ref().is_none_or(|b| b.len() < len) {
                self.buf = None;
                // SAFETY: written below before any copy reads it.
                let b = unsafe { dev.cuda_stream().context().alloc_pinned::<u8>(len.max(1)) }
                    .map_err(candle_core::Error::wrap)?;
                self.buf = Some(b);
            }
            let buf = self.buf.as_mut().expect("allocated above");
            let host = buf.as_mut_slice().map_err(candle_core::Error::wrap)?;
            let mut at = 0;
            for p in parts {
                host[at..at + p.len()].copy_from_slice(p);
                at += p.len();
            }
            if self.anchor.is_none() {
                let d = candle_core::Device::Cuda(dev.clone());
                self.anchor = Some(Tensor::zeros(1, candle_core::DType::U8, &d)?);
            }
            let anchor = self.anchor.as_ref().expect("made above");
            let t = anchor.apply_op1_no_bwd(&Copy { src: &host[..len] })?;
            let stream = dev.cuda_stream();
            self.done = Some(
                stream
                    .record_event(None)
                    .map_err(candle_core::Error::wrap)?,
            );
            Ok(t)
        }
    }

    /// Copies pinned host bytes into a new device tensor (a custom op, the public way to wrap
    /// new device memory as a candle tensor; its input only names the device).
    struct Copy<'a> {
        src: &'a [u8],
    }

    impl CustomOp1 for Copy<'_> {
        fn name(&self) -> &'static str {
            "octet-upload"
        }

        fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> Result<(CpuStorage, Shape)> {
            candle_core::bail!("upload: pinned copies are for CUDA devices")
        }

        fn cuda_fwd(&self, s: &CudaStorage, _: &Layout) -> Result<(CudaStorage, Shape)> {
            let dev = s.device.clone();
            let stream = dev.cuda_stream();
            // SAFETY: the copy below writes every byte.
            let mut dst = unsafe { dev.alloc::<u8>(self.src.len().max(1))? };
            {
                let (ptr, _record) = dst.device_ptr_mut(&stream);
                // SAFETY: `src` lies in a pinned allocation that the caller keeps alive and
                // unchanged until the event recorded after this copy has completed.
                unsafe { result::memcpy_htod_async(ptr, self.src, stream.cu_stream()) }
                    .map_err(candle_core::Error::wrap)?;
            }
            let n = self.src.len();
            Ok((CudaStorage::wrap_cuda_slice(dst, dev), Shape::from(n)))
        }
    }
}
