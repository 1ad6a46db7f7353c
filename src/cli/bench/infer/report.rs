//! The inference report: its rows, the markdown table (with octet's int8 CUDA against the
//! PyTorch peer at batch 1024) and throughput.png.

use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cli::plot::{chart, colour, Axes, Series};

/// One timing: an engine running a model at a batch size.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Row {
    pub model: String,
    pub engine: String,
    pub batch: usize,
    pub ms: f64,
    pub img_per_s: f64,
    /// Device memory the engine holds for this batch (int8 CUDA), bytes.
    pub device_bytes: Option<usize>,
}

/// The distinct items, in order of first appearance.
fn first_seen<T: PartialEq>(items: impl Iterator<Item = T>) -> Vec<T> {
    let mut out = Vec::new();
    for k in items {
        if !out.contains(&k) {
            out.push(k);
        }
    }
    out
}

/// Images/s against log2(batch), one line per model and engine; the peer's dashed.
pub fn plot(rows: &[Row], peer: &[Value], dir: &Path) -> anyhow::Result<()> {
    let mut series = Vec::new();
    // One series per (model, engine), in order of first appearance (rows interleave engines).
    let keys = first_seen(rows.iter().map(|r| (r.model.clone(), r.engine.clone())));
    for (i, (m, e)) in keys.iter().enumerate() {
        let pts = rows
            .iter()
            .filter(|r| &r.model == m && &r.engine == e)
            .map(|r| ((r.batch as f64).log2(), r.img_per_s / 1e3))
            .collect();
        series.push(Series::new(format!("{m} {e}"), colour(i), false, pts));
    }
    let pk = first_seen(peer.iter().map(|p| {
        (
            p["model"].as_str().unwrap_or("?").to_string(),
            p["precision"].as_str().unwrap_or("?").to_string(),
        )
    }));
    for (i, (m, p)) in pk.iter().enumerate() {
        let pts = peer
            .iter()
            .filter(|r| r["model"] == m.as_str() && r["precision"] == p.as_str())
            .filter_map(|r| {
                Some((
                    (r["batch"].as_f64()?).log2(),
                    r["img_per_s"].as_f64()? / 1e3,
                ))
            })
            .collect();
        series.push(Series::new(
            format!("{m} torch {p} (dashed)"),
            colour(keys.len() + i),
            true,
            pts,
        ));
    }
    let axes = Axes::new("inference throughput", "log2(batch)", "thousand images/s");
    chart(&dir.join("throughput.png"), &axes, &series)
}

/// The table of every row, the peer's after octet's.
pub fn markdown(rows: &[Row], peer: &[Value]) -> String {
    let mut s = String::from(
        "| model | engine | batch | ms | img/s | device MiB |\n|---|---|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.3} | {:.0} | {} |",
            r.model,
            r.engine,
            r.batch,
            r.ms,
            r.img_per_s,
            r.device_bytes
                .map(|b| format!("{:.1}", b as f64 / 1048576.0))
                .unwrap_or_default()
        );
    }
    for p in peer {
        let _ = writeln!(
            s,
            "| {} | torch-{} | {} | {:.3} | {:.0} | |",
            p["model"].as_str().unwrap_or("?"),
            p["precision"].as_str().unwrap_or("?"),
            p["batch"].as_u64().unwrap_or(0),
            p["ms"].as_f64().unwrap_or(f64::NAN),
            p["img_per_s"].as_f64().unwrap_or(f64::NAN)
        );
    }
    let find = |m: &str, e: &str, b: usize| {
        rows.iter()
            .find(|r| r.model == m && r.engine == e && r.batch == b)
            .map(|r| r.img_per_s)
    };
    let peer_at = |m: &str, p: &str, b: u64| {
        peer.iter()
            .find(|r| r["model"] == m && r["precision"] == p && r["batch"].as_u64() == Some(b))
            .and_then(|r| r["img_per_s"].as_f64())
    };
    for m in ["resnet18", "lenet"] {
        for (engine, what) in [
            ("int8-cuda", "host to host"),
            ("int8-cuda-on-device", "batch on the device, as PyTorch"),
        ] {
            if let (Some(o), Some(t)) = (
                find(m, engine, 1024),
                peer_at(m, "bf16_channels_last", 1024),
            ) {
                let _ = writeln!(s, "\n{m}: int8 CUDA ({what}) at batch 1024 is {:.2}× PyTorch bf16 + channels_last ({o:.0} vs {t:.0} img/s).", o / t);
            }
        }
    }
    s
}
