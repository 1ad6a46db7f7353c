//! Activation range calibration: running statistics, 2048-bin histograms and the four ways of
//! choosing a clip range from them.

use serde::{Deserialize, Serialize};

use crate::graph::Graph;
use crate::progress::Progress;
use crate::quantize::QParams;
use crate::reference::{values, Executor};
use crate::{ExportOptions, Result};

/// Histogram resolution.
pub const BINS: usize = 2048;

/// How an activation's clip range is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Calibration {
    /// The observed minimum and maximum.
    MinMax,
    /// Clip both tails at this percentile (e.g. 99.99 keeps 99.99 % of the values below the top).
    Percentile(f64),
    /// The range minimising the expected squared quantization error.
    Mse,
    /// TensorRT's entropy calibration: the threshold minimising KL(P‖Q).
    Entropy,
}

impl Default for Calibration {
    fn default() -> Self {
        Calibration::Percentile(99.99)
    }
}

impl std::fmt::Display for Calibration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Calibration::MinMax => f.write_str("minmax"),
            Calibration::Percentile(p) => write!(f, "percentile {p}"),
            Calibration::Mse => f.write_str("mse"),
            Calibration::Entropy => f.write_str("entropy"),
        }
    }
}

/// One activation's calibration: what was seen and the range chosen.
#[derive(Debug, Clone, Serialize)]
pub struct TensorCalibration {
    pub stats: Stats,
    pub histogram: Histogram,
    /// The clip range the method chose (before widening to contain 0).
    pub clip: (f32, f32),
}

/// Every tensor's statistics and histogram over the calibration images: all that any method,
/// weight scheme or symmetry chooses from, so trying several runs the model only once.
#[derive(Debug, Clone)]
pub struct Observed {
    pub stats: Vec<Stats>,
    pub histograms: Vec<Histogram>,
}

/// Runs `pixels` through `float` twice: pass 1 finds each of the `tensors` tensors' range,
/// pass 2 fills a histogram over it (the bins need the whole range first).
pub fn observe(
    float: &Executor,
    tensors: usize,
    pixels: &[u8],
    batch: usize,
    progress: &dyn Progress,
) -> Result<Observed> {
    let mut stats = vec![Stats::default(); tensors];
    let pass = |name: &str, add: &mut dyn FnMut(usize, &[f32])| -> Result<()> {
        progress.phase(name, pixels.len() / float.input_len());
        let mut observe = |t: usize, x: &candle_core::Tensor| {
            add(t, &values(x)?);
            Ok(())
        };
        float.run_all_counted(pixels, batch, &mut observe, progress)?;
        Ok(())
    };
    pass("calibration pass 1 (ranges)", &mut |t, v| stats[t].add(v))?;
    let mut histograms: Vec<Histogram> = stats
        .iter()
        .map(|s| Histogram::for_range(s.range().0, s.range().1))
        .collect();
    pass("calibration pass 2 (histograms)", &mut |t, v| {
        histograms[t].add(v)
    })?;
    Ok(Observed { stats, histograms })
}

/// Each activation's clip range by `opts.calibration` and its parameters.
pub fn choose(
    graph: &Graph,
    observed: &Observed,
    opts: &ExportOptions,
) -> (Vec<QParams>, Vec<Option<TensorCalibration>>) {
    let nt = graph.tensors.len();
    let mut acts = vec![QParams::input(); nt];
    let mut calibration = Vec::with_capacity(nt);
    for (t, (stats, histogram)) in observed.stats.iter().zip(&observed.histograms).enumerate() {
        if t == graph.input {
            calibration.push(None);
            continue;
        }
        let symmetric = opts.symmetric_activations;
        let clip = choose_range(opts.calibration, stats, histogram, symmetric);
        acts[t] = QParams::from_range(clip.0, clip.1, symmetric);
        calibration.push(Some(TensorCalibration {
            stats: *stats,
            histogram: histogram.clone(),
            clip,
        }));
    }
    (acts, calibration)
}

/// Running min, max, mean and standard deviation.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Stats {
    pub min: f32,
    pub max: f32,
    pub count: u64,
    sum: f64,
    sum_sq: f64,
}

impl Default for Stats {
    fn default() -> Self {
        Self {
            min: f32::INFINITY,
            max: f32::NEG_INFINITY,
            count: 0,
            sum: 0.0,
            sum_sq: 0.0,
        }
    }
}

impl Stats {
    pub fn add(&mut self, v: &[f32]) {
        for &x in v {
            self.min = self.min.min(x);
            self.max = self.max.max(x);
            self.sum += x as f64;
            self.sum_sq += x as f64 * x as f64;
        }
        self.count += v.len() as u64;
    }

    pub fn mean(&self) -> f64 {
        self.sum / self.count.max(1) as f64
    }

    pub fn std(&self) -> f64 {
        (self.sum_sq / self.count.max(1) as f64 - self.mean().powi(2))
            .max(0.0)
            .sqrt()
    }

    /// (min, max), (0, 0) when nothing was seen.
    pub fn range(&self) -> (f32, f32) {
        if self.count == 0 {
            (0.0, 0.0)
        } else {
            (self.min, self.max)
        }
    }
}

/// Counts over `[lo, hi)` in [`BINS`] bins: `[0, max]` for non-negative tensors, else
/// `[−a, a]` with a = max|x| (so |x| folds bin-to-bin for entropy calibration).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Histogram {
    pub lo: f64,
    pub hi: f64,
    pub counts: Vec<u64>,
    /// How many values were exactly 0 (ReLU's spike), also counted in their bin.
    pub zeros: u64,
}

impl Histogram {
    pub fn for_range(min: f32, max: f32) -> Self {
        let (lo, mut hi) = if min >= 0.0 {
            (0.0, max.max(0.0) as f64)
        } else {
            let a = (min.abs().max(max.abs())) as f64;
            (-a, a)
        };
        if hi <= lo {
            hi = lo + 1e-12;
        }
        Self {
            lo,
            hi,
            counts: vec![0; BINS],
            zeros: 0,
        }
    }

    pub fn bin_width(&self) -> f64 {
        (self.hi - self.lo) / self.counts.len() as f64
    }

    pub fn non_negative(&self) -> bool {
        self.lo >= 0.0
    }

    pub fn add(&mut self, v: &[f32]) {
        let inv = 1.0 / self.bin_width();
        let last = self.counts.len() - 1;
        for &x in v {
            let b = ((x as f64 - self.lo) * inv).floor();
            let b = if b <= 0.0 { 0 } else { (b as usize).min(last) };
            self.counts[b] += 1;
            self.zeros += (x == 0.0) as u64;
        }
    }

    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    fn center(&self, i: usize) -> f64 {
        self.lo + (i as f64 + 0.5) * self.bin_width()
    }
}

/// The clip range of one tensor by `method`, within the observed `[min, max]`.
pub fn choose_range(
    method: Calibration,
    stats: &Stats,
    hist: &Histogram,
    symmetric: bool,
) -> (f32, f32) {
    let (min, max) = stats.range();
    let (lo, hi) = match method {
        Calibration::MinMax => (min as f64, max as f64),
        Calibration::Percentile(p) => percentile(hist, p),
        Calibration::Mse => mse(hist, min, max, symmetric),
        Calibration::Entropy => entropy(hist, symmetric),
    };
    let (lo, hi) = ((lo as f32).max(min), (hi as f32).min(max));
    (lo.min(hi), hi.max(lo))
}

/// Lower edge at the (100 − p) % quantile, upper edge at the p % quantile.
fn percentile(h: &Histogram, p: f64) -> (f64, f64) {
    let p = p.clamp(50.0, 100.0) / 100.0;
    let total = h.total() as f64;
    let w = h.bin_width();
    let (mut lo, mut hi) = (h.lo, h.hi);
    let mut cum = 0f64;
    let mut found_lo = false;
    for (i, &c) in h.counts.iter().enumerate() {
        cum += c as f64;
        if !found_lo && cum > (1.0 - p) * total {
            lo = h.lo + i as f64 * w;
            found_lo = true;
        }
        if cum >= p * total {
            hi = h.lo + (i + 1) as f64 * w;
            break;
        }
    }
    (lo, hi)
}

/// Expected squared error of quantizing the histogram with clip range `[a, b]`: Δ²/12 inside,
/// the clipping distance outside.
fn expected_mse(h: &Histogram, a: f64, b: f64, symmetric: bool) -> f64 {
    let d = QParams::from_range(a as f32, b as f32, symmetric).scale as f64;
    let (a, b) = if symmetric {
        (-(a.abs().max(b)), a.abs().max(b))
    } else {
        (a.min(0.0), b.max(0.0))
    };
    let mut e = 0f64;
    for (i, &c) in h.counts.iter().enumerate() {
        if c == 0 {
            continue;
        }
        let x = h.center(i);
        let err = if x < a {
            (a - x).powi(2)
        } else if x > b {
            (x - b).powi(2)
        } else {
            d * d / 12.0
        };
        e += c as f64 * err;
    }
    e
}

/// Shrinks `[min, max]` toward 0 in 1/256 steps and keeps the range of least expected error.
fn mse(h: &Histogram, min: f32, max: f32, symmetric: bool) -> (f64, f64) {
    let (min, max) = (min.min(0.0) as f64, max.max(0.0) as f64);
    let mut best = (f64::INFINITY, min, max);
    for k in 1..=256 {
        let f = k as f64 / 256.0;
        let (a, b) = (min * f, max * f);
        let e = expected_mse(h, a, b, symmetric);
        if e < best.0 {
            best = (e, a, b);
        }
    }
    (best.1, best.2)
}

/// TensorRT-style KL calibration on |x| (or x for non-negative tensors): for each candidate
/// threshold bin i, P = the first i bins with the outliers added to the last, Q = P merged into
/// the available levels and spread back over P's non-empty bins; keep the i minimising KL(P‖Q).
fn entropy(h: &Histogram, symmetric: bool) -> (f64, f64) {
    let (abs, width): (Vec<f64>, f64) = if h.non_negative() {
        // Exact zeros (ReLU's spike) are exact at any threshold; merged into Q's first
        // level it would dominate KL and push the threshold down.
        let mut v: Vec<f64> = h.counts.iter().map(|&c| c as f64).collect();
        v[0] -= h.zeros as f64;
        (v, h.bin_width())
    } else {
        let half = h.counts.len() / 2;
        (
            (0..half)
                .map(|j| (h.counts[half + j] + h.counts[half - 1 - j]) as f64)
                .collect(),
            h.bin_width(),
        )
    };
    let levels = if h.non_negative() && !symmetric {
        256
    } else {
        128
    };
    let n = abs.len();
    if n <= levels || abs.iter().sum::<f64>() == 0.0 {
        return (h.lo, h.hi);
    }
    let mut best = (f64::INFINITY, n);
    let mut tail: f64 = abs[levels..].iter().sum();
    for i in levels..=n {
        let mut p: Vec<f64> = abs[..i].to_vec();
        p[i - 1] += tail;
        if i < n {
            tail -= abs[i];
        }
        // Q: merge abs[..i] into `levels` chunks, spread each chunk's mass over its non-empty bins.
        let mut q = vec![0f64; i];
        for l in 0..levels {
            let start = l * i / levels;
            let end = ((l + 1) * i / levels).max(start + 1).min(i);
            let mass: f64 = abs[start..end].iter().sum();
            let nz = abs[start..end].iter().filter(|&&c| c > 0.0).count();
            if nz > 0 {
                for j in start..end {
                    if abs[j] > 0.0 {
                        q[j] = mass / nz as f64;
                    }
                }
            }
        }
        let kl = kl_divergence(&p, &q);
        if kl < best.0 {
            best = (kl, i);
        }
    }
    let t = best.1 as f64 * width;
    if h.non_negative() {
        (0.0, t)
    } else {
        (-t, t)
    }
}

fn kl_divergence(p: &[f64], q: &[f64]) -> f64 {
    const EPS: f64 = 1e-10;
    let (sp, sq): (f64, f64) = (p.iter().sum(), q.iter().sum());
    if sp == 0.0 || sq == 0.0 {
        return f64::INFINITY;
    }
    p.iter()
        .zip(q)
        .filter(|(p, _)| **p > 0.0)
        .map(|(p, q)| {
            let (p, q) = (p / sp, (q / sq).max(EPS));
            p * (p / q).ln()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn observe(v: &[f32]) -> (Stats, Histogram) {
        let mut s = Stats::default();
        s.add(v);
        let mut h = Histogram::for_range(s.min, s.max);
        h.add(v);
        (s, h)
    }

    fn gaussian(n: usize, seed: u64) -> Vec<f32> {
        let mut r = ChaCha8Rng::seed_from_u64(seed);
        (0..n)
            .map(|_| {
                // Box–Muller.
                let (u, v): (f64, f64) = (r.random_range(1e-12..1.0), r.random());
                ((-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()) as f32
            })
            .collect()
    }

    #[test]
    fn uniform_minmax_gives_the_range_and_percentile_is_close() {
        let mut r = ChaCha8Rng::seed_from_u64(1);
        let v: Vec<f32> = (0..100_000).map(|_| r.random_range(-1.0f32..3.0)).collect();
        let (s, h) = observe(&v);
        let (lo, hi) = choose_range(Calibration::MinMax, &s, &h, false);
        assert_eq!((lo, hi), (s.min, s.max));
        assert!(lo > -1.001 && lo < -0.999 && hi > 2.999 && hi < 3.0001);
        let (lo, hi) = choose_range(Calibration::Percentile(99.99), &s, &h, false);
        assert!(
            (lo + 1.0).abs() < 0.01 && (hi - 3.0).abs() < 0.01,
            "{lo} {hi}"
        );
        // Stats.
        assert!((s.mean() - 1.0).abs() < 0.02 && (s.std() - 4.0 / 12f64.sqrt()).abs() < 0.02);
    }

    #[test]
    fn percentile_clips_a_heavy_outlier() {
        let mut r = ChaCha8Rng::seed_from_u64(2);
        let mut v: Vec<f32> = (0..100_000).map(|_| r.random_range(0.0f32..1.0)).collect();
        v.push(1000.0);
        let (s, h) = observe(&v);
        assert_eq!(choose_range(Calibration::MinMax, &s, &h, false).1, 1000.0);
        let (lo, hi) = choose_range(Calibration::Percentile(99.99), &s, &h, false);
        assert!(lo >= 0.0 && hi < 1.5, "{lo} {hi}");
        // Entropy clips it as far as its smallest threshold (128 of 2048 bins for |x|, here
        // 256 levels of a non-negative tensor) allows; MSE rightly keeps it (one sample
        // clipped by ~1000 costs more than the coarser grid does on the rest).
        assert!(choose_range(Calibration::Entropy, &s, &h, false).1 <= 1000.0 * 257.0 / 2048.0);
    }

    #[test]
    fn gaussian_mse_and_entropy_clip_between_2_sigma_and_max() {
        let v = gaussian(200_000, 3);
        let (s, h) = observe(&v);
        for m in [Calibration::Mse, Calibration::Entropy] {
            let (lo, hi) = choose_range(m, &s, &h, false);
            assert!(hi > 2.0 && hi < s.max, "{m}: {lo} {hi} max {}", s.max);
            assert!(lo < -2.0 && lo > s.min, "{m}: {lo} {hi} min {}", s.min);
        }
        // ReLU'd Gaussian: non-negative histogram, lower end stays 0.
        let relu: Vec<f32> = v.iter().map(|x| x.max(0.0)).collect();
        let (s, h) = observe(&relu);
        assert!(h.non_negative());
        for m in [
            Calibration::Mse,
            Calibration::Entropy,
            Calibration::Percentile(99.9),
        ] {
            let (lo, hi) = choose_range(m, &s, &h, false);
            assert!(lo == 0.0 && hi > 2.0 && hi <= s.max, "{m}: {lo} {hi}");
        }
    }

    #[test]
    fn constant_tensor_does_not_break_anything() {
        let v = vec![0f32; 1000];
        let (s, h) = observe(&v);
        for m in [
            Calibration::MinMax,
            Calibration::Percentile(99.99),
            Calibration::Mse,
            Calibration::Entropy,
        ] {
            let (lo, hi) = choose_range(m, &s, &h, false);
            assert!(lo == 0.0 && hi == 0.0, "{m}");
            let q = QParams::from_range(lo, hi, false);
            assert!(q.scale > 0.0 && q.scale.is_finite());
        }
    }
}
