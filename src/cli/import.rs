//! `octet import`: a TensorFlow Lite int8 model as an `.o8`, and the model files every command
//! that runs a model takes (`.o8`, or a `.tflite` imported on the fly).

use std::path::{Path, PathBuf};

use clap::Args;
use octet_export::tflite::import::{import, is_tflite, ImportOptions, ImportedOp, SUPPORTED};
use octet_runtime::{Kernels, Rounding};
use octet_trainer::atomic::write_atomic;

use super::common::read;

#[derive(Args)]
#[command(after_help = format!("Imported ops: {SUPPORTED}. Anything else is refused with the \
    op's name and index; the model must be int8 (int8 or uint8 input, int8 output) with one \
    subgraph, one input and one output."))]
pub struct ImportArgs {
    /// The .tflite model (int8, as the TFLite converter's full-integer quantization writes it).
    model: PathBuf,
    /// The .o8 file to write [default: the model's name with .o8].
    #[arg(long, short)]
    out: Option<PathBuf>,
    /// The requantization rounding the .o8 records.
    #[arg(long, value_enum, default_value_t = Rounding::Double)]
    rounding: Rounding,
    /// What the import did as one JSON object on stdout instead of text.
    #[arg(long)]
    json: bool,
}

/// A model file's `.o8` bytes: the file itself, or the `.tflite` it holds imported (TFLite's
/// default rounding), with what each TFLite op became.
pub fn model_bytes(path: &Path) -> anyhow::Result<(Vec<u8>, Option<Vec<ImportedOp>>)> {
    let bytes = read(path)?;
    let named = path.extension().is_some_and(|e| e == "tflite");
    if !(is_tflite(&bytes) || named) {
        return Ok((bytes, None));
    }
    let imported = import(&bytes, &ImportOptions::default())
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok((imported.bytes, Some(imported.ops)))
}

/// Imports the `.tflite` and writes the `.o8` (atomically).
pub fn run(a: ImportArgs) -> anyhow::Result<()> {
    let out = super::common::out_path(&a.model, a.out.as_deref(), "o8")?;
    let tflite = read(&a.model)?;
    let imported = import(
        &tflite,
        &ImportOptions {
            rounding: a.rounding,
        },
    )
    .map_err(|e| anyhow::anyhow!("{}: {e}", a.model.display()))?;
    write_atomic(&out, &imported.bytes)?;
    let m = octet_runtime::Model::parse(&imported.bytes)?;
    let (c, h, w) = m.input_shape();
    let arena = |k: Kernels| m.arena_bytes(k);
    if a.json {
        let arenas: serde_json::Map<String, serde_json::Value> = Kernels::ALL
            .iter()
            .filter(|&&k| k != Kernels::Auto)
            .map(|&k| (k.name().to_string(), arena(k).into()))
            .collect();
        println!(
            "{}",
            serde_json::json!({"tflite": a.model, "o8": out, "bytes": imported.bytes.len(),
                "rounding": a.rounding.name(), "input": [c, h, w],
                "input_encoding": m.input_encoding().name(), "input_scale": m.input_scale(),
                "input_zero_point": m.input_zero_point(), "outputs": m.output_len(),
                "output_scale": m.output_scale(), "output_zero_point": m.output_zero_point(),
                "arena_bytes": arenas, "macs": m.macs_per_image(), "ops": imported.ops})
        );
        return Ok(());
    }
    println!(
        "{} → {}: {} TFLite ops as {} octet ops, {} bytes, {} rounding",
        a.model.display(),
        out.display(),
        imported.ops.len(),
        m.num_ops(),
        imported.bytes.len(),
        a.rounding.name()
    );
    for op in &imported.ops {
        println!("  {:>3} {:<20} → {}", op.index, op.tflite, op.octet);
    }
    println!(
        "input {h}×{w}×{c} {} (scale {}, zero point {}); {} outputs (scale {}, zero point {}); arena {} bytes with the {} kernels here, {} with cortex-m-dsp",
        m.input_encoding().name(),
        m.input_scale(),
        m.input_zero_point(),
        m.output_len(),
        m.output_scale(),
        m.output_zero_point(),
        arena(Kernels::Auto),
        Kernels::Auto.resolved_kernels().name(),
        arena(Kernels::CortexM),
    );
    Ok(())
}
