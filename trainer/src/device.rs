//! `--device cpu|cuda|cuda:N`.

use candle_core::Device;

use crate::{Result, TrainError};

/// The forms of a `--device` value, for help and error texts.
pub const DEVICE_FORMS: &str = "cpu, cuda or cuda:N";

/// The CUDA ordinal a `--device` string names (`None` for the CPU), without opening it.
pub fn cuda_ordinal(s: &str) -> Result<Option<usize>> {
    match s {
        "cpu" => Ok(None),
        "cuda" | "gpu" => Ok(Some(0)),
        _ => match s.strip_prefix("cuda:").map(str::parse::<usize>) {
            Some(Ok(n)) => Ok(Some(n)),
            _ => Err(TrainError::BadDevice(s.to_string())),
        },
    }
}

/// Opens the device a `--device` string names.
pub fn parse_device(s: &str) -> Result<Device> {
    let Some(ordinal) = cuda_ordinal(s)? else {
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
        Err(candle_core::Error::NotCompiledWithCudaSupport) => Err(TrainError::NoCuda(s.into())),
        Err(e) => Err(TrainError::Config(format!(
            "cannot open CUDA device {ordinal}: {e}. Is a GPU present and the driver loaded?"
        ))),
    }
}

/// Turns off cudarc's per-buffer event tracking for the buffers allocated from here on.
/// candle runs on a stream of its own, which puts cudarc in multi-stream mode: every new
/// buffer then creates two CUDA events, and every kernel launch records one per argument and
/// makes the stream wait on them. A bf16 ResNet-18 step launches ~440 kernels, and its host
/// side (~10 ms on an H100) was the bound of the step, not the GPU. octet queues all
/// device work of a process on that one stream (kernels, copies, NCCL), so stream order
/// already orders every use of a buffer; host buffers the DMA reads carry their own events
/// (`upload.rs`).
#[cfg(feature = "cuda")]
fn single_stream(d: &Device) {
    if let Device::Cuda(cd) = d {
        // SAFETY: all device work of this process goes to candle's one stream (see above).
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
}
