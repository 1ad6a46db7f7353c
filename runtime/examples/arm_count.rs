//! The workload `bench/arm_insn.sh` counts instructions of under QEMU (aarch64):
//!
//! `arm_count MODEL KERNELS IMAGES OP CALLS` builds `MODEL` (`lenet`: `common::lenet(1)`,
//! `resnet18`: `common::resnet18(1)`, in octet's single rounding; `lenet-double`,
//! `resnet18-double`: the same in TensorFlow Lite's double rounding), prepares everything (the
//! model as `octet run` prepares it for `KERNELS`, one image, and for every conv/fc op random
//! input of that op's shape with its output and scratch buffers), then runs the image through
//! the model `IMAGES` times with `KERNELS` (`scalar`, `neon`, `neondot`) and op `OP`'s kernel
//! alone `CALLS` times (`OP` = `-`: none). The setup does not depend on `IMAGES`, `OP` or
//! `CALLS`, so the difference between two runs' counts is the
//! count of the extra work: `IMAGES = 0, OP = -` is the fixed overhead.
//!
//! `arm_count MODEL list` prints one line per conv/fc op: index, kind, multiply-adds, shape.
//! `MODEL` may also be an `.o8` file (`bench/imported_models.sh`), counted per image only.

use octet_testkit as common;

use std::hint::black_box;

use octet_runtime::kernels::{self, ConvParams, FcParams};
use octet_runtime::{Kernels, Model, OpInfo, OpKind, PreparedOp};

/// One conv/fc op with its own input, output and scratch.
struct Prepared<'a> {
    index: u32,
    conv: Option<ConvParams<'a>>,
    fc: Option<FcParams<'a>>,
    input: Vec<i8>,
    output: Vec<i8>,
    scratch: Vec<u8>,
}

impl Prepared<'_> {
    fn macs(&self) -> usize {
        match (&self.conv, &self.fc) {
            (Some(p), _) => p.output.len() * p.k(),
            (_, Some(p)) => p.n * p.k,
            _ => 0,
        }
    }

    fn run(&mut self, k: Kernels) {
        let (x, y, s) = (&self.input[..], &mut self.output[..], &mut self.scratch[..]);
        if let Some(p) = &self.conv {
            match k {
                #[cfg(target_arch = "aarch64")]
                // SAFETY: main() checked that the CPU has what `k` needs.
                Kernels::Neon => unsafe { kernels::neon::conv2d(p, x, y, s) },
                #[cfg(target_arch = "aarch64")]
                // SAFETY: as above (NEON and dotprod).
                Kernels::NeonDot => unsafe { kernels::neon::conv2d_dot(p, x, y, s) },
                _ => kernels::scalar::conv2d(p, x, y),
            }
        } else if let Some(p) = &self.fc {
            match k {
                #[cfg(target_arch = "aarch64")]
                // SAFETY: main() checked that the CPU has what `k` needs.
                Kernels::Neon => unsafe { kernels::neon::fully_connected(p, x, y) },
                #[cfg(target_arch = "aarch64")]
                // SAFETY: as above (NEON and dotprod).
                Kernels::NeonDot => unsafe { kernels::neon::fully_connected_dot(p, x, y) },
                _ => kernels::scalar::fully_connected(p, x, y),
            }
        }
        let _ = s;
        black_box(&self.output);
    }
}

fn prepare<'a>(m: &Model<'a>, o: &OpInfo<'a>, rng: &mut common::Rng) -> Option<Prepared<'a>> {
    let (tin, tout) = (m.tensor(o.input0)?, m.tensor(o.output)?);
    let r = m.rounding();
    let (conv, fc) = match o.kind {
        OpKind::Conv2d => (Some(Model::conv_params(o, &tin, &tout, r)), None),
        OpKind::FullyConnected => (None, Some(Model::fc_params(o, &tin, &tout, r))),
        _ => return None,
    };
    // The scratch the widest kernel set here states (NEON's conv fits in it).
    let scratch = Kernels::Neon.scratch_bytes(&o.geometry(&tin, &tout));
    Some(Prepared {
        index: o.index,
        conv,
        fc,
        input: rng.bytes(tin.len()).into_iter().map(|b| b as i8).collect(),
        output: vec![0; tout.len()],
        scratch: vec![0; scratch],
    })
}

fn usage() -> ! {
    eprintln!(
        "usage: arm_count lenet|resnet18[-double]|MODEL.o8 (list | scalar|neon|neondot IMAGES OP|- CALLS)"
    );
    std::process::exit(2)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let name = args.first().map(String::as_str).unwrap_or_else(|| usage());
    let (base, rounding) = match name.strip_suffix("-double") {
        Some(base) => (base, 2),
        None => (name, 1),
    };
    // An .o8 file (the imported MLPerf Tiny models) is counted per image only: its convs with
    // SAME padding run through the model's dispatch, which one kernel called alone would not.
    let file = name.ends_with(".o8");
    let bytes = if file {
        std::fs::read(name).unwrap_or_else(|e| panic!("{name}: {e}"))
    } else {
        let mut builder = match base {
            "lenet" => common::lenet(1),
            "resnet18" => common::resnet18(1),
            _ => usage(),
        };
        builder.rounding = rounding;
        builder.encode()
    };
    let model = Model::parse(&bytes).expect("model");
    let mut rng = common::Rng::new(5);
    let mut ops: Vec<Prepared> = model
        .ops()
        .filter(|_| !file)
        .filter_map(|o| prepare(&model, &o, &mut rng))
        .collect();
    if args.get(1).map(String::as_str) == Some("list") {
        for p in &ops {
            let what = match (&p.conv, &p.fc) {
                (Some(c), _) => format!(
                    "conv2d {}x{}x{} k{}x{} s{} p{} -> {}x{}x{}",
                    c.input.c,
                    c.input.h,
                    c.input.w,
                    c.window.kernel_h,
                    c.window.kernel_w,
                    c.window.stride_h,
                    c.window.pad_top,
                    c.output.c,
                    c.output.h,
                    c.output.w
                ),
                (_, Some(f)) => format!("fully_connected {} -> {}", f.k, f.n),
                _ => unreachable!(),
            };
            println!("{} {} {}", p.index, p.macs(), what);
        }
        return;
    }
    if args.len() != 5 {
        usage();
    }
    let k = match args[1].as_str() {
        "scalar" => Kernels::Scalar,
        "neon" => Kernels::Neon,
        "neondot" => Kernels::NeonDot,
        _ => usage(),
    };
    let images: usize = args[2].parse().unwrap_or_else(|_| usage());
    let op: Option<u32> = match args[3].as_str() {
        "-" => None,
        s => Some(s.parse().unwrap_or_else(|_| usage())),
    };
    let calls: usize = args[4].parse().unwrap_or_else(|_| usage());
    // Detection runs here, in the fixed part, not in the first counted call.
    let ok = match k {
        Kernels::Neon => Kernels::neon_available(),
        Kernels::NeonDot => Kernels::dotprod_available(),
        _ => true,
    };
    if !ok {
        eprintln!("{} kernels unavailable on this CPU", args[1]);
        std::process::exit(1);
    }
    // Prepared as `octet run` prepares it (each op's parameters once, the weights and the
    // adds' tables packed for `k`), in the fixed part: the images run what users run.
    let table = Box::leak(vec![PreparedOp::EMPTY; model.num_ops()].into_boxed_slice());
    let packed = Box::leak(vec![0u8; model.packed_bytes(k).expect("packed")].into_boxed_slice());
    let model = model.prepare_packed(table, packed, k).expect("prepare");
    let pixels = rng.bytes(model.input_len());
    let mut arena = vec![0u8; model.arena_bytes_for(k, 1)];
    for _ in 0..images {
        black_box(model.run_with(k, &pixels, &mut arena).expect("run"));
    }
    for p in &mut ops {
        if Some(p.index) == op {
            for _ in 0..calls {
                p.run(k);
            }
        }
    }
}
