//! Crafted checkpoints: seeded mutations of a valid octet safetensors checkpoint, in its
//! structure (the header's length, dtypes, shapes, data offsets, entries) and in its octet
//! metadata (values null, non-finite, negative, huge, of the wrong type, missing; the fields
//! of issue 19: gamma, normalisation, model, epoch), plus NaN in the tensor data and
//! truncation. Shared by the trainer's in-process test (`hostile.rs`) and the command line's
//! (`tests/crafted_inputs.rs`).
#![allow(dead_code)]

use rand::{Rng as _, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};

/// The seeded generator the mutations draw from (ChaCha8, as the trainer's own shuffling).
pub struct Rng(ChaCha8Rng);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(ChaCha8Rng::seed_from_u64(seed))
    }
    pub fn below(&mut self, n: usize) -> usize {
        self.0.random_range(0..n.max(1))
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len())]
    }
}

/// A safetensors file taken apart: header JSON and the data after it.
pub struct Parts {
    pub header: serde_json::Map<String, Value>,
    pub data: Vec<u8>,
}

/// Takes a (valid) safetensors file apart.
pub fn split(bytes: &[u8]) -> Parts {
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    Parts {
        header,
        data: bytes[8 + n..].to_vec(),
    }
}

/// Puts it back together (header padded to 8 bytes, as safetensors writes it).
pub fn join(p: &Parts) -> Vec<u8> {
    let mut h = serde_json::to_vec(&p.header).unwrap();
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&h);
    out.extend_from_slice(&p.data);
    out
}

fn tensor_names(p: &Parts) -> Vec<String> {
    let mut v: Vec<String> = p
        .header
        .keys()
        .filter(|k| *k != "__metadata__")
        .cloned()
        .collect();
    v.sort();
    v
}

/// `bytes` with its octet metadata edited by `f`.
pub fn edit_meta(bytes: &[u8], f: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut p = split(bytes);
    let s = p.header["__metadata__"]["octet"]
        .as_str()
        .unwrap()
        .to_string();
    let mut meta: Value = serde_json::from_str(&s).unwrap();
    f(&mut meta);
    p.header["__metadata__"]["octet"] = Value::String(meta.to_string());
    join(&p)
}

/// `bytes` with element `i` of the f32 tensor `name` set to `v`.
pub fn set_f32(bytes: &[u8], name: &str, i: usize, v: f32) -> Vec<u8> {
    let mut p = split(bytes);
    assert_eq!(p.header[name]["dtype"], "F32");
    let at = p.header[name]["data_offsets"][0].as_u64().unwrap() as usize + 4 * i;
    p.data[at..at + 4].copy_from_slice(&v.to_le_bytes());
    join(&p)
}

/// A hostile JSON value.
fn hostile(rng: &mut Rng) -> Value {
    rng.pick(&[
        Value::Null,
        json!("NaN"),
        json!("inf"),
        json!(-1),
        json!(0),
        json!(1e308),
        json!(-1e308),
        json!(u64::MAX),
        json!(1_000_000u64),
        json!(1.5),
        json!(true),
        json!([]),
        json!({}),
        json!(""),
        json!([0.0]),
        json!("resnet18"),
    ])
    .clone()
}

/// Every path to a leaf or container of `v` (object keys and array indices).
fn paths(v: &Value, at: &mut Vec<Value>, out: &mut Vec<Vec<Value>>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                at.push(json!(k));
                out.push(at.clone());
                paths(x, at, out);
                at.pop();
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate().take(4) {
                at.push(json!(i));
                out.push(at.clone());
                paths(x, at, out);
                at.pop();
            }
        }
        _ => {}
    }
}

/// The parent of `path` in `v`, and the last key.
fn parent<'a>(v: &'a mut Value, path: &[Value]) -> Option<(&'a mut Value, Value)> {
    let (last, init) = path.split_last()?;
    let mut cur = v;
    for k in init {
        cur = match k {
            Value::String(s) => cur.get_mut(s.as_str())?,
            Value::Number(n) => cur.get_mut(n.as_u64()? as usize)?,
            _ => return None,
        };
    }
    Some((cur, last.clone()))
}

fn set(v: &mut Value, path: &[Value], new: Option<Value>) {
    if let Some((p, k)) = parent(v, path) {
        match (p, k, new) {
            (Value::Object(m), Value::String(k), Some(x)) => {
                m.insert(k, x);
            }
            (Value::Object(m), Value::String(k), None) => {
                m.remove(&k);
            }
            (Value::Array(a), Value::Number(i), Some(x)) => {
                if let Some(slot) = a.get_mut(i.as_u64().unwrap_or(0) as usize) {
                    *slot = x;
                }
            }
            (Value::Array(a), Value::Number(i), None) => {
                let i = i.as_u64().unwrap_or(0) as usize;
                if i < a.len() {
                    a.remove(i);
                }
            }
            _ => {}
        }
    }
}

/// The metadata fields issue 19 names, with values that broke the readers.
fn targeted(meta: &mut Value, rng: &mut Rng) -> String {
    let (path, value): (&[&str], Value) = match rng.below(14) {
        0 => (
            &["config", "schedule"],
            json!({"kind": "step", "every": 1, "gamma": null}),
        ),
        1 => (
            &["config", "schedule"],
            json!({"kind": "step", "every": 0, "gamma": 0.1}),
        ),
        2 => (
            &["config", "schedule"],
            json!({"kind": "step", "every": 1, "gamma": 1e300}),
        ),
        3 => (&["normalization", "std"], json!([0.0])),
        4 => (&["normalization", "std"], json!([])),
        5 => (&["normalization", "mean"], json!([])),
        6 => (&["normalization", "std"], json!([-1.0])),
        7 => (&["normalization", "mean"], json!([0.5, 0.5, 0.5])),
        8 => (&["model"], json!("resnet18")),
        9 => (&["model"], json!("vgg16")),
        10 => (&["epoch"], json!(1_000_000)),
        11 => (&["in_channels"], json!(3)),
        12 => (&["classes"], json!(1_000_000_000u64)),
        _ => (&["config", "lr"], json!(-1.0)),
    };
    let p: Vec<Value> = path.iter().map(|s| json!(s)).collect();
    set(meta, &p, Some(value.clone()));
    format!("metadata {} = {value}", path.join("."))
}

/// One mutation of the checkpoint `bytes`; what it did.
fn mutate_once(bytes: &mut Vec<u8>, rng: &mut Rng) -> String {
    if bytes.len() < 8 {
        return "too short to mutate".into();
    }
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    let parsable = n as usize <= bytes.len() - 8
        && serde_json::from_slice::<serde_json::Map<String, Value>>(&bytes[8..8 + n as usize])
            .is_ok();
    let choice = if parsable {
        rng.below(16)
    } else {
        12 + rng.below(4)
    };
    if choice >= 12 {
        return raw(bytes, rng, choice);
    }
    let mut p = split(bytes);
    let names = tensor_names(&p);
    let what = match choice {
        0..=4 => {
            // The octet metadata.
            let Some(Value::String(s)) = p
                .header
                .get("__metadata__")
                .and_then(|m| m.get("octet"))
                .cloned()
            else {
                return "no metadata to mutate".into();
            };
            let mut meta: Value = match serde_json::from_str(&s) {
                Ok(v) => v,
                Err(_) => return "metadata not JSON".into(),
            };
            let what = if choice <= 1 {
                targeted(&mut meta, rng)
            } else {
                let mut all = Vec::new();
                paths(&meta, &mut Vec::new(), &mut all);
                let path = rng.pick(&all).clone();
                let shown: Vec<String> = path.iter().map(|k| k.to_string()).collect();
                if rng.below(5) == 0 {
                    set(&mut meta, &path, None);
                    format!("metadata {} removed", shown.join("."))
                } else {
                    let v = hostile(rng);
                    set(&mut meta, &path, Some(v.clone()));
                    format!("metadata {} = {v}", shown.join("."))
                }
            };
            let text = if rng.below(20) == 0 {
                s[..rng.below(s.len())].to_string()
            } else {
                meta.to_string()
            };
            p.header
                .get_mut("__metadata__")
                .and_then(|m| m.as_object_mut())
                .map(|m| m.insert("octet".into(), Value::String(text)));
            what
        }
        5 => {
            let t = rng.pick(&names).clone();
            let d = rng
                .pick(&[
                    "F32", "F16", "BF16", "F64", "I64", "U8", "BOOL", "F8_E4M3", "XX",
                ])
                .to_string();
            p.header[&t]["dtype"] = json!(d);
            format!("{t} dtype {d}")
        }
        6 | 7 => {
            let t = rng.pick(&names).clone();
            let mut shape: Vec<Value> = p.header[&t]["shape"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            match rng.below(6) {
                0 => shape.push(json!(1)),
                1 => {
                    shape.pop();
                }
                2 => shape.insert(0, json!(0)),
                3 => shape = vec![json!(1u64 << 40), json!(1u64 << 40)],
                4 => shape.reverse(),
                _ => {
                    if let Some(d) = shape.first_mut() {
                        *d = json!(d.as_u64().unwrap_or(1) * 2);
                    }
                }
            }
            p.header[&t]["shape"] = json!(shape);
            format!("{t} shape {}", p.header[&t]["shape"])
        }
        8 | 9 => {
            let t = rng.pick(&names).clone();
            let o = &p.header[&t]["data_offsets"];
            let (a, b) = (o[0].as_u64().unwrap_or(0), o[1].as_u64().unwrap_or(0));
            let new = match rng.below(6) {
                0 => json!([b, a]),
                1 => json!([a + 1, b + 1]),
                2 => json!([a, b.saturating_sub(1)]),
                3 => json!([a, u64::MAX]),
                4 => json!([0, 0]),
                _ => json!([a, b + 4]),
            };
            p.header[&t]["data_offsets"] = new.clone();
            format!("{t} data_offsets {new}")
        }
        10 => {
            let t = rng.pick(&names).clone();
            p.header.remove(&t);
            format!("{t} removed")
        }
        _ => {
            let t = rng.pick(&names).clone();
            let v = p.header.remove(&t).unwrap();
            let new = rng
                .pick(&[
                    "conv1.weight",
                    "linear.weight",
                    "fc3.weight",
                    "optim.momentum.x",
                    "x",
                ])
                .to_string();
            p.header.insert(new.clone(), v);
            format!("{t} renamed {new}")
        }
    };
    *bytes = join(&p);
    what
}

/// Byte-level mutations: the header length, NaN in the data, truncation, a flipped byte.
fn raw(bytes: &mut Vec<u8>, rng: &mut Rng, choice: usize) -> String {
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    match choice {
        12 => {
            let v = *rng.pick(&[
                0,
                n.wrapping_add(1),
                n.wrapping_sub(1),
                u64::MAX,
                1 << 40,
                bytes.len() as u64,
            ]);
            bytes[..8].copy_from_slice(&v.to_le_bytes());
            format!("header length {n} -> {v}")
        }
        13 => {
            // NaN or infinity into the data (aligned to 4: an f32 element).
            let start = 8usize.saturating_add(n as usize);
            if start >= bytes.len() {
                return "no data".into();
            }
            let at = (start + rng.below(bytes.len() - start)) & !3;
            let v = *rng.pick(&[f32::NAN, f32::INFINITY, f32::NEG_INFINITY]);
            if at >= start && at + 4 <= bytes.len() {
                bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
            }
            format!("{v} at byte {at}")
        }
        14 => {
            let len = rng.below(bytes.len());
            bytes.truncate(len.max(1));
            format!("truncated to {}", bytes.len())
        }
        _ => {
            let at = rng.below(bytes.len());
            bytes[at] ^= 1 << rng.below(8);
            format!("bit flip at byte {at}")
        }
    }
}

/// A mutant of `base`: one to three mutations.
pub fn mutate(base: &[u8], rng: &mut Rng) -> (Vec<u8>, String) {
    let mut b = base.to_vec();
    let n = 1 + rng.below(6).saturating_sub(3);
    let what: Vec<String> = (0..n).map(|_| mutate_once(&mut b, rng)).collect();
    (b, what.join("; "))
}
