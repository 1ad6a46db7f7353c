//! PyTorch `.pth` files, as `torch.save` writes them (a zip holding a pickle and the tensor
//! storages), read through candle's pickle reader: a state_dict, or a training checkpoint dict
//! that holds one under a usual key.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

use candle_core::pickle;
use candle_core::Tensor;

/// Keys under which training scripts keep the model's state_dict in a checkpoint dict, tried
/// in this order when the file's top level holds no tensors.
const STATE_DICT_KEYS: [&str; 3] = ["state_dict", "model", "model_state_dict"];

/// What a file's first bytes say it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Container {
    /// A zip archive: `torch.save` since PyTorch 1.6.
    Zip,
    /// A bare pickle stream: `torch.save` before 1.6, or `_use_new_zipfile_serialization=False`.
    LegacyPickle,
    /// Anything else (safetensors, or not a checkpoint at all).
    Other,
}

impl Container {
    pub fn of(bytes: &[u8]) -> Self {
        // A zip's first local file header; pickle protocol 2+ opens with the PROTO opcode.
        if bytes.starts_with(b"PK\x03\x04") {
            Container::Zip
        } else if bytes.len() >= 2 && bytes[0] == 0x80 && (2..=5).contains(&bytes[1]) {
            Container::LegacyPickle
        } else {
            Container::Other
        }
    }
}

/// The tensors of the state_dict in the zip-format `.pth` at `path`, by their names in the
/// file; or why there are none.
pub fn read(path: &Path) -> Result<HashMap<String, Tensor>, String> {
    // candle's pickle reader indexes into what the pickle says without always checking it, so
    // a damaged file could panic inside it: that becomes an error like any other.
    let guarded = std::panic::catch_unwind(|| read_unguarded(path));
    guarded.unwrap_or_else(|_| {
        Err("its pickle is malformed (the file is damaged or not a PyTorch state_dict)".into())
    })
}

/// A candle error's message, without the backtrace candle may have captured.
fn message(e: candle_core::Error) -> String {
    crate::error::without_backtrace(e).to_string()
}

fn read_unguarded(path: &Path) -> Result<HashMap<String, Tensor>, String> {
    let unreadable = |e| {
        format!(
            "not a readable PyTorch zip file ({}); is it truncated?",
            message(e)
        )
    };
    for key in std::iter::once(None).chain(STATE_DICT_KEYS.map(Some)) {
        let pth = match pickle::PthTensors::new(path, key) {
            Ok(pth) => pth,
            // The top level is a dict without this key: try the next one.
            Err(_) if key.is_some() => continue,
            Err(e) => return Err(unreadable(e)),
        };
        if pth.tensor_infos().is_empty() {
            continue;
        }
        let mut tensors = HashMap::with_capacity(pth.tensor_infos().len());
        for (name, info) in pth.tensor_infos() {
            let l = &info.layout;
            let t = if l.is_contiguous() || l.is_fortran_contiguous() {
                pth.get(name)
                    .map_err(message)
                    .and_then(|t| t.ok_or_else(|| "listed but not found in the file".to_string()))
            } else {
                read_permuted(path, info)
            };
            tensors.insert(
                name.clone(),
                t.map_err(|e| format!("tensor '{name}': {e}"))?,
            );
        }
        return Ok(tensors);
    }
    Err(format!(
        "holds no tensors, neither at its top level nor under any of the keys {}: save \
         `model.state_dict()`",
        STATE_DICT_KEYS.map(|k| format!("'{k}'")).join(", ")
    ))
}

/// A tensor whose storage holds its elements densely but with the dimensions in another
/// order, as `channels_last` convolution weights are saved (candle's reader takes only
/// row- and column-major ones): read in storage order, then permuted back.
fn read_permuted(path: &Path, info: &pickle::TensorInfo) -> Result<Tensor, String> {
    let (dims, strides) = (info.layout.dims(), info.layout.stride());
    // The dimensions from the outermost in storage (largest stride) to the innermost.
    let mut order: Vec<usize> = (0..dims.len()).collect();
    order.sort_by_key(|&d| std::cmp::Reverse((strides[d], dims[d])));
    let mut dense = 1;
    for &d in order.iter().rev() {
        if dims[d] != 1 && strides[d] != dense {
            return Err(format!(
                "stored with strides {strides:?} for shape {dims:?}, not densely: save it \
                 with `.contiguous()`"
            ));
        }
        dense *= dims[d];
    }
    let stored: Vec<usize> = order.iter().map(|&d| dims[d]).collect();
    let bytes = dense * info.dtype.size_in_bytes();
    let mut raw = vec![0u8; bytes];
    let zip_error = |e: zip::result::ZipError| e.to_string();
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut zip = zip::ZipArchive::new(std::io::BufReader::new(file)).map_err(zip_error)?;
    let mut entry = zip.by_name(&info.path).map_err(zip_error)?;
    // The layout's start offset is in bytes already.
    std::io::copy(
        &mut (&mut entry).take(info.layout.start_offset() as u64),
        &mut std::io::sink(),
    )
    .and_then(|_| entry.read_exact(&mut raw))
    .map_err(|e| format!("its storage is shorter than its shape needs ({e})"))?;
    let mut back = vec![0; order.len()];
    for (i, &d) in order.iter().enumerate() {
        back[d] = i;
    }
    Tensor::from_raw_buffer(&raw, info.dtype, &stored, &candle_core::Device::Cpu)
        .and_then(|t| t.permute(back)?.contiguous())
        .map_err(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containers_are_told_apart_by_their_first_bytes() {
        assert_eq!(Container::of(b"PK\x03\x04rest"), Container::Zip);
        assert_eq!(Container::of(&[0x80, 0x02, 0x8a]), Container::LegacyPickle);
        // A safetensors header: a little-endian length, then JSON.
        assert_eq!(Container::of(b"\x10\0\0\0\0\0\0\0{}"), Container::Other);
        assert_eq!(Container::of(b""), Container::Other);
        assert_eq!(Container::of(&[0x80]), Container::Other);
    }
}
