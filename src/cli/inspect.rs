use std::path::PathBuf;

use clap::Args;

#[derive(Args)]
pub struct InspectArgs {
    /// A checkpoint (.safetensors, or a PyTorch .pth), an int8 model (.o8, or a .tflite:
    /// imported as `octet import` would, and shown as the .o8 it becomes) or a packed image
    /// (.o8pk, `octet pack`).
    file: PathBuf,
    /// Kernel set whose scratch the arena figure includes (an .o8: the arena is exact for the
    /// set that runs it; any set can be named, e.g. cortex-m-dsp to size a firmware's arena).
    #[arg(long, value_enum, default_value_t = octet_runtime::Kernels::Auto)]
    kernels: octet_runtime::Kernels,
    /// Everything as pretty-printed JSON on stdout instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(a: InspectArgs) -> anyhow::Result<()> {
    super::common::exit_quietly_on_closed_stdout();
    let bytes = super::common::read(&a.file)?;
    let tflite_named = a.file.extension().is_some_and(|e| e == "tflite");
    if octet_export::tflite::import::is_tflite(&bytes) || tflite_named {
        drop(bytes);
        let (o8, ops) = super::import::model_bytes(&a.file)?;
        return inspect_o8(&a, &o8, ops.as_deref());
    }
    // A packed image (`octet pack`) by its magic or its name.
    if bytes.starts_with(&octet_runtime::PACKED_IMAGE_MAGIC)
        || a.file.extension().is_some_and(|e| e == "o8pk")
    {
        return inspect_packed_image(&a, &bytes);
    }
    // An .o8 by its magic, by a prefix of it (a truncated file) or by its name.
    let magic = &octet_runtime::format::MAGIC;
    let o8_named = a.file.extension().is_some_and(|e| e == "o8");
    if bytes.starts_with(magic) || (!bytes.is_empty() && magic.starts_with(&bytes)) || o8_named {
        return inspect_o8(&a, &bytes, None);
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

/// Layers, shapes, scales, zero points, multipliers, arena and file size of an `.o8` model
/// (`imported`: what each op of the `.tflite` it came from became).
fn inspect_o8(
    a: &InspectArgs,
    bytes: &[u8],
    imported: Option<&[octet_export::tflite::import::ImportedOp]>,
) -> anyhow::Result<()> {
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
        let w = op.window;
        let scratch = a.kernels.scratch_bytes(&op.geometry(&inp, &out));
        ops.push(serde_json::json!({
            "index": op.index, "kind": op.kind.name(),
            "input": [inp.c, inp.h, inp.w], "input1": op.input1, "output": [out.c, out.h, out.w],
            "kernel": [w.kernel_h, w.kernel_w], "stride": [w.stride_h, w.stride_w],
            "pad": [w.pad_top, w.pad_left, w.pad_bottom, w.pad_right],
            "dilation": [w.dilation_h, w.dilation_w],
            "in_scale": inp.scale, "in_zero_point": inp.zero_point,
            "out_scale": out.scale, "out_zero_point": out.zero_point,
            "clamp": [op.act_min, op.act_max], "weights": op.weights.len(),
            "multiplier_range": mults, "shift_range": shifts,
            "arena_offset": out.offset, "scratch_bytes": scratch,
        }));
    }
    let (c, h, w) = m.input_shape();
    let kernels = a.kernels.resolved_kernels();
    let arena = m.arena_bytes(kernels);
    if a.json {
        let v = serde_json::json!({"file": a.file, "bytes": bytes.len(),
            "crc": format!("{:#010x}", m.crc()), "kernels": kernels.name(),
            "arena_bytes": arena, "activation_bytes": m.activation_bytes(),
            "scratch_bytes": m.scratch_bytes(kernels), "rounding": m.rounding().name(),
            "input": [c, h, w], "input_encoding": m.input_encoding().name(),
            "input_scale": m.input_scale(), "input_zero_point": m.input_zero_point(),
            "outputs": m.output_len(), "output_scale": m.output_scale(),
            "output_zero_point": m.output_zero_point(), "macs": m.macs_per_image(), "ops": ops,
            "imported_from_tflite": imported});
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    let input = match m.input_encoding() {
        octet_runtime::format::InputEncoding::PixelsU8Chw => {
            format!("{c}×{h}×{w} u8 pixels (planar)")
        }
        e => format!(
            "{h}×{w}×{c} {} (scale {:.6}, zero point {})",
            if e.is_u8() { "u8" } else { "int8" },
            m.input_scale(),
            m.input_zero_point()
        ),
    };
    println!(
        "{}: int8 model, {} ops, {} bytes (CRC-32 {:#010x}), {} rounding; input {input}; {} outputs (scale {:.6}, zero point {}); {} multiply-adds",
        a.file.display(), m.num_ops(), bytes.len(), m.crc(), m.rounding().name(), m.output_len(),
        m.output_scale(), m.output_zero_point(), m.macs_per_image()
    );
    if let Some(ops) = imported {
        let list: Vec<String> = ops
            .iter()
            .map(|o| format!("{} {} → {}", o.index, o.tflite, o.octet))
            .collect();
        println!(
            "imported from TFLite ({} ops): {}",
            ops.len(),
            list.join(", ")
        );
    }
    println!(
        "footprint with the {} kernels: {} bytes of flash for the model (read in place), {arena} bytes of RAM for the arena ({} of activations, {} of scratch, {} for the output), plus the firmware's code and stack (bench/mcu.sh measures both)",
        kernels.name(),
        bytes.len(),
        m.activation_bytes(),
        m.scratch_bytes(kernels),
        arena - m.working_bytes(kernels),
    );
    print_ops(&m, &ops)
}

/// A packed image's header, checked (`PackedImageInfo::read`): the kernel set and the model
/// it was made from (which `inspect` of that `.o8` shows as its CRC-32).
fn inspect_packed_image(a: &InspectArgs, bytes: &[u8]) -> anyhow::Result<()> {
    let info = octet_runtime::PackedImageInfo::read(bytes)
        .map_err(|e| anyhow::anyhow!("{}: {e}", a.file.display()))?;
    let crc = format!("{:#010x}", info.model_crc);
    if a.json {
        let v = serde_json::json!({"file": a.file, "packed_image": true, "bytes": info.len,
            "kernels": info.kernels.name(), "model_crc": crc});
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "{}: packed image for the {} kernels, {} bytes, made from the model whose CRC-32 is {crc} \
         (`octet inspect MODEL.o8` shows a model's); firmware prepares from it with \
         Model::prepare_packed_image or octet_model_prepare_image",
        a.file.display(),
        info.kernels.name(),
        info.len
    );
    Ok(())
}

/// The op table of [`inspect_o8`]'s text: shapes, window, quantization, weights, multipliers.
fn print_ops(m: &octet_runtime::Model, ops: &[serde_json::Value]) -> anyhow::Result<()> {
    let tensor = |id: u16| {
        m.tensor(id)
            .ok_or_else(|| anyhow::anyhow!("tensor {id} out of range"))
    };
    println!(
        "{:>3} {:<17} {:>13} {:>13} {:>9} {:>22} {:>22} {:>9} {:>25}",
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
    for (op, j) in m.ops().zip(ops) {
        let (i, o) = (tensor(op.input0)?, tensor(op.output)?);
        let ms = match (
            j["multiplier_range"].as_array(),
            j["shift_range"].as_array(),
        ) {
            (Some(mr), Some(sr)) => format!("{}..{} / {}..{}", mr[0], mr[1], sr[0], sr[1]),
            _ => "-".into(),
        };
        let w = op.window;
        let window = if w.is_none() {
            "-".to_string()
        } else if w.kernel_h == 0 {
            format!("pad {}/{}", w.pad_top, w.pad_bottom)
        } else {
            format!("{}/{}/{}", w.kernel_h, w.stride_h, w.pad_top)
        };
        println!(
            "{:>3} {:<17} {:>13} {:>13} {:>9} {:>22} {:>22} {:>9} {:>25}",
            op.index,
            op.kind.name(),
            format!("{}×{}×{}", i.c, i.h, i.w),
            format!("{}×{}×{}", o.c, o.h, o.w),
            window,
            format!("{:.5} / {}", i.scale, i.zero_point),
            format!("{:.5} / {}", o.scale, o.zero_point),
            op.weights.len(),
            ms
        );
    }
    Ok(())
}
