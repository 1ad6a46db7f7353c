//! Device time of the phases of training steps, without making the host wait for the device.
//!
//! On CUDA an event is recorded at every phase boundary and the events are read once, when the
//! epoch's work has finished; the host keeps queueing steps meanwhile. On the CPU an op's work
//! is done when the call returns, so the host clock is the device clock.
//!
//! With a timeline, every mark also keeps the host time it was queued at, and device times
//! are mapped onto the host clock, so one rank's host and device, and several ranks of one
//! machine, can be laid side by side (`octet train --timeline`).

use std::time::{Instant, SystemTime, UNIX_EPOCH};

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
    /// Host time of every mark, µs on [`host_us`]'s clock, kept only with a timeline.
    host: Option<Vec<f64>>,
    /// Maps device events onto the host clock (CUDA timelines only).
    #[cfg(feature = "cuda")]
    origin: Option<DeviceClock>,
}

/// Microseconds since the Unix epoch: one clock for every process of a machine.
pub fn host_us() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1e6)
}

/// One step of a timeline: when the host queued its marks and when the device reached them,
/// both in µs on [`host_us`]'s clock (on the CPU the two are the same).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepMarks {
    pub host_start: f64,
    pub host_h2d: f64,
    pub host_end: f64,
    pub dev_start: f64,
    pub dev_h2d: f64,
    pub dev_end: f64,
}

/// Device time as host time: an event recorded on an idle stream right after a host
/// timestamp, so `at(e)` = that timestamp + the device time from the origin event to `e`.
/// Accurate to the launch latency of one event (microseconds).
#[cfg(feature = "cuda")]
pub(crate) struct DeviceClock {
    origin: candle_core::cuda_backend::cudarc::driver::CudaEvent,
    host: f64,
}

#[cfg(feature = "cuda")]
impl DeviceClock {
    /// Waits for `stream` to go idle, then records the origin.
    pub(crate) fn new(
        stream: &candle_core::cuda_backend::cudarc::driver::CudaStream,
    ) -> Result<DeviceClock> {
        use candle_core::cuda_backend::cudarc::driver::sys::CUevent_flags;
        let idle = stream
            .record_event(None)
            .map_err(candle_core::Error::wrap)?;
        crate::device::wait_event(&idle)?;
        let host = host_us();
        let origin = stream
            .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(candle_core::Error::wrap)?;
        Ok(DeviceClock { origin, host })
    }

    /// The host-clock time at which the device reached `e` (a timing event).
    pub(crate) fn at(
        &self,
        e: &candle_core::cuda_backend::cudarc::driver::CudaEvent,
    ) -> Result<f64> {
        let ms = self
            .origin
            .elapsed_ms(e)
            .map_err(candle_core::Error::wrap)?;
        Ok(self.host + ms as f64 * 1e3)
    }
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
        StepClock {
            inner,
            host: None,
            #[cfg(feature = "cuda")]
            origin: None,
        }
    }

    /// A clock that also keeps a per-step timeline ([`StepClock::timeline`]). On CUDA it
    /// waits once for the device to go idle, to anchor device time to the host clock.
    pub fn with_timeline(dev: &Device) -> Result<StepClock> {
        let mut c = StepClock::new(dev);
        #[cfg(feature = "cuda")]
        if let Inner::Cuda { stream, .. } = &c.inner {
            c.origin = Some(DeviceClock::new(stream)?);
        }
        c.host = Some(Vec::new());
        Ok(c)
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
        if let Some(h) = &mut self.host {
            h.push(host_us());
        }
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

    /// The steps marked so far (start, end of H2d, end of Compute each), or `None` without a
    /// timeline; waits for the device to reach the last mark.
    pub fn timeline(&self) -> Result<Option<Vec<StepMarks>>> {
        let Some(host) = &self.host else {
            return Ok(None);
        };
        let dev: Vec<f64> = match &self.inner {
            Inner::Host { .. } => host.clone(),
            #[cfg(feature = "cuda")]
            Inner::Cuda { marks, .. } => {
                let origin = self.origin.as_ref().expect("a CUDA timeline has an origin");
                marks
                    .iter()
                    .map(|(_, e)| origin.at(e))
                    .collect::<Result<_>>()?
            }
        };
        // Marks come in threes (start, H2d, Compute) in the training loop.
        Ok(Some(
            host.chunks_exact(3)
                .zip(dev.chunks_exact(3))
                .map(|(h, d)| StepMarks {
                    host_start: h[0],
                    host_h2d: h[1],
                    host_end: h[2],
                    dev_start: d[0],
                    dev_h2d: d[1],
                    dev_end: d[2],
                })
                .collect(),
        ))
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

    #[test]
    fn timeline_keeps_one_row_per_step_in_order() -> Result<()> {
        assert!(StepClock::new(&Device::Cpu).timeline()?.is_none());
        let mut c = StepClock::with_timeline(&Device::Cpu)?;
        for _ in 0..2 {
            c.start()?;
            std::thread::sleep(std::time::Duration::from_millis(2));
            c.end(Phase::H2d)?;
            c.end(Phase::Compute)?;
        }
        let t = c.timeline()?.expect("timeline was asked for");
        assert_eq!(t.len(), 2);
        for s in &t {
            assert!(s.host_h2d - s.host_start >= 1900.0, "{s:?}");
            assert!(s.host_end >= s.host_h2d);
            assert_eq!(s.dev_start, s.host_start);
        }
        assert!(t[1].host_start >= t[0].host_end);
        Ok(())
    }
}
