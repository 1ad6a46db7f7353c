//! `--device cpu|cuda|cuda:N`.

use candle_core::Device;

use crate::{Result, TrainError};

/// Opens the device a `--device` string names.
pub fn parse_device(s: &str) -> Result<Device> {
    let ordinal = match s {
        "cpu" => return Ok(Device::Cpu),
        "cuda" | "gpu" => 0,
        _ => match s.strip_prefix("cuda:").map(str::parse::<usize>) {
            Some(Ok(n)) => n,
            _ => return Err(TrainError::BadDevice(s.to_string())),
        },
    };
    match Device::new_cuda(ordinal) {
        Ok(d) => Ok(d),
        Err(candle_core::Error::NotCompiledWithCudaSupport) => Err(TrainError::NoCuda(s.into())),
        Err(e) => Err(TrainError::Config(format!(
            "cannot open CUDA device {ordinal}: {e}. Is a GPU present and the driver loaded?"
        ))),
    }
}

/// Waits for the device's queued work, so host clocks measure it.
pub fn sync(dev: &Device) -> Result<()> {
    Ok(dev.synchronize()?)
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
