//! PyTorch `.pth` files, as `torch.save` writes them (a zip holding a pickle and the tensor
//! storages), read through candle's pickle reader: a state_dict, or a training checkpoint dict
//! that holds one under a usual key.

use std::collections::HashMap;
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

fn read_unguarded(path: &Path) -> Result<HashMap<String, Tensor>, String> {
    let unreadable =
        |e: candle_core::Error| format!("not a readable PyTorch zip file ({e}); is it truncated?");
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
        for name in pth.tensor_infos().keys() {
            let t = pth
                .get(name)
                .map_err(|e| format!("tensor '{name}': {e}"))?
                .ok_or_else(|| format!("tensor '{name}' vanished while reading"))?;
            tensors.insert(name.clone(), t);
        }
        return Ok(tensors);
    }
    Err(format!(
        "holds no tensors, neither at its top level nor under any of the keys {}: save \
         `model.state_dict()`",
        STATE_DICT_KEYS.map(|k| format!("'{k}'")).join(", ")
    ))
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
