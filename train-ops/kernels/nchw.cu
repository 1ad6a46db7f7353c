
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

// ReLU6 forward, min(max(x, 0), 6), and backward from the input (dy where 0 < x < 6, PyTorch's
// hardtanh backward); n counts float4s when vec.
__device__ __forceinline__ float relu6_y(float x) { return fminf(fmaxf(x, 0.0f), 6.0f); }
__device__ __forceinline__ float relu6_dx(float x, float g) {
    return x > 0.0f && x < 6.0f ? g : 0.0f;
}

extern "C" __global__ void relu6_fwd(const float* __restrict__ x, float* __restrict__ y, int n,
                                     int vec) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        if (vec) {
            float4 v = reinterpret_cast<const float4*>(x)[i];
            v.x = relu6_y(v.x);
            v.y = relu6_y(v.y);
            v.z = relu6_y(v.z);
            v.w = relu6_y(v.w);
            reinterpret_cast<float4*>(y)[i] = v;
        } else {
            y[i] = relu6_y(x[i]);
        }
    }
}

extern "C" __global__ void relu6_bwd(const float* __restrict__ x, const float* __restrict__ dy,
                                     float* __restrict__ dx, int n, int vec) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        if (vec) {
            float4 v = reinterpret_cast<const float4*>(x)[i];
            float4 g = reinterpret_cast<const float4*>(dy)[i];
            g.x = relu6_dx(v.x, g.x);
            g.y = relu6_dx(v.y, g.y);
            g.z = relu6_dx(v.z, g.z);
            g.w = relu6_dx(v.w, g.w);
            reinterpret_cast<float4*>(dx)[i] = g;
        } else {
            dx[i] = relu6_dx(x[i], dy[i]);
        }
    }
}
