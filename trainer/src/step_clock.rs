//! Device time of the phases of training steps, without making the host wait for the device.
//!
//! On CUDA an event is recorded at every phase boundary and the events are read once, when the
//! epoch's work has finished; the host keeps queueing steps meanwhile. On the CPU an op's work
//! is done when the call returns, so the host clock is the device clock.

use std::time::Instant;

use candle_core::{Device, Result};

/// The phases a step is split into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Copying the batch to the device.
    H2d = 0,
    /// Forward, backward, gradient all-reduce and optimiser step.
    Compute = 1,
}

const PHASES: usize = 2;

pub struct StepClock {
    inner: Inner,
}

enum Inner {
    Host {
        last: Instant,
        sums: [f64; PHASES],
    },
    #[cfg(feature = "cuda")]
    Cuda {
        stream: std::sync::Arc<candle_core::cuda_backend::cudarc::driver::CudaStream>,
        /// Events in stream order; `None` starts a step, `Some(p)` ends phase `p`.
        marks: Vec<(
            Option<Phase>,
            candle_core::cuda_backend::cudarc::driver::CudaEvent,
        )>,
    },
}

impl StepClock {
    pub fn new(dev: &Device) -> StepClock {
        let inner = match dev {
            #[cfg(feature = "cuda")]
            Device::Cuda(cd) => Inner::Cuda {
                stream: cd.cuda_stream(),
                marks: Vec::new(),
            },
            _ => Inner::Host {
                last: Instant::now(),
                sums: [0.0; PHASES],
            },
        };
        StepClock { inner }
    }

    /// Marks the start of a step (time since the previous mark belongs to no phase).
    pub fn start(&mut self) -> Result<()> {
        self.mark(None)
    }

    /// Marks the end of `phase`, which began at the previous mark.
    pub fn end(&mut self, phase: Phase) -> Result<()> {
        self.mark(Some(phase))
    }

    fn mark(&mut self, phase: Option<Phase>) -> Result<()> {
        match &mut self.inner {
            Inner::Host { last, sums } => {
                if let Some(p) = phase {
                    sums[p as usize] += last.elapsed().as_secs_f64();
                }
                *last = Instant::now();
            }
            #[cfg(feature = "cuda")]
            Inner::Cuda { stream, marks } => {
                use candle_core::cuda_backend::cudarc::driver::sys::CUevent_flags;
                let ev = stream
                    .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                    .map_err(candle_core::Error::wrap)?;
                marks.push((phase, ev));
            }
        }
        Ok(())
    }

    /// Seconds spent in each phase since the clock was made; waits for the device to reach
    /// the last mark.
    pub fn seconds(&self, phase: Phase) -> Result<f64> {
        match &self.inner {
            Inner::Host { sums, .. } => Ok(sums[phase as usize]),
            #[cfg(feature = "cuda")]
            Inner::Cuda { marks, .. } => {
                let mut s = 0.0;
                for w in marks.windows(2) {
                    if w[1].0 == Some(phase) {
                        let ms = w[0]
                            .1
                            .elapsed_ms(&w[1].1)
                            .map_err(candle_core::Error::wrap)?;
                        s += ms as f64 / 1e3;
                    }
                }
                Ok(s)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_clock_attributes_time_to_the_phase_that_ends() -> Result<()> {
        let mut c = StepClock::new(&Device::Cpu);
        c.start()?;
        std::thread::sleep(std::time::Duration::from_millis(20));
        c.end(Phase::H2d)?;
        c.end(Phase::Compute)?;
        std::thread::sleep(std::time::Duration::from_millis(20));
        c.start()?;
        c.end(Phase::H2d)?;
        let (h2d, compute) = (c.seconds(Phase::H2d)?, c.seconds(Phase::Compute)?);
        assert!(h2d >= 0.019, "{h2d}");
        // The sleep between the end of one step and the start of the next is no phase's.
        assert!(compute < 0.015, "{compute}");
        Ok(())
    }
}
