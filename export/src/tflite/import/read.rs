//! A `.tflite` file read safely: the flatbuffer verified (flatbuffers' verifier: every offset,
//! table and vector checked before any access), then its one subgraph's tensors, operators and
//! constant buffers behind accessors that check every index the file holds, so that a hostile
//! file is an error, never a panic.

use super::super::schema::{self, BuiltinOperator, Operator, QuantizationParameters, TensorType};
use super::ImportError;

/// Largest flatbuffer the verifier walks (the default is 2 GiB; octet's models are small and a
/// bound keeps a hostile size field from costing time).
const MAX_FILE: usize = 512 << 20;

/// A verified `.tflite` model with one subgraph.
pub(super) struct TfliteFile<'a> {
    bytes: &'a [u8],
    model: schema::Model<'a>,
    graph: schema::SubGraph<'a>,
}

/// A tensor of the subgraph, its fields read once.
#[derive(Debug, Clone)]
pub(super) struct TensorView<'a> {
    pub index: usize,
    pub name: &'a str,
    pub shape: Vec<i32>,
    pub dtype: TensorType,
    /// Per-tensor or per-channel scales (empty: not quantized).
    pub scales: Vec<f32>,
    pub zero_points: Vec<i64>,
    pub quantized_dimension: i32,
    /// The constant data, when the tensor has a non-empty buffer.
    pub data: Option<&'a [u8]>,
}

impl TensorView<'_> {
    /// Elements (the product of the shape; 0 for a negative dimension).
    pub fn elements(&self) -> usize {
        self.shape
            .iter()
            .map(|&d| usize::try_from(d).unwrap_or(0))
            .product()
    }

    /// The one scale and zero point of a per-tensor quantized tensor.
    pub fn per_tensor(&self) -> Option<(f32, i32)> {
        match (self.scales.as_slice(), self.zero_points.as_slice()) {
            ([s], [z]) => Some((*s, i32::try_from(*z).ok()?)),
            _ => None,
        }
    }
}

/// An operator: its position, builtin code, input and output tensor indices (−1: absent).
#[derive(Debug, Clone)]
pub(super) struct OpView<'a> {
    pub index: usize,
    pub code: BuiltinOperator,
    pub inputs: Vec<i32>,
    pub outputs: Vec<i32>,
    pub op: Operator<'a>,
}

impl OpView<'_> {
    /// TFLite's name of the builtin (`CONV_2D`), or its number.
    pub fn name(&self) -> String {
        builtin_name(self.code)
    }
}

/// TFLite's name of a builtin operator code, or `builtin N`.
pub(super) fn builtin_name(code: BuiltinOperator) -> String {
    code.variant_name()
        .map_or_else(|| format!("builtin {}", code.0), str::to_string)
}

impl<'a> TfliteFile<'a> {
    /// Verifies `bytes` as a TFLite flatbuffer with exactly one subgraph.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, ImportError> {
        if bytes.len() < 8 {
            return Err(ImportError::NotTflite(format!(
                "{} bytes is too short for a flatbuffer",
                bytes.len()
            )));
        }
        if &bytes[4..8] != b"TFL3" {
            return Err(ImportError::NotTflite(
                "no TFL3 identifier at bytes 4..8 (not a .tflite flatbuffer)".into(),
            ));
        }
        if bytes.len() > MAX_FILE {
            return Err(ImportError::NotTflite(format!(
                "{} bytes is more than the {} MiB octet reads",
                bytes.len(),
                MAX_FILE >> 20
            )));
        }
        let opts = flatbuffers::VerifierOptions {
            max_apparent_size: MAX_FILE,
            ..Default::default()
        };
        let model = schema::root_as_model_with_opts(&opts, bytes).map_err(|e| {
            ImportError::NotTflite(format!("the flatbuffer fails verification: {e}"))
        })?;
        let graphs = model
            .subgraphs()
            .ok_or_else(|| ImportError::NotTflite("no subgraph".into()))?;
        if graphs.len() != 1 {
            return Err(ImportError::Unsupported(format!(
                "{} subgraphs: octet imports models of one subgraph (no control flow)",
                graphs.len()
            )));
        }
        Ok(TfliteFile {
            bytes,
            model,
            graph: graphs.get(0),
        })
    }

    /// Tensor `index`, or an error naming `what` refers to it.
    pub fn tensor(&self, index: i32, what: &str) -> Result<TensorView<'a>, ImportError> {
        let tensors = self.graph.tensors().ok_or_else(|| {
            ImportError::Malformed(format!("{what}: the subgraph has no tensors"))
        })?;
        let i = usize::try_from(index)
            .ok()
            .filter(|&i| i < tensors.len())
            .ok_or_else(|| {
                ImportError::Malformed(format!(
                    "{what}: tensor {index} out of range (the subgraph has {})",
                    tensors.len()
                ))
            })?;
        let t = tensors.get(i);
        let q: Option<QuantizationParameters> = t.quantization();
        let scales = q
            .and_then(|q| q.scale())
            .map_or_else(Vec::new, |v| v.iter().collect());
        let zero_points = q
            .and_then(|q| q.zero_point())
            .map_or_else(Vec::new, |v| v.iter().collect());
        Ok(TensorView {
            index: i,
            name: t.name().unwrap_or(""),
            shape: t.shape().map_or_else(Vec::new, |s| s.iter().collect()),
            dtype: t.type_(),
            scales,
            zero_points,
            quantized_dimension: q.map_or(0, |q| q.quantized_dimension()),
            data: self.buffer(t.buffer(), what)?,
        })
    }

    /// The bytes of buffer `index` (`None` for an empty one), inline or, in files over 2 GiB's
    /// layout, at its offset in the file.
    fn buffer(&self, index: u32, what: &str) -> Result<Option<&'a [u8]>, ImportError> {
        let Some(buffers) = self.model.buffers() else {
            return Ok(None);
        };
        if index as usize >= buffers.len() {
            return Err(ImportError::Malformed(format!(
                "{what}: buffer {index} out of range (the file has {})",
                buffers.len()
            )));
        }
        let b = buffers.get(index as usize);
        if let Some(d) = b.data().filter(|d| !d.is_empty()) {
            return Ok(Some(d));
        }
        // Large models keep buffers after the flatbuffer: offset 1 means "none".
        let (off, size) = (b.offset(), b.size_());
        if off > 1 && size > 0 {
            let range = usize::try_from(off)
                .ok()
                .zip(usize::try_from(size).ok())
                .and_then(|(o, s)| Some(o..o.checked_add(s)?))
                .filter(|r| r.end <= self.bytes.len())
                .ok_or_else(|| {
                    ImportError::Malformed(format!(
                        "{what}: buffer {index} at {off}+{size} lies outside the {}-byte file",
                        self.bytes.len()
                    ))
                })?;
            return Ok(Some(&self.bytes[range]));
        }
        Ok(None)
    }

    /// The subgraph's input and output tensor indices.
    pub fn io(&self) -> (Vec<i32>, Vec<i32>) {
        let v = |x: Option<flatbuffers::Vector<'a, i32>>| {
            x.map_or_else(Vec::new, |v| v.iter().collect())
        };
        (v(self.graph.inputs()), v(self.graph.outputs()))
    }

    /// The operators in execution order, each with its builtin code resolved (TFLite's rule:
    /// the larger of the deprecated 8-bit code and the 32-bit one).
    pub fn operators(&self) -> Result<Vec<OpView<'a>>, ImportError> {
        let codes = self.model.operator_codes();
        let ops = self
            .graph
            .operators()
            .ok_or_else(|| ImportError::Malformed("the subgraph has no operators".into()))?;
        let mut out = Vec::with_capacity(ops.len());
        for (index, op) in ops.iter().enumerate() {
            let oc = op.opcode_index() as usize;
            let code = codes
                .filter(|c| oc < c.len())
                .map(|c| c.get(oc))
                .ok_or_else(|| {
                    ImportError::Malformed(format!(
                        "operator {index}: opcode index {oc} out of range"
                    ))
                })?;
            if code.custom_code().is_some() {
                return Err(ImportError::Unsupported(format!(
                    "operator {index} is the custom op '{}': octet runs builtin ops only",
                    code.custom_code().unwrap_or("")
                )));
            }
            let builtin = (code.deprecated_builtin_code() as i32).max(code.builtin_code().0);
            let ids = |v: Option<flatbuffers::Vector<'a, i32>>| {
                v.map_or_else(Vec::new, |v| v.iter().collect::<Vec<i32>>())
            };
            out.push(OpView {
                index,
                code: BuiltinOperator(builtin),
                inputs: ids(op.inputs()),
                outputs: ids(op.outputs()),
                op,
            });
        }
        Ok(out)
    }
}
