//! Where the exporter's passes run: the float executor on a candle device (CPU or CUDA), the
//! int8 rows through the runtime (the CPU's threads or its CUDA path), and who hears of their
//! progress.

use candle_core::{Device, DeviceLocation};

use crate::progress::{Progress, Quiet};
use crate::{ExportError, Result};

/// Images per float batch on a GPU: a CPU keeps the caller's batch (64 by default; its
/// values do not depend on it, but nothing there is gained by changing it).
const GPU_FLOAT_BATCH: usize = 512;

/// Images per call of the int8 CUDA path (its planned maximum batch).
#[cfg(feature = "cuda")]
const GPU_INT8_BATCH: usize = 4096;

/// A device and a progress listener for [`crate::Calibrated`] and [`crate::ablation_on`].
pub struct Engine<'p> {
    pub device: Device,
    pub progress: &'p dyn Progress,
}

impl Engine<'static> {
    /// The CPU, no progress shown.
    pub fn cpu() -> Self {
        Engine {
            device: Device::Cpu,
            progress: &Quiet,
        }
    }
}

impl Engine<'_> {
    /// The float executor's batch for a requested `batch`.
    pub fn float_batch(&self, batch: usize) -> usize {
        match self.device {
            Device::Cpu => batch.max(1),
            _ => batch.max(GPU_FLOAT_BATCH),
        }
    }

    /// The int8 logits of the `.o8` `bytes` for `pixels` (`n × classes`): the runtime on every
    /// CPU core, or its CUDA path on the engine's GPU (the same bytes, the runtime's contract).
    /// Counts the images in the current phase.
    pub fn int8_logits(&self, bytes: &[u8], pixels: &[u8], batch: usize) -> Result<Vec<i8>> {
        match self.device.location() {
            DeviceLocation::Cuda { gpu_id } => self.int8_cuda(bytes, pixels, gpu_id),
            _ => crate::runtime_logits_counted(bytes, pixels, batch, self.progress),
        }
    }

    #[cfg(feature = "cuda")]
    fn int8_cuda(&self, bytes: &[u8], pixels: &[u8], ordinal: usize) -> Result<Vec<i8>> {
        let model = octet_runtime::Model::parse(bytes)
            .map_err(|e| ExportError::Runtime(format!("parse: {e:?}")))?;
        let n = pixels.len() / model.input_len().max(1);
        let cuda = |e: octet_runtime::cuda::CudaError| {
            ExportError::Runtime(format!("int8 CUDA path on GPU {ordinal}: {e}"))
        };
        let logits =
            octet_runtime::cuda::CudaModel::new(&model, ordinal, n.clamp(1, GPU_INT8_BATCH))
                .map_err(cuda)?
                .run_all(pixels)
                .map_err(cuda)?;
        self.progress.advance(n);
        Ok(logits)
    }

    #[cfg(not(feature = "cuda"))]
    fn int8_cuda(&self, _: &[u8], _: &[u8], ordinal: usize) -> Result<Vec<i8>> {
        Err(ExportError::Runtime(format!(
            "the int8 rows on GPU {ordinal} need octet-export's `cuda` feature: build octet with \
             `--features cuda`"
        )))
    }
}
