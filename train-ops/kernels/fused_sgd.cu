
#define TABLE 64
#define CHUNK 4096

// Mirrors `Table` in trainer/src/optim/fused_sgd.rs field for field, and TABLE and CHUNK its
// constants of those names.
struct Table {
    float* p[TABLE];
    float* buf[TABLE];
    const float* g[TABLE];
    int n[TABLE];
    // Block k's first block; first_block[count] is the grid's size.
    int first_block[TABLE + 1];
    int count;
};

// No FMA contraction (__fmul_rn/__fadd_rn): each product and sum is rounded on its own, like
// candle's CPU ops; `+ 0.0f` is their affine's add (it also turns -0 into +0, as they do).
extern "C" __global__ void sgd_step(const Table t, float lr, float momentum, float wd,
                                    int decay, int use_momentum) {
    int block = (int)blockIdx.x;
    int k = 0;
    while (k + 1 < t.count && t.first_block[k + 1] <= block) k++;
    float* __restrict__ p = t.p[k];
    float* __restrict__ buf = t.buf[k];
    const float* __restrict__ g = t.g[k];
    int start = (block - t.first_block[k]) * CHUNK;
    int end = min(start + CHUNK, t.n[k]);
    for (int i = start + (int)threadIdx.x; i < end; i += (int)blockDim.x) {
        float pi = p[i];
        float d = g[i];
        if (decay) d = __fadd_rn(d, __fadd_rn(__fmul_rn(pi, wd), 0.0f));
        if (use_momentum) {
            d = __fadd_rn(__fadd_rn(__fmul_rn(buf[i], momentum), 0.0f), d);
            buf[i] = d;
        }
        p[i] = __fsub_rn(pi, __fadd_rn(__fmul_rn(d, lr), 0.0f));
    }
}
