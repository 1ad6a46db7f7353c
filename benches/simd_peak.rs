//! The CPU's multiply-add peak for each int8 formulation the kernels use, to read the
//! inference figures against (`bench/NOTES_cpu_infer.md`): 12 independent accumulators (no
//! dependency stalls), operands from L1, nothing else in the loop. Criterion's throughput is
//! in multiply-adds: its elements/s are MAC/s.
//!
//! `cargo bench --bench simd_peak`

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

#[cfg(target_arch = "x86_64")]
mod x86 {
    use core::arch::x86_64::*;

    pub const STEPS: usize = 4096;
    const ACC: usize = 12;

    /// `vpdpbusd` on 512-bit vectors: 64 multiply-adds each.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub unsafe fn dpbusd_zmm(x: &[u8; 64], w: &[i32; ACC]) -> i32 {
        let xv = _mm512_loadu_si512(x.as_ptr() as *const _);
        let mut acc = [_mm512_setzero_si512(); ACC];
        for _ in 0..STEPS {
            for (a, &wq) in acc.iter_mut().zip(core::hint::black_box(w)) {
                *a = _mm512_dpbusd_epi32(*a, xv, _mm512_set1_epi32(wq));
            }
        }
        acc.iter().map(|&a| _mm512_reduce_add_epi32(a)).sum()
    }

    /// AVX-VNNI `vpdpbusd` on 256-bit vectors with the sign moved onto the weight (the
    /// `avx2::lanes` formulation): 32 multiply-adds per `vpsignb` + `vpdpbusd`.
    #[target_feature(enable = "avx2,avxvnni")]
    pub unsafe fn sign_dpbusd_ymm(x: &[u8; 64], w: &[i32; ACC]) -> i32 {
        let xv = _mm256_loadu_si256(x.as_ptr() as *const _);
        let ax = _mm256_abs_epi8(xv);
        let mut acc = [_mm256_setzero_si256(); ACC];
        for _ in 0..STEPS {
            for (a, &wq) in acc.iter_mut().zip(core::hint::black_box(w)) {
                let sw = _mm256_sign_epi8(_mm256_set1_epi32(wq), xv);
                *a = _mm256_dpbusd_avx_epi32(*a, ax, sw);
            }
        }
        hsum(acc)
    }

    /// AVX2 with the sign moved onto the weight: 32 multiply-adds per `vpsignb` +
    /// `vpmaddubsw` + `vpmaddwd` + `vpaddd`.
    #[target_feature(enable = "avx2")]
    pub unsafe fn sign_maddubs_ymm(x: &[u8; 64], w: &[i32; ACC]) -> i32 {
        let xv = _mm256_loadu_si256(x.as_ptr() as *const _);
        let ax = _mm256_abs_epi8(xv);
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_si256(); ACC];
        for _ in 0..STEPS {
            for (a, &wq) in acc.iter_mut().zip(core::hint::black_box(w)) {
                let sw = _mm256_sign_epi8(_mm256_set1_epi32(wq), xv);
                let pair = _mm256_maddubs_epi16(ax, sw);
                *a = _mm256_add_epi32(*a, _mm256_madd_epi16(pair, ones));
            }
        }
        hsum(acc)
    }

    /// AVX2 on operands widened to i16 (the older packed-patch conv, XNNPACK's formulation):
    /// 16 multiply-adds per `vpmaddwd` + `vpaddd`.
    #[target_feature(enable = "avx2")]
    pub unsafe fn maddwd_ymm(x: &[u8; 64], w: &[i32; ACC]) -> i32 {
        let xv = _mm256_cvtepi8_epi16(_mm_loadu_si128(x.as_ptr() as *const _));
        let mut acc = [_mm256_setzero_si256(); ACC];
        for _ in 0..STEPS {
            for (a, &wq) in acc.iter_mut().zip(core::hint::black_box(w)) {
                *a = _mm256_add_epi32(*a, _mm256_madd_epi16(xv, _mm256_set1_epi32(wq)));
            }
        }
        hsum(acc)
    }

    #[target_feature(enable = "avx2")]
    unsafe fn hsum(acc: [__m256i; ACC]) -> i32 {
        let mut out = [0i32; 8];
        let s = acc
            .iter()
            .fold(_mm256_setzero_si256(), |s, &a| _mm256_add_epi32(s, a));
        _mm256_storeu_si256(out.as_mut_ptr() as *mut _, s);
        out.iter().sum()
    }

    pub const ACCS: usize = ACC;

    /// AMX `tdpbssd`: 16 × 16 × 64 = 16 384 multiply-adds each, into six independent sum
    /// tiles (tmm0–5) from one input and one weight tile (tmm6, tmm7) loaded once.
    /// `Kernels::amx_available()` must hold (it asks Linux for the tile state).
    pub unsafe fn tdpbssd(x: &[u8; 64], _: &[i32; ACC]) -> i32 {
        #[repr(C, align(64))]
        struct Config([u8; 64]);
        let mut cfg = Config([0; 64]);
        cfg.0[0] = 1; // palette 1
        for t in 0..8 {
            cfg.0[16 + 2 * t] = 64; // bytes per row
            cfg.0[48 + t] = 16; // rows
        }
        let rows = [*x; 16];
        let mut out = [[0i32; 16]; 16];
        core::arch::asm!(
            "ldtilecfg [{cfg}]",
            "tileloadd tmm6, [{x} + {s}*1]",
            "tileloadd tmm7, [{x} + {s}*1]",
            "tilezero tmm0", "tilezero tmm1", "tilezero tmm2",
            "tilezero tmm3", "tilezero tmm4", "tilezero tmm5",
            "2:",
            "tdpbssd tmm0, tmm6, tmm7", "tdpbssd tmm1, tmm6, tmm7", "tdpbssd tmm2, tmm6, tmm7",
            "tdpbssd tmm3, tmm6, tmm7", "tdpbssd tmm4, tmm6, tmm7", "tdpbssd tmm5, tmm6, tmm7",
            "dec {n}",
            "jnz 2b",
            "tilestored [{out} + {s}*1], tmm0",
            "tilerelease",
            cfg = in(reg) &cfg,
            x = in(reg) rows.as_ptr(),
            out = in(reg) out.as_mut_ptr(),
            s = in(reg) 64usize,
            n = inout(reg) STEPS => _,
            options(nostack)
        );
        out[0][0]
    }

    /// Sum tiles [`tdpbssd`] keeps busy.
    pub const TILE_ACCS: usize = 6;
}

fn bench(c: &mut Criterion) {
    #[cfg(target_arch = "x86_64")]
    {
        use x86::*;
        type Kernel = unsafe fn(&[u8; 64], &[i32; ACCS]) -> i32;
        let x = [3u8; 64];
        let w = [0x0102_0304i32; ACCS];
        let mut g = c.benchmark_group("simd_peak");
        // (name, CPU feature, multiply-adds per instruction, kernel).
        let rows: [(&str, &str, usize, Kernel); 4] = [
            ("vpdpbusd-zmm", "avx512vnni", 64, dpbusd_zmm),
            ("vpsignb+vpdpbusd-ymm", "avxvnni", 32, sign_dpbusd_ymm),
            (
                "vpsignb+vpmaddubsw+vpmaddwd-ymm",
                "avx2",
                32,
                sign_maddubs_ymm,
            ),
            ("vpmaddwd-ymm", "avx2", 16, maddwd_ymm),
        ];
        for (name, feature, macs, f) in rows {
            let ok = match feature {
                "avx512vnni" => std::is_x86_feature_detected!("avx512vnni"),
                "avxvnni" => std::is_x86_feature_detected!("avxvnni"),
                _ => std::is_x86_feature_detected!("avx2"),
            };
            if !ok {
                continue;
            }
            g.throughput(Throughput::Elements((STEPS * ACCS * macs) as u64));
            // SAFETY: run only where the CPU has the kernel's features (checked above).
            g.bench_function(name, |b| b.iter(|| unsafe { f(&x, &w) }));
        }
        if octet_runtime::Kernels::amx_available() {
            g.throughput(Throughput::Elements(
                (STEPS * TILE_ACCS * 16 * 16 * 64) as u64,
            ));
            // SAFETY: the CPU has AMX-INT8 and the OS granted the tile state (checked above).
            g.bench_function("tdpbssd-amx", |b| b.iter(|| unsafe { tdpbssd(&x, &w) }));
        }
        g.finish();
    }
    let _ = c;
}

criterion_group!(benches, bench);
criterion_main!(benches);
