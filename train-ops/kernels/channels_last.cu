
typedef unsigned short bf16;

__device__ __forceinline__ float from_bf16(bf16 v) { return __uint_as_float(((unsigned)v) << 16); }

// Round to nearest even, NaN kept a (quiet) NaN: what half::bf16::from_f32 and PyTorch do.
__device__ __forceinline__ bf16 to_bf16(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (bf16)(u >> 16);
}

// V consecutive bf16 values as floats; V is 8 (one 16-byte load, p 16-byte aligned) or 1.
template <int V> __device__ __forceinline__ void load(const bf16* __restrict__ p, float* v) {
    if (V == 8) {
        uint4 u = *reinterpret_cast<const uint4*>(p);
        unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            v[2 * i] = __uint_as_float(w[i] << 16);
            v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
        }
    } else {
        v[0] = from_bf16(p[0]);
    }
}

template <int V> __device__ __forceinline__ void store(bf16* __restrict__ p, const float* v) {
    if (V == 8) {
        unsigned w[4];
#pragma unroll
        for (int i = 0; i < 4; i++)
            w[i] = (unsigned)to_bf16(v[2 * i]) | ((unsigned)to_bf16(v[2 * i + 1]) << 16);
        *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
    } else {
        p[0] = to_bf16(v[0]);
    }
}

// The reductions see an (m, c) row-major tensor (m = n*h*w rows). A block takes the rows
// [split*chunk, (split+1)*chunk) of a tile of channel groups (V channels each): `tpr`
// threads per row, one group each, `rows` rows at a time (tpr * rows <= blockDim.x). Block
// (tile, split) is blockIdx.x = tile * splits + split.
struct Tile {
    int g, r0, rows, tpr, split, splits, start, end;
    bool active;
    __device__ Tile(int groups, int m, int chunk, int splits_) {
        splits = splits_;
        int tile = blockIdx.x / splits;
        split = blockIdx.x - tile * splits;
        tpr = min(groups, (int)blockDim.x);
        rows = blockDim.x / tpr;
        g = tile * tpr + (int)threadIdx.x % tpr;
        r0 = threadIdx.x / tpr;
        active = r0 < rows && g < groups;
        start = split * chunk;
        end = min(start + chunk, m);
    }
};

struct Moments {
    float n, mean, m2;
};

// Chan, Golub and LeVeque's pairwise merge (as in the NCHW kernels).
__device__ __forceinline__ Moments merge(Moments a, Moments b) {
    if (b.n == 0.0f) return a;
    if (a.n == 0.0f) return b;
    Moments r;
    r.n = a.n + b.n;
    float fb = b.n / r.n;
    float d = b.mean - a.mean;
    r.mean = a.mean + d * fb;
    r.m2 = a.m2 + b.m2 + d * d * (a.n * fb);
    return r;
}

// Per-(block, channel) moments; part holds 3 floats per (channel, split), channel-major, as
// bn_stats_final reads them (the count as an int's bits). Each thread sums (v - shift) and
// its square over its rows, shift being its first row's value (no division per row, and no
// cancellation for data far from zero); the block's threads are then merged with Chan's
// formula over a fixed tree (deterministic). A Welford update per row and a serial merge
// left this kernel at a fifth of the memory bandwidth.
template <int V>
__device__ void stats_partial(const bf16* __restrict__ x, float* __restrict__ part, int c,
                              int m, int chunk, int splits) {
    __shared__ Moments sh[256 * 8];
    Tile t(c / V, m, chunk, splits);
    float shift[V], s1[V], s2[V], n = 0.0f;
#pragma unroll
    for (int i = 0; i < V; i++) shift[i] = s1[i] = s2[i] = 0.0f;
    long long r = t.start + t.r0;
    if (t.active && r < t.end) {
        const bf16* base = x + (long long)t.g * V;
        load<V>(base + r * c, shift);
        // Four rows' loads in flight before their sums.
        for (; r + 3LL * t.rows < t.end; r += 4LL * t.rows) {
            float v[4][V];
#pragma unroll
            for (int u = 0; u < 4; u++) load<V>(base + (r + u * t.rows) * c, v[u]);
#pragma unroll
            for (int u = 0; u < 4; u++)
#pragma unroll
                for (int i = 0; i < V; i++) {
                    float d = v[u][i] - shift[i];
                    s1[i] += d;
                    s2[i] += d * d;
                }
            n += 4.0f;
        }
        for (; r < t.end; r += t.rows) {
            float v[V];
            load<V>(base + r * c, v);
#pragma unroll
            for (int i = 0; i < V; i++) {
                float d = v[i] - shift[i];
                s1[i] += d;
                s2[i] += d * d;
            }
            n += 1.0f;
        }
    }
    Moments* own = sh + threadIdx.x * V;
#pragma unroll
    for (int i = 0; i < V; i++) {
        float d = n > 0.0f ? s1[i] / n : 0.0f;
        own[i].n = n;
        own[i].mean = shift[i] + d;
        own[i].m2 = fmaxf(s2[i] - s1[i] * d, 0.0f);
    }
    __syncthreads();
    for (int s = 1; s < t.rows; s *= 2) {
        if (t.active && t.r0 % (2 * s) == 0 && t.r0 + s < t.rows) {
            const Moments* other = own + s * t.tpr * V;
#pragma unroll
            for (int i = 0; i < V; i++) own[i] = merge(own[i], other[i]);
        }
        __syncthreads();
    }
    if (t.active && t.r0 == 0) {
#pragma unroll
        for (int i = 0; i < V; i++) {
            long long at = 3 * ((long long)(t.g * V + i) * splits + t.split);
            part[at] = __int_as_float((int)own[i].n);
            part[at + 1] = own[i].mean;
            part[at + 2] = own[i].m2;
        }
    }
}

extern "C" __global__ void cl_stats_partial(const bf16* __restrict__ x, float* __restrict__ part,
                                            int c, int m, int chunk, int splits, int vec) {
    if (vec) stats_partial<8>(x, part, c, m, chunk, splits);
    else stats_partial<1>(x, part, c, m, chunk, splits);
}

// Per-channel coefficients of the element-wise kernels sit in a shared-memory table filled
// once per block (up to TABLE_CH channels; beyond, each element computes its own): the
// element loops then do multiply-adds only. Computed per element (a square root and
// divisions) they made the kernels ALU-bound; kept per thread in registers they cut
// occupancy.
#define TABLE_CH 1024

// V consecutive floats of a table (16-byte aligned when V is 8).
template <int V> __device__ __forceinline__ void coef(const float* t, float* out) {
    if (V == 8) {
        const uint4* p = reinterpret_cast<const uint4*>(t);
        uint4 u[2] = {p[0], p[1]};
#pragma unroll
        for (int j = 0; j < 2; j++) {
            out[4 * j] = __uint_as_float(u[j].x);
            out[4 * j + 1] = __uint_as_float(u[j].y);
            out[4 * j + 2] = __uint_as_float(u[j].z);
            out[4 * j + 3] = __uint_as_float(u[j].w);
        }
    } else {
        out[0] = t[0];
    }
}

// Channel of element vector k's first value, stepped along a grid-stride loop without a
// 64-bit division per step.
struct Channel {
    int ch, step, c;
    __device__ Channel(long long k, long long stride, int V, int c_)
        : ch((int)((k * V) % c_)), step((int)((stride * V) % c_)), c(c_) {}
    __device__ __forceinline__ void next() {
        ch += step;
        if (ch >= c) ch -= c;
    }
};

// a = gamma / sqrt(var + eps).
__device__ __forceinline__ float scale_of(const float* stats, const float* gamma, int c, int ch,
                                          float eps) {
    return gamma[ch] * (1.0f / sqrtf(stats[c + ch] + eps));
}

// The fused rectifier, by the flag `act` (Activation::code): 0 none, 1 ReLU, 2 ReLU6.
__device__ __forceinline__ float rectify(float r, int act) {
    if (act == 0) return r;
    r = fmaxf(r, 0.0f);
    return act == 2 ? fminf(r, 6.0f) : r;
}

// Whether the gradient passes where the rectifier's output is o: strictly inside its linear
// range (PyTorch's threshold and hardtanh backward).
__device__ __forceinline__ bool passes(float o, int act) {
    return o > 0.0f && (act != 2 || o < 6.0f);
}

// y = (x - mean) * a + beta, then the rectifier act.
template <int V>
__device__ void apply(const bf16* __restrict__ x, const float* __restrict__ stats,
                      const float* __restrict__ gamma, const float* __restrict__ beta,
                      bf16* __restrict__ y, int c, long long items, float eps, int act) {
    __shared__ __align__(16) float tab[3 * TABLE_CH];
    const bool tabled = c <= TABLE_CH;
    if (tabled)
        for (int ch = threadIdx.x; ch < c; ch += blockDim.x) {
            tab[ch] = stats[ch];
            tab[TABLE_CH + ch] = scale_of(stats, gamma, c, ch, eps);
            tab[2 * TABLE_CH + ch] = beta[ch];
        }
    __syncthreads();
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    for (Channel ch(k, stride, V, c); k < items; k += stride, ch.next()) {
        float mean[V], a[V], b[V];
        if (tabled) {
            coef<V>(tab + ch.ch, mean);
            coef<V>(tab + TABLE_CH + ch.ch, a);
            coef<V>(tab + 2 * TABLE_CH + ch.ch, b);
        } else {
#pragma unroll
            for (int i = 0; i < V; i++) {
                mean[i] = stats[ch.ch + i];
                a[i] = scale_of(stats, gamma, c, ch.ch + i, eps);
                b[i] = beta[ch.ch + i];
            }
        }
        float v[V];
        load<V>(x + k * V, v);
#pragma unroll
        for (int i = 0; i < V; i++) {
            float r = (v[i] - mean[i]) * a[i] + b[i];
            v[i] = rectify(r, act);
        }
        store<V>(y + k * V, v);
    }
}

extern "C" __global__ void cl_apply(const bf16* __restrict__ x, const float* __restrict__ stats,
                                    const float* __restrict__ gamma, const float* __restrict__ beta,
                                    bf16* __restrict__ y, int c, long long items, float eps,
                                    int act, int vec) {
    if (vec) apply<8>(x, stats, gamma, beta, y, c, items, eps, act);
    else apply<1>(x, stats, gamma, beta, y, c, items, eps, act);
}

// The gradient reaching the normalisation: dy, or dy where the fused rectifier passes it.
template <int V>
__device__ __forceinline__ void grad_in(const bf16* __restrict__ dy, const bf16* __restrict__ y,
                                        long long at, int act, float* g) {
    load<V>(dy + at, g);
    if (act) {
        float o[V];
        load<V>(y + at, o);
#pragma unroll
        for (int i = 0; i < V; i++) g[i] = passes(o[i], act) ? g[i] : 0.0f;
    }
}

// Per-(block, channel) [sum(g * (x - mean)), sum(g)]; 2 floats per (channel, split),
// channel-major, as bn_bwd_final reads them.
template <int V>
__device__ void bwd_partial(const bf16* __restrict__ x, const bf16* __restrict__ dy,
                            const bf16* __restrict__ y, const float* __restrict__ stats,
                            float* __restrict__ part, int c, int m, int chunk, int splits,
                            int act) {
    __shared__ float sh[2][256 * 8];
    Tile t(c / V, m, chunk, splits);
    float sdy[V], sdyx[V], mean[V];
#pragma unroll
    for (int i = 0; i < V; i++) {
        sdy[i] = sdyx[i] = 0.0f;
        mean[i] = t.active ? stats[t.g * V + i] : 0.0f;
    }
    if (t.active) {
        for (long long r = t.start + t.r0; r < t.end; r += t.rows) {
            long long at = r * c + (long long)t.g * V;
            float v[V], g[V];
            load<V>(x + at, v);
            grad_in<V>(dy, y, at, act, g);
#pragma unroll
            for (int i = 0; i < V; i++) {
                sdy[i] += g[i];
                sdyx[i] += g[i] * (v[i] - mean[i]);
            }
        }
    }
    // The block's threads summed over a fixed tree (deterministic), all channels at once.
    float* a = sh[0] + threadIdx.x * V;
    float* b = sh[1] + threadIdx.x * V;
#pragma unroll
    for (int i = 0; i < V; i++) {
        a[i] = sdyx[i];
        b[i] = sdy[i];
    }
    __syncthreads();
    for (int s = 1; s < t.rows; s *= 2) {
        if (t.active && t.r0 % (2 * s) == 0 && t.r0 + s < t.rows) {
            int o = s * t.tpr * V;
#pragma unroll
            for (int i = 0; i < V; i++) {
                a[i] += a[o + i];
                b[i] += b[o + i];
            }
        }
        __syncthreads();
    }
    if (t.active && t.r0 == 0) {
#pragma unroll
        for (int i = 0; i < V; i++) {
            long long at = 2 * ((long long)(t.g * V + i) * splits + t.split);
            part[at] = a[i];
            part[at + 1] = b[i];
        }
    }
}

extern "C" __global__ void cl_bwd_partial(const bf16* __restrict__ x, const bf16* __restrict__ dy,
                                          const bf16* __restrict__ y,
                                          const float* __restrict__ stats, float* __restrict__ part,
                                          int c, int m, int chunk, int splits, int act, int vec) {
    if (vec) bwd_partial<8>(x, dy, y, stats, part, c, m, chunk, splits, act);
    else bwd_partial<1>(x, dy, y, stats, part, c, m, chunk, splits, act);
}

// dx = gamma * inv * (g - sum(g) / m - xhat * sum(g * xhat) / m)
//    = a * (g - sg) - (x - mean) * q, with a = gamma * inv, sg = sum(g) / m and
//      q = a * inv * sum(g * xhat) / m, per channel.
struct DxCoef {
    float mean, a, sg, q;
};

__device__ __forceinline__ DxCoef dx_coef(const float* stats, const float* gamma,
                                          const float* sums, int c, int ch, float m, float eps) {
    float inv = 1.0f / sqrtf(stats[c + ch] + eps);
    float a = gamma[ch] * inv;
    return {stats[ch], a, sums[c + ch] / m, a * inv * (sums[ch] / m)};
}

template <int V>
__device__ void bwd_dx(const bf16* __restrict__ x, const bf16* __restrict__ dy,
                       const bf16* __restrict__ y, const float* __restrict__ stats,
                       const float* __restrict__ gamma, const float* __restrict__ sums,
                       bf16* __restrict__ dx, int c, long long items, float m, float eps,
                       int act) {
    __shared__ __align__(16) float tab[4 * TABLE_CH];
    const bool tabled = c <= TABLE_CH;
    if (tabled)
        for (int ch = threadIdx.x; ch < c; ch += blockDim.x) {
            DxCoef q = dx_coef(stats, gamma, sums, c, ch, m, eps);
            tab[ch] = q.mean;
            tab[TABLE_CH + ch] = q.a;
            tab[2 * TABLE_CH + ch] = q.sg;
            tab[3 * TABLE_CH + ch] = q.q;
        }
    __syncthreads();
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    for (Channel ch(k, stride, V, c); k < items; k += stride, ch.next()) {
        float mean[V], a[V], sg[V], q[V];
        if (tabled) {
            coef<V>(tab + ch.ch, mean);
            coef<V>(tab + TABLE_CH + ch.ch, a);
            coef<V>(tab + 2 * TABLE_CH + ch.ch, sg);
            coef<V>(tab + 3 * TABLE_CH + ch.ch, q);
        } else {
#pragma unroll
            for (int i = 0; i < V; i++) {
                DxCoef d = dx_coef(stats, gamma, sums, c, ch.ch + i, m, eps);
                mean[i] = d.mean;
                a[i] = d.a;
                sg[i] = d.sg;
                q[i] = d.q;
            }
        }
        float v[V], g[V];
        load<V>(x + k * V, v);
        grad_in<V>(dy, y, k * V, act, g);
#pragma unroll
        for (int i = 0; i < V; i++) v[i] = a[i] * (g[i] - sg[i]) - (v[i] - mean[i]) * q[i];
        store<V>(dx + k * V, v);
    }
}

extern "C" __global__ void cl_bwd_dx(const bf16* __restrict__ x, const bf16* __restrict__ dy,
                                     const bf16* __restrict__ y, const float* __restrict__ stats,
                                     const float* __restrict__ gamma, const float* __restrict__ sums,
                                     bf16* __restrict__ dx, int c, long long items, float m,
                                     float eps, int act, int vec) {
    if (vec) bwd_dx<8>(x, dy, y, stats, gamma, sums, dx, c, items, m, eps, act);
    else bwd_dx<1>(x, dy, y, stats, gamma, sums, dx, c, items, m, eps, act);
}

// y = op(x) element-wise over a bf16 tensor; items counts 8-value vectors when vec.
template <int V, class Op>
__device__ void pointwise1(const bf16* __restrict__ x, bf16* __restrict__ y, long long items,
                           Op op) {
    for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < items;
         k += (long long)gridDim.x * blockDim.x) {
        float v[V];
        load<V>(x + k * V, v);
#pragma unroll
        for (int i = 0; i < V; i++) v[i] = op(v[i]);
        store<V>(y + k * V, v);
    }
}

// candle's bf16 ReLU: x where x >= 0 (so -0 stays -0), else +0 (NaN included); its gradient
// is ReluBwd's.
struct Relu {
    __device__ float operator()(float v) const { return v >= 0.0f ? v : 0.0f; }
};

// ReLU6, min(max(x, 0), 6) (exact in bf16: every result is x, 0 or 6).
struct Relu6 {
    __device__ float operator()(float v) const { return rectify(v, 2); }
};

// out = op(a, b) element-wise over two bf16 tensors of one length.
template <int V, class Op>
__device__ void pointwise2(const bf16* __restrict__ a, const bf16* __restrict__ b,
                           bf16* __restrict__ out, long long items, Op op) {
    for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < items;
         k += (long long)gridDim.x * blockDim.x) {
        float u[V], w[V];
        load<V>(a + k * V, u);
        load<V>(b + k * V, w);
#pragma unroll
        for (int i = 0; i < V; i++) u[i] = op(u[i], w[i]);
        store<V>(out + k * V, u);
    }
}

// candle's ReLU gradient: dy where x >= 0.
struct ReluBwd {
    __device__ float operator()(float x, float g) const { return x >= 0.0f ? g : 0.0f; }
};

// ReLU6's gradient from its input: dy where 0 < x < 6 (PyTorch's hardtanh backward).
struct Relu6Bwd {
    __device__ float operator()(float x, float g) const { return passes(x, 2) ? g : 0.0f; }
};

// A residual block's end, max(a + b, 0): the sum rounded to bf16 first, as candle's add then
// ReLU give it, in one pass instead of two (and a third for the mask).
struct AddRelu {
    __device__ float operator()(float u, float w) const {
        float s = from_bf16(to_bf16(u + w));
        return s >= 0.0f ? s : 0.0f;
    }
};

// A sum of two gradients (candle's add, one rounding).
struct Add {
    __device__ float operator()(float u, float w) const { return u + w; }
};

// Its gradient from the output: dy where y > 0 (PyTorch's threshold backward).
struct ReluOutBwd {
    __device__ float operator()(float y, float g) const { return y > 0.0f ? g : 0.0f; }
};

extern "C" __global__ void relu_fwd_bf16(const bf16* __restrict__ x, bf16* __restrict__ y,
                                         long long items, int vec) {
    if (vec) pointwise1<8>(x, y, items, Relu());
    else pointwise1<1>(x, y, items, Relu());
}

extern "C" __global__ void relu6_fwd_bf16(const bf16* __restrict__ x, bf16* __restrict__ y,
                                          long long items, int vec) {
    if (vec) pointwise1<8>(x, y, items, Relu6());
    else pointwise1<1>(x, y, items, Relu6());
}

// One kernel per element-wise op of two bf16 tensors: `out = Op(a, b)`.
#define POINTWISE2_KERNEL(name, Op)                                                       \
    extern "C" __global__ void name(const bf16* __restrict__ a, const bf16* __restrict__ b, \
                                    bf16* __restrict__ out, long long items, int vec) {     \
        if (vec) pointwise2<8>(a, b, out, items, Op());                                     \
        else pointwise2<1>(a, b, out, items, Op());                                         \
    }

POINTWISE2_KERNEL(relu_bwd_bf16, ReluBwd)      // (x, dy) -> dx
POINTWISE2_KERNEL(relu6_bwd_bf16, Relu6Bwd)    // (x, dy) -> dx
POINTWISE2_KERNEL(add_relu_bf16, AddRelu)      // (a, b) -> y
POINTWISE2_KERNEL(add_bf16, Add)               // (a, b) -> y
POINTWISE2_KERNEL(relu_out_bwd_bf16, ReluOutBwd)  // (y, dy) -> dx

// f32 (k, c, rs) -> bf16 (k, rs, c): the weight in cuDNN's NHWC filter layout. One thread
// per output element (writes coalesced; weights are small).
extern "C" __global__ void kcrs_to_krsc_bf16(const float* __restrict__ w, bf16* __restrict__ out,
                                             int k, int c, int rs) {
    long long total = (long long)k * c * rs;
    for (long long o = blockIdx.x * (long long)blockDim.x + threadIdx.x; o < total;
         o += (long long)gridDim.x * blockDim.x) {
        int ci = (int)(o % c);
        long long rest = o / c;
        int p = (int)(rest % rs);
        long long ki = rest / rs;
        out[o] = to_bf16(w[(ki * c + ci) * rs + p]);
    }
}

// The gradient back: bf16 (k, rs, c) -> f32 (k, c, rs), exact.
extern "C" __global__ void krsc_bf16_to_kcrs(const bf16* __restrict__ g, float* __restrict__ out,
                                             int k, int c, int rs) {
    long long total = (long long)k * c * rs;
    for (long long o = blockIdx.x * (long long)blockDim.x + threadIdx.x; o < total;
         o += (long long)gridDim.x * blockDim.x) {
        int p = (int)(o % rs);
        long long rest = o / rs;
        int ci = (int)(rest % c);
        long long ki = rest / c;
        out[o] = from_bf16(g[(ki * rs + p) * c + ci]);
    }
}
