// The channels-last kernels (kernels/channels_last.cu, on the include path the Rust test
// gives) run under shim.h against double-precision references: batch-norm statistics,
// apply (with no rectifier, ReLU and ReLU6), backward sums and input gradient, the bf16 ReLU
// and ReLU6 (exact, -0 and NaN included) and the weight cast (exact against an independent round-to-nearest-even, any
// bit pattern); partial results poisoned with NaN first, so an unwritten one fails. The host
// code mirrors RowSplit::new from src/launch.rs for the launch geometry.
#include "shim.h"
#include <array>
#include <cstdio>
#include <random>
#include "channels_last.cu"

static int failures = 0;
#define CHECK(c, ...) do { if (!(c)) { failures++; printf("FAIL: " __VA_ARGS__); printf("\n"); } } while (0)

// Independent bf16 rounding: nearest of the two neighbouring bf16 values, ties to even.
static bf16 ref_bf16(float f) {
  if (std::isnan(f)) return (bf16)((__float_as_uint(f) >> 16) | 0x40);
  unsigned u = __float_as_uint(f);
  unsigned lo = u & 0xffff0000u, hi = lo + 0x10000u;
  double dl = std::fabs((double)__uint_as_float(lo) - f), dh = std::fabs((double)__uint_as_float(hi) - f);
  if (std::isinf(__uint_as_float(lo))) return lo >> 16;
  if (dl < dh) return lo >> 16;
  if (dh < dl) return hi >> 16;
  return ((lo >> 16) & 1) ? hi >> 16 : lo >> 16;
}
static float f(bf16 v) { return __uint_as_float((unsigned)v << 16); }

struct Split { int tiles, splits, chunk; };
static Split row_split(int groups, int rows) {
  int per_row = std::min(groups, 256), tiles = (groups + per_row - 1) / per_row;
  int at_once = std::max(256 / per_row, 1);
  int minr = std::max(64, at_once);
  int splits = std::max(std::min((1024 + tiles - 1) / tiles, (rows + minr - 1) / minr), 1);
  int chunk = (rows + splits - 1) / splits;
  return {tiles, (rows + chunk - 1) / chunk, chunk};
}

int main() {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> U(-2.f, 2.5f);
  int cases[][2] = {{185, 24}, {50, 5}, {20, 2400}, {4096, 64}, {7, 3}, {300, 512}};
  for (auto& cs : cases) {
    int m = cs[0], c = cs[1];
    bool vec = c % 8 == 0;
    int V = vec ? 8 : 1;
    std::vector<bf16> x(m * c), dy(m * c);
    for (auto& v : x) v = ref_bf16(U(rng) + 0.3f);
    for (auto& v : dy) v = ref_bf16(U(rng));
    std::vector<double> mean(c, 0), var(c, 0);
    for (int ch = 0; ch < c; ch++) {
      for (int r = 0; r < m; r++) mean[ch] += f(x[r * c + ch]);
      mean[ch] /= m;
      for (int r = 0; r < m; r++) { double d = f(x[r * c + ch]) - mean[ch]; var[ch] += d * d; }
      var[ch] /= m;
    }
    // statistics
    Split sp = row_split(c / V, m);
    std::vector<float> part(3 * c * sp.splits, NAN);
    launch(sp.tiles * sp.splits, 256, [&] { cl_stats_partial(x.data(), part.data(), c, m, sp.chunk, sp.splits, vec); });
    std::vector<float> stats(2 * c);
    double worst = 0;
    for (int ch = 0; ch < c; ch++) {
      double n = 0, mu = 0, m2 = 0;
      for (int s = 0; s < sp.splits; s++) {
        const float* p = &part[3 * (ch * sp.splits + s)];
        CHECK(!std::isnan(p[1]) && !std::isnan(p[2]), "m=%d c=%d: partial (%d,%d) unwritten", m, c, ch, s);
        double bn = __float_as_int(p[0]), bm = p[1], bm2 = p[2];
        if (bn == 0) continue;
        double tot = n + bn, d = bm - mu;
        mu += d * bn / tot; m2 += bm2 + d * d * n * bn / tot; n = tot;
      }
      CHECK(n == m, "m=%d c=%d ch %d: count %g", m, c, ch, n);
      worst = std::max({worst, std::fabs(mu - mean[ch]) / (std::fabs(mean[ch]) + 1), std::fabs(m2 / n - var[ch]) / (var[ch] + 1e-6)});
      stats[ch] = mean[ch]; stats[c + ch] = var[ch];
    }
    CHECK(worst < 1e-5, "m=%d c=%d: statistics off by %g", m, c, worst);
    printf("m=%d c=%d vec=%d splits=%d tiles=%d: stats worst %.2e\n", m, c, vec, sp.splits, sp.tiles, worst);
    std::vector<float> gamma(c), beta(c);
    for (int i = 0; i < c; i++) { gamma[i] = 0.5f + (i % 7) * 0.1f; beta[i] = -0.3f + (i % 5) * 0.1f; }
    float eps = 1e-5f;
    // act: the fused rectifier (0 none, 1 ReLU, 2 ReLU6); ReLU6's runs with gamma x4 so that
    // outputs reach past 6 and its upper clip and mask are exercised.
    auto pass = [](float o, int act) { return !act || (o > 0 && (act != 2 || o < 6)); };
    for (int act = 0; act < 3; act++) {
      std::vector<float> ga(gamma);
      if (act == 2) for (auto& v : ga) v *= 4;
      long long items = vec ? (long long)m * c / 8 : (long long)m * c;
      std::vector<bf16> y(m * c, 0xffff);
      launch(3, 256, [&] { cl_apply(x.data(), stats.data(), ga.data(), beta.data(), y.data(), c, items, eps, act, vec); });
      int bad = 0;
      for (int i = 0; i < m * c; i++) {
        int ch = i % c;
        float inv = 1.0f / sqrtf(stats[c + ch] + eps);
        float r = (f(x[i]) - stats[ch]) * (ga[ch] * inv) + beta[ch];
        if (act) r = std::max(r, 0.0f);
        if (act == 2) r = std::min(r, 6.0f);
        float want = f(ref_bf16(r)), got = f(y[i]);
        if (!(std::fabs(got - want) <= std::fabs(want) * (1.0f / 128) + 1e-6f)) bad++;
      }
      CHECK(bad == 0, "m=%d c=%d act=%d: %d outputs wrong", m, c, act, bad);
      // backward sums
      std::vector<float> bpart(2 * c * sp.splits, NAN);
      launch(sp.tiles * sp.splits, 256, [&] { cl_bwd_partial(x.data(), dy.data(), y.data(), stats.data(), bpart.data(), c, m, sp.chunk, sp.splits, act, vec); });
      std::vector<float> sums(2 * c);
      double sworst = 0;
      for (int ch = 0; ch < c; ch++) {
        double a = 0, b = 0, ra = 0, rb = 0, scale = 1e-3;
        for (int s = 0; s < sp.splits; s++) { a += bpart[2 * (ch * sp.splits + s)]; b += bpart[2 * (ch * sp.splits + s) + 1]; }
        for (int r = 0; r < m; r++) {
          int i = r * c + ch;
          double g = pass(f(y[i]), act) ? f(dy[i]) : 0;
          ra += g * (f(x[i]) - stats[ch]); rb += g; scale += std::fabs(g * (f(x[i]) - stats[ch])) + std::fabs(g);
        }
        CHECK(!std::isnan(a) && !std::isnan(b), "m=%d c=%d: bwd partial unwritten", m, c);
        sworst = std::max({sworst, std::fabs(a - ra) / scale, std::fabs(b - rb) / scale});
        float inv = 1.0f / sqrtf(stats[c + ch] + eps);
        sums[ch] = (float)ra * inv; sums[c + ch] = (float)rb;
      }
      CHECK(sworst < 1e-5, "m=%d c=%d act=%d: backward sums off by %g", m, c, act, sworst);
      std::vector<bf16> dx(m * c, 0xffff);
      launch(3, 256, [&] { cl_bwd_dx(x.data(), dy.data(), y.data(), stats.data(), ga.data(), sums.data(), dx.data(), c, items, (float)m, eps, act, vec); });
      double dmax = 1e-6, derr = 0;
      for (int i = 0; i < m * c; i++) {
        int ch = i % c;
        float inv = 1.0f / sqrtf(stats[c + ch] + eps);
        float g = pass(f(y[i]), act) ? f(dy[i]) : 0.0f;
        float xhat = (f(x[i]) - stats[ch]) * inv;
        float want = ga[ch] * inv * (g - sums[c + ch] / m - xhat * (sums[ch] / m));
        dmax = std::max(dmax, (double)std::fabs(want));
        derr = std::max(derr, (double)std::fabs(f(dx[i]) - want));
      }
      CHECK(derr / dmax < 1e-2, "m=%d c=%d act=%d: dx off by %g", m, c, act, derr / dmax);
      printf("   act=%d: apply ok=%d, sums worst %.2e, dx worst %.2e\n", act, bad == 0, sworst, derr / dmax);
    }
    // relu forward/backward, exact
    long long n = (long long)m * c, ritems = vec ? n / 8 : n;
    std::vector<bf16> xr(x);
    xr[0] = 0x8000; xr[1] = 0x7fc1; xr[2] = 0;  // -0, NaN, +0
    std::vector<bf16> ry(n, 1), rdx(n, 1);
    launch(2, 256, [&] { relu_fwd_bf16(xr.data(), ry.data(), ritems, vec); });
    launch(2, 256, [&] { relu_bwd_bf16(xr.data(), dy.data(), rdx.data(), ritems, vec); });
    int rbad = 0;
    for (long long i = 0; i < n; i++) {
      float v = f(xr[i]);
      bf16 want = v >= 0.0f ? xr[i] : 0;
      bf16 wantg = v >= 0.0f ? dy[i] : 0;
      if (ry[i] != want || rdx[i] != wantg) rbad++;
    }
    CHECK(rbad == 0, "m=%d c=%d: relu %d wrong", m, c, rbad);
    // relu6 forward/backward, exact (values compared, so -0 and +0 are one zero); values at,
    // past and below 6 placed
    std::vector<bf16> x6(xr);
    if (n > 6) { x6[3] = 0x40e0; x6[4] = 0x40c0; x6[5] = 0x40b0; x6[6] = 0xc0e0; }  // 7, 6, 5.5, -7
    std::vector<bf16> y6(n, 1), dx6(n, 1);
    launch(2, 256, [&] { relu6_fwd_bf16(x6.data(), y6.data(), ritems, vec); });
    launch(2, 256, [&] { relu6_bwd_bf16(x6.data(), dy.data(), dx6.data(), ritems, vec); });
    int bad6 = 0;
    for (long long i = 0; i < n; i++) {
      float v = f(x6[i]);
      float want = v > 0.0f ? std::min(v, 6.0f) : 0.0f;
      bf16 wantg = (v > 0.0f && v < 6.0f) ? dy[i] : 0;
      if (f(y6[i]) != want || dx6[i] != wantg) bad6++;
    }
    CHECK(bad6 == 0, "m=%d c=%d: relu6 %d wrong", m, c, bad6);
    // residual add + relu and its backward from the output, exact
    std::vector<bf16> ay(n, 1), adx(n, 1);
    launch(2, 256, [&] { add_relu_bf16(xr.data(), dy.data(), ay.data(), ritems, vec); });
    launch(2, 256, [&] { relu_out_bwd_bf16(ay.data(), dy.data(), adx.data(), ritems, vec); });
    int abad = 0;
    for (long long i = 0; i < n; i++) {
      bf16 s = ref_bf16(f(xr[i]) + f(dy[i]));
      bf16 want = f(s) >= 0.0f ? s : 0;
      bf16 wantg = f(want) > 0.0f ? dy[i] : 0;
      if (ay[i] != want || adx[i] != wantg) abad++;
    }
    CHECK(abad == 0, "m=%d c=%d: add_relu %d wrong", m, c, abad);
  }
  // weight cast, exact, NaN/inf/subnormal bit patterns included
  for (auto d : std::vector<std::array<int, 3>>{{3, 5, 9}, {64, 3, 9}, {7, 1, 25}, {16, 64, 1}}) {
    int k = d[0], c = d[1], rs = d[2];
    std::vector<float> w(k * c * rs);
    std::uniform_int_distribution<unsigned> B;
    for (auto& v : w) v = __uint_as_float(B(rng));
    w[0] = NAN; if (w.size() > 3) { w[1] = INFINITY; w[2] = 1e-40f; w[3] = -0.0f; }
    std::vector<bf16> out(w.size(), 0x1234);
    launch(2, 256, [&] { kcrs_to_krsc_bf16(w.data(), out.data(), k, c, rs); });
    std::vector<float> back(w.size(), 123.f);
    launch(2, 256, [&] { krsc_bf16_to_kcrs(out.data(), back.data(), k, c, rs); });
    int bad = 0, bad2 = 0;
    for (int ki = 0; ki < k; ki++) for (int ci = 0; ci < c; ci++) for (int p = 0; p < rs; p++) {
      float src = w[(ki * c + ci) * rs + p];
      bf16 got = out[(ki * rs + p) * c + ci];
      if (got != ref_bf16(src)) bad++;
      float b = back[(ki * c + ci) * rs + p];
      if (__float_as_uint(b) != ((unsigned)got << 16)) bad2++;
    }
    CHECK(bad == 0 && bad2 == 0, "weight cast %d %d %d: %d forward, %d backward wrong", k, c, rs, bad, bad2);
  }
  printf("%s (%d failures)\n", failures ? "FAILED" : "all emulated kernel checks passed", failures);
  return failures != 0;
}
