// octet int8 kernels for NVRTC (self-contained: no #include). Bit-exact with the scalar CPU
// kernels of octet-runtime (kernels/scalar) and the one requantization of requant.rs:
//   v = ((acc · M0 + 2^(n−1)) >> n) + z_out   (64-bit, arithmetic shift: rounds half up)
//   out = clamp(clamp(clamp(v, act_min, ·), ·, act_max), −128, 127)
// Activations are batch-major HWC int8: image b of a tensor of `len` bytes starts at b·len.
// Per-output-channel constants are precomputed on upload as int4 {bias, M0, n, 0}, with
// n = 31 − shift already clamped to [1, 62].

typedef signed char i8;
typedef unsigned char u8;
typedef long long i64;

// The model validator guarantees −128 ≤ act_min ≤ act_max ≤ 127, so the CPU's final clamp to
// [−128, 127] never changes the value: two clamps, not four.
__device__ __forceinline__ i8 clamp_out(i64 v, int act_min, int act_max) {
    v = v < (i64)act_min ? (i64)act_min : v;
    v = v > (i64)act_max ? (i64)act_max : v;
    return (i8)v;
}

// clamp(s + zout, act_min, act_max) for a 64-bit s, in 32-bit arithmetic: saturate s to the
// int32 range (cvt.sat), clamp it to [act_min − zout, act_max − zout] (both in int32 range:
// zero points and clamps are int8), then add zout. Adding a constant commutes with clamping,
// so the value is that of the 64-bit clamp.
__device__ __forceinline__ i8 clamp_shifted(i64 s, int zout, int act_min, int act_max) {
    int v;
    asm("cvt.sat.s32.s64 %0, %1;" : "=r"(v) : "l"(s));
    v = max(v, act_min - zout);
    v = min(v, act_max - zout);
    return (i8)(v + zout);
}

// `sum` is Σ q·w (wrapping i32); the CPU starts from the bias instead: the same value mod 2^32.
__device__ __forceinline__ i8 finish(int sum, int4 r, int zout, int act_min, int act_max) {
    const int acc = (int)((unsigned)sum + (unsigned)r.x);
    const i64 s = ((i64)acc * r.y + (1LL << (r.z - 1))) >> r.z;
    return clamp_shifted(s, zout, act_min, act_max);
}

__device__ __forceinline__ int pack4(int b0, int b1, int b2, int b3) {
    return (b0 & 0xff) | ((b1 & 0xff) << 8) | ((b2 & 0xff) << 16) | ((unsigned)(b3 & 0xff) << 24);
}

// The four int8 at p as one word, those at or past the first `left` zero (the last word of a
// row whose length is not a multiple of 4).
__device__ __forceinline__ int load4_partial(const i8* p, int left) {
    return pack4(p[0], 1 < left ? p[1] : 0, 2 < left ? p[2] : 0, 3 < left ? p[3] : 0);
}

// u8 pixels, planar C×H×W per image → i8 HWC (q = pixel − 128, i.e. pixel ^ 0x80).
extern "C" __global__ void input_u8_to_hwc(const u8* __restrict__ px, i8* __restrict__ x,
                                           i64 total, int c, int hw) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (i64)gridDim.x * blockDim.x) {
        const int ch = (int)(i % c);
        const i64 t = i / c;             // b·hw + p
        const int p = (int)(t % hw);
        const i64 b = t / hw;
        x[i] = (i8)(px[(b * c + ch) * hw + p] ^ 0x80);
    }
}

// conv2d (and fully_connected as a 1×1 conv over a 1×1×K input) as an implicit GEMM:
// M = batch·Ho·Wo output pixels, N = C_out, K = kh·kw·cin4 (cin4 = C_in rounded up to 4; the
// packed weights [C_out][kh][kw][cin4] are zero in the padding). A 64×64 output tile per block
// of 256 threads, 4×4 per thread, K in steps of 8 words (32 int8) through shared memory,
// int8×int8→int32 with __dp4a. Padded taps read the per-input-channel pad value.
#define BM 64
#define BN 64
#define BKW 8

extern "C" __global__ void __launch_bounds__(256)
conv2d_dp4a(const i8* __restrict__ x, i8* __restrict__ y, const int* __restrict__ w,
            const int4* __restrict__ rq, const i8* __restrict__ padv,
            int M, int H, int W, int cin, int Ho, int Wo, int cout,
            int kh, int kw, int stride, int pad, int cin_words,
            int zout, int act_min, int act_max) {
    __shared__ int As[BKW][BM];
    __shared__ int Bs[BKW][BN];
    const int tid = threadIdx.x;
    const int tx = tid & 15, ty = tid >> 4;
    const int m0 = blockIdx.x * BM;
    const int n0 = blockIdx.y * BN;
    const int kwords = kh * kw * cin_words;
    const bool aligned = (cin & 3) == 0;

    // This thread's A row (one output pixel) and its two K slots.
    const int am = tid & (BM - 1);
    const int ak = tid >> 6;  // 0..3, and ak + 4
    const int gm = m0 + am;
    const bool row_ok = gm < M;
    int b = 0, oy = 0, ox = 0;
    if (row_ok) {
        ox = gm % Wo;
        const int t = gm / Wo;
        oy = t % Ho;
        b = t / Ho;
    }
    const int iy0 = oy * stride - pad, ix0 = ox * stride - pad;
    // This thread's two B slots: rows bn, bn + 32 of the tile, word bk.
    const int bk = tid & (BKW - 1);
    const int bn = tid >> 3;  // 0..31

    int acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = 0;

    for (int k0 = 0; k0 < kwords; k0 += BKW) {
#pragma unroll
        for (int s = 0; s < 2; ++s) {
            const int kk = ak + 4 * s;
            const int gk = k0 + kk;
            int v = 0;
            if (row_ok && gk < kwords) {
                const int tap = gk / cin_words;
                const int c = (gk - tap * cin_words) * 4;
                const int ky = tap / kw, kx = tap - (tap / kw) * kw;
                const int iy = iy0 + ky, ix = ix0 + kx;
                if (iy >= 0 && iy < H && ix >= 0 && ix < W) {
                    const i64 base = (((i64)b * H + iy) * W + ix) * cin + c;
                    v = aligned ? *(const int*)(x + base) : load4_partial(x + base, cin - c);
                } else {
                    v = load4_partial(padv + c, cin - c);
                }
            }
            As[kk][am] = v;
        }
#pragma unroll
        for (int s = 0; s < 2; ++s) {
            const int nn = bn + 32 * s;
            const int gn = n0 + nn;
            const int gk = k0 + bk;
            Bs[bk][nn] = (gn < cout && gk < kwords) ? w[(i64)gn * kwords + gk] : 0;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BKW; ++kk) {
            int a[4], bw[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) a[i] = As[kk][ty + 16 * i];
#pragma unroll
            for (int j = 0; j < 4; ++j) bw[j] = Bs[kk][tx + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] = __dp4a(a[i], bw[j], acc[i][j]);
        }
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int m = m0 + ty + 16 * i;
        if (m >= M) continue;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int n = n0 + tx + 16 * j;
            if (n < cout) y[(i64)m * cout + n] = finish(acc[i][j], rq[n], zout, act_min, act_max);
        }
    }
}

// fully_connected for small batches: one warp per (image, output), __dp4a over the packed
// weight row [N][k_words], warp-shuffle reduction.
extern "C" __global__ void fc_warp(const i8* __restrict__ x, i8* __restrict__ y,
                                   const int* __restrict__ w, const int4* __restrict__ rq,
                                   int batch, int k, int k_words, int n,
                                   int zout, int act_min, int act_max) {
    const i64 warp = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (warp >= (i64)batch * n) return;  // uniform per warp
    const int o = (int)(warp % n);
    const i64 b = warp / n;
    const i8* xr = x + b * k;
    const int* wr = w + (i64)o * k_words;
    const bool aligned = (k & 3) == 0;
    int acc = 0;
    for (int i = lane; i < k_words; i += 32) {
        const int v = aligned ? ((const int*)xr)[i] : load4_partial(xr + 4 * i, k - 4 * i);
        acc = __dp4a(v, wr[i], acc);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, off);
    if (lane == 0) y[b * n + o] = finish(acc, rq[o], zout, act_min, act_max);
}

// The input byte of the first tap of pool output element i (batch-major HWC: channel ch of
// pixel (ox, oy) of image b): channel ch at (oy·stride, ox·stride); tap (ky, kx) lies
// (ky·W + kx)·c bytes further.
__device__ __forceinline__ const i8* pool_window(const i8* x, i64 i, int H, int W, int c,
                                                 int Ho, int Wo, int stride) {
    const int ch = (int)(i % c);
    i64 t = i / c;
    const int ox = (int)(t % Wo);
    t /= Wo;
    const int oy = (int)(t % Ho);
    const i64 b = t / Ho;
    return x + ((b * H + oy * stride) * W + (i64)ox * stride) * c + ch;
}

// max_pool: one thread per output value; max over the window (from −128), then the clamp.
extern "C" __global__ void max_pool(const i8* __restrict__ x, i8* __restrict__ y, i64 total,
                                    int H, int W, int c, int Ho, int Wo, int kh, int kw,
                                    int stride, int act_min, int act_max) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (i64)gridDim.x * blockDim.x) {
        const i8* win = pool_window(x, i, H, W, c, Ho, Wo, stride);
        int m = -128;
        for (int ky = 0; ky < kh; ++ky) {
            const i8* row = win + (i64)ky * W * c;
            for (int kx = 0; kx < kw; ++kx) {
                const int v = row[(i64)kx * c];
                m = v > m ? v : m;
            }
        }
        y[i] = clamp_out(m, act_min, act_max);
    }
}

// avg_pool: acc = Σ (q − z_in) over the window, then requant(acc) + z_out and the clamp.
extern "C" __global__ void avg_pool(const i8* __restrict__ x, i8* __restrict__ y, i64 total,
                                    int H, int W, int c, int Ho, int Wo, int kh, int kw,
                                    int stride, int zin, int m0, int n, int zout,
                                    int act_min, int act_max) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (i64)gridDim.x * blockDim.x) {
        const i8* win = pool_window(x, i, H, W, c, Ho, Wo, stride);
        int acc = 0;
        for (int ky = 0; ky < kh; ++ky) {
            const i8* row = win + (i64)ky * W * c;
            for (int kx = 0; kx < kw; ++kx) acc += (int)row[(i64)kx * c] - zin;
        }
        const i64 v = (((i64)acc * (i64)m0 + (1LL << (n - 1))) >> n) + (i64)zout;
        y[i] = clamp_out(v, act_min, act_max);
    }
}

// Requantizing residual add: t = (q0 − z0)·m0 + (q1 − z1)·m1 in i64,
// out = ((t + 2^(n−1)) >> n) + z_out, clamped.
__device__ __forceinline__ unsigned add_byte(unsigned wa, unsigned wb, int k, int z0, int m0,
                                             int z1, int m1, int n, int zout, int act_min,
                                             int act_max) {
    const int qa = (int)(i8)(wa >> (8 * k)), qb = (int)(i8)(wb >> (8 * k));
    // q − z fits 32 bits: two 32×32→64 multiplies instead of 64×64 ones, same values.
    const i64 t = (i64)(qa - z0) * m0 + (i64)(qb - z1) * m1;
    return (unsigned)(u8)clamp_shifted((t + (1LL << (n - 1))) >> n, zout, act_min, act_max)
           << (8 * k);
}

// 16 bytes per thread and step (the regions are 256-byte aligned), the last total % 16 bytes
// one by one: the add is a pure stream, and byte-wide accesses left it at a fifth of the
// memory bandwidth.
extern "C" __global__ void add_requant(const i8* __restrict__ a, const i8* __restrict__ b,
                                       i8* __restrict__ y, i64 total, int z0, int m0, int z1,
                                       int m1, int n, int zout, int act_min, int act_max) {
    const i64 vecs = total >> 4;
    const i64 step = (i64)gridDim.x * blockDim.x;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < vecs; i += step) {
        const uint4 va = ((const uint4*)a)[i], vb = ((const uint4*)b)[i];
        unsigned r[4] = {0, 0, 0, 0};
        const unsigned wa[4] = {va.x, va.y, va.z, va.w}, wb[4] = {vb.x, vb.y, vb.z, vb.w};
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int k = 0; k < 4; ++k)
                r[j] |= add_byte(wa[j], wb[j], k, z0, m0, z1, m1, n, zout, act_min, act_max);
        ((uint4*)y)[i] = make_uint4(r[0], r[1], r[2], r[3]);
    }
    for (i64 i = (vecs << 4) + (i64)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step)
        y[i] = (i8)add_byte((unsigned)(u8)a[i], (unsigned)(u8)b[i], 0, z0, m0, z1, m1, n, zout,
                            act_min, act_max);
}
