use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use octet_export::tflite::{to_tflite, TfliteExport};
use octet_trainer::atomic::write_atomic;

use super::common::read;

/// Which model files `octet export` writes.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// The .o8 model (octet's runtime).
    O8,
    /// A .tflite flatbuffer of the same int8 model (TFLite, TFLite Micro), instead of the .o8.
    Tflite,
    /// Both, side by side (`<out>.o8` and `<out>.tflite`).
    Both,
}

impl Format {
    /// The files this format writes for the model path `out`: the `.o8` (at `out`) and the
    /// `.tflite` (`out` with `.tflite`), each when asked for.
    pub fn files(self, out: &Path) -> (Option<PathBuf>, Option<PathBuf>) {
        let o8 = (self != Format::Tflite).then(|| out.to_path_buf());
        let tflite = (self != Format::O8).then(|| out.with_extension("tflite"));
        (o8, tflite)
    }
}

#[derive(Args)]
pub struct ConvertArgs {
    /// The .o8 model to convert.
    model: PathBuf,
    /// The .tflite file to write [default: the model's name with .tflite].
    #[arg(long, short)]
    out: Option<PathBuf>,
    /// Print what the conversion found as JSON.
    #[arg(long)]
    json: bool,
}

/// Converts an `.o8` to a `.tflite` of the same int8 model.
pub fn run(a: ConvertArgs) -> anyhow::Result<()> {
    let o8 = read(&a.model)?;
    let out = super::common::out_path(&a.model, a.out.as_deref(), "tflite")?;
    let t = write_tflite(&o8, &out).map_err(|e| anyhow::anyhow!("{}: {e}", a.model.display()))?;
    if a.json {
        println!(
            "{}",
            serde_json::json!({"model": a.model, "tflite": out, "bytes": t.bytes.len(),
            "multipliers": t.multipliers})
        );
    } else {
        println!("{}", summary(&out, &t));
    }
    Ok(())
}

/// Converts `o8` and writes the `.tflite` to `path` (atomically).
pub fn write_tflite(o8: &[u8], path: &Path) -> anyhow::Result<TfliteExport> {
    let t = to_tflite(o8)?;
    write_atomic(path, &t.bytes)?;
    Ok(t)
}

/// One line on what was written, and a warning where TFLite will not derive the `.o8`'s
/// multipliers exactly.
pub fn summary(path: &Path, t: &TfliteExport) -> String {
    let m = &t.multipliers;
    let mut s = format!(
        "wrote {} ({} bytes): {} of {} requantization multipliers derived exactly by TFLite",
        path.display(),
        t.bytes.len(),
        m.pairs - m.inexact,
        m.pairs
    );
    if m.inexact > 0 {
        s.push_str(&format!(
            "\nwarning: {} multipliers differ from the .o8's (first: {:?}); outputs near a \
             rounding boundary may differ by one",
            m.inexact,
            m.examples.first()
        ));
    }
    s
}
