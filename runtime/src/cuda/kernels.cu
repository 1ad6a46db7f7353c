// octet int8 kernels for NVRTC (self-contained: no #include). Bit-exact with the scalar CPU
// kernels of octet-runtime (kernels/scalar) and the requantization of requant.rs, in the
// model's rounding, chosen when the source is compiled (OCTET_ROUNDING, one PTX per rounding):
//   1 single (octet's):  requant(acc) = (acc · M0 + 2^(n−1)) >> n   (64-bit, rounds half up)
//   2 double (TFLite's): RoundingDivideByPOT(SaturatingRoundingDoublingHighMul(acc · 2^ls, M0), rs)
//                        with shift = 31 − n, ls = max(shift, 0), rs = max(−shift, 0)
//   out = clamp(requant(acc) + z_out, act_min, act_max)
// Activations are batch-major HWC int8: image b of a tensor of `len` bytes starts at b·len.
// Per-output-channel constants are precomputed on upload as int4 {bias, M0, n, 0}, with
// n = 31 − shift already clamped to [1, 62].

#ifndef OCTET_ROUNDING
#define OCTET_ROUNDING 1
#endif

typedef signed char i8;
typedef unsigned char u8;
typedef long long i64;

#define I32_MIN (-2147483647 - 1)
#define I32_MAX 2147483647

// Additions and shifts that wrap in 32 bits, as the CPU's wrapping_add / TFLite's compiled code.
__device__ __forceinline__ int wadd(int a, int b) { return (int)((unsigned)a + (unsigned)b); }
__device__ __forceinline__ int wsub(int a, int b) { return (int)((unsigned)a - (unsigned)b); }
__device__ __forceinline__ int wshl(int a, int s) { return (int)((unsigned)a << s); }

// gemmlowp's SaturatingRoundingDoublingHighMul (requant.rs): (a·b + nudge) / 2^31 with C's
// truncating division, nudge 2^30 for a non-negative product, 1 − 2^30 otherwise; i32::MAX for
// a = b = i32::MIN. For a negative v = a·b + 1 − 2^30, trunc(v / 2^31) = floor((v + 2^31 − 1)
// / 2^31), so both cases are floor((a·b + 2^30) / 2^31): one shift, no division or select.
__device__ __forceinline__ int rdhm_nosat(int a, int b) {
    return (int)(((i64)a * b + (1LL << 30)) >> 31);
}

__device__ __forceinline__ int sat_rdhm(int a, int b) {
    return a == I32_MIN && b == I32_MIN ? I32_MAX : rdhm_nosat(a, b);
}

// gemmlowp's RoundingDivideByPOT for e in [0, 31]: to nearest, ties away from zero.
__device__ __forceinline__ int rdiv_pot(int x, int e) {
    const int mask = (int)((1u << e) - 1u);
    const int threshold = (mask >> 1) + (x < 0 ? 1 : 0);
    return (x >> e) + ((x & mask) > threshold ? 1 : 0);
}

// acc · M0 · 2^(shift − 31) with n = 31 − shift, in the model's rounding; single: not yet
// saturated (64-bit), as the CPU's epilogue computes it before the clamp. M0 is a valid
// multiplier (0 or in [2^30, 2^31)), never i32::MIN: the high multiply cannot saturate.
__device__ __forceinline__ i64 requant(int acc, int m0, int n) {
#if OCTET_ROUNDING == 2
    const int shift = 31 - n;
    return rdiv_pot(rdhm_nosat(wshl(acc, max(shift, 0)), m0), max(-shift, 0));
#else
    return ((i64)acc * m0 + (1LL << (n - 1))) >> n;
#endif
}

// requant saturated to int32: requant.rs's `Rounding::requantize`.
__device__ __forceinline__ int requant32(int acc, int m0, int n) {
    const i64 v = requant(acc, m0, n);
    return (int)(v < (i64)I32_MIN ? (i64)I32_MIN : v > (i64)I32_MAX ? (i64)I32_MAX : v);
}

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
    return clamp_shifted(requant(wadd(sum, r.x), r.y, r.z), zout, act_min, act_max);
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

// Inputs already HWC: the int8 tensor as is (flip 0), or u8 values with q = u − 128 (flip 0x80).
extern "C" __global__ void input_hwc(const u8* __restrict__ px, i8* __restrict__ x, i64 total,
                                     int flip) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (i64)gridDim.x * blockDim.x)
        x[i] = (i8)(px[i] ^ flip);
}

// conv2d (and fully_connected as a 1×1 conv over a 1×1×K input) as an implicit GEMM:
// M = batch·Ho·Wo output pixels, N = C_out, K = kh·kw·cin4 (cin4 = C_in rounded up to 4; the
// packed weights [C_out][kh][kw][cin4] are zero in the padding). A 64×64 output tile per block
// of 256 threads, 4×4 per thread, K in steps of 8 words (32 int8) through shared memory,
// int8×int8→int32 with __dp4a. Padded taps read the per-input-channel pad value. The window
// (FORMAT.md, "Windows"): output pixel (oy, ox) reads input row oy·sh − pt + ky·dh, column
// ox·sw − pl + kx·dw.
#define BM 64
#define BN 64
#define BKW 8

extern "C" __global__ void __launch_bounds__(256)
conv2d_dp4a(const i8* __restrict__ x, i8* __restrict__ y, const int* __restrict__ w,
            const int4* __restrict__ rq, const i8* __restrict__ padv,
            int M, int H, int W, int cin, int Ho, int Wo, int cout,
            int kh, int kw, int sh, int sw, int pt, int pl, int dh, int dw, int cin_words,
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
    const int iy0 = oy * sh - pt, ix0 = ox * sw - pl;
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
                const int iy = iy0 + ky * dh, ix = ix0 + kx * dw;
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

// Pool output element i (batch-major HWC: channel ch of pixel (ox, oy) of image b): its window's
// first input row and column (oy·sh − pt, ox·sw − pl, possibly in the padding) and the image's
// channel-ch plane start.
struct PoolAt {
    const i8* img;  // input image b, channel ch
    int iy0, ix0;
};

__device__ __forceinline__ PoolAt pool_at(const i8* x, i64 i, int H, int W, int c, int Ho,
                                          int Wo, int sh, int sw, int pt, int pl) {
    const int ch = (int)(i % c);
    i64 t = i / c;
    const int ox = (int)(t % Wo);
    t /= Wo;
    const int oy = (int)(t % Ho);
    const i64 b = t / Ho;
    PoolAt a;
    a.img = x + b * H * W * c + ch;
    a.iy0 = oy * sh - pt;
    a.ix0 = ox * sw - pl;
    return a;
}

// max_pool: one thread per output value; max over the window's taps inside the input (from
// −128; padded taps are skipped, and no window lies wholly in the padding), then the clamp.
extern "C" __global__ void max_pool(const i8* __restrict__ x, i8* __restrict__ y, i64 total,
                                    int H, int W, int c, int Ho, int Wo, int kh, int kw,
                                    int sh, int sw, int pt, int pl, int act_min, int act_max) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (i64)gridDim.x * blockDim.x) {
        const PoolAt a = pool_at(x, i, H, W, c, Ho, Wo, sh, sw, pt, pl);
        const int y0 = max(a.iy0, 0), y1 = min(a.iy0 + kh, H);
        const int x0 = max(a.ix0, 0), x1 = min(a.ix0 + kw, W);
        int m = -128;
        for (int iy = y0; iy < y1; ++iy)
            for (int ix = x0; ix < x1; ++ix) m = max(m, (int)a.img[((i64)iy * W + ix) * c]);
        y[i] = clamp_out(m, act_min, act_max);
    }
}

// avg_pool (octet's, no padding): acc = Σ (q − z_in) over the window, then requant(acc) + z_out
// and the clamp.
extern "C" __global__ void avg_pool(const i8* __restrict__ x, i8* __restrict__ y, i64 total,
                                    int H, int W, int c, int Ho, int Wo, int kh, int kw,
                                    int sh, int sw, int zin, int m0, int n, int zout,
                                    int act_min, int act_max) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (i64)gridDim.x * blockDim.x) {
        const PoolAt a = pool_at(x, i, H, W, c, Ho, Wo, sh, sw, 0, 0);
        int acc = 0;
        for (int ky = 0; ky < kh; ++ky) {
            const i8* row = a.img + ((i64)(a.iy0 + ky) * W + a.ix0) * c;
            for (int kx = 0; kx < kw; ++kx) acc += (int)row[(i64)kx * c] - zin;
        }
        y[i] = clamp_out(requant(acc, m0, n) + (i64)zout, act_min, act_max);
    }
}

// tflite_avg_pool (TFLite's AVERAGE_POOL_2D): sum and count of the taps inside the input,
// sum/count rounded half away from zero (C's truncating division), then the clamp.
extern "C" __global__ void tflite_avg_pool(const i8* __restrict__ x, i8* __restrict__ y,
                                           i64 total, int H, int W, int c, int Ho, int Wo,
                                           int kh, int kw, int sh, int sw, int pt, int pl,
                                           int act_min, int act_max) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (i64)gridDim.x * blockDim.x) {
        const PoolAt a = pool_at(x, i, H, W, c, Ho, Wo, sh, sw, pt, pl);
        const int y0 = max(a.iy0, 0), y1 = min(a.iy0 + kh, H);
        const int x0 = max(a.ix0, 0), x1 = min(a.ix0 + kw, W);
        int sum = 0;
        for (int iy = y0; iy < y1; ++iy)
            for (int ix = x0; ix < x1; ++ix) sum += (int)a.img[((i64)iy * W + ix) * c];
        const int count = max(max(y1 - y0, 0) * max(x1 - x0, 0), 1);
        const int avg = sum > 0 ? (sum + count / 2) / count : (sum - count / 2) / count;
        y[i] = clamp_out(avg, act_min, act_max);
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

// depthwise_conv2d: one thread per output value. Output channel oc reads input channel
// oc / dm; weights [kh·kw][ld] bytes (C_out padded to ld), padded taps read padv[ic] (the input
// zero point); the epilogue is the conv's.
extern "C" __global__ void depthwise_conv2d(
    const i8* __restrict__ x, i8* __restrict__ y, const i8* __restrict__ w,
    const int4* __restrict__ rq, const i8* __restrict__ padv, i64 total, int H, int W, int cin,
    int Ho, int Wo, int cout, int kh, int kw, int sh, int sw, int pt, int pl, int dh, int dw,
    int dm, int ld, int zout, int act_min, int act_max) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (i64)gridDim.x * blockDim.x) {
        const int oc = (int)(i % cout);
        i64 t = i / cout;
        const int ox = (int)(t % Wo);
        t /= Wo;
        const int oy = (int)(t % Ho);
        const i64 b = t / Ho;
        const int ic = oc / dm;
        const i8* img = x + b * H * W * cin + ic;
        const int pad = padv[ic];
        int acc = 0;
        for (int ky = 0; ky < kh; ++ky) {
            const int iy = oy * sh - pt + ky * dh;
            const bool row_in = iy >= 0 && iy < H;
            for (int kx = 0; kx < kw; ++kx) {
                const int ix = ox * sw - pl + kx * dw;
                const int v = row_in && ix >= 0 && ix < W ? (int)img[((i64)iy * W + ix) * cin] : pad;
                acc += v * (int)w[(ky * kw + kx) * ld + oc];
            }
        }
        y[i] = finish(acc, rq[oc], zout, act_min, act_max);
    }
}

// pad: each output byte the input byte at (oy − pt, ox − pl), or `value` outside the input.
extern "C" __global__ void pad_hwc(const i8* __restrict__ x, i8* __restrict__ y, i64 total,
                                   int H, int W, int c, int Ho, int Wo, int pt, int pl,
                                   int value) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (i64)gridDim.x * blockDim.x) {
        const int ch = (int)(i % c);
        i64 t = i / c;
        const int ix = (int)(t % Wo) - pl;
        t /= Wo;
        const int iy = (int)(t % Ho) - pt;
        const i64 b = t / Ho;
        y[i] = iy >= 0 && iy < H && ix >= 0 && ix < W ? x[((b * H + iy) * W + ix) * c + ch]
                                                      : (i8)value;
    }
}

// tflite_add (TFLite's ADD): a = requant_0((q0 − z0)·2^ls), b = requant_1((q1 − z1)·2^ls),
// out = requant_out(a + b) + z_out, clamped; every requant in the model's rounding, saturated to
// int32, the sums wrapping (kernels/scalar/tflite_add.rs).
extern "C" __global__ void tflite_add(const i8* __restrict__ a, const i8* __restrict__ b,
                                      i8* __restrict__ y, i64 total, int z0, int z1, int ls,
                                      int m0, int n0, int m1, int n1, int mo, int no, int zout,
                                      int act_min, int act_max) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (i64)gridDim.x * blockDim.x) {
        const int va = requant32(wshl((int)a[i] - z0, ls), m0, n0);
        const int vb = requant32(wshl((int)b[i] - z1, ls), m1, n1);
        y[i] = clamp_out((i64)requant32(wadd(va, vb), mo, no) + zout, act_min, act_max);
    }
}

// gemmlowp's fixed point as TFLite's integer softmax uses it (fixedpoint.rs, line by line):
// raw int32 values with a number of integer bits.
__device__ __forceinline__ int fp_mul_pot(int x, int e) {  // SaturatingRoundingMultiplyByPOT
    if (e > 0) {
        const int threshold = (1 << (31 - e)) - 1;
        return x > threshold ? I32_MAX : x < -threshold ? I32_MIN : wshl(x, e);
    }
    return rdiv_pot(x, -e);
}

__device__ __forceinline__ int fp_rescale(int x, int src_bits, int dst_bits) {
    return fp_mul_pot(x, src_bits - dst_bits);
}

__device__ int fp_exp_quarter(int a) {  // exp on [−1/4, 0), 0 integer bits
    const int exp_minus_one_eighth = 1895147668, one_third = 715827883;
    const int x = wadd(a, 1 << 28);
    const int x2 = sat_rdhm(x, x);
    const int x3 = sat_rdhm(x2, x);
    const int x4 = sat_rdhm(x2, x2);
    const int x4_over_4 = fp_mul_pot(x4, -2);
    const int poly = fp_mul_pot(wadd(sat_rdhm(wadd(x4_over_4, x3), one_third), x2), -1);
    return wadd(exp_minus_one_eighth, sat_rdhm(exp_minus_one_eighth, wadd(x, poly)));
}

__device__ int fp_exp_negative(int a, int int_bits) {  // exp_on_negative_values
    const int frac = 31 - int_bits;
    const int one_quarter = 1 << (frac - 2);
    const int a_mod = wsub(a & (one_quarter - 1), one_quarter);
    int result = fp_exp_quarter(fp_rescale(a_mod, int_bits, 0));
    const int remainder = wsub(a_mod, a);
    // exp(−2^k) for k = −2..4.
    const int mult[7] = {1672461947, 1302514674, 790015084, 290630308, 39332535, 720401, 242};
#pragma unroll
    for (int k = 0; k < 7; ++k) {
        const int exponent = k - 2;
        if (int_bits > exponent && (remainder & (1 << (frac + exponent))) != 0)
            result = sat_rdhm(result, mult[k]);
    }
    return a == 0 ? I32_MAX : result;
}

__device__ int fp_one_over_one_plus_x(int a) {  // 1/(1 + a), a in [0, 1)
    const int c48_over_17 = 1515870810, cneg32_over_17 = -1010580540, one_q2 = 1 << 29;
    const i64 sum = (i64)a + I32_MAX;
    const int half_denominator = (int)((sum + (sum >= 0 ? 1 : -1)) / 2);  // RoundingHalfSum
    int x = wadd(c48_over_17, sat_rdhm(half_denominator, cneg32_over_17));
    for (int i = 0; i < 3; ++i) {
        const int one_minus = wsub(one_q2, sat_rdhm(half_denominator, x));
        x = wadd(x, fp_rescale(sat_rdhm(x, one_minus), 4, 2));
    }
    return fp_rescale(x, 1, 0);
}

// softmax over the channels of each pixel: one thread per row of `depth` values
// (kernels/scalar/softmax.rs): the input rescaled by (m0, n) in the model's rounding, exp in
// Q5.26 → Q0, summed in Q12.19, times the reciprocal of the sum, −128, clamped.
extern "C" __global__ void softmax(const i8* __restrict__ x, i8* __restrict__ y, i64 rows,
                                   int depth, int m0, int n, int diff_min) {
    for (i64 r = (i64)blockIdx.x * blockDim.x + threadIdx.x; r < rows;
         r += (i64)gridDim.x * blockDim.x) {
        const i8* in = x + r * depth;
        i8* out = y + r * depth;
        int mx = -128;
        for (int j = 0; j < depth; ++j) mx = max(mx, (int)in[j]);
        int sum = 0;
        for (int j = 0; j < depth; ++j) {
            const int diff = (int)in[j] - mx;
            if (diff >= diff_min)
                sum = wadd(sum, fp_rescale(fp_exp_negative(requant32(diff, m0, n), 5), 0, 12));
        }
        // GetReciprocal of the Q12 sum (> 0: the maximum contributes exp(0)).
        const int headroom_plus_one = __clz(sum);
        const int bits_over_unit = 12 - headroom_plus_one;
        const int shifted = (int)(((unsigned)sum << (headroom_plus_one & 31)) - (1u << 31));
        const int scale = fp_one_over_one_plus_x(shifted);
        const int exponent = min(max(bits_over_unit + 31 - 8, 0), 31);
        for (int j = 0; j < depth; ++j) {
            const int diff = (int)in[j] - mx;
            int q = -128;
            if (diff >= diff_min) {
                const int e = fp_exp_negative(requant32(diff, m0, n), 5);
                q = min(max(rdiv_pot(sat_rdhm(scale, e), exponent) - 128, -128), 127);
            }
            out[j] = (i8)q;
        }
    }
}
