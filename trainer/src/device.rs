//! `--device cpu|cuda|cuda:N`.

use candle_core::Device;

use crate::{Result, TrainError};

/// The forms of a `--device` value, for help and error texts.
pub const DEVICE_FORMS: &str = "cpu, cuda or cuda:N";

/// What `--device` names: the CPU or one CUDA GPU by ordinal. Parsed (so clap checks it, as a
/// `value_parser`: `cpu`, `cuda` (= `cuda:0`, also `gpu`) or `cuda:N`), opened by [`DeviceSpec::open`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceSpec {
    Cpu,
    Cuda(usize),
}

impl std::str::FromStr for DeviceSpec {
    type Err = TrainError;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "cpu" => Ok(DeviceSpec::Cpu),
            "cuda" | "gpu" => Ok(DeviceSpec::Cuda(0)),
            _ => match s.strip_prefix("cuda:").map(str::parse::<usize>) {
                Some(Ok(n)) => Ok(DeviceSpec::Cuda(n)),
                _ => Err(TrainError::BadDevice(s.to_string())),
            },
        }
    }
}

impl std::fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceSpec::Cpu => f.write_str("cpu"),
            DeviceSpec::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

impl DeviceSpec {
    /// The GPU's ordinal; `None` for the CPU.
    pub fn cuda_ordinal(self) -> Option<usize> {
        match self {
            DeviceSpec::Cpu => None,
            DeviceSpec::Cuda(n) => Some(n),
        }
    }

    /// [`TrainError::NoCuda`] (which build flag to use) when this is a GPU and the binary was
    /// built without CUDA: for code paths that need the GPU without opening a candle device.
    pub fn check_built(self) -> Result<Self> {
        match self {
            DeviceSpec::Cuda(_) if !cfg!(feature = "cuda") => {
                Err(TrainError::NoCuda(self.to_string()))
            }
            _ => Ok(self),
        }
    }

    /// Opens the candle device: a clear error without a CUDA build, or without the GPU.
    pub fn open(self) -> Result<Device> {
        let Some(ordinal) = self.cuda_ordinal() else {
            return Ok(Device::Cpu);
        };
        match Device::new_cuda(ordinal) {
            Ok(d) => {
                #[cfg(feature = "cuda")]
                {
                    keep_pool_memory(&d)?;
                    single_stream(&d);
                }
                Ok(d)
            }
            Err(candle_core::Error::NotCompiledWithCudaSupport) => {
                Err(TrainError::NoCuda(self.to_string()))
            }
            Err(e) => Err(TrainError::Config(format!(
                "cannot open CUDA device {ordinal}: {e}. Is a GPU present and the driver loaded?"
            ))),
        }
    }
}

/// Opens the device a `--device` string names.
pub fn parse_device(s: &str) -> Result<Device> {
    s.parse::<DeviceSpec>()?.open()
}

/// Turns off cudarc's per-buffer event tracking for the buffers allocated from here on.
/// candle runs on a stream of its own, which puts cudarc in multi-stream mode: every new
/// buffer then creates two CUDA events, and every kernel launch records one per argument and
/// makes the stream wait on them. A bf16 ResNet-18 step launches ~440 kernels, and its host
/// side (~10 ms on an H100) was the bound of the step, not the GPU. octet queues its kernels
/// and copies on that one stream, so stream order already orders every use of a buffer; host
/// buffers the DMA reads carry their own events (`upload.rs`); NCCL's communication stream
/// waits for an event after its inputs are written, and holds them until candle's stream
/// has waited for the collective's end (`dist/nccl.rs`).
#[cfg(feature = "cuda")]
fn single_stream(d: &Device) {
    if let Device::Cuda(cd) = d {
        // SAFETY: kernels and copies go to candle's one stream; collectives order themselves
        // against it with events (see above).
        unsafe { cd.disable_event_tracking() };
    }
}

/// Keeps freed device memory in the device's memory pool across synchronisations. candle
/// (through cudarc) allocates with `cuMemAllocAsync` from that pool, whose release threshold
/// is 0 by default: every synchronisation (the loss read-back every few steps, the end of an
/// epoch) hands the free memory back to the driver, and the next steps pay to map it again:
/// a 2×H200 timeline showed the first ~25 steps after each epoch boundary at 12–14 ms instead
/// of 7.4 (ResNet-18, batch 128). PyTorch's caching allocator keeps memory the same way.
#[cfg(feature = "cuda")]
fn keep_pool_memory(d: &Device) -> Result<()> {
    use candle_core::cuda_backend::cudarc::driver::{result, sys};
    let Device::Cuda(cd) = d else { return Ok(()) };
    let ctx = cd.cuda_stream().context().clone();
    let err = |e: result::DriverError| {
        TrainError::Config(format!("cannot configure the CUDA memory pool: {e:?}"))
    };
    if !ctx.has_async_alloc() {
        return Ok(());
    }
    ctx.bind_to_thread().map_err(err)?;
    let mut keep_all = u64::MAX;
    // SAFETY: the device comes from an open context; the attribute takes a u64.
    unsafe {
        let pool = result::device::get_mem_pool(ctx.cu_device()).map_err(err)?;
        result::mem_pool::set_attribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&mut keep_all as *mut u64).cast(),
        )
        .map_err(err)?;
    }
    Ok(())
}

/// Waits for the device's queued work, so host clocks measure it.
pub fn sync(dev: &Device) -> Result<()> {
    Ok(wait_idle(dev)?)
}

/// [`Device::synchronize`], but on CUDA by polling an event instead of a blocking driver
/// call. A thread blocked inside the driver (a synchronous copy waiting on a collective that
/// will never finish because a peer died) can hold driver locks that the NCCL watchdog's
/// own event queries then wait on: the watchdog would hang with the rank instead of ending
/// it. Every wait of the training loop goes through here.
pub fn wait_idle(dev: &Device) -> candle_core::Result<()> {
    match dev {
        #[cfg(feature = "cuda")]
        Device::Cuda(cd) => {
            let e = cd
                .cuda_stream()
                .record_event(None)
                .map_err(candle_core::Error::wrap)?;
            wait_event(&e)
        }
        _ => dev.synchronize(),
    }
}

/// Waits for `e` by polling it (see [`wait_idle`]): yields first, for waits of a few
/// microseconds, then sleeps 50 µs between queries.
#[cfg(feature = "cuda")]
pub fn wait_event(
    e: &candle_core::cuda_backend::cudarc::driver::CudaEvent,
) -> candle_core::Result<()> {
    let mut polls = 0u32;
    while !e.try_is_complete().map_err(candle_core::Error::wrap)? {
        if polls < 200 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
        polls += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cpu_and_rejects_nonsense() {
        assert!(parse_device("cpu").unwrap().is_cpu());
        assert!(matches!(parse_device("tpu"), Err(TrainError::BadDevice(_))));
        assert!(matches!(
            parse_device("cuda:x"),
            Err(TrainError::BadDevice(_))
        ));
        #[cfg(not(feature = "cuda"))]
        assert!(matches!(parse_device("cuda:0"), Err(TrainError::NoCuda(_))));
    }

    #[test]
    fn device_specs_parse_and_print_back() {
        for (s, d) in [
            ("cpu", DeviceSpec::Cpu),
            ("cuda", DeviceSpec::Cuda(0)),
            ("gpu", DeviceSpec::Cuda(0)),
            ("cuda:3", DeviceSpec::Cuda(3)),
        ] {
            assert_eq!(s.parse::<DeviceSpec>().unwrap(), d, "{s}");
            assert_eq!(d.to_string().parse::<DeviceSpec>().unwrap(), d);
        }
        assert_eq!(DeviceSpec::Cuda(2).cuda_ordinal(), Some(2));
        assert_eq!(DeviceSpec::Cpu.cuda_ordinal(), None);
        for bad in ["cuda:", "cuda:-1", "CUDA", "cuda0", ""] {
            assert!(bad.parse::<DeviceSpec>().is_err(), "{bad}");
        }
        assert!(DeviceSpec::Cpu.check_built().is_ok());
        #[cfg(not(feature = "cuda"))]
        assert!(matches!(
            DeviceSpec::Cuda(1).check_built(),
            Err(TrainError::NoCuda(d)) if d == "cuda:1"
        ));
    }
}
