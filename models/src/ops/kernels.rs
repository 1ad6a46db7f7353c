//! CUDA kernels of the fused ops, compiled once per process with NVRTC (no CUDA compiler
//! is needed to build octet) and loaded once per device through candle.

use std::sync::OnceLock;

use std::sync::Arc;

use candle_core::cuda_backend::cudarc::driver::{CudaFunction, CudaStream, LaunchConfig};
use candle_core::cuda_backend::cudarc::nvrtc;
use candle_core::cuda_backend::CudaDevice;
use candle_core::Result;

const MODULE: &str = "octet_fastops";

/// Threads of the per-channel reduction blocks (a multiple of 32, at most 1024).
pub(crate) const REDUCE_THREADS: u32 = 512;

const SOURCE: &str = r#"
// Sum of v over the block; every thread gets the result. sh holds 32 floats.
__device__ float block_sum(float v, float* sh) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();  // sh may still be read from the previous call
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    if (warp == 0) {
        int warps = (blockDim.x + 31) >> 5;
        v = lane < warps ? sh[lane] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
        if (lane == 0) sh[0] = v;
    }
    __syncthreads();
    return sh[0];
}

// Element i of channel ch in an (n, c, hw) tensor, i in [0, n*hw).
__device__ __forceinline__ long long at(long long i, int ch, int c, int hw) {
    long long b = i / hw;
    return (b * c + ch) * hw + (i - b * hw);
}

// One block per channel: stats[ch] = mean, stats[c + ch] = biased variance, in two passes
// (mean, then centred squares) like the candle ops they replace.
extern "C" __global__ void bn_stats(const float* __restrict__ x, float* __restrict__ stats,
                                    int n, int c, int hw) {
    __shared__ float sh[32];
    int ch = blockIdx.x;
    long long m = (long long)n * hw;
    float s = 0.0f;
    for (long long i = threadIdx.x; i < m; i += blockDim.x) s += x[at(i, ch, c, hw)];
    float mean = block_sum(s, sh) / (float)m;
    float q = 0.0f;
    for (long long i = threadIdx.x; i < m; i += blockDim.x) {
        float d = x[at(i, ch, c, hw)] - mean;
        q += d * d;
    }
    float var = block_sum(q, sh) / (float)m;
    if (threadIdx.x == 0) {
        stats[ch] = mean;
        stats[c + ch] = var;
    }
}

// run = run * keep + stats[row] * take, rounded like candle's affine ops.
extern "C" __global__ void bn_running(float* __restrict__ run, const float* __restrict__ stats,
                                      int c, int row, float keep, float take) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < c) run[i] = __fadd_rn(__fmul_rn(run[i], keep), __fmul_rn(stats[row * c + i], take));
}

// y = (x - mean) / sqrt(var + eps) * gamma + beta.
extern "C" __global__ void bn_apply(const float* __restrict__ x, const float* __restrict__ stats,
                                    const float* __restrict__ gamma, const float* __restrict__ beta,
                                    float* __restrict__ y, int c, int hw, long long total,
                                    float eps) {
    long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += step) {
        int ch = (int)((i / hw) % c);
        float inv = 1.0f / sqrtf(stats[c + ch] + eps);
        y[i] = (x[i] - stats[ch]) * (gamma[ch] * inv) + beta[ch];
    }
}

// One block per channel: sums[ch] = sum(dy * xhat) (the gradient of gamma),
// sums[c + ch] = sum(dy) (the gradient of beta).
extern "C" __global__ void bn_bwd_reduce(const float* __restrict__ x, const float* __restrict__ dy,
                                         const float* __restrict__ stats, float* __restrict__ sums,
                                         int n, int c, int hw, float eps) {
    __shared__ float sh[32];
    int ch = blockIdx.x;
    long long m = (long long)n * hw;
    float mean = stats[ch];
    float sdy = 0.0f, sdyx = 0.0f;
    for (long long i = threadIdx.x; i < m; i += blockDim.x) {
        long long j = at(i, ch, c, hw);
        float g = dy[j];
        sdy += g;
        sdyx += g * (x[j] - mean);
    }
    sdy = block_sum(sdy, sh);
    sdyx = block_sum(sdyx, sh);
    if (threadIdx.x == 0) {
        sums[ch] = sdyx * (1.0f / sqrtf(stats[c + ch] + eps));
        sums[c + ch] = sdy;
    }
}

// dx = gamma * inv * (dy - sum(dy) / m - xhat * sum(dy * xhat) / m), m = n * hw.
extern "C" __global__ void bn_bwd_dx(const float* __restrict__ x, const float* __restrict__ dy,
                                     const float* __restrict__ stats, const float* __restrict__ gamma,
                                     const float* __restrict__ sums, float* __restrict__ dx,
                                     int c, int hw, long long total, float m, float eps) {
    long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += step) {
        int ch = (int)((i / hw) % c);
        float inv = 1.0f / sqrtf(stats[c + ch] + eps);
        float xhat = (x[i] - stats[ch]) * inv;
        dx[i] = gamma[ch] * inv * (dy[i] - sums[c + ch] / m - xhat * (sums[ch] / m));
    }
}
"#;

fn ptx() -> Result<&'static str> {
    static PTX: OnceLock<std::result::Result<String, String>> = OnceLock::new();
    PTX.get_or_init(|| {
        nvrtc::compile_ptx(SOURCE)
            .map(|p| p.to_src())
            .map_err(|e| format!("compiling octet's fused-op kernels with NVRTC: {e:?}"))
    })
    .as_deref()
    .map_err(|e| candle_core::Error::Msg(e.clone()))
}

/// The kernel `name`, loaded on `dev` (candle caches the module per device), and the
/// device's stream to launch it on.
pub(crate) fn func(dev: &CudaDevice, name: &str) -> Result<(Arc<CudaStream>, CudaFunction)> {
    let f = dev.get_or_load_custom_func(name, MODULE, ptx()?)?;
    Ok((dev.cuda_stream(), f.into_cuda_function()))
}

/// One block of `REDUCE_THREADS` per channel.
pub(crate) fn per_channel(c: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (c as u32, 1, 1),
        block_dim: (REDUCE_THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// A grid-stride launch over `n` elements: enough blocks to fill the GPU, not one per
/// element.
pub(crate) fn elementwise(n: usize) -> LaunchConfig {
    const THREADS: u32 = 256;
    let blocks = n.div_ceil(THREADS as usize).clamp(1, 65_535) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}
