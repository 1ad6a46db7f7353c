//! Crafted-input test (issue 19): thousands of seeded, field-aware mutants of valid `.o8`
//! files, each with a valid CRC, through `Model::parse` and, when it accepts one, the run path
//! the command line takes (`parallel::arena_bytes_parallel`, then `run_parallel_with` on 1
//! and 2 threads, against the scalar reference). Fails on any panic, on any single allocation
//! above 256 MiB, on a case running longer than 60 s, and on an accepted model whose arena is
//! not the exact, gap-free size FORMAT.md specifies. Prints how many inputs it tried.
//!
//! `OCTET_CRAFTED_CASES=N` changes the number of mutants (default 20,000, a few seconds; 5,000
//! off x86-64, where CI runs this under QEMU).
#![cfg(feature = "std")]

use octet_testkit as common;
mod guard;
mod mutate_o8;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use common::Rng;
use octet_runtime::parallel::{arena_bytes_parallel, run_parallel_with};
use octet_runtime::{Kernels, Model};

#[global_allocator]
static ALLOC: guard::Bounded = guard::Bounded;

/// A run's arena above this is not allocated here (counted as too large to run).
const RUN_ARENA_BOUND: usize = 64 << 20;
/// Multiply-adds per image above which an accepted model is run on one image only.
const RUN_MACS_BOUND: u64 = 40_000_000;

#[derive(Default, Debug)]
struct Tally {
    tried: usize,
    refused: usize,
    ran: usize,
    too_large: usize,
}

/// The checks an accepted model must pass, and its runs; `Err` says what went wrong. Models
/// above `macs_bound` multiply-adds per image are only parsed.
fn exercise(bytes: &[u8], t: &mut Tally, macs_bound: u64) -> Result<(), String> {
    let m = match Model::parse(bytes) {
        Err(e) => {
            // Every refusal has a message.
            if e.to_string().is_empty() {
                return Err(format!("empty message for {e:?}"));
            }
            t.refused += 1;
            return Ok(());
        }
        Ok(m) => m,
    };
    // The activation arena is exact: the end of the highest tensor, with no gap larger than
    // alignment (so it is bounded by what the model's own tensors describe); the working area
    // adds exactly the kernels' scratch.
    let (mut end, mut packed) = (0usize, 0usize);
    for r in m.tensors().map(|t| t.range()).filter(|r| !r.is_empty()) {
        end = end.max(r.end);
        packed += r.len().next_multiple_of(16);
    }
    if m.activation_bytes() != end || m.activation_bytes() > packed {
        return Err(format!(
            "accepted arena {} (tensors end at {end}, packed {packed})",
            m.activation_bytes()
        ));
    }
    for k in Kernels::ALL {
        let scratch = m.scratch_bytes(k);
        let want = if scratch == 0 {
            end
        } else {
            end.next_multiple_of(16) + scratch
        };
        if m.working_bytes(k) != want {
            return Err(format!(
                "working area {} for {}",
                m.working_bytes(k),
                k.name()
            ));
        }
    }
    let n = m.input_len();
    if m.macs_per_image() > macs_bound || n > 1 << 20 {
        t.too_large += 1;
        return Ok(());
    }
    // Large models: the fastest kernels are the reference, and one image on two threads
    // (split between them, op by op, when the model is large enough) the run.
    let large = m.macs_per_image() > RUN_MACS_BOUND;
    let (images, reference_kernels, runs): (usize, _, &[(usize, usize)]) = if large {
        (1, Kernels::Auto, &[(1, 2)])
    } else {
        (3, Kernels::Scalar, &[(1, 1), (3, 2), (1, 2)])
    };
    let pixels: Vec<u8> = (0..images * n).map(|i| (i * 37 % 251) as u8).collect();
    let mut reference = vec![0u8; m.arena_bytes_for(reference_kernels, 1)];
    let want: Vec<i8> = (0..images)
        .flat_map(|i| {
            m.run_with(
                reference_kernels,
                &pixels[i * n..(i + 1) * n],
                &mut reference,
            )
            .map(|o| o.to_vec())
            .unwrap_or_default()
        })
        .collect();
    if want.len() != images * m.output_len() {
        return Err("accepted, but the single-threaded run fails".into());
    }
    let mut ran = false;
    for &(batch, threads) in runs {
        let needed = arena_bytes_parallel(&m, Kernels::Auto, batch, threads);
        if needed > RUN_ARENA_BOUND {
            continue;
        }
        let mut arena = Vec::new();
        arena
            .try_reserve_exact(needed)
            .map_err(|e| format!("arena of {needed} bytes: {e}"))?;
        arena.resize(needed, 0);
        let out = run_parallel_with(&m, Kernels::Auto, &pixels[..batch * n], &mut arena, threads)
            .map_err(|e| {
            format!("accepted, but run_parallel({batch}, {threads}) fails: {e}")
        })?;
        if out != &want[..out.len()] {
            return Err(format!(
                "run_parallel({batch}, {threads}) differs from the single-threaded run"
            ));
        }
        ran = true;
    }
    if ran {
        t.ran += 1;
    } else {
        t.too_large += 1;
    }
    Ok(())
}

#[test]
fn crafted_o8_files_never_crash_hang_or_overallocate() {
    let default = if cfg!(target_arch = "x86_64") {
        20_000
    } else {
        5_000
    };
    let cases: usize = std::env::var("OCTET_CRAFTED_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    let seeds = mutate_o8::seeds();
    for (name, s) in &seeds {
        Model::parse(s).unwrap_or_else(|e| panic!("seed {name} invalid: {e}"));
    }
    guard::arm(256 << 20, Duration::from_secs(60));
    let start = Instant::now();
    let mut rng = Rng::new(19);
    let mut t = Tally::default();
    let mut failures = Vec::new();
    for i in 0..cases {
        let (name, base) = &seeds[i % seeds.len()];
        let (bytes, what) = mutate_o8::mutate(base, &mut rng);
        guard::case(i as u64);
        t.tried += 1;
        let r = catch_unwind(AssertUnwindSafe(|| {
            exercise(&bytes, &mut t, RUN_MACS_BOUND)
        }));
        guard::idle();
        let problem = match r {
            Ok(Ok(())) => continue,
            Ok(Err(e)) => e,
            Err(p) => format!(
                "panic: {}",
                p.downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default()
            ),
        };
        failures.push(format!("case {i} ({name}: {what}): {problem}"));
    }
    // ResNet-18 (0.56 G multiply-adds per image): one image split between two threads.
    let big_cases = if cfg!(target_arch = "x86_64") { 40 } else { 0 };
    let big = common::resnet18(24).encode();
    Model::parse(&big).expect("ResNet-18 seed");
    for i in 0..big_cases {
        let (bytes, what) = mutate_o8::mutate(&big, &mut rng);
        let id = (cases + i) as u64;
        guard::case(id);
        t.tried += 1;
        let r = catch_unwind(AssertUnwindSafe(|| exercise(&bytes, &mut t, u64::MAX)));
        guard::idle();
        match r {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failures.push(format!("case {id} (resnet18: {what}): {e}")),
            Err(_) => failures.push(format!("case {id} (resnet18: {what}): panic")),
        }
    }
    let secs = start.elapsed().as_secs_f64();
    guard::report(&format!(
        "crafted .o8: {} mutants tried in {secs:.1} s ({big_cases} of ResNet-18): {} refused by \
         Model::parse, {} accepted and run (1 and 2 threads, same bytes as one thread), {} \
         accepted but too large to run here; largest allocation {} bytes",
        t.tried,
        t.refused,
        t.ran,
        t.too_large,
        guard::largest()
    ));
    assert_eq!(guard::refused(), 0, "allocations above the bound");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The mutations reach past the parser: some mutants are still valid models.
    assert!(t.ran > 0 && t.refused > t.tried / 2, "{t:?}");
}
