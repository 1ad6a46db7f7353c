//! `octet pack`: a model's packed image, the weights a kernel set reads in its own order laid
//! out ahead of time, for firmware to keep in flash next to the model
//! (`Model::prepare_packed_image` in Rust, `octet_model_prepare_image` in C;
//! `runtime/FORMAT.md`, "Packed images").

use std::path::PathBuf;

use clap::Args;
use octet_runtime::{Kernels, Model};
use octet_trainer::atomic::write_atomic;

#[derive(Args)]
#[command(
    after_help = "The image is for the Cortex-M kernels (cortex-m-dsp), the one set \
    with packed images: their fully connected layers, two rows per SMLAD. It names the model \
    it was made from (its CRC-32); firmware places it at an address aligned to 64 bytes. A \
    model with no fully connected layer gives a 64-byte image of its header alone."
)]
pub struct PackArgs {
    /// The model: an .o8, or a .tflite (imported as `octet import` would).
    model: PathBuf,
    /// The image to write [default: the model's name with .o8pk].
    #[arg(long, short)]
    out: Option<PathBuf>,
    /// What was written as one JSON object on stdout instead of text.
    #[arg(long)]
    json: bool,
}

/// Writes the image (atomically).
pub fn run(a: PackArgs) -> anyhow::Result<()> {
    let out = super::common::out_path(&a.model, a.out.as_deref(), "o8pk")?;
    let (bytes, _) = super::import::model_bytes(&a.model)?;
    let m = Model::parse(&bytes).map_err(|e| anyhow::anyhow!("{}: {e}", a.model.display()))?;
    let k = Kernels::CortexM;
    let n = m.packed_image_bytes(k)?;
    let mut image = vec![0u8; n];
    m.write_packed_image(k, &mut image)?;
    write_atomic(&out, &image)?;
    let fc_weights: usize = (0..m.num_ops() as u32)
        .filter_map(|j| m.op(j))
        .filter(|o| o.kind == octet_runtime::OpKind::FullyConnected)
        .map(|o| m.op_macs(&o) as usize)
        .sum();
    if a.json {
        println!(
            "{}",
            serde_json::json!({"model": a.model, "image": out, "kernels": k.name(),
                "bytes": n, "model_bytes": bytes.len(),
                "fully_connected_weights": fc_weights})
        );
    } else {
        println!(
            "{}: packed image for {} ({n} bytes; the model {} bytes, its fully connected \
             weights {fc_weights})",
            out.display(),
            k.name(),
            bytes.len()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use octet_runtime::{PreparedOp, RuntimeError};

    /// The image written is the one the runtime takes for this model (every check passes;
    /// here the Cortex-M set itself cannot run), beside the model; the model is never
    /// overwritten.
    #[test]
    fn writes_the_image_the_runtime_takes() {
        let d = tempfile::tempdir().unwrap();
        let model = d.path().join("m.o8");
        let bytes = octet_testkit::lenet(7).encode();
        std::fs::write(&model, &bytes).unwrap();
        let args = |out: Option<PathBuf>| PackArgs {
            model: model.clone(),
            out,
            json: true,
        };
        run(args(None)).unwrap();
        let image = std::fs::read(d.path().join("m.o8pk")).unwrap();
        let m = Model::parse(&bytes).unwrap();
        assert_eq!(image.len(), m.packed_image_bytes(Kernels::CortexM).unwrap());
        let mut store = vec![0u8; image.len() + 64];
        let at = store.as_ptr().align_offset(64);
        store[at..at + image.len()].copy_from_slice(&image);
        let mut table = vec![PreparedOp::EMPTY; m.num_ops()];
        let r = m.prepare_packed_image(&mut table, &store[at..at + image.len()], Kernels::CortexM);
        assert!(
            matches!(r, Err(RuntimeError::KernelsUnavailable)),
            "{:?}",
            r.map(|_| ())
        );
        assert!(run(args(Some(model.clone()))).is_err());
        assert_eq!(std::fs::read(&model).unwrap(), bytes);
    }
}
