//! Links with cortex-m-rt's `link.x` (our `memory.x`) and embeds the inputs: the directory
//! `OCTET_MCU_INPUTS` holds `model.o8`, `images.bin` (raw u8 images, one after another) and
//! `expected.bin` (the host's logits for them), as `runtime/examples/mcu_inputs.rs` writes
//! them. `OCTET_MCU_KERNELS` (default `scalar,auto`) names the kernel sets to run
//! (`Kernels::from_name`). The model is validated here with the runtime's parser, which also
//! gives the arena each set needs (`Model::arena_bytes`): the firmware's arena is a static of
//! exactly the largest of them. Where a set run here is the Cortex-M set, the model's packed
//! image for it (`Model::write_packed_image`: the weights in that set's own order) is embedded
//! too, in flash, and the firmware prepares from it.

use std::env;
use std::path::{Path, PathBuf};

use octet_runtime::{Kernels, Model};

fn fail(msg: String) -> ! {
    eprintln!("octet-firmware: {msg}");
    std::process::exit(1)
}

fn read(dir: &Path, name: &str) -> (PathBuf, Vec<u8>) {
    let p = dir.join(name);
    println!("cargo:rerun-if-changed={}", p.display());
    match std::fs::read(&p) {
        Ok(b) => (p, b),
        Err(e) => fail(format!(
            "{}: {e} (make the inputs with `cargo run --release -p octet-runtime --example mcu_inputs -- DIR lenet1`, or run bench/mcu.sh)",
            p.display()
        )),
    }
}

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::copy("memory.x", out.join("memory.x")).expect("copy memory.x to OUT_DIR");
    println!("cargo:rustc-link-search={}", out.display());
    println!("cargo:rerun-if-changed=memory.x");
    println!("cargo:rustc-link-arg=-Tlink.x");
    let target = env::var("TARGET").expect("cargo sets TARGET");
    println!("cargo:rustc-env=OCTET_FIRMWARE_TARGET={target}");

    println!("cargo:rerun-if-env-changed=OCTET_MCU_INPUTS");
    println!("cargo:rerun-if-env-changed=OCTET_MCU_KERNELS");
    let Some(dir) = env::var_os("OCTET_MCU_INPUTS") else {
        fail("set OCTET_MCU_INPUTS to a directory with model.o8, images.bin and expected.bin (runtime/examples/mcu_inputs.rs makes one)".into())
    };
    // Absolute: `include_bytes!` resolves relative paths against the generated file.
    let dir = std::fs::canonicalize(&dir).unwrap_or_else(|e| {
        fail(format!(
            "OCTET_MCU_INPUTS={}: {e}",
            Path::new(&dir).display()
        ))
    });
    let (model_path, model) = read(&dir, "model.o8");
    let (images_path, images) = read(&dir, "images.bin");
    let (expected_path, expected) = read(&dir, "expected.bin");
    let m = Model::parse(&model)
        .unwrap_or_else(|e| fail(format!("{}: invalid model: {e}", model_path.display())));
    let n = images.len() / m.input_len();
    if n == 0 || images.len() % m.input_len() != 0 {
        fail(format!(
            "{}: {} bytes is not a whole number of {}-byte images",
            images_path.display(),
            images.len(),
            m.input_len()
        ));
    }
    if expected.len() != n * m.output_len() {
        fail(format!(
            "{}: {} bytes, expected {n} images × {} logits",
            expected_path.display(),
            expected.len(),
            m.output_len()
        ));
    }
    let kernels = env::var("OCTET_MCU_KERNELS").unwrap_or_else(|_| "scalar,auto".into());
    let kernels: Vec<&str> = kernels.split(',').map(str::trim).collect();
    // The arena: the largest any set run here needs, `auto` being the set it resolves to on
    // this target (not on the host running this script).
    let var = |k: &str| env::var(k).unwrap_or_default();
    let mut arena = 0;
    let mut cortex_m = false;
    for k in &kernels {
        let set = match Kernels::from_name(k) {
            Some(Kernels::Auto) => Kernels::auto_on_mcu(
                &var("CARGO_CFG_TARGET_ARCH"),
                &target,
                &var("CARGO_CFG_TARGET_FEATURE"),
            ),
            Some(set) => set,
            None => {
                let names: Vec<&str> = Kernels::ALL.iter().map(|k| k.name()).collect();
                fail(format!(
                    "OCTET_MCU_KERNELS: unknown kernel set '{k}' (expected a comma-separated list of {})",
                    names.join(", ")
                ))
            }
        };
        arena = arena.max(m.arena_bytes(set));
        cortex_m |= set == Kernels::CortexM;
    }
    // The packed image, where the Cortex-M set runs (an empty file elsewhere).
    let mut packed = Vec::new();
    if cortex_m {
        let n = m
            .packed_image_bytes(Kernels::CortexM)
            .unwrap_or_else(|e| fail(format!("{}: packed image: {e}", model_path.display())));
        packed.resize(n, 0);
        if let Err(e) = m.write_packed_image(Kernels::CortexM, &mut packed) {
            fail(format!("{}: packed image: {e}", model_path.display()));
        }
    }
    let packed_path = out.join("packed.bin");
    std::fs::write(&packed_path, &packed).expect("write packed.bin to OUT_DIR");

    let path = |p: &Path| format!("{:?}", p.display().to_string());
    let s = format!(
        "/// Arena the kernel sets run here need for one image: the largest `Model::arena_bytes`.
pub const ARENA_BYTES: usize = {arena};
/// Ops in the model.
pub const N_OPS: usize = {ops};
/// The `.o8` file, 16-byte aligned as the format's data section.
pub static MODEL: Aligned<[u8; {model_len}]> = Aligned(*include_bytes!({model_path}));
/// The model's packed image for the Cortex-M set (`Model::prepare_packed_image`; empty where
/// that set does not run), aligned as the image needs.
pub static PACKED: AlignedPacked<[u8; {packed_len}]> = AlignedPacked(*include_bytes!({packed_path}));
/// Test images.
pub const N_IMAGES: usize = {n};
/// The images, one after another.
pub static IMAGES: [u8; {images_len}] = *include_bytes!({images_path});
/// The host's logits for them.
pub static EXPECTED: [u8; {expected_len}] = *include_bytes!({expected_path});
/// Kernel sets to run, by name.
pub const KERNELS: [&str; {n_kernels}] = {kernels:?};
/// The same, comma-separated.
pub const KERNELS_LIST: &str = {kernels_list:?};
",
        ops = m.num_ops(),
        model_len = model.len(),
        model_path = path(&model_path),
        packed_len = packed.len(),
        packed_path = path(&packed_path),
        images_len = images.len(),
        images_path = path(&images_path),
        expected_len = expected.len(),
        expected_path = path(&expected_path),
        n_kernels = kernels.len(),
        kernels_list = kernels.join(","),
    );
    std::fs::write(out.join("inputs.rs"), s).expect("write inputs.rs to OUT_DIR");
}
