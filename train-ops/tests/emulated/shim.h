// Just enough of CUDA to run octet's channels-last kernels on the host: one std::thread per
// CUDA thread, a block's threads joined by a barrier for __syncthreads, blocks one after
// another (so a function-local __shared__ array, made static here, is the block's own).
// Used by train-ops/tests/kernels_cl_emulated.rs; the kernels use no warp intrinsics.
#pragma once
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>
#include <algorithm>
struct dim3 { unsigned x, y, z; };
inline thread_local dim3 threadIdx;
inline thread_local dim3 blockIdx;
inline dim3 blockDim, gridDim;
inline std::barrier<>* g_bar;
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
inline void __syncthreads() { g_bar->arrive_and_wait(); }
struct uint4 { unsigned x, y, z, w; };
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
inline float __int_as_float(int u) { float f; memcpy(&f, &u, 4); return f; }
inline int __float_as_int(float f) { int u; memcpy(&u, &f, 4); return u; }
using std::min;
template <class F> void launch(unsigned grid, unsigned block, F f) {
  gridDim = {grid, 1, 1};
  blockDim = {block, 1, 1};
  for (unsigned b = 0; b < grid; b++) {
    std::barrier<> bar(block);
    g_bar = &bar;
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < block; t++)
      ts.emplace_back([=] { blockIdx = {b, 0, 0}; threadIdx = {t, 0, 0}; f(); });
    for (auto& th : ts) th.join();
  }
}
