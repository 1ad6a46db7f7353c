//! Inputs of the microcontroller firmware (`firmware/`, `bench/mcu.sh`), made without candle:
//!
//! `mcu_inputs DIR MODEL [IMAGES]` writes into `DIR`
//! - `model.o8`: `MODEL` = `lenet1` (`common::lenet`: the LeNet `octet demo` exports, 1×32×32,
//!   random weights, octet's single rounding), `lenet3` (the same on 3×32×32), `lenet1-double`
//!   and `lenet3-double` (the same weights and multipliers, TensorFlow Lite's double rounding),
//!   `embedded` (`common::embedded_net`: every op of the embedded set, int8 input, the double
//!   rounding) or the path of an `.o8` file;
//! - `images.bin`: `IMAGES` (default 4) inputs of the model's input encoding, one after
//!   another: the first Fashion-MNIST test images of `data/fashion-mnist-subset` (centred in
//!   32×32, as the trainer pads them) when the model takes raw pixels of 1×32×32, random bytes
//!   otherwise (int8 inputs included);
//! - `expected.bin`: the logits of every image by the host's scalar kernels, which the fastest
//!   host kernels (`Kernels::Auto`) must match byte for byte (else this fails);
//! - `ops.txt`: one line per op, `index kind multiply-adds`.
//!
//! The test models' builder gives every buffer its own arena bytes; the models here are
//! replanned as the exporter plans them (`Builder::replan`), so their arena is the one a device
//! needs.

use octet_testkit as common;

use std::io::Read;
use std::path::Path;

use octet_runtime::format::InputEncoding;
use octet_runtime::{align16, Kernels, Model};

/// The first `n` test images of the bundled Fashion-MNIST subset, centred in 32×32.
fn fashion_images(n: usize) -> Result<Vec<u8>, String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../data/fashion-mnist-subset/t10k-images-idx3-ubyte.gz");
    let file = std::fs::File::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut idx = Vec::new();
    flate2::read::GzDecoder::new(file)
        .read_to_end(&mut idx)
        .map_err(|e| format!("{}: not gzip: {e}", path.display()))?;
    let be = |o: usize| u32::from_be_bytes([idx[o], idx[o + 1], idx[o + 2], idx[o + 3]]) as usize;
    if idx.len() < 16 || be(0) != 0x0803 || be(8) != 28 || be(12) != 28 || be(4) < n {
        return Err(format!(
            "{}: not an IDX file of at least {n} 28×28 images",
            path.display()
        ));
    }
    let mut out = vec![0u8; n * 32 * 32];
    for (i, img) in out.chunks_exact_mut(32 * 32).enumerate() {
        let src = &idx[16 + i * 28 * 28..16 + (i + 1) * 28 * 28];
        for (r, row) in src.chunks_exact(28).enumerate() {
            img[(r + 2) * 32 + 2..(r + 2) * 32 + 30].copy_from_slice(row);
        }
    }
    Ok(out)
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 || args.len() > 3 {
        return Err(
            "usage: mcu_inputs DIR lenet1|lenet3|lenet1-double|lenet3-double|embedded|MODEL.o8 [IMAGES]"
                .into(),
        );
    }
    let dir = Path::new(&args[0]);
    let n: usize = match args.get(2) {
        Some(s) => s
            .parse()
            .ok()
            .filter(|&n| n > 0)
            .ok_or(format!("IMAGES: '{s}' is not a positive count"))?,
        None => 4,
    };
    let built = |mut b: common::Builder| {
        b.replan();
        b.encode()
    };
    let lenet = |c, rounding| {
        let mut b = common::lenet_on(c, 16);
        b.rounding = rounding;
        built(b)
    };
    let bytes = match args[1].as_str() {
        "lenet1" => lenet(1, 1),
        "lenet3" => lenet(3, 1),
        "lenet1-double" => lenet(1, 2),
        "lenet3-double" => lenet(3, 2),
        "embedded" => built(common::embedded_net(2, 16)),
        path => std::fs::read(path).map_err(|e| format!("{path}: {e}"))?,
    };
    let model = Model::parse(&bytes).map_err(|e| format!("{}: invalid model: {e}", args[1]))?;
    let pixels = model.input_encoding() == InputEncoding::PixelsU8Chw;
    let images = if pixels && model.input_shape() == (1, 32, 32) {
        fashion_images(n)?
    } else {
        common::Rng::new(3).bytes(n * model.input_len())
    };

    let mut arena = vec![0u8; model.arena_bytes(Kernels::Auto)];
    let mut expected = Vec::with_capacity(n * model.output_len());
    for (i, img) in images.chunks_exact(model.input_len()).enumerate() {
        let scalar: Vec<i8> = model
            .run_with(Kernels::Scalar, img, &mut arena)
            .map_err(|e| format!("image {i}, scalar kernels: {e}"))?
            .to_vec();
        let auto = model
            .run_with(Kernels::Auto, img, &mut arena)
            .map_err(|e| format!("image {i}, auto kernels: {e}"))?;
        if auto != scalar.as_slice() {
            return Err(format!(
                "image {i}: the host's {} kernels differ from the scalar ones",
                Kernels::Auto.resolved_name().unwrap_or("auto")
            ));
        }
        expected.extend(scalar.iter().map(|&q| q as u8));
    }

    let mut ops = String::new();
    for o in model.ops() {
        ops += &format!("{} {} {}\n", o.index, o.kind.name(), model.op_macs(&o));
    }

    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for (name, data) in [
        ("model.o8", &bytes[..]),
        ("images.bin", &images[..]),
        ("expected.bin", &expected[..]),
        ("ops.txt", ops.as_bytes()),
    ] {
        let p = dir.join(name);
        std::fs::write(&p, data).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    println!(
        "{}: {} model bytes, {} rounding, arena with the host's kernels {} bytes ({} working + {} logits), with the Cortex-M ones {} bytes, {n} inputs, {} multiply-adds per input",
        dir.display(),
        bytes.len(),
        model.rounding().name(),
        model.arena_bytes(Kernels::Auto),
        model.working_bytes(Kernels::Auto),
        align16(model.output_len()),
        model.arena_bytes(Kernels::CortexM),
        model.macs_per_image()
    );
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("mcu_inputs: {e}");
        std::process::exit(1);
    }
}
