//! Timing smoke tests (ignored by default): `cargo test --release -p octet-runtime --test perf
//! -- --ignored --nocapture`.

use octet_testkit as common;

use std::time::Instant;

use octet_runtime::{Kernels, Model};

fn time_it(model: &Model, k: Kernels, pixels: &[u8], reps: usize) -> f64 {
    let batch = pixels.len() / model.input_len();
    let mut arena = vec![0u8; model.arena_bytes_for(k, batch)];
    model.run_with(k, pixels, &mut arena).unwrap();
    let t = Instant::now();
    for _ in 0..reps {
        std::hint::black_box(model.run_with(k, pixels, &mut arena).unwrap());
    }
    t.elapsed().as_secs_f64() / reps as f64
}

/// ResNet-18 batch 64 through `run_parallel` (the benchmark's path), 1 and 2 threads, wall time.
#[cfg(feature = "std")]
#[test]
#[ignore]
fn resnet18_batch64_throughput() {
    use octet_runtime::parallel::{arena_bytes_parallel, run_parallel};
    let bytes = common::resnet18(1).encode();
    let m = Model::parse(&bytes).unwrap();
    let pixels = common::Rng::new(2).bytes(64 * m.input_len());
    for threads in [1usize, 2] {
        let mut arena = vec![0u8; arena_bytes_parallel(&m, Kernels::Auto, 64, threads)];
        run_parallel(&m, &pixels, &mut arena, threads).unwrap();
        let mut best = f64::MAX;
        for _ in 0..10 {
            let t = Instant::now();
            std::hint::black_box(run_parallel(&m, &pixels, &mut arena, threads).unwrap());
            best = best.min(t.elapsed().as_secs_f64());
        }
        println!(
            "resnet18 batch 64, {threads} thread(s): {:.1} img/s (best of 10)",
            64.0 / best
        );
    }
}

#[test]
#[ignore]
fn lenet_batch1_latency() {
    let bytes = common::lenet(1).encode();
    let m = Model::parse(&bytes).unwrap();
    let pixels = common::Rng::new(2).bytes(m.input_len());
    for k in [Kernels::Avx512Vnni, Kernels::Avx2, Kernels::Scalar] {
        if m.run_with(k, &pixels, &mut vec![0; m.arena_bytes(k)])
            .is_err()
        {
            continue;
        }
        let s = time_it(&m, k, &pixels, 2000);
        println!("lenet batch 1, {k:?}: {:.4} ms", s * 1e3);
    }
}

/// Writes the fuzz seed corpus of both `.o8` targets (run by hand when the format changes).
#[test]
#[ignore]
fn write_fuzz_corpus() {
    let mut small = common::Builder::new(2, 6, 6, 4);
    let x = small.conv(0, 3, 3, 1, 1, true);
    let x = small.max_pool(x, 2, 2);
    let y = small.conv(x, 3, 1, 1, 0, false);
    let z = small.add(x, y, true);
    let z = small.avg_pool(z, 3, 3);
    small.fc(z, 4, false);
    for (name, b) in [
        ("hand.o8", common::hand_model()),
        ("lenet.o8", common::lenet(1)),
        ("small_resnet.o8", common::small_resnet(2)),
        ("all_ops.o8", small),
        ("embedded.o8", common::embedded_net(2, 3)),
    ] {
        let bytes = b.encode();
        assert!(bytes.len() < 64 * 1024, "{name}: {}", bytes.len());
        Model::parse(&bytes).unwrap();
        for target in ["parse", "parse_fixed"] {
            let dir = format!("{}/fuzz/corpus/{target}", env!("CARGO_MANIFEST_DIR"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(format!("{dir}/{name}"), &bytes).unwrap();
        }
    }
}

/// This thread's CPU time in seconds (Linux `CLOCK_THREAD_CPUTIME_ID`): steadier than wall
/// time on a shared machine.
#[cfg(target_os = "linux")]
fn thread_cpu_time() -> f64 {
    #[repr(C)]
    struct Timespec {
        sec: i64,
        nsec: i64,
    }
    extern "C" {
        fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
    }
    let mut ts = Timespec { sec: 0, nsec: 0 };
    // SAFETY: a valid clock id (3 = CLOCK_THREAD_CPUTIME_ID) and a valid out pointer.
    unsafe { clock_gettime(3, &mut ts) };
    ts.sec as f64 + ts.nsec as f64 * 1e-9
}

/// Per-op CPU time and MAC rate of ResNet-18 (CIFAR) at batch 64, one thread, the model
/// prepared with packed weights:
/// `cargo test --release -p octet-runtime --features std --test perf -- --ignored --nocapture profile`.
#[cfg(all(feature = "std", target_os = "linux"))]
#[test]
#[ignore]
fn profile_resnet18_ops() {
    // OCTET_MODEL: a .o8 file to profile instead.
    let bytes = model_from_env();
    let m = Model::parse(&bytes).unwrap();
    let kernels = kernels_from_env();
    println!("kernels: {}", kernels.resolved_name().unwrap());
    // Prepared with the set's packed weights, as `octet run` and the benches run it.
    let mut table = vec![octet_runtime::PreparedOp::EMPTY; m.num_ops()];
    let mut packed = vec![0u8; m.packed_bytes(kernels).unwrap()];
    let m = m.prepare_packed(&mut table, &mut packed, kernels).unwrap();
    let batch = 64;
    let pixels = common::Rng::new(2).bytes(batch * m.input_len());
    // ONE_AREA=1: one working area, so images run one by one (as a batch of 1 does).
    let mut arena = if std::env::var("ONE_AREA").is_ok() {
        vec![0u8; m.arena_bytes_for(kernels, batch)]
    } else {
        vec![0u8; octet_runtime::parallel::arena_bytes_parallel(&m, kernels, batch, 1)]
    };
    // Per op, the fastest of several runs: the machine may be shared.
    let mut times = vec![f64::MAX; m.num_ops()];
    let reps = std::env::var("REPS").map_or(5, |r| r.parse().unwrap());
    for _ in 0..reps {
        let mut t = vec![0.0f64; m.num_ops()];
        m.run_timed(kernels, &pixels, &mut arena, &mut t, thread_cpu_time)
            .unwrap();
        times.iter_mut().zip(&t).for_each(|(a, &b)| *a = a.min(b));
    }
    let (mut total, mut total_macs) = (0.0, 0.0);
    for (j, op) in m.ops().enumerate() {
        let tin = m.tensor(op.input0).unwrap();
        let tout = m.tensor(op.output).unwrap();
        let macs = match op.kind {
            octet_runtime::OpKind::Conv2d | octet_runtime::OpKind::FullyConnected => {
                (tout.len() * op.weights.len() / tout.shape().c) as f64
            }
            octet_runtime::OpKind::DepthwiseConv2d => {
                (tout.len() * op.window.kernel_h as usize * op.window.kernel_w as usize) as f64
            }
            _ => 0.0,
        };
        let t = times[j] / batch as f64;
        total += t;
        total_macs += macs;
        let chw = |t: &octet_runtime::TensorInfo| format!("{:>3}x{:<2}x{:<2}", t.c, t.h, t.w);
        println!(
            "{j:2} {:<6} {} -> {} k{} s{}: {:7.1} us/img {:6.1} GMAC/s",
            op.kind.name(),
            chw(&tin),
            chw(&tout),
            op.window.kernel_h,
            op.window.stride_h,
            t * 1e6,
            macs / t / 1e9
        );
    }
    println!(
        "total {:.1} us/img = {:.1} img/s, {:.3} GMAC/img, {:.1} GMAC/s",
        total * 1e6,
        1.0 / total,
        total_macs / 1e9,
        total_macs / total / 1e9
    );
}

/// OCTET_MODEL: a .o8 file's bytes (e.g. dumped by benches/infer.rs with OCTET_BENCH_DUMP=dir);
/// the test ResNet-18 without it.
fn model_from_env() -> Vec<u8> {
    std::env::var("OCTET_MODEL").map_or_else(
        |_| common::resnet18(1).encode(),
        |p| std::fs::read(p).unwrap(),
    )
}

/// Arena sizes of ResNet-18 (CIFAR) per kernel set: `… --ignored --nocapture arena_sizes`.
#[test]
#[ignore]
fn arena_sizes() {
    let bytes = model_from_env();
    let m = Model::parse(&bytes).unwrap();
    println!("activations {} KiB", m.activation_bytes() >> 10);
    for k in Kernels::ALL {
        println!(
            "{}: working {} KiB, scratch {} KiB",
            k.name(),
            m.working_bytes(k) >> 10,
            m.scratch_bytes(k) >> 10
        );
    }
}

/// KERNELS: a kernel set's name as `octet run --kernels` takes it (`scalar`, `avx2`,
/// `avx-vnni`, `avx512-vnni`, …); default the fastest here.
fn kernels_from_env() -> Kernels {
    std::env::var("KERNELS").map_or(Kernels::Auto, |name| {
        Kernels::from_name(&name).unwrap_or_else(|| panic!("KERNELS={name}: no such kernel set"))
    })
}

/// Batch-1 latency of a model (OCTET_MODEL, default ResNet-18; KERNELS) on one thread, and split
/// between 1 and 2 threads (`run_split_with`): what splitting costs and gains. Best of 200.
#[cfg(feature = "std")]
#[test]
#[ignore]
fn split_latency() {
    use octet_runtime::parallel::{arena_bytes_split, run_split_with};
    let bytes = model_from_env();
    let m = Model::parse(&bytes).unwrap();
    let pixels = common::Rng::new(2).bytes(m.input_len());
    let best = |f: &mut dyn FnMut()| {
        f();
        (0..200)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64()
            })
            .fold(f64::MAX, f64::min)
    };
    let kernels = kernels_from_env();
    println!("kernels: {}", kernels.resolved_name().unwrap());
    let mut arena = vec![0u8; m.arena_bytes(kernels)];
    let one = best(&mut || {
        std::hint::black_box(m.run_with(kernels, &pixels, &mut arena).unwrap());
    });
    println!("run, 1 thread: {:.3} ms", one * 1e3);
    for threads in [1usize, 2] {
        let mut arena = vec![0u8; arena_bytes_split(&m, kernels, 1, threads)];
        let t = best(&mut || {
            std::hint::black_box(
                run_split_with(&m, kernels, &pixels, &mut arena, threads).unwrap(),
            );
        });
        println!("split, {threads} thread(s): {:.3} ms", t * 1e3);
    }
}

/// What the double rounding costs: ResNet-18 (CIFAR, the test weights) in the single rounding
/// with octet's add, in the double rounding with octet's add, and as the exporter writes it by
/// default (`as_exported`: the double rounding, TFLite's adds, the multipliers from the
/// scales); one thread (KERNELS, default the fastest here), batch 64 (images in groups) and
/// batch 1; img/s by this thread's CPU time, the best of REPS (default 7) interleaved runs
/// each, and each against the first:
/// `cargo test --release -p octet-runtime --features std --test perf -- --ignored --nocapture rounding_cost`.
#[cfg(all(feature = "std", target_os = "linux"))]
#[test]
#[ignore]
fn rounding_cost() {
    let kernels = kernels_from_env();
    println!("kernels: {}", kernels.resolved_name().unwrap());
    let names = ["single, add", "double, add", "double, tflite_add"];
    let bytes = [0, 1, 2].map(|i| {
        let mut b = common::resnet18(1);
        match i {
            0 => b.rounding = 1,
            1 => b.rounding = 2,
            _ => common::exported::as_exported(&mut b),
        }
        b.encode()
    });
    let models = bytes.each_ref().map(|b| Model::parse(b).unwrap());
    let reps = std::env::var("REPS").map_or(7, |r| r.parse().unwrap());
    for (batch, calls) in [(64usize, 1usize), (1, 32)] {
        let pixels = common::Rng::new(2).bytes(batch * models[0].input_len());
        let mut arenas = models
            .each_ref()
            .map(|m| vec![0u8; m.arena_bytes_for(kernels, batch)]);
        let mut best = [f64::MAX; 3];
        for _ in 0..reps {
            for (i, m) in models.iter().enumerate() {
                let t = thread_cpu_time();
                for _ in 0..calls {
                    std::hint::black_box(m.run_with(kernels, &pixels, &mut arenas[i]).unwrap());
                }
                best[i] = best[i].min((thread_cpu_time() - t) / calls as f64);
            }
        }
        let ips = best.map(|s| batch as f64 / s);
        let line: Vec<String> = (0..3)
            .map(|i| format!("{} {:.1} img/s ({:.3})", names[i], ips[i], ips[i] / ips[0]))
            .collect();
        println!("batch {batch}: {}", line.join(", "));
    }
}

/// The residual adds' kernels on this CPU, ns per element over 65 536 elements (ResNet-18's
/// largest add) and 8 192 (its smallest), best of REPS (default 200): octet's add (AVX-512),
/// tflite_add in both roundings (the scalar reference, AVX2 and AVX-512, each with its
/// tables built per call, as the dispatch does), with TFLite's parameters:
/// `cargo test --release -p octet-runtime --features std --test perf -- --ignored --nocapture add_kernels`.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[test]
#[ignore]
fn add_kernels() {
    use octet_runtime::kernels::{scalar, vnni, TfliteAddParams, TfliteAddTables};
    use octet_runtime::requant::{AddRequant, OutputQuant, Rounding};
    let reps = std::env::var("REPS").map_or(200, |r| r.parse().unwrap());
    let out = |rounding| OutputQuant {
        zero_point: -3,
        act_min: -128,
        act_max: 127,
        rounding,
    };
    let octet = AddRequant {
        z0: 5,
        m0: 1_300_000_000,
        z1: -7,
        m1: 1_100_000_000,
        n: 32,
        out: out(Rounding::Single),
    };
    let pairs = common::models::tflite_add_pairs(0.05, 0.04, 0.07);
    for len in [65_536usize, 8_192] {
        let mut rng = common::Rng::new(len as u64);
        let (a, b) = (rng.i8s(len, -128, 127), rng.i8s(len, -128, 127));
        let time = |f: &mut dyn FnMut(&mut [i8])| {
            let mut y = vec![0i8; len];
            let best = (0..reps)
                .map(|_| {
                    let t = thread_cpu_time();
                    f(&mut y);
                    thread_cpu_time() - t
                })
                .fold(f64::MAX, f64::min);
            best * 1e9 / len as f64
        };
        let mut line = format!("{len} elements, ns/element:");
        if Kernels::vnni_available() {
            // SAFETY: AVX-512 checked.
            let ns = time(&mut |y| unsafe { vnni::add(&octet, &a, &b, y) });
            line += &format!(" add avx512 {ns:.3};");
        }
        for rounding in Rounding::ALL {
            let p = TfliteAddParams {
                zero_points: [5, -7],
                left_shift: 20,
                multipliers: pairs,
                out: out(rounding),
            };
            let ns = time(&mut |y| scalar::tflite_add(&p, &a, &b, y));
            line += &format!(" tflite_add {} scalar {ns:.3}", rounding.name());
            let tables = || TfliteAddTables::new(&p).unwrap();
            if Kernels::avx2_available() {
                // SAFETY: AVX2 checked.
                let ns = time(&mut |y| unsafe {
                    octet_runtime::kernels::avx2::tflite_add(&tables(), &a, &b, y)
                });
                line += &format!(" avx2 {ns:.3}");
            }
            if Kernels::vnni_available() {
                // SAFETY: AVX-512 checked.
                let ns = time(&mut |y| unsafe { vnni::tflite_add(&tables(), &a, &b, y) });
                let build = time(&mut |_| {
                    std::hint::black_box(tables());
                });
                line += &format!(
                    " avx512 {ns:.3} (tables {:.1} us);",
                    build * len as f64 * 1e-3
                );
            }
        }
        println!("{line}");
    }
}
