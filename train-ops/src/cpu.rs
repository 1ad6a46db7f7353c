//! Moving between a custom op's raw CPU storage and candle tensors.

use candle_core::backend::BackendStorage;
use candle_core::{bail, CpuStorage, DType, Device, Layout, Result, Tensor, WithDType};
use half::{bf16, f16};

/// The elements of a contiguous layout. The ops' public wrappers make their inputs
/// contiguous, so a strided input here is a caller's mistake, reported as an error.
pub(crate) fn slice<'a, T: WithDType>(s: &'a CpuStorage, l: &Layout) -> Result<&'a [T]> {
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&s.as_slice::<T>()?[a..b]),
        None => bail!("custom op: input is not contiguous"),
    }
}

/// A CPU tensor holding a copy of `(s, l)`, to run candle's own ops on it.
pub(crate) fn tensor(s: &CpuStorage, l: &Layout) -> Result<Tensor> {
    fn copy<T: WithDType>(s: &CpuStorage, l: &Layout) -> Result<Tensor> {
        Tensor::from_vec(slice::<T>(s, l)?.to_vec(), l.shape(), &Device::Cpu)
    }
    match s {
        CpuStorage::F32(_) => copy::<f32>(s, l),
        CpuStorage::F64(_) => copy::<f64>(s, l),
        CpuStorage::BF16(_) => copy::<bf16>(s, l),
        CpuStorage::F16(_) => copy::<f16>(s, l),
        _ => bail!("custom op: unsupported dtype"),
    }
}

/// The storage of a CPU tensor, as a custom op returns it.
pub(crate) fn storage(t: &Tensor) -> Result<CpuStorage> {
    let t = t.flatten_all()?;
    Ok(match t.dtype() {
        DType::F32 => f32::to_cpu_storage_owned(t.to_vec1()?),
        DType::F64 => f64::to_cpu_storage_owned(t.to_vec1()?),
        DType::BF16 => bf16::to_cpu_storage_owned(t.to_vec1()?),
        DType::F16 => f16::to_cpu_storage_owned(t.to_vec1()?),
        d => bail!("custom op: unsupported dtype {d:?}"),
    })
}

/// The elements of a contiguous f32 or bf16 layout, as f32 (the channels-last ops compute
/// in f32 whatever they store).
pub(crate) fn to_f32(s: &CpuStorage, l: &Layout) -> Result<Vec<f32>> {
    match s {
        CpuStorage::F32(_) => Ok(slice::<f32>(s, l)?.to_vec()),
        CpuStorage::BF16(_) => Ok(slice::<bf16>(s, l)?.iter().map(|v| v.to_f32()).collect()),
        _ => bail!("custom op: expected f32 or bf16, got {:?}", s.dtype()),
    }
}

/// `v` stored as `dtype` (f32, or bf16 rounded to nearest even).
pub(crate) fn from_f32(dtype: DType, v: Vec<f32>) -> Result<CpuStorage> {
    Ok(match dtype {
        DType::F32 => CpuStorage::F32(v),
        DType::BF16 => CpuStorage::BF16(v.into_iter().map(bf16::from_f32).collect()),
        d => bail!("custom op: expected f32 or bf16, got {d:?}"),
    })
}
