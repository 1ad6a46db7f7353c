//! NCCL as a [`Collective`]: one process per GPU. Rank 0 makes the unique id and hands it to
//! the others through the TCP rendezvous; collectives run on candle's stream, so they are
//! ordered after the kernels that produced their inputs with no host synchronisation.
//!
//! A watchdog thread turns a peer that died into an error instead of a hang: it polls NCCL's
//! asynchronous error and, through an event recorded after each collective, how long the
//! oldest unfinished collective has been at the head of the stream's queue; past the timeout
//! it aborts the communicator and ends the process with a message. The host never has to
//! wait on the device for this, so training steps stay asynchronous.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use candle_core::cuda_backend::cudarc::driver::{
    sys::CUevent_flags, CudaEvent, CudaSlice, CudaStream, DevicePtr, DevicePtrMut,
};
use candle_core::cuda_backend::cudarc::nccl::{result as nr, sys as ns};
use candle_core::cuda_backend::CudaDevice;
use candle_core::{CpuStorage, CudaStorage, CustomOp1, Device, Layout, Shape, Tensor};

use super::collective::{Collective, CommStats};
use super::{share_bytes, DistEnv};
use crate::{Result, TrainError};

/// Exit code of a rank the watchdog ended.
pub const WATCHDOG_EXIT: i32 = 3;

/// The raw communicator. NCCL allows a communicator to be used from any thread as long as
/// calls on it are not concurrent; `Nccl` serialises them with its mutex, and abort is the one
/// call NCCL documents as safe from another thread.
struct RawComm(ns::ncclComm_t);
unsafe impl Send for RawComm {}
unsafe impl Sync for RawComm {}

pub struct Nccl {
    comm: Arc<RawComm>,
    rank: usize,
    world: usize,
    stream: Arc<CudaStream>,
    pending: Mutex<Pending>,
    watch: Arc<Watch>,
    /// One float for the all-reduce that lines the ranks up before each timed transfer.
    tiny: CudaSlice<f32>,
}

#[derive(Default)]
struct Pending {
    /// (arrived, synchronised, done, bytes) of all-reduces whose events are unread.
    timed: Vec<(CudaEvent, CudaEvent, CudaEvent, u64)>,
}

struct Watch {
    /// Collectives not yet seen finished: when each was enqueued, and its completion event.
    inflight: Mutex<VecDeque<(Instant, CudaEvent)>>,
    stop: AtomicBool,
}

impl Watch {
    /// Drops the finished collectives at the head of the queue and says how long the
    /// oldest unfinished one has waited: since it was enqueued, or since its predecessor
    /// was seen finished if that is later (the host may enqueue many steps ahead).
    fn oldest_wait(&self, last_progress: &mut Instant) -> Option<Duration> {
        let mut q = self.inflight.lock().ok()?;
        while q.front().is_some_and(|(_, done)| done.is_complete()) {
            q.pop_front();
            *last_progress = Instant::now();
        }
        q.front()
            .map(|(queued, _)| (*queued).max(*last_progress).elapsed())
    }
}

fn nccl_err(what: &str, e: nr::NcclError) -> candle_core::Error {
    candle_core::Error::Msg(format!("NCCL {what} failed: {:?}", e.0))
}

impl Nccl {
    /// Joins the job `env` describes on `dev` (a CUDA device). `timeout` bounds the
    /// rendezvous; `watchdog` bounds how long a collective may stay unfinished.
    pub fn init(
        env: &DistEnv,
        dev: &Device,
        timeout: Duration,
        watchdog: Duration,
    ) -> Result<Self> {
        let Device::Cuda(cd) = dev else {
            return Err(TrainError::Dist(
                "multi-GPU training needs --device cuda (NCCL runs on GPUs only)".into(),
            ));
        };
        let stream = cd.cuda_stream();
        stream
            .context()
            .bind_to_thread()
            .map_err(candle_core::Error::wrap)?;
        let mine = if env.rank == 0 {
            let id = nr::get_uniqueid().map_err(|e| nccl_err("ncclGetUniqueId", e))?;
            Some(id.internal.map(|c| c as u8).to_vec())
        } else {
            None
        };
        let bytes = share_bytes(env, mine.as_deref(), timeout)?;
        let internal: [u8; 128] = bytes.as_slice().try_into().map_err(|_| {
            TrainError::Dist(format!(
                "rendezvous sent {} bytes, not a 128-byte NCCL id",
                bytes.len()
            ))
        })?;
        let id = ns::ncclUniqueId {
            internal: internal.map(|b| b as core::ffi::c_char),
        };
        let mut comm = std::mem::MaybeUninit::uninit();
        let comm = unsafe {
            nr::comm_init_rank(comm.as_mut_ptr(), env.world as i32, id, env.rank as i32)
                .map_err(|e| nccl_err("ncclCommInitRank", e))?;
            comm.assume_init()
        };
        let comm = Arc::new(RawComm(comm));
        let watch = Arc::new(Watch {
            inflight: Mutex::new(VecDeque::new()),
            stop: AtomicBool::new(false),
        });
        spawn_watchdog(comm.clone(), watch.clone(), env.rank, watchdog);
        let tiny = stream
            .alloc_zeros::<f32>(1)
            .map_err(candle_core::Error::wrap)?;
        Ok(Self {
            tiny,
            comm,
            rank: env.rank,
            world: env.world,
            stream,
            pending: Mutex::new(Pending::default()),
            watch,
        })
    }

    /// Hands the collective just enqueued to the watchdog.
    fn watch(&self) -> candle_core::Result<()> {
        let done = self
            .stream
            .record_event(None)
            .map_err(candle_core::Error::wrap)?;
        if let Ok(mut q) = self.watch.inflight.lock() {
            q.push_back((Instant::now(), done));
        }
        Ok(())
    }

    fn event(&self) -> candle_core::Result<CudaEvent> {
        self.stream
            .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(candle_core::Error::wrap)
    }
}

impl Drop for Nccl {
    fn drop(&mut self) {
        self.watch.stop.store(true, Ordering::SeqCst);
        // Queued collectives must finish before the communicator goes.
        let _ = self.stream.synchronize();
        unsafe {
            let _ = nr::comm_destroy(self.comm.0);
        }
    }
}

fn spawn_watchdog(comm: Arc<RawComm>, watch: Arc<Watch>, rank: usize, timeout: Duration) {
    std::thread::spawn(move || {
        let mut last_progress = Instant::now();
        while !watch.stop.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(200));
            let mut async_err = ns::ncclResult_t::ncclSuccess;
            let polled = unsafe { ns::ncclCommGetAsyncError(comm.0, &mut async_err) };
            let stuck = watch
                .oldest_wait(&mut last_progress)
                .is_some_and(|waited| waited > timeout);
            let why = if polled != ns::ncclResult_t::ncclSuccess
                || async_err != ns::ncclResult_t::ncclSuccess
            {
                format!("NCCL reported an asynchronous error ({async_err:?}): a peer rank failed")
            } else if stuck {
                format!(
                    "a collective has not finished in {} s: another rank has probably died or \
                     stopped (raise --dist-timeout if steps are really this slow)",
                    timeout.as_secs()
                )
            } else {
                continue;
            };
            if watch.stop.load(Ordering::SeqCst) {
                return;
            }
            eprintln!("error: rank {rank}: {why}; aborting this rank");
            unsafe {
                let _ = ns::ncclCommAbort(comm.0);
            }
            std::process::exit(WATCHDOG_EXIT);
        }
    });
}

/// Runs the collective inside candle's custom-op interface, which hands over the storage.
struct Op<'a> {
    nccl: &'a Nccl,
    /// `None`: all-reduce sum; `Some(root)`: broadcast from `root`.
    root: Option<usize>,
}

impl CustomOp1 for Op<'_> {
    fn name(&self) -> &'static str {
        "nccl"
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        candle_core::bail!("NCCL collectives need tensors on a CUDA device")
    }

    fn cuda_fwd(&self, s: &CudaStorage, l: &Layout) -> candle_core::Result<(CudaStorage, Shape)> {
        let n = self.nccl;
        let Some((a, b)) = l.contiguous_offsets() else {
            candle_core::bail!("NCCL collectives need a contiguous tensor")
        };
        let src = s.as_cuda_slice::<f32>()?.slice(a..b);
        let dev: CudaDevice = s.device.clone();
        let mut dst = unsafe { dev.alloc::<f32>(b - a)? };
        let arrived = n.event()?;
        let stream = n.stream.cu_stream() as ns::cudaStream_t;
        if self.root.is_none() {
            // Ranks reach a collective at different times; a one-float all-reduce absorbs
            // the wait so the events around the real one time the transfer alone.
            let (tp, _t) = n.tiny.device_ptr(&n.stream);
            unsafe {
                nr::all_reduce(
                    tp as _,
                    tp as _,
                    1,
                    ns::ncclDataType_t::ncclFloat32,
                    ns::ncclRedOp_t::ncclSum,
                    n.comm.0,
                    stream,
                )
                .map_err(|e| nccl_err("all-reduce", e))?;
            }
        }
        let start = n.event()?;
        {
            let (sp, _r) = src.device_ptr(&n.stream);
            let (dp, _w) = dst.device_ptr_mut(&n.stream);
            let ty = ns::ncclDataType_t::ncclFloat32;
            unsafe {
                match self.root {
                    None => nr::all_reduce(
                        sp as _,
                        dp as _,
                        b - a,
                        ty,
                        ns::ncclRedOp_t::ncclSum,
                        n.comm.0,
                        stream,
                    )
                    .map_err(|e| nccl_err("all-reduce", e))?,
                    Some(root) => {
                        nr::broadcast(sp as _, dp as _, b - a, ty, root as i32, n.comm.0, stream)
                            .map_err(|e| nccl_err("broadcast", e))?
                    }
                };
            }
        }
        n.watch()?;
        if self.root.is_none() {
            let end = n.event()?;
            if let Ok(mut p) = n.pending.lock() {
                p.timed.push((arrived, start, end, 4 * (b - a) as u64));
            }
        }
        Ok((CudaStorage::wrap_cuda_slice(dst, dev), l.shape().clone()))
    }
}

impl Collective for Nccl {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world(&self) -> usize {
        self.world
    }
    fn all_reduce_sum(&self, t: &Tensor) -> candle_core::Result<Tensor> {
        t.apply_op1_no_bwd(&Op {
            nccl: self,
            root: None,
        })
    }
    fn broadcast(&self, t: &Tensor, root: usize) -> candle_core::Result<Tensor> {
        t.apply_op1_no_bwd(&Op {
            nccl: self,
            root: Some(root),
        })
    }
    fn take_stats(&self) -> candle_core::Result<CommStats> {
        let timed = match self.pending.lock() {
            Ok(mut p) => std::mem::take(&mut p.timed),
            Err(_) => Vec::new(),
        };
        let mut s = CommStats::default();
        for (arrived, start, end, bytes) in timed {
            let wait = arrived
                .elapsed_ms(&start)
                .map_err(candle_core::Error::wrap)?;
            let ms = start.elapsed_ms(&end).map_err(candle_core::Error::wrap)?;
            s.add(CommStats {
                calls: 1,
                bytes,
                seconds: ms as f64 / 1e3,
                wait_s: wait as f64 / 1e3,
            });
        }
        Ok(s)
    }
}
