//! What the C side needs besides the inputs every microcontroller benchmark shares (the model,
//! images and expected logits of `runtime/examples/mcu_inputs.rs`, the one generator):
//!
//! ```text
//! make_inputs c-inputs DIR [TARGET]         from DIR/model.o8, images.bin and expected.bin
//!                                           (as mcu_inputs writes them): DIR/model_info.h (the
//!                                           C firmware's sizes, its arena for the kernels the
//!                                           library runs on TARGET, default
//!                                           thumbv7em-none-eabihf: the Cortex-M DSP kernels)
//!                                           and DIR/expected.txt (the expected logits as the C
//!                                           programs print them, one "logits I: v v ..." line
//!                                           per image); with the Cortex-M kernels also
//!                                           DIR/model.o8pk, the model's packed image
//! make_inputs peer-header MODEL.o8 OUT.h    the model as C arrays for bench/mcu_peer (CMSIS-NN)
//! ```
//!
//! `images.bin` holds the inputs back to back, each in the model's input encoding;
//! `expected.bin` their outputs (int8), back to back. Both outputs come from the runtime's own decoding of the file
//! (`Model::ops`, `Model::tensor`), never a second parser of the format.

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use octet_runtime::format::Window;
use octet_runtime::{Kernels, Model, OpInfo, OpKind, Rounding, TensorInfo};

type Res<T> = Result<T, String>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    let r = match args[..] {
        ["c-inputs", dir] => c_inputs(Path::new(dir), "thumbv7em-none-eabihf"),
        ["c-inputs", dir, target] => c_inputs(Path::new(dir), target),
        ["peer-header", model, out] => {
            read(model).and_then(|m| write(out, peer_header(&m, model)?.as_bytes()))
        }
        _ => Err("usage: make_inputs c-inputs DIR [TARGET] | peer-header MODEL.o8 OUT.h".into()),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("make_inputs: {e}");
            ExitCode::FAILURE
        }
    }
}

fn read(path: impl AsRef<Path>) -> Res<Vec<u8>> {
    let p = path.as_ref();
    std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()))
}

fn write(path: impl AsRef<Path>, bytes: &[u8]) -> Res<()> {
    let p = path.as_ref();
    std::fs::write(p, bytes).map_err(|e| format!("cannot write {}: {e}", p.display()))
}

/// `octet_model_prepared_table_bytes` of the model in `bytes`, as the library answers on this
/// host (at least what it answers on a 32-bit target: a prepared op is larger here).
fn prepared_table_bytes(bytes: &[u8]) -> Res<usize> {
    // SAFETY: zeroed storage is a valid (unparsed) handle, `bytes` outlives it, and the
    // handle is only read by the size query.
    unsafe {
        let mut m: octet_capi::OctetModel = std::mem::zeroed();
        match octet_capi::octet_model_parse(&mut m, bytes.as_ptr(), bytes.len()) {
            octet_capi::OctetStatus::Ok => Ok(octet_capi::octet_model_prepared_table_bytes(&m)),
            s => Err(format!("the C API refused the model: {s:?}")),
        }
    }
}

fn parse(bytes: &[u8]) -> Res<Model<'_>> {
    Model::parse(bytes).map_err(|e| format!("invalid .o8 model: {e}"))
}

/// DIR/model_info.h and DIR/expected.txt from mcu_inputs' DIR/model.o8, images.bin and
/// expected.bin (their sizes checked against each other); the arena for the library on the
/// microcontroller target `target` (the kernels `Kernels::Auto` resolves to there).
fn c_inputs(dir: &Path, target: &str) -> Res<()> {
    let bytes = read(dir.join("model.o8"))?;
    let m = parse(&bytes)?;
    let pixels = read(dir.join("images.bin"))?;
    let expected = read(dir.join("expected.bin"))?;
    let (n_in, n_out) = (m.input_len(), m.output_len());
    let n = pixels.len() / n_in;
    if n == 0 || pixels.len() % n_in != 0 {
        return Err(format!(
            "{}: {} bytes is not a whole number of {n_in}-byte images",
            dir.join("images.bin").display(),
            pixels.len()
        ));
    }
    if expected.len() != n * n_out {
        return Err(format!(
            "{}: {} bytes, expected {n} images × {n_out} logits (make the directory with \
             runtime/examples/mcu_inputs.rs)",
            dir.join("expected.bin").display(),
            expected.len()
        ));
    }
    let mut text = String::new();
    for (i, l) in expected.chunks(n_out).enumerate() {
        let v: Vec<String> = l.iter().map(|&x| (x as i8).to_string()).collect();
        writeln!(text, "logits {i}: {}", v.join(" ")).unwrap();
    }
    write(dir.join("expected.txt"), text.as_bytes())?;
    // What octet_model_arena_bytes(model, 1) answers on the target.
    let kernels = Kernels::auto_on_mcu("arm", target, "");
    // With the Cortex-M kernels, the packed image (`octet pack`) the firmware prepares from,
    // and a table buffer of the host's octet_model_prepared_table_bytes, which is at least
    // the target's (a prepared op is larger on a 64-bit host).
    let image = kernels == Kernels::CortexM;
    if image {
        let n = m
            .packed_image_bytes(kernels)
            .map_err(|e| format!("packed image: {e}"))?;
        let mut bytes = vec![0u8; n];
        m.write_packed_image(kernels, &mut bytes)
            .map_err(|e| format!("packed image: {e}"))?;
        write(dir.join("model.o8pk"), &bytes)?;
    }
    let table = prepared_table_bytes(&bytes)?;
    let info = format!(
        "/* Generated by capi/examples/make_inputs.rs for model.o8 and images.bin: do not edit. */\n\
         #define EX_IMAGES {n}\n\
         #define EX_INPUT_LEN {n_in}\n\
         #define EX_OUTPUT_LEN {n_out}\n\
         /* octet_model_arena_bytes(model, 1) on {target} (kernels {}) */\n\
         #define EX_ARENA_BYTES {}\n\
         /* 1: prepared from the packed image model.o8pk (the Cortex-M kernels), its table in\n   \
         EX_TABLE_BYTES, at least octet_model_prepared_table_bytes(model) */\n\
         #define EX_PACKED_IMAGE {}\n\
         #define EX_TABLE_BYTES {table}\n",
        kernels.name(),
        m.arena_bytes(kernels),
        image as u8,
    );
    write(dir.join("model_info.h"), info.as_bytes())
}

/// The peer's kind of op `o`, or why it has none: conv2d, fully_connected and max_pool, their
/// windows with one stride and one padding on every side.
fn peer_kind(o: &OpInfo) -> Res<&'static str> {
    let unsupported = |what: &str| Err(format!("op {} ({}): {what}", o.index, o.kind.name()));
    let kind = match o.kind {
        OpKind::Conv2d => "PEER_CONV",
        OpKind::FullyConnected => "PEER_FC",
        OpKind::MaxPool => "PEER_MAX_POOL",
        OpKind::AvgPool | OpKind::Add => {
            return unsupported("not in the peer (its rounding differs from CMSIS-NN's)")
        }
        _ => return unsupported("not in the peer (conv2d, fully_connected and max_pool)"),
    };
    let w = o.window;
    let square = Window {
        kernel_h: w.kernel_h,
        kernel_w: w.kernel_w,
        ..Window::square(0, w.stride_h, w.pad_top)
    };
    if o.kind != OpKind::FullyConnected && w != square {
        return unsupported("a window the peer cannot express (one stride, one padding)");
    }
    Ok(kind)
}

/// A conv's or fully connected op's constant arrays as C arrays into `h` (the bias unfolded:
/// see [`peer_header`]); its input offset and the arrays' names for its `peer_op`.
fn peer_arrays(
    h: &mut String,
    o: &OpInfo,
    tin: &TensorInfo,
    tout: &TensorInfo,
) -> Res<(i32, String)> {
    let j = o.index;
    let zin = tin.zero_point;
    if o.window.pad_top > 0 && o.pad_values.iter().any(|&p| p as i32 != zin) {
        return Err(format!(
            "op {j} ({}): pads with values other than the input zero point, which CMSIS-NN cannot",
            o.kind.name()
        ));
    }
    let k = o.weights.len() / tout.c as usize;
    let mut bias = Vec::new();
    for (c, row) in o.weights.chunks(k).enumerate() {
        let sum: i64 = row.iter().map(|&w| w as i64).sum();
        let b = o.bias.get(c) as i64 + zin as i64 * sum;
        bias.push(
            i32::try_from(b).map_err(|_| {
                format!("op {j}: the unfolded bias of channel {c} does not fit int32")
            })?,
        );
    }
    let mult: Vec<i32> = (0..tout.c as usize).map(|c| o.multipliers.get(c)).collect();
    let shift: Vec<i32> = (0..tout.c as usize).map(|c| o.shifts.get(c)).collect();
    writeln!(
        h,
        "static const int8_t peer_w{j}[{}] = {{\n{}}};",
        o.weights.len(),
        c_array(o.weights.iter())
    )
    .unwrap();
    for (a, v) in [("b", &bias), ("m", &mult), ("s", &shift)] {
        writeln!(
            h,
            "static const int32_t peer_{a}{j}[{}] = {{\n{}}};",
            v.len(),
            c_array(v.iter())
        )
        .unwrap();
    }
    Ok((-zin, format!("peer_w{j}, peer_b{j}, peer_m{j}, peer_s{j}")))
}

/// C array body, 16 values a line.
fn c_array<T: std::fmt::Display>(v: impl IntoIterator<Item = T>) -> String {
    let v: Vec<String> = v.into_iter().map(|x| x.to_string()).collect();
    v.chunks(16)
        .map(|c| format!("    {},\n", c.join(", ")))
        .collect()
}

/// The model as CMSIS-NN's functions take it (see bench/mcu_peer/peer.h): per op its kernel,
/// shapes (NHWC, as octet's tensors), weights (OHWI / [N][K], as octet's), per-channel
/// multipliers and shifts (the same Q31 convention: n = 31 − shift), offsets and clamp.
///
/// octet folds the input zero point into the bias (b′ = b − z_in·Σw) and pads with it;
/// CMSIS-NN adds `input_offset` = −z_in to every input and skips padded taps. So the peer gets
/// b = b′ + z_in·Σw: the same accumulator, exactly, for every output.
fn peer_header(bytes: &[u8], name: &str) -> Res<String> {
    let m = parse(bytes)?;
    if m.rounding() != Rounding::Single {
        return Err(format!(
            "{name}: the model rounds as TensorFlow Lite does (double); the peer harness is built \
             with CMSIS_NN_USE_SINGLE_ROUNDING and compares single-rounding models"
        ));
    }
    let mut h = String::new();
    let mut ops = String::new();
    let mut prev = m.input_tensor();
    let mut max_bytes = m.tensor(prev).map(|t| t.len()).ok_or("no input tensor")?;
    let mut scratch = 0usize;
    writeln!(
        h,
        "/* Generated by `make_inputs peer-header` (capi/examples/make_inputs.rs) from\n   {name}: do not edit. */\n#include \"peer.h\"\n"
    )
    .unwrap();
    for o in m.ops() {
        let j = o.index;
        let unsupported = |what: &str| Err(format!("op {j} ({}): {what}", o.kind.name()));
        if o.input0 != prev || o.input1.is_some() {
            return unsupported("the peer runs a chain (each op reads the previous op's output)");
        }
        let tin = m.tensor(o.input0).ok_or("bad tensor")?;
        let tout = m.tensor(o.output).ok_or("bad tensor")?;
        prev = o.output;
        max_bytes = max_bytes.max(tout.len());
        let kind = peer_kind(&o)?;
        let w = o.window;
        let (input_offset, arrays) = if matches!(o.kind, OpKind::Conv2d | OpKind::FullyConnected) {
            if o.kind == OpKind::Conv2d {
                // arm_convolve_s8's im2col buffer: two columns of K int16 values.
                let k4 = (w.kernel_h as usize * w.kernel_w as usize * tin.c as usize).div_ceil(4);
                scratch = scratch.max(2 * 4 * k4 * 2);
            }
            peer_arrays(&mut h, &o, &tin, &tout)?
        } else {
            (0, "NULL, NULL, NULL, NULL".to_string())
        };
        let desc = format!(
            "{} {}x{}x{} -> {}x{}x{}{}",
            o.kind.name(),
            tin.c,
            tin.h,
            tin.w,
            tout.c,
            tout.h,
            tout.w,
            if o.kind == OpKind::FullyConnected {
                String::new()
            } else {
                format!(
                    " k{}x{} s{} p{}",
                    w.kernel_h, w.kernel_w, w.stride_h, w.pad_top
                )
            }
        );
        writeln!(
            ops,
            "    {{{kind}, \"{desc}\", {{{}, {}, {}}}, {{{}, {}, {}}}, {}, {}, {}, {}, {input_offset}, {}, {}, {},\n     {arrays}}},",
            tin.c, tin.h, tin.w, tout.c, tout.h, tout.w, w.kernel_h, w.kernel_w, w.stride_h, w.pad_top,
            tout.zero_point, o.act_min, o.act_max,
        )
        .unwrap();
    }
    if prev != m.output_tensor() {
        return Err("the last op does not write the model's output".into());
    }
    let (c, hh, w) = m.input_shape();
    write!(
        h,
        "\n#define PEER_INPUT_C {c}\n#define PEER_INPUT_H {hh}\n#define PEER_INPUT_W {w}\n\
         #define PEER_OUTPUT_LEN {}\n#define PEER_N_OPS {}\n\
         /* Largest tensor: the size of each of the two activation buffers. */\n\
         #define PEER_MAX_TENSOR_BYTES {max_bytes}\n\
         /* Upper bound of arm_convolve_wrapper_s8_get_buffer_size (the harness checks it). */\n\
         #define PEER_SCRATCH_BYTES {}\n\n\
         static const struct peer_op peer_ops[PEER_N_OPS] = {{\n{ops}}};\n",
        m.output_len(),
        m.num_ops(),
        scratch.max(4),
    )
    .unwrap();
    Ok(h)
}
