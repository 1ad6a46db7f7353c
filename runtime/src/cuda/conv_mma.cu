// conv2d / fully_connected on the int8 tensor cores (sm_80+): the implicit GEMM of
// conv2d_dp4a (same arguments, same packed weights, same epilogue arithmetic `finish`) with
// mma.sync.m16n8k32 s8×s8→s32, the window as general (two strides, top/left padding,
// dilation). Appended to kernels.cu by the host (one NVRTC source).
//
// GEMM view: row m = one output pixel (b, oy, ox), column n = one output channel, K' = the
// packed weight row, kh·kw taps of cin_words words (4 int8 each). A (M×K') and B (N×K', the
// weights) are both K-contiguous: exactly mma's row.col operands, loaded with ldmatrix.
//
// A block computes a BM×BN tile, K' in steps of BK bytes (64 or 128) through a STAGES-deep
// shared-memory ring. Two ways to fill the A tile:
//  - direct (C_in % 16 == 0): a 16-byte piece of an A row is 16 channels of one tap, contiguous
//    in the NHWC input, so it is one cp.async. A tap outside the image reads the pad bytes of
//    `padv` instead (same channels), so padding costs nothing; pieces past K' are zero-filled.
//  - gather (any C_in, e.g. the first conv's 3 channels): word by word, as conv2d_dp4a packs
//    them, through registers (BK = 64). Used for convs with few channels, where K' is short.
// Shared rows are BK bytes, pieces of 16 bytes swizzled (XOR with row bits) so that the 8 rows
// an ldmatrix reads hit 8 different 16-byte bank groups.

// conv2d_dp4a's tile macros are not this kernel's template parameters.
#undef BM
#undef BN
#undef BKW

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    unsigned r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}

template <int BK>
__device__ __forceinline__ int swz(int row, int piece) {
    // 128-byte rows: 8 consecutive rows cover the 8 groups; 64-byte rows: rows r and r + 1
    // share a 128-byte line, so the XOR uses r >> 1.
    if (BK == 128) return row * 128 + ((piece ^ (row & 7)) << 4);
    return row * 64 + ((piece ^ ((row >> 1) & 3)) << 4);
}

#if __CUDA_ARCH__ >= 800
// .cg: through L2 only (weights: each block reads its rows once); .ca: also through L1, for
// activations, where neighbouring taps of one block re-read the same input pixels.
template <bool CA>
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, int bytes) {
    if (CA)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                     "r"(bytes));
    else
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                     "r"(bytes));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ void ldsm4(unsigned addr, unsigned& r0, unsigned& r1, unsigned& r2,
                                      unsigned& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}
__device__ __forceinline__ void mma_s8(int* c, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#endif

template <int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES, bool GATHER, bool CA>
__device__ __forceinline__ void conv_mma(
    const i8* __restrict__ x, i8* __restrict__ y, const int* __restrict__ w,
    const int4* __restrict__ rq, const i8* __restrict__ padv, int M, int H, int W, int cin,
    int Ho, int Wo, int cout, int kh, int kw, int sh, int sw, int pt, int pl, int dh, int dw,
    int cin_words, int zout,
    int act_min, int act_max, const i8* __restrict__ res, int rz, int rm, int cz, int cm, int an,
    int az, int amin, int amax) {
#if __CUDA_ARCH__ >= 800
    constexpr int T = WARPS_M * WARPS_N * 32;
    constexpr int WTM = BM / WARPS_M, WTN = BN / WARPS_N;  // warp tile
    constexpr int MT = WTM / 16, NT = WTN / 8;              // mma tiles per warp
    constexpr int A_BYTES = BM * BK, STAGE_BYTES = (BM + BN) * BK;
    constexpr int PIECES = BK / 16, RP = T / PIECES;  // 16-byte pieces per row; rows per pass
    static_assert(NT % 2 == 0, "B fragments are loaded two n-tiles at a time");
    static_assert(BK == 64 || (BK == 128 && !GATHER), "BK is 64 or 128; gather needs 64");
    static_assert(BM % RP == 0 && BN % RP == 0, "whole rows per pass");
    extern __shared__ __align__(128) unsigned char smem[];
    const unsigned sbase = smem_addr(smem);

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp % WARPS_M, wn = warp / WARPS_M;
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const int kwords = kh * kw * cin_words;
    const int kbytes = kwords * 4;  // K' (bytes of a packed weight row)
    const int ktiles = (kbytes + BK - 1) / BK;

    // Direct mode: this thread's A rows (fixed 16-byte piece `pc`), precomputed once.
    constexpr int A_ROWS = GATHER ? 1 : BM / RP;
    const int pc = tid % PIECES;
    int rbase[A_ROWS], riy[A_ROWS], rix[A_ROWS];
    // Running position of piece pc of the next k-tile to load: tap (ky, kx), channel ch.
    int ky = 0, kx = 0, ch = pc * 16;
    if (!GATHER) {
#pragma unroll
        for (int i = 0; i < A_ROWS; ++i) {
            const int m = m0 + tid / PIECES + i * RP;
            int b = 0, oy = 0, ox = 0;
            if (m < M) {
                ox = m % Wo;
                const int t = m / Wo;
                oy = t % Ho;
                b = t / Ho;
            }
            riy[i] = m < M ? oy * sh - pt : -(1 << 28);  // rows past M read pad bytes
            rix[i] = ox * sw - pl;
            rbase[i] = m < M ? ((b * H + riy[i]) * W + rix[i]) * cin : 0;
        }
        while (ch >= cin) {  // cin ≥ 16: piece pc may already be in a later tap
            ch -= cin;
            if (++kx == kw) kx = 0, ++ky;
        }
    }
    // Gather mode: each tile row's (iy0, ix0, image offset) once per block, not per word.
    __shared__ int4 grow[GATHER ? BM : 1];
    if (GATHER) {
        for (int r = tid; r < BM; r += T) {
            const int m = m0 + r;
            int4 g = make_int4(-(1 << 28), 0, 0, 0);  // rows past M read pad bytes
            if (m < M) {
                const int ox = m % Wo, t = m / Wo;
                g = make_int4((t % Ho) * sh - pt, ox * sw - pl, (t / Ho) * H * W * cin, 0);
            }
            grow[r] = g;
        }
        __syncthreads();
    }

    auto load_tile = [&](int kt, int stage) {
        const unsigned sa = sbase + stage * STAGE_BYTES, sb = sa + A_BYTES;
        if (!GATHER) {
            const bool kin = ky < kh;
            const int dy = ky * dh, dx = kx * dw;  // the tap's offset from the window's corner
            const int toff = (dy * W + dx) * cin + ch;
#pragma unroll
            for (int i = 0; i < A_ROWS; ++i) {
                const int r = tid / PIECES + i * RP;
                const int iy = riy[i] + dy, ix = rix[i] + dx;
                const bool in = iy >= 0 && iy < H && ix >= 0 && ix < W;
                const i8* src = in ? x + (rbase[i] + toff) : padv + (kin ? ch : 0);
                cp_async16<CA>(sa + swz<BK>(r, pc), src, kin ? 16 : 0);
            }
#pragma unroll
            for (int i = 0; i < BN / RP; ++i) {
                const int r = tid / PIECES + i * RP;
                const int n = n0 + r;
                const int kb = kt * BK + pc * 16;
                const bool ok = n < cout && kb < kbytes;
                const i8* src = (const i8*)w + (ok ? (i64)n * kbytes + kb : 0);
                cp_async16<false>(sb + swz<BK>(r, pc), src, ok ? 16 : 0);
            }
            // Advance piece pc by one k-tile.
            ch += BK;
            while (ch >= cin) {
                ch -= cin;
                if (++kx == kw) kx = 0, ++ky;
            }
        } else {
            // One word of the tile per (row, word slot); word slot fixed per thread.
            const int ws = tid & 15;
            const int gk = kt * (BK / 4) + ws;
            const bool kin = gk < kwords;
            int tap = 0, c = 0, gy = 0, gx = 0;
            if (kin) {
                tap = gk / cin_words;
                c = (gk - tap * cin_words) * 4;
                gy = tap / kw;
                gx = (tap - gy * kw) * dw;  // the tap's offset from the window's corner
                gy *= dh;
            }
            const bool aligned = (cin & 3) == 0;
#pragma unroll 4
            for (int i = 0; i < BM * 16 / T; ++i) {
                const int r = (tid >> 4) + i * (T / 16);
                int v = 0;
                if (kin) {
                    const int4 g = grow[r];
                    const int iy = g.x + gy, ix = g.y + gx;
                    const i8* p;
                    if (iy >= 0 && iy < H && ix >= 0 && ix < W) {
                        p = x + (g.z + (iy * W + ix) * cin + c);
                    } else {
                        p = padv + c;
                    }
                    if (aligned) {
                        v = pack4(p[0], p[1], p[2], p[3]);
                    } else {
                        v = pack4(p[0], c + 1 < cin ? p[1] : 0, c + 2 < cin ? p[2] : 0,
                                  c + 3 < cin ? p[3] : 0);
                    }
                }
                *(int*)(smem + (sa - sbase) + swz<BK>(r, ws >> 2) + (ws & 3) * 4) = v;
            }
#pragma unroll 4
            for (int i = 0; i < BN * 16 / T; ++i) {
                const int r = (tid >> 4) + i * (T / 16);
                const int n = n0 + r;
                const int v = (kin && n < cout) ? w[(i64)n * kwords + gk] : 0;
                *(int*)(smem + (sb - sbase) + swz<BK>(r, ws >> 2) + (ws & 3) * 4) = v;
            }
        }
    };

    int acc[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0;

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < ktiles) load_tile(s, s);
        cp_commit();  // always, so that group counts match k-tiles
    }

    for (int kt = 0; kt < ktiles; ++kt) {
        cp_wait<STAGES - 2>();
        __syncthreads();  // tile kt visible to all; stage (kt−1) % STAGES free to refill
        {
            const int nk = kt + STAGES - 1;
            if (nk < ktiles) load_tile(nk, nk % STAGES);
            cp_commit();
        }
        const unsigned sa = sbase + (kt % STAGES) * STAGE_BYTES, sb = sa + A_BYTES;
#pragma unroll
        for (int kk = 0; kk < BK / 32; ++kk) {  // k32 steps of the tile
            unsigned af[MT][4], bf[NT][2];
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                const int r = wm * WTM + i * 16 + (lane & 15);
                ldsm4(sa + swz<BK>(r, kk * 2 + (lane >> 4)), af[i][0], af[i][1], af[i][2],
                      af[i][3]);
            }
#pragma unroll
            for (int j = 0; j < NT; j += 2) {
                const int r = wn * WTN + j * 8 + (lane & 7) + ((lane >> 4) << 3);
                ldsm4(sb + swz<BK>(r, kk * 2 + ((lane >> 3) & 1)), bf[j][0], bf[j][1],
                      bf[j + 1][0], bf[j + 1][1]);
            }
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int j = 0; j < NT; ++j) mma_s8(acc[i][j], af[i], bf[j][0], bf[j][1]);
        }
    }
    cp_wait<0>();
    __syncthreads();  // the ring is free: reuse it to stage the output tile

    const int g = lane >> 2, tq = lane & 3;
    if ((cout & 15) == 0) {
        // Requantize into a BM×(BN+16) byte tile (the 16-byte pad spreads rows over banks),
        // then write 16-byte pieces: whole output rows are contiguous in NHWC. With `res`, the
        // requantizing residual add that follows the conv is fused here: out = add(res, conv)
        // (add_requant's arithmetic on the conv's int8 output), and the conv's own output is
        // never stored.
        constexpr int LD = BN + 16;
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            const int cl = wn * WTN + j * 8 + tq * 2;
            const int n = n0 + cl;
            const int4 r0 = rq[n < cout ? n : 0], r1 = rq[n + 1 < cout ? n + 1 : 0];
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int rl = wm * WTM + i * 16 + g + h * 8;
                    const i8 v0 = finish(acc[i][j][2 * h], r0, zout, act_min, act_max);
                    const i8 v1 = finish(acc[i][j][2 * h + 1], r1, zout, act_min, act_max);
                    *(short*)(smem + rl * LD + cl) =
                        (short)((v0 & 0xff) | ((unsigned)(v1 & 0xff) << 8));
                }
        }
        __syncthreads();
#pragma unroll
        for (int i = 0; i < BM * BN / 16 / T; ++i) {
            const int idx = tid + i * T;
            const int rl = idx / (BN / 16), p = idx % (BN / 16);
            const int m = m0 + rl, n = n0 + p * 16;
            if (m < M && n < cout) {
                const i64 o = (i64)m * cout + n;
                uint4 v = *(const uint4*)(smem + rl * LD + p * 16);
                if (res != nullptr) {
                    const uint4 r = *(const uint4*)(res + o);
                    const unsigned wr[4] = {r.x, r.y, r.z, r.w}, wv[4] = {v.x, v.y, v.z, v.w};
                    unsigned t[4] = {0, 0, 0, 0};
#pragma unroll
                    for (int j = 0; j < 4; ++j)
#pragma unroll
                        for (int k = 0; k < 4; ++k)
                            t[j] |= add_byte(wr[j], wv[j], k, rz, rm, cz, cm, an, az, amin, amax);
                    v = make_uint4(t[0], t[1], t[2], t[3]);
                }
                *(uint4*)(y + o) = v;
            }
        }
    } else {
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            const int n = n0 + wn * WTN + j * 8 + tq * 2;
            if (n >= cout) continue;
            const int4 r0 = rq[n];
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int m = m0 + wm * WTM + i * 16 + g + h * 8;
                    if (m >= M) continue;
                    i8* o = y + (i64)m * cout + n;
                    o[0] = finish(acc[i][j][2 * h], r0, zout, act_min, act_max);
                    if (n + 1 < cout)
                        o[1] = finish(acc[i][j][2 * h + 1], rq[n + 1], zout, act_min, act_max);
                }
        }
    }
#endif
}

// Instantiations: name = conv_mma_<BM>x<BN>[x<BK>][_gather]; the host picks one per layer
// and batch (kernels.rs: MMA_TILES must match these).
#define CONV_MMA_ARGS                                                                          \
    const i8 *__restrict__ x, i8 *__restrict__ y, const int *__restrict__ w,                   \
        const int4 *__restrict__ rq, const i8 *__restrict__ padv, int M, int H, int W,         \
        int cin, int Ho, int Wo, int cout, int kh, int kw, int sh, int sw, int pt, int pl,     \
        int dh, int dw, int cin_words,                                                         \
        int zout, int act_min, int act_max, const i8 *__restrict__ res, int rz, int rm, int cz, \
        int cm, int an, int az, int amin, int amax
#define CONV_MMA_PASS                                                                           \
    x, y, w, rq, padv, M, H, W, cin, Ho, Wo, cout, kh, kw, sh, sw, pt, pl, dh, dw, cin_words, zout, \
        act_min, act_max, res, rz, rm, cz, cm, an, az, amin, amax
// MINB: blocks per SM the register budget must allow (caps registers at 65536 / (MINB·T)).
#define CONV_MMA(NAME, BM, BN, BK, WMS, WNS, ST, MINB, GATHER, CA)                          \
    extern "C" __global__ void __launch_bounds__(WMS * WNS * 32, MINB) NAME(CONV_MMA_ARGS) { \
        conv_mma<BM, BN, BK, WMS, WNS, ST, GATHER, CA>(CONV_MMA_PASS);                      \
    }

// Measured on an H100 (ResNet-18 at b1024): for C_out ≥ 128, 128×128 tiles with
// 128-byte k-steps ran 1.3–1.9× faster than with 64-byte ones; for C_out = 64, 128×64 with
// 64-byte k-steps (48 KiB ring, 4 blocks per SM) beat 128-byte ones (96 KiB, 2 blocks);
// 256×128 and 256×64 tiles were slower than these everywhere. Activations through L1
// (cp.async.ca) made the 128×128 tile 15–25% faster on the 256- and 512-channel convs and
// changed nothing on the 128×64 one.
CONV_MMA(conv_mma_128x128, 128, 128, 128, 2, 4, 3, 2, false, true)
CONV_MMA(conv_mma_128x64, 128, 64, 64, 2, 2, 4, 4, false, false)
CONV_MMA(conv_mma_64x64, 64, 64, 64, 2, 2, 4, 4, false, false)
CONV_MMA(conv_mma_128x64_gather, 128, 64, 64, 2, 2, 2, 4, true, false)
CONV_MMA(conv_mma_64x64_gather, 64, 64, 64, 2, 2, 2, 4, true, false)
