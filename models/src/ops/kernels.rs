//! CUDA kernels of the fused ops, compiled once per process with NVRTC (no CUDA compiler
//! is needed to build octet) and loaded once per device through candle.

use std::sync::OnceLock;

use std::sync::Arc;

use candle_core::cuda_backend::cudarc::driver::{CudaFunction, CudaStream, LaunchConfig};
use candle_core::cuda_backend::cudarc::nvrtc;
use candle_core::cuda_backend::CudaDevice;
use candle_core::Result;

const MODULE: &str = "octet_fastops";

/// Threads of the partial-reduction blocks (a multiple of 32, at most 1024).
pub(crate) const REDUCE_THREADS: u32 = 256;

/// Threads of the blocks that combine one channel's partial results.
const FINAL_THREADS: u32 = 128;

/// Blocks a reduction aims for: about 8 resident blocks of 256 threads on each of an
/// H100's 132 SMs, so even few channels fill the GPU.
const TARGET_BLOCKS: usize = 1024;

/// The fewest loads (float4 or float) a partial block takes: 4 per thread, so that small
/// tensors are not cut into blocks that mostly idle.
const MIN_ITEMS_PER_BLOCK: usize = 4 * REDUCE_THREADS as usize;

pub(crate) const SOURCE: &str = r#"
#define FULL 0xffffffffu

// Sum of v over the block; every thread gets the result. sh holds 32 floats; blockDim.x
// is a multiple of 32.
__device__ float block_sum(float v, float* sh) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(FULL, v, o);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();  // sh may still be read from the previous call
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    if (warp == 0) {
        int warps = (blockDim.x + 31) >> 5;
        v = lane < warps ? sh[lane] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(FULL, v, o);
        if (lane == 0) sh[0] = v;
    }
    __syncthreads();
    return sh[0];
}

// Count, mean and sum of squared deviations (M2) of a set of values.
struct Moments {
    int n;
    float mean, m2;
};

// The moments of the union of two sets (Chan, Golub and LeVeque's pairwise formula):
// no cancellation, as precise as two passes.
__device__ __forceinline__ Moments merge(Moments a, Moments b) {
    if (b.n == 0) return a;
    if (a.n == 0) return b;
    Moments r;
    r.n = a.n + b.n;
    float fb = (float)b.n / (float)r.n;
    float d = b.mean - a.mean;
    r.mean = a.mean + d * fb;
    r.m2 = a.m2 + b.m2 + d * d * ((float)a.n * fb);
    return r;
}

__device__ __forceinline__ Moments shfl_down(Moments v, int o) {
    Moments u;
    u.n = __shfl_down_sync(FULL, v.n, o);
    u.mean = __shfl_down_sync(FULL, v.mean, o);
    u.m2 = __shfl_down_sync(FULL, v.m2, o);
    return u;
}

// Moments of the whole block, valid in thread 0. A fixed merge tree: deterministic.
__device__ Moments block_moments(Moments v) {
    __shared__ Moments sh[32];
    for (int o = 16; o > 0; o >>= 1) v = merge(v, shfl_down(v, o));
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    if (warp == 0) {
        int warps = (blockDim.x + 31) >> 5;
        Moments z = {0, 0.0f, 0.0f};
        v = lane < warps ? sh[lane] : z;
        for (int o = 16; o > 0; o >>= 1) v = merge(v, shfl_down(v, o));
    }
    return v;
}

// The reductions see one channel of an (n, c, hw) tensor as n*hw items in (plane, position)
// order; block `s` of the channel's `splits` takes items [s*chunk, (s+1)*chunk) and its
// threads stride over them by blockDim.x. An item is a float4 when VEC (hw is then counted
// in float4s), else one float. A thread tracks (plane, position) by adding the stride's
// quotient and remainder: one division per thread, none per item, and the loads of a
// warp stay contiguous within a plane.
struct Walk {
    unsigned j, end, b, pos, db, dp, hw, c, ch;
    __device__ Walk(unsigned c_, unsigned hw_, unsigned m, unsigned chunk, unsigned splits) {
        c = c_;
        hw = hw_;
        ch = blockIdx.x / splits;
        unsigned s = blockIdx.x - ch * splits;
        unsigned start = s * chunk;
        end = min(start + chunk, m);
        j = start + threadIdx.x;
        b = j / hw;
        pos = j - b * hw;
        db = blockDim.x / hw;
        dp = blockDim.x - db * hw;
    }
    __device__ __forceinline__ bool more() const { return j < end; }
    // Index (in items) of the current item in the whole tensor.
    __device__ __forceinline__ unsigned at() const { return (b * c + ch) * hw + pos; }
    __device__ __forceinline__ void next() {
        j += blockDim.x;
        b += db;
        pos += dp;
        if (pos >= hw) {
            pos -= hw;
            b += 1;
        }
    }
};

template <bool VEC>
__device__ void stats_partial(const float* __restrict__ x, float* __restrict__ part,
                              unsigned c, unsigned hw, unsigned m, unsigned chunk,
                              unsigned splits) {
    Walk w(c, hw, m, chunk, splits);
    Moments acc = {0, 0.0f, 0.0f};
    for (; w.more(); w.next()) {
        if (VEC) {
            // The four values' own moments (exact two-pass on registers), merged in.
            float4 v = reinterpret_cast<const float4*>(x)[w.at()];
            Moments g;
            g.n = 4;
            g.mean = ((v.x + v.y) + (v.z + v.w)) * 0.25f;
            float a = v.x - g.mean, b = v.y - g.mean, e = v.z - g.mean, f = v.w - g.mean;
            g.m2 = (a * a + b * b) + (e * e + f * f);
            acc = merge(acc, g);
        } else {
            // Welford's update.
            float v = x[w.at()];
            acc.n += 1;
            float d = v - acc.mean;
            acc.mean += d / (float)acc.n;
            acc.m2 += d * (v - acc.mean);
        }
    }
    acc = block_moments(acc);
    if (threadIdx.x == 0) {
        part[3 * blockIdx.x] = __int_as_float(acc.n);
        part[3 * blockIdx.x + 1] = acc.mean;
        part[3 * blockIdx.x + 2] = acc.m2;
    }
}

// Per-block moments of one channel's slice; grid c * splits, part holds 3 floats a block.
extern "C" __global__ void bn_stats_partial(const float* __restrict__ x, float* __restrict__ part,
                                            int c, int hw, int m, int chunk, int splits,
                                            int vec) {
    if (vec) stats_partial<true>(x, part, c, hw, m, chunk, splits);
    else stats_partial<false>(x, part, c, hw, m, chunk, splits);
}

// One block per channel merges its splits in a fixed order: stats[ch] = mean,
// stats[c + ch] = biased variance.
extern "C" __global__ void bn_stats_final(const float* __restrict__ part,
                                          float* __restrict__ stats, int c, int splits) {
    int ch = blockIdx.x;
    const float* p = part + 3 * (long long)ch * splits;
    Moments acc = {0, 0.0f, 0.0f};
    for (int s = threadIdx.x; s < splits; s += blockDim.x) {
        Moments g = {__float_as_int(p[3 * s]), p[3 * s + 1], p[3 * s + 2]};
        acc = merge(acc, g);
    }
    acc = block_moments(acc);
    if (threadIdx.x == 0) {
        stats[ch] = acc.mean;
        stats[c + ch] = acc.m2 / (float)acc.n;
    }
}

// run = run * keep + stats[row] * take, rounded like candle's affine ops.
extern "C" __global__ void bn_running(float* __restrict__ run, const float* __restrict__ stats,
                                      int c, int row, float keep, float take) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < c) run[i] = __fadd_rn(__fmul_rn(run[i], keep), __fmul_rn(stats[row * c + i], take));
}

// A grid-stride walk over the items (float4s when hw counts float4s) of an (n, c, hw)
// tensor that knows each item's channel without dividing: the stride's quotient and
// remainder by hw and c are added instead.
struct Flat {
    unsigned k, stride, pos, ch, dpos, dch, hw, c;
    __device__ Flat(unsigned c_, unsigned hw_) {
        c = c_;
        hw = hw_;
        k = blockIdx.x * blockDim.x + threadIdx.x;
        stride = gridDim.x * blockDim.x;
        unsigned p = k / hw;
        pos = k - p * hw;
        ch = p % c;
        unsigned dp = stride / hw;
        dpos = stride - dp * hw;
        dch = dp % c;
    }
    __device__ __forceinline__ void next() {
        k += stride;
        pos += dpos;
        ch += dch;
        if (pos >= hw) {
            pos -= hw;
            ch += 1;
        }
        if (ch >= c) ch -= c;  // ch < 2c here: ch <= c-1, dch <= c-1, carry <= 1
    }
};

__device__ __forceinline__ float apply1(float v, float mean, float scale, float shift) {
    return (v - mean) * scale + shift;
}

// y = (x - mean) / sqrt(var + eps) * gamma + beta.
extern "C" __global__ void bn_apply(const float* __restrict__ x, const float* __restrict__ stats,
                                    const float* __restrict__ gamma, const float* __restrict__ beta,
                                    float* __restrict__ y, int c, int hw, int total, float eps,
                                    int vec) {
    for (Flat f(c, hw); f.k < (unsigned)total; f.next()) {
        unsigned ch = f.ch;
        float mean = stats[ch], inv = 1.0f / sqrtf(stats[c + ch] + eps);
        float scale = gamma[ch] * inv, shift = beta[ch];
        if (vec) {
            float4 v = reinterpret_cast<const float4*>(x)[f.k];
            v.x = apply1(v.x, mean, scale, shift);
            v.y = apply1(v.y, mean, scale, shift);
            v.z = apply1(v.z, mean, scale, shift);
            v.w = apply1(v.w, mean, scale, shift);
            reinterpret_cast<float4*>(y)[f.k] = v;
        } else {
            y[f.k] = apply1(x[f.k], mean, scale, shift);
        }
    }
}

template <bool VEC>
__device__ void bwd_partial(const float* __restrict__ x, const float* __restrict__ dy,
                            const float* __restrict__ stats, float* __restrict__ part,
                            unsigned c, unsigned hw, unsigned m, unsigned chunk,
                            unsigned splits) {
    __shared__ float sh[32];
    Walk w(c, hw, m, chunk, splits);
    float mean = stats[w.ch];
    float sdy = 0.0f, sdyx = 0.0f;
    for (; w.more(); w.next()) {
        if (VEC) {
            float4 g = reinterpret_cast<const float4*>(dy)[w.at()];
            float4 v = reinterpret_cast<const float4*>(x)[w.at()];
            sdy += (g.x + g.y) + (g.z + g.w);
            sdyx += (g.x * (v.x - mean) + g.y * (v.y - mean)) +
                    (g.z * (v.z - mean) + g.w * (v.w - mean));
        } else {
            unsigned i = w.at();
            float g = dy[i];
            sdy += g;
            sdyx += g * (x[i] - mean);
        }
    }
    sdy = block_sum(sdy, sh);
    sdyx = block_sum(sdyx, sh);
    if (threadIdx.x == 0) {
        part[2 * blockIdx.x] = sdyx;
        part[2 * blockIdx.x + 1] = sdy;
    }
}

// Per-block [sum(dy * (x - mean)), sum(dy)] of one channel's slice; grid c * splits.
extern "C" __global__ void bn_bwd_partial(const float* __restrict__ x, const float* __restrict__ dy,
                                          const float* __restrict__ stats, float* __restrict__ part,
                                          int c, int hw, int m, int chunk, int splits, int vec) {
    if (vec) bwd_partial<true>(x, dy, stats, part, c, hw, m, chunk, splits);
    else bwd_partial<false>(x, dy, stats, part, c, hw, m, chunk, splits);
}

// One block per channel sums its splits in a fixed order: sums[ch] = sum(dy * xhat) (the
// gradient of gamma), sums[c + ch] = sum(dy) (the gradient of beta).
extern "C" __global__ void bn_bwd_final(const float* __restrict__ part,
                                        const float* __restrict__ stats, float* __restrict__ sums,
                                        int c, int splits, float eps) {
    __shared__ float sh[32];
    int ch = blockIdx.x;
    const float* p = part + 2 * (long long)ch * splits;
    float sdyx = 0.0f, sdy = 0.0f;
    for (int s = threadIdx.x; s < splits; s += blockDim.x) {
        sdyx += p[2 * s];
        sdy += p[2 * s + 1];
    }
    sdyx = block_sum(sdyx, sh);
    sdy = block_sum(sdy, sh);
    if (threadIdx.x == 0) {
        sums[ch] = sdyx * (1.0f / sqrtf(stats[c + ch] + eps));
        sums[c + ch] = sdy;
    }
}

__device__ __forceinline__ float dx1(float v, float g, float mean, float inv, float ginv,
                                     float mdy, float mdyx) {
    float xhat = (v - mean) * inv;
    return ginv * (g - mdy - xhat * mdyx);
}

// dx = gamma * inv * (dy - sum(dy) / m - xhat * sum(dy * xhat) / m), m = n * hw.
extern "C" __global__ void bn_bwd_dx(const float* __restrict__ x, const float* __restrict__ dy,
                                     const float* __restrict__ stats, const float* __restrict__ gamma,
                                     const float* __restrict__ sums, float* __restrict__ dx,
                                     int c, int hw, int total, float m, float eps, int vec) {
    for (Flat f(c, hw); f.k < (unsigned)total; f.next()) {
        unsigned ch = f.ch;
        float mean = stats[ch], inv = 1.0f / sqrtf(stats[c + ch] + eps);
        float ginv = gamma[ch] * inv, mdy = sums[c + ch] / m, mdyx = sums[ch] / m;
        if (vec) {
            float4 v = reinterpret_cast<const float4*>(x)[f.k];
            float4 g = reinterpret_cast<const float4*>(dy)[f.k];
            float4 r;
            r.x = dx1(v.x, g.x, mean, inv, ginv, mdy, mdyx);
            r.y = dx1(v.y, g.y, mean, inv, ginv, mdy, mdyx);
            r.z = dx1(v.z, g.z, mean, inv, ginv, mdy, mdyx);
            r.w = dx1(v.w, g.w, mean, inv, ginv, mdy, mdyx);
            reinterpret_cast<float4*>(dx)[f.k] = r;
        } else {
            dx[f.k] = dx1(x[f.k], dy[f.k], mean, inv, ginv, mdy, mdyx);
        }
    }
}

// ReLU forward and backward (candle's gradient: dy where x >= 0); n counts float4s when vec.
__device__ __forceinline__ float relu_dx(float x, float g) { return x >= 0.0f ? g : 0.0f; }

extern "C" __global__ void relu_fwd(const float* __restrict__ x, float* __restrict__ y, int n,
                                    int vec) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        if (vec) {
            float4 v = reinterpret_cast<const float4*>(x)[i];
            v.x = fmaxf(v.x, 0.0f);
            v.y = fmaxf(v.y, 0.0f);
            v.z = fmaxf(v.z, 0.0f);
            v.w = fmaxf(v.w, 0.0f);
            reinterpret_cast<float4*>(y)[i] = v;
        } else {
            y[i] = fmaxf(x[i], 0.0f);
        }
    }
}

extern "C" __global__ void relu_bwd(const float* __restrict__ x, const float* __restrict__ dy,
                                    float* __restrict__ dx, int n, int vec) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        if (vec) {
            float4 v = reinterpret_cast<const float4*>(x)[i];
            float4 g = reinterpret_cast<const float4*>(dy)[i];
            g.x = relu_dx(v.x, g.x);
            g.y = relu_dx(v.y, g.y);
            g.z = relu_dx(v.z, g.z);
            g.w = relu_dx(v.w, g.w);
            reinterpret_cast<float4*>(dx)[i] = g;
        } else {
            dx[i] = relu_dx(x[i], dy[i]);
        }
    }
}
"#;

/// A module of octet's kernels: NVRTC compiles its source once per process, candle loads it
/// once per device (and caches it). Public for the trainer's kernels (fused SGD).
pub struct Module {
    name: &'static str,
    source: &'static str,
    /// What the kernels are, for the compile error.
    what: &'static str,
    ptx: OnceLock<std::result::Result<String, String>>,
}

impl Module {
    pub const fn new(name: &'static str, source: &'static str, what: &'static str) -> Self {
        Self {
            name,
            source,
            what,
            ptx: OnceLock::new(),
        }
    }

    fn ptx(&self) -> Result<&str> {
        self.ptx
            .get_or_init(|| {
                nvrtc::compile_ptx(self.source)
                    .map(|p| p.to_src())
                    .map_err(|e| format!("compiling {} with NVRTC: {e:?}", self.what))
            })
            .as_deref()
            .map_err(|e| candle_core::Error::Msg(e.to_string()))
    }

    /// The kernel `name`, loaded on `dev`, and the device's stream to launch it on.
    pub fn func(&self, dev: &CudaDevice, name: &str) -> Result<(Arc<CudaStream>, CudaFunction)> {
        let f = dev.get_or_load_custom_func(name, self.name, self.ptx()?)?;
        Ok((dev.cuda_stream(), f.into_cuda_function()))
    }
}

static FAST_OPS: Module = Module::new(MODULE, SOURCE, "octet's fused-op kernels");

/// A kernel of this module (see [`Module::func`]).
pub(crate) fn func(dev: &CudaDevice, name: &str) -> Result<(Arc<CudaStream>, CudaFunction)> {
    FAST_OPS.func(dev, name)
}

/// A contiguous view of `T` elements of a CUDA tensor, or an error naming `what` it is.
pub(crate) fn view<'a, T: candle_core::cuda_backend::CudaDType>(
    s: &'a candle_core::CudaStorage,
    l: &candle_core::Layout,
    what: &str,
) -> Result<candle_core::cuda_backend::cudarc::driver::CudaView<'a, T>> {
    let Some((a, b)) = l.contiguous_offsets() else {
        candle_core::bail!("{what} is not contiguous")
    };
    Ok(s.as_cuda_slice::<T>()?.slice(a..b))
}

/// Runs `f` with a contiguous view of a CUDA tensor an op holds (statistics, gamma, an
/// output kept for the backward).
pub(crate) fn with_held<T: candle_core::cuda_backend::CudaDType, R>(
    t: &candle_core::Tensor,
    what: &str,
    f: impl FnOnce(candle_core::cuda_backend::cudarc::driver::CudaView<'_, T>) -> Result<R>,
) -> Result<R> {
    let (s, l) = t.storage_and_layout();
    match &*s {
        candle_core::Storage::Cuda(c) => f(view(c, l, what)?),
        _ => candle_core::bail!("{what} is not on a CUDA device"),
    }
}

/// A size as a kernel's 32-bit argument.
pub(crate) fn i32_arg(v: usize, what: &str) -> Result<i32> {
    i32::try_from(v).map_err(|_| candle_core::Error::Msg(format!("{what}: {v} too large")))
}

/// How a per-channel reduction over `items` items (float4s or floats) a channel is cut:
/// `splits` blocks a channel, each taking `chunk` consecutive items.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Split {
    pub splits: usize,
    pub chunk: usize,
}

impl Split {
    /// Enough blocks over all `c` channels to fill the GPU, none smaller than
    /// `MIN_ITEMS_PER_BLOCK` items unless a channel is; no empty blocks.
    pub(crate) fn new(c: usize, items: usize) -> Self {
        Self::cut(c, items, MIN_ITEMS_PER_BLOCK)
    }

    /// `items` cut for `across` independent reductions (channels, tiles of channels) so all
    /// of them together fill the GPU, no block under `min_items` unless the whole is.
    pub(crate) fn cut(across: usize, items: usize, min_items: usize) -> Self {
        let items = items.max(1);
        let splits = TARGET_BLOCKS
            .div_ceil(across.max(1))
            .min(items.div_ceil(min_items.max(1)))
            .max(1);
        let chunk = items.div_ceil(splits);
        Self {
            splits: items.div_ceil(chunk),
            chunk,
        }
    }

    /// `c * splits` blocks of `REDUCE_THREADS`.
    pub(crate) fn partial_launch(&self, c: usize) -> LaunchConfig {
        LaunchConfig {
            grid_dim: ((c * self.splits) as u32, 1, 1),
            block_dim: (REDUCE_THREADS, 1, 1),
            shared_mem_bytes: 0,
        }
    }
}

/// One block per channel combining that channel's partial results.
pub(crate) fn per_channel(c: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (c as u32, 1, 1),
        block_dim: (FINAL_THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// A grid-stride launch over `n` items: enough blocks to fill the GPU, not one per item.
pub(crate) fn elementwise(n: usize) -> LaunchConfig {
    const THREADS: u32 = 256;
    let blocks = n.div_ceil(THREADS as usize).clamp(1, 65_535) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NVRTC (no GPU needed) accepts the kernels. Ignored by default: it needs the CUDA
    /// runtime libraries (`source shared/cuda/toolkit.sh`) even where there is no GPU.
    #[test]
    #[ignore = "needs libnvrtc"]
    fn kernels_compile_with_nvrtc() {
        let ptx = nvrtc::compile_ptx(SOURCE).expect("NVRTC compiles the fused-op kernels");
        for name in [
            "bn_stats_partial",
            "bn_stats_final",
            "bn_running",
            "bn_apply",
            "bn_bwd_partial",
            "bn_bwd_final",
            "bn_bwd_dx",
        ] {
            assert!(ptx.to_src().contains(name), "{name} missing from the PTX");
        }
    }

    #[test]
    fn splits_cover_every_item_once() {
        for (c, items) in [
            (64, 131_072),
            (512, 4),
            (3, 3136),
            (1, 1),
            (5, 49),
            (1, 10_000_000),
        ] {
            let s = Split::new(c, items);
            assert!(s.splits >= 1 && s.chunk >= 1, "{c} {items}: {s:?}");
            // Every block gets at least one item, and together they cover the channel.
            assert!((s.splits - 1) * s.chunk < items, "{c} {items}: {s:?}");
            assert!(s.splits * s.chunk >= items, "{c} {items}: {s:?}");
        }
        // Few channels, many items: the GPU is filled.
        assert_eq!(Split::new(64, 131_072).splits * 64, TARGET_BLOCKS);
    }
}
