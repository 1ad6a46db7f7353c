use std::path::PathBuf;

use clap::Args;

#[derive(Args)]
pub struct InspectArgs {
    /// A checkpoint (.safetensors, or a PyTorch .pth) or an int8 model (.o8).
    file: PathBuf,
    /// Everything as pretty-printed JSON on stdout instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(a: InspectArgs) -> anyhow::Result<()> {
    let bytes = super::common::read(&a.file)?;
    // An .o8 by its magic, by a prefix of it (a truncated file) or by its name.
    let magic = &octet_runtime::format::MAGIC;
    let o8_named = a.file.extension().is_some_and(|e| e == "o8");
    if bytes.starts_with(magic) || (!bytes.is_empty() && magic.starts_with(&bytes)) || o8_named {
        return inspect_o8(&a, &bytes);
    }
    drop(bytes);
    let ck = octet_trainer::checkpoint::load(&a.file)?;
    let size = std::fs::metadata(&a.file)?.len();
    let mut names: Vec<&String> = ck.tensors.keys().collect();
    names.sort();
    let tensors: Vec<serde_json::Value> = names
        .iter()
        .map(|n| {
            let t = &ck.tensors[*n];
            serde_json::json!({"name": n, "dtype": format!("{:?}", t.dtype()), "shape": t.dims(), "elements": t.elem_count()})
        })
        .collect();
    let model_elems: usize = names
        .iter()
        .filter(|n| {
            !n.starts_with("optim.")
                && !n.ends_with("running_mean")
                && !n.ends_with("running_var")
                && !n.ends_with("num_batches_tracked")
        })
        .map(|n| ck.tensors[*n].elem_count())
        .sum();
    if a.json {
        let v = serde_json::json!({
            "file": a.file, "bytes": size, "trained_parameters": model_elems,
            "meta": ck.meta, "tensors": tensors,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "{}  ({size} bytes, {} tensors, {model_elems} trained parameters)",
        a.file.display(),
        names.len()
    );
    match &ck.meta {
        Some(m) => {
            println!(
                "model {} ({} input channels, {} classes), trained on {}, epoch {}/{}, step {}, commit {}",
                m.model, m.in_channels, m.classes, m.dataset, m.epoch, m.config.epochs, m.step, m.commit
            );
            println!(
                "normalisation mean {:?} std {:?}",
                m.normalization.mean, m.normalization.std
            );
            println!("config {}", serde_json::to_string(&m.config)?);
            if let Some(r) = m.history.last() {
                let acc = r
                    .test_accuracy
                    .map(|a| format!("{:.2}%", 100.0 * a))
                    .unwrap_or("-".into());
                println!(
                    "last epoch: train loss {:.4}, test accuracy {acc}",
                    r.train_loss
                );
            }
        }
        None => println!("no octet metadata (a PyTorch state_dict?)"),
    }
    println!("{:<44} {:<5} shape", "tensor", "dtype");
    for n in names {
        let t = &ck.tensors[n];
        println!("{n:<44} {:<5} {:?}", format!("{:?}", t.dtype()), t.dims());
    }
    Ok(())
}

/// Layers, shapes, scales, zero points, multipliers, arena and file size of an `.o8` model.
fn inspect_o8(a: &InspectArgs, bytes: &[u8]) -> anyhow::Result<()> {
    let m = octet_runtime::Model::parse(bytes)
        .map_err(|e| anyhow::anyhow!("{}: invalid .o8 model: {e}", a.file.display()))?;
    let tensor = |id: u16| {
        m.tensor(id)
            .ok_or_else(|| anyhow::anyhow!("tensor {id} out of range"))
    };
    let range = |v: &mut dyn Iterator<Item = i32>| {
        v.fold(None, |acc: Option<(i32, i32)>, x| {
            Some(acc.map_or((x, x), |(lo, hi)| (lo.min(x), hi.max(x))))
        })
    };
    let mut ops = Vec::new();
    for op in m.ops() {
        let out = tensor(op.output)?;
        let inp = tensor(op.input0)?;
        let mults = range(&mut op.multipliers.iter());
        let shifts = range(&mut op.shifts.iter());
        ops.push(serde_json::json!({
            "index": op.index, "kind": format!("{:?}", op.kind),
            "input": [inp.c, inp.h, inp.w], "input1": op.input1, "output": [out.c, out.h, out.w],
            "kernel": [op.kernel_h, op.kernel_w], "stride": op.stride, "pad": op.pad,
            "in_scale": inp.scale, "in_zero_point": inp.zero_point,
            "out_scale": out.scale, "out_zero_point": out.zero_point,
            "clamp": [op.act_min, op.act_max], "weights": op.weights.len(),
            "multiplier_range": mults, "shift_range": shifts,
            "arena_offset": out.offset, "scratch_bytes": op.scratch_bytes,
        }));
    }
    let (c, h, w) = m.input_shape();
    if a.json {
        let v = serde_json::json!({"file": a.file, "bytes": bytes.len(), "arena_bytes": m.arena_bytes(),
            "input": [c, h, w], "outputs": m.output_len(), "output_scale": m.output_scale(),
            "output_zero_point": m.output_zero_point(), "ops": ops});
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "{}: int8 model, {} bytes, arena {} bytes for one image; input {c}×{h}×{w} u8 pixels, {} outputs (scale {:.6}, zero point {})",
        a.file.display(), bytes.len(), m.arena_bytes(), m.output_len(), m.output_scale(), m.output_zero_point()
    );
    println!(
        "footprint: {} bytes of flash for the model (read in place) and {} bytes of RAM for the arena, plus the firmware's code and stack (bench/mcu.sh measures both)",
        bytes.len(),
        m.arena_bytes()
    );
    println!(
        "{:>3} {:<15} {:>13} {:>13} {:>6} {:>22} {:>22} {:>9} {:>25}",
        "#",
        "op",
        "input",
        "output",
        "k/s/p",
        "in scale / zp",
        "out scale / zp",
        "weights",
        "M0 range / shift range"
    );
    for (op, j) in m.ops().zip(&ops) {
        let (i, o) = (tensor(op.input0)?, tensor(op.output)?);
        let ms = match (
            j["multiplier_range"].as_array(),
            j["shift_range"].as_array(),
        ) {
            (Some(mr), Some(sr)) => format!("{}..{} / {}..{}", mr[0], mr[1], sr[0], sr[1]),
            _ => "-".into(),
        };
        println!(
            "{:>3} {:<15} {:>13} {:>13} {:>6} {:>22} {:>22} {:>9} {:>25}",
            op.index,
            format!("{:?}", op.kind),
            format!("{}×{}×{}", i.c, i.h, i.w),
            format!("{}×{}×{}", o.c, o.h, o.w),
            format!("{}/{}/{}", op.kernel_h, op.stride, op.pad),
            format!("{:.5} / {}", i.scale, i.zero_point),
            format!("{:.5} / {}", o.scale, o.zero_point),
            op.weights.len(),
            ms
        );
    }
    Ok(())
}
