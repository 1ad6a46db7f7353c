//! NCCL as a [`Collective`]: one process per GPU. Rank 0 makes the unique id and hands it to
//! the others through the TCP rendezvous. Collectives run on a communication stream of their
//! own (as PyTorch's process groups do), which waits for an event recorded on candle's stream
//! after the kernels that produced the inputs; candle's stream waits for the collective's end
//! only where the result is used ([`InFlight::wait`]), so a gradient bucket's all-reduce runs
//! beside the rest of backward. No host synchronisation either way.
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
    sys::CUevent_flags, CudaContext, CudaEvent, CudaSlice, CudaStream, DevicePtr, DevicePtrMut,
    DeviceRepr,
};
use candle_core::cuda_backend::cudarc::nccl::{result as nr, sys as ns};
use candle_core::cuda_backend::CudaDType;
use candle_core::op::BackpropOp;
use candle_core::{CudaStorage, DType, Device, Storage, Tensor};

use super::collective::{Collective, CommMarks, CommStats, Finished, InFlight};
use super::watchdog;
use super::{share_bytes, DistEnv};
use crate::step_clock::{host_us, DeviceClock};
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
    /// candle's stream: every kernel of this process.
    stream: Arc<CudaStream>,
    /// Every collective of this process, in the order they are issued.
    comm_stream: Arc<CudaStream>,
    pending: Mutex<Pending>,
    watch: Arc<Watch>,
    /// One float for the all-reduce that lines the ranks up before each timed transfer.
    tiny: CudaSlice<f32>,
    /// Maps the events onto the host clock for timelines.
    origin: DeviceClock,
}

#[derive(Default)]
struct Pending {
    /// All-reduces whose events are unread.
    timed: Vec<Timed>,
}

struct Timed {
    /// When the host queued it (µs, `host_us`).
    host: f64,
    arrived: CudaEvent,
    synchronised: CudaEvent,
    done: Arc<CudaEvent>,
    bytes: u64,
    /// On candle's stream, just before and after its wait for `done`, once it has waited.
    exposed: Arc<Mutex<Option<[CudaEvent; 2]>>>,
}

struct Watch {
    /// Collectives not yet seen finished: when each was enqueued, and its completion event.
    inflight: Mutex<VecDeque<(Instant, Arc<CudaEvent>)>>,
    /// Since when the host has been inside an NCCL call, if it is.
    inside: Mutex<Option<Instant>>,
    /// When the host last entered or left a collective.
    beat: Mutex<Instant>,
    /// Why the poller thinks the job is stuck, once it does.
    verdict: Mutex<Option<String>>,
    stop: AtomicBool,
}

impl Watch {
    fn new() -> Watch {
        Watch {
            inflight: Mutex::new(VecDeque::new()),
            inside: Mutex::new(None),
            beat: Mutex::new(Instant::now()),
            verdict: Mutex::new(None),
            stop: AtomicBool::new(false),
        }
    }

    fn enter(&self) -> Inside<'_> {
        let now = Instant::now();
        if let Ok(mut t) = self.inside.lock() {
            *t = Some(now);
        }
        if let Ok(mut b) = self.beat.lock() {
            *b = now;
        }
        Inside(self)
    }

    fn inside_since(&self) -> Option<Instant> {
        self.inside.lock().ok().and_then(|t| *t)
    }

    fn since_beat(&self) -> Duration {
        self.beat.lock().map_or(Duration::ZERO, |b| b.elapsed())
    }

    fn any_inflight(&self) -> bool {
        self.inflight.lock().is_ok_and(|q| !q.is_empty())
    }

    /// Drops the finished collectives at the head of the queue and says how long the
    /// oldest unfinished one has waited: since it was enqueued, or since its predecessor
    /// was seen finished if that is later (the host may enqueue many steps ahead). The
    /// queue is not locked during the event queries, which may block in the driver.
    fn oldest_wait(&self, last_progress: &mut Instant) -> Option<Duration> {
        loop {
            let (queued, done) = {
                let q = self.inflight.lock().ok()?;
                let (queued, done) = q.front()?;
                (*queued, done.clone())
            };
            if !done.is_complete() {
                return Some(queued.max(*last_progress).elapsed());
            }
            if let Ok(mut q) = self.inflight.lock() {
                if q.front().is_some_and(|(_, e)| Arc::ptr_eq(e, &done)) {
                    q.pop_front();
                }
            }
            *last_progress = Instant::now();
        }
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
        let watch = Arc::new(Watch::new());
        let ctx = stream.context().clone();
        spawn_watchdog(comm.clone(), watch.clone(), ctx, env.rank, watchdog);
        let tiny = stream
            .alloc_zeros::<f32>(1)
            .map_err(candle_core::Error::wrap)?;
        // The highest priority: NCCL's kernels get SMs as soon as compute kernels end,
        // rather than after every queued one.
        let (_, highest) =
            candle_core::cuda_backend::cudarc::driver::result::stream::get_priority_range()
                .map_err(candle_core::Error::wrap)?;
        let comm_stream = stream
            .context()
            .new_stream_with_priority(highest)
            .map_err(candle_core::Error::wrap)?;
        Ok(Self {
            origin: DeviceClock::new(&stream)?,
            tiny,
            comm,
            rank: env.rank,
            world: env.world,
            stream,
            comm_stream,
            pending: Mutex::new(Pending::default()),
            watch,
        })
    }

    /// Hands the collective just enqueued, ending at `done`, to the watchdog.
    fn watch(&self, done: Arc<CudaEvent>) {
        if let Ok(mut q) = self.watch.inflight.lock() {
            q.push_back((Instant::now(), done));
        }
    }

    /// A timing event, not yet recorded.
    fn new_event(&self) -> candle_core::Result<CudaEvent> {
        self.stream
            .context()
            .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(candle_core::Error::wrap)
    }
}

impl Drop for Nccl {
    fn drop(&mut self) {
        // Queued collectives must finish before the communicator goes. The watchdog stays
        // on meanwhile: if a peer died, this wait never ends and the watchdog ends the
        // process with its error instead of leaving it hanging.
        for stream in [&self.comm_stream, &self.stream] {
            if let Ok(idle) = stream.record_event(None) {
                let _ = crate::device::wait_event(&idle);
            }
        }
        self.watch.stop.store(true, Ordering::SeqCst);
        unsafe {
            let _ = nr::comm_destroy(self.comm.0);
        }
    }
}

/// Two threads: a poller that queries the collectives' events and NCCL's asynchronous
/// error, and a judge that decides from what the host and the poller last reported. The
/// poller's queries may block inside the driver while the main thread is blocked in it
/// (a full launch queue, a copy behind a collective that never finishes); the judge makes
/// no driver or NCCL call until it aborts, so a dead peer always ends this rank.
fn spawn_watchdog(
    comm: Arc<RawComm>,
    watch: Arc<Watch>,
    ctx: Arc<CudaContext>,
    rank: usize,
    timeout: Duration,
) {
    let (w, c, msg) = (
        watch.clone(),
        comm.clone(),
        watchdog::stuck_message(timeout),
    );
    std::thread::spawn(move || {
        // Event queries need the device's context on this thread too; without it every
        // query fails and would read as "not finished".
        if let Err(e) = ctx.bind_to_thread() {
            eprintln!("warning: rank {rank}: the NCCL watchdog cannot use the device: {e:?}");
        }
        let mut last_progress = Instant::now();
        while !w.stop.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(200));
            let why = if w
                .oldest_wait(&mut last_progress)
                .is_some_and(|waited| waited > timeout)
            {
                msg.clone()
            } else if w.inside_since().is_some() {
                // NCCL may hold the communicator while a call runs; polling it now could
                // block this thread too.
                continue;
            } else {
                let mut async_err = ns::ncclResult_t::ncclSuccess;
                let polled = unsafe { ns::ncclCommGetAsyncError(c.0, &mut async_err) };
                if polled == ns::ncclResult_t::ncclSuccess
                    && async_err == ns::ncclResult_t::ncclSuccess
                {
                    continue;
                }
                format!("NCCL reported an asynchronous error ({async_err:?}): a peer rank failed")
            };
            if let Ok(mut v) = w.verdict.lock() {
                v.get_or_insert(why);
            }
        }
    });
    std::thread::spawn(move || {
        while !watch.stop.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(200));
            let host = watchdog::HostState {
                inside_call: watch.inside_since().map(|t| t.elapsed()),
                since_collective: watch.since_beat(),
                unfinished: watch.any_inflight(),
            };
            let poller = watch.verdict.lock().ok().and_then(|v| v.clone());
            let Some(why) = watchdog::judge(host, poller.as_deref(), timeout) else {
                continue;
            };
            if watch.stop.load(Ordering::SeqCst) {
                return;
            }
            watchdog::begin_abort();
            eprintln!("error: rank {rank}: {why}; aborting this rank");
            // A checkpoint being written is the last finished epoch's: let it land.
            if !crate::saver::wait_for_writes(Duration::from_secs(60)) {
                eprintln!("error: rank {rank}: a checkpoint write did not finish in 60 s");
            }
            // Abort can itself wait on a blocked communicator: give it a few seconds.
            let (tx, rx) = std::sync::mpsc::channel();
            let c = comm.clone();
            std::thread::spawn(move || {
                unsafe {
                    let _ = ns::ncclCommAbort(c.0);
                }
                let _ = tx.send(());
            });
            let _ = rx.recv_timeout(Duration::from_secs(10));
            std::process::exit(WATCHDOG_EXIT);
        }
    });
}

/// Marks the host as inside an NCCL call until dropped.
struct Inside<'a>(&'a Watch);

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        if let Ok(mut t) = self.0.inside.lock() {
            *t = None;
        }
        if let Ok(mut b) = self.0.beat.lock() {
            *b = Instant::now();
        }
    }
}

impl Nccl {
    /// Sums over ranks (`root` `None`) or broadcasts from `root` every tensor of `ts` (f32 or
    /// bf16), as one NCCL group on the communication stream: NCCL fuses the calls into one
    /// launch, so the buckets of a step move at the bandwidth of one message of their total
    /// size. Collectives are issued in `ts` order.
    fn collective(
        &self,
        ts: &[Tensor],
        root: Option<usize>,
    ) -> candle_core::Result<Box<dyn InFlight>> {
        let Some(first) = ts.first() else {
            return Ok(Box::new(Finished(Vec::new())));
        };
        let dtype = first.dtype();
        if ts.iter().any(|t| t.dtype() != dtype) {
            candle_core::bail!("NCCL collectives of one call need tensors of one dtype")
        }
        match dtype {
            DType::F32 => self.typed::<f32>(ts, root, ns::ncclDataType_t::ncclFloat32),
            DType::BF16 => self.typed::<half::bf16>(ts, root, ns::ncclDataType_t::ncclBfloat16),
            other => candle_core::bail!("NCCL collectives here take f32 or bf16, not {other:?}"),
        }
    }

    fn typed<T: CudaDType + DeviceRepr>(
        &self,
        ts: &[Tensor],
        root: Option<usize>,
        ty: ns::ncclDataType_t,
    ) -> candle_core::Result<Box<dyn InFlight>> {
        let guards: Vec<_> = ts.iter().map(|t| t.storage_and_layout()).collect();
        let mut srcs = Vec::with_capacity(ts.len());
        let mut dev = None;
        for (s, l) in &guards {
            let Storage::Cuda(cs) = &**s else {
                candle_core::bail!("NCCL collectives need tensors on a CUDA device")
            };
            let Some((a, b)) = l.contiguous_offsets() else {
                candle_core::bail!("NCCL collectives need a contiguous tensor")
            };
            srcs.push(cs.as_cuda_slice::<T>()?.slice(a..b));
            dev.get_or_insert_with(|| cs.device.clone());
        }
        let Some(dev) = dev else {
            return Ok(Box::new(Finished(Vec::new())));
        };
        // Allocated on candle's stream, before the event the communication stream waits for.
        let mut dsts = srcs
            .iter()
            .map(|s| unsafe { dev.alloc::<T>(s.len()) })
            .collect::<candle_core::Result<Vec<CudaSlice<T>>>>()?;
        let elems: Vec<usize> = srcs.iter().map(|s| s.len()).collect();
        let comm = &self.comm_stream;
        let reads: Vec<_> = srcs.iter().map(|s| s.device_ptr(comm)).collect();
        let writes: Vec<_> = dsts.iter_mut().map(|d| d.device_ptr_mut(comm)).collect();
        let (tp, tiny) = self.tiny.device_ptr(comm);
        // Events are made before and only recorded between the launches: when the host is
        // the bottleneck the device reaches each mark as soon as it is queued, and host work
        // between the marks would count as transfer time.
        let [arrived, start, done] = [self.new_event()?, self.new_event()?, self.new_event()?];
        let wrap = candle_core::Error::wrap;
        let cu = comm.cu_stream() as ns::cudaStream_t;
        let (f32_ty, sum) = (ns::ncclDataType_t::ncclFloat32, ns::ncclRedOp_t::ncclSum);
        let _inside = self.watch.enter();
        let host = host_us();
        comm.wait(&self.stream.record_event(None).map_err(wrap)?)
            .map_err(wrap)?;
        arrived.record(comm).map_err(wrap)?;
        if root.is_none() {
            // Ranks reach a collective at different times; a one-float all-reduce absorbs the
            // wait so the events around the real ones time the transfer alone.
            unsafe { nr::all_reduce(tp as _, tp as _, 1, f32_ty, sum, self.comm.0, cu) }
                .map_err(|e| nccl_err("all-reduce", e))?;
        }
        start.record(comm).map_err(wrap)?;
        nr::group_start().map_err(|e| nccl_err("ncclGroupStart", e))?;
        let issued = (|| {
            for (((sp, _), (dp, _)), &n) in reads.iter().zip(&writes).zip(&elems) {
                let (sp, dp) = (*sp as *const _, *dp as *mut _);
                unsafe {
                    match root {
                        None => nr::all_reduce(sp, dp, n, ty, sum, self.comm.0, cu)
                            .map_err(|e| nccl_err("all-reduce", e))?,
                        Some(r) => nr::broadcast(sp, dp, n, ty, r as i32, self.comm.0, cu)
                            .map_err(|e| nccl_err("broadcast", e))?,
                    };
                }
            }
            Ok::<_, candle_core::Error>(())
        })();
        // The group must be closed even when a call in it failed.
        let closed = nr::group_end().map_err(|e| nccl_err("ncclGroupEnd", e));
        issued?;
        closed?;
        done.record(comm).map_err(wrap)?;
        let done = Arc::new(done);
        drop((reads, writes, tiny));
        self.watch(done.clone());
        let exposed = Arc::new(Mutex::new(None));
        if root.is_none() {
            if let Ok(mut p) = self.pending.lock() {
                p.timed.push(Timed {
                    host,
                    arrived,
                    synchronised: start,
                    done: done.clone(),
                    bytes: (std::mem::size_of::<T>() * elems.iter().sum::<usize>()) as u64,
                    exposed: exposed.clone(),
                });
            }
        }
        let outs = dsts
            .into_iter()
            .zip(ts)
            .map(|(d, t)| {
                let storage = Storage::Cuda(CudaStorage::wrap_cuda_slice(d, dev.clone()));
                Tensor::from_storage(storage, t.shape().clone(), BackpropOp::none(), false)
            })
            .collect();
        drop(guards);
        Ok(Box::new(Started {
            outs,
            _inputs: ts.to_vec(),
            done: Some(done),
            compute: self.stream.clone(),
            exposed,
        }))
    }
}

/// Collectives queued on the communication stream ([`Nccl::collective`]).
struct Started {
    outs: Vec<Tensor>,
    /// Held (dropped with this, after candle's stream waits for `done`): their memory, freed
    /// on candle's stream, could otherwise be handed to a kernel while the transfer reads it.
    _inputs: Vec<Tensor>,
    done: Option<Arc<CudaEvent>>,
    compute: Arc<CudaStream>,
    exposed: Arc<Mutex<Option<[CudaEvent; 2]>>>,
}

impl InFlight for Started {
    fn wait(mut self: Box<Self>) -> candle_core::Result<Vec<Tensor>> {
        let Some(done) = self.done.take() else {
            return Ok(std::mem::take(&mut self.outs));
        };
        let wrap = candle_core::Error::wrap;
        let timing = Some(CUevent_flags::CU_EVENT_DEFAULT);
        let before = self.compute.record_event(timing).map_err(wrap)?;
        self.compute.wait(&done).map_err(wrap)?;
        let after = self.compute.record_event(timing).map_err(wrap)?;
        if let Ok(mut e) = self.exposed.lock() {
            *e = Some([before, after]);
        }
        Ok(std::mem::take(&mut self.outs))
    }
}

impl Drop for Started {
    /// Dropped unwaited (a step that failed midway): candle's stream still waits for the
    /// transfer before the inputs' memory can go back to it.
    fn drop(&mut self) {
        if let Some(done) = &self.done {
            let _ = self.compute.wait(done);
        }
    }
}

impl Nccl {
    /// When candle's stream began and ended waiting for `t`'s result, µs on the host clock;
    /// `None` before anything waited for it.
    fn exposed_span(&self, t: &Timed) -> candle_core::Result<Option<[f64; 2]>> {
        match t.exposed.lock().ok().as_deref() {
            Some(Some([before, after])) => {
                Ok(Some([self.origin.at(before)?, self.origin.at(after)?]))
            }
            _ => Ok(None),
        }
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
        Ok(self.all_reduce_sum_many(std::slice::from_ref(t))?.remove(0))
    }
    fn all_reduce_sum_many(&self, ts: &[Tensor]) -> candle_core::Result<Vec<Tensor>> {
        self.collective(ts, None)?.wait()
    }
    fn all_reduce_start(&self, ts: &[Tensor]) -> candle_core::Result<Box<dyn InFlight>> {
        self.collective(ts, None)
    }
    fn broadcast(&self, t: &Tensor, root: usize) -> candle_core::Result<Tensor> {
        Ok(self
            .collective(std::slice::from_ref(t), Some(root))?
            .wait()?
            .remove(0))
    }
    fn take_stats(&self) -> candle_core::Result<CommStats> {
        let timed = match self.pending.lock() {
            Ok(mut p) => std::mem::take(&mut p.timed),
            Err(_) => Vec::new(),
        };
        let mut s = CommStats::default();
        for t in timed {
            let wait = t
                .arrived
                .elapsed_ms(&t.synchronised)
                .map_err(candle_core::Error::wrap)?;
            let ms = t
                .synchronised
                .elapsed_ms(&t.done)
                .map_err(candle_core::Error::wrap)?;
            let exposed_us = self.exposed_span(&t)?.map_or(0.0, |[a, b]| b - a);
            s.add(CommStats {
                calls: 1,
                bytes: t.bytes,
                seconds: ms as f64 / 1e3,
                wait_s: wait as f64 / 1e3,
                exposed_s: exposed_us / 1e6,
            });
        }
        Ok(s)
    }
    fn timeline(&self) -> candle_core::Result<Vec<CommMarks>> {
        let Ok(p) = self.pending.lock() else {
            return Ok(Vec::new());
        };
        p.timed
            .iter()
            .map(|t| {
                let dev_end = self.origin.at(&t.done)?;
                let [exposed_start, exposed_end] = self.exposed_span(t)?.unwrap_or([dev_end; 2]);
                Ok(CommMarks {
                    host: t.host,
                    dev_arrived: self.origin.at(&t.arrived)?,
                    dev_start: self.origin.at(&t.synchronised)?,
                    dev_end,
                    exposed_start,
                    exposed_end,
                    bytes: t.bytes,
                })
            })
            .collect()
    }
}
