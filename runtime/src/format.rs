//! The `.o8` layout (`runtime/FORMAT.md`) in one place, for reading and writing: the format's
//! constants and field offsets, zero-copy views of the records (the runtime's reader), and
//! their encoders (`*Fields::write_to`, the exporter's writer).
//!
//! Fields are read with `from_le_bytes` on bounds-checked slices; a view over too short a
//! slice reads zeros rather than panicking (the constructors check the length anyway).

/// File magic.
pub const MAGIC: [u8; 8] = *b"OCTET8\r\n";
/// Format version (3: scratch stated by the kernels, not the file; the embedded op set; int8
/// inputs; the rounding recorded; FORMAT.md).
pub const VERSION: u16 = 3;
/// Header length in bytes.
pub const HEADER_LEN: usize = 80;
/// Tensor record length in bytes.
pub const TENSOR_LEN: usize = 32;
/// Op record length in bytes.
pub const OP_LEN: usize = 80;
/// Alignment of the data section (from the file start) and of i8 arrays in it.
pub const DATA_ALIGN: usize = 16;
/// Alignment of i32 arrays in the data section.
pub const I32_ALIGN: usize = 4;
/// The "no tensor" id (input 1 of every op but add).
pub const NO_TENSOR: u16 = 0xFFFF;
/// Largest number of multiply-adds per output (kh·kw·C_in or K).
pub const MAX_ACCUMULATION: u32 = 65_536;
/// First byte of the CRC-covered range.
pub const CRC_START: usize = 16;

/// The header's CRC-32 (the format's one definition): IEEE 802.3 as zlib and PNG compute it
/// (reflected polynomial 0x04C11DB7, initial value and final XOR 0xFFFFFFFF).
pub fn crc32(bytes: &[u8]) -> u32 {
    CRC32.checksum(bytes)
}

/// Slicing by 16 (16 KiB of table) on hosts; byte at a time (1 KiB) without `std`, where the
/// table is flash a microcontroller pays for and the CRC runs once per `Model::parse`.
#[cfg(feature = "std")]
type CrcTable = crc::Table<16>;
#[cfg(not(feature = "std"))]
type CrcTable = crc::Table<1>;
static CRC32: crc::Crc<u32, CrcTable> = crc::Crc::<u32, CrcTable>::new(&crc::CRC_32_ISO_HDLC);

/// Op kind code: conv2d.
pub const OP_CONV2D: u8 = 1;
/// Op kind code: fully_connected.
pub const OP_FULLY_CONNECTED: u8 = 2;
/// Op kind code: max_pool.
pub const OP_MAX_POOL: u8 = 3;
/// Op kind code: avg_pool.
pub const OP_AVG_POOL: u8 = 4;
/// Op kind code: add (octet's requantizing residual add).
pub const OP_ADD: u8 = 5;
/// Op kind code: depthwise_conv2d.
pub const OP_DEPTHWISE_CONV2D: u8 = 6;
/// Op kind code: tflite_avg_pool (TFLite's AVERAGE_POOL_2D: same quantization in and out).
pub const OP_TFLITE_AVG_POOL: u8 = 7;
/// Op kind code: softmax (TFLite's integer algorithm).
pub const OP_SOFTMAX: u8 = 8;
/// Op kind code: reshape (the same bytes under another shape).
pub const OP_RESHAPE: u8 = 9;
/// Op kind code: pad.
pub const OP_PAD: u8 = 10;
/// Op kind code: tflite_add (TFLite's ADD: three requantizations).
pub const OP_TFLITE_ADD: u8 = 11;

/// Input encoding: raw `u8` pixels, planar C×H×W as data sets store them, converted to the
/// int8 input tensor as q = pixel − 128 (octet's exports).
pub const INPUT_U8_CHW: u8 = 1;
/// Input encoding: the int8 input tensor itself, H×W×C (TFLite's int8 input).
pub const INPUT_I8_HWC: u8 = 2;
/// Input encoding: `u8` values, H×W×C, converted as q = u − 128 (TFLite's uint8 input
/// followed by the QUANTIZE that only moves the zero point by 128).
pub const INPUT_U8_HWC: u8 = 3;

/// What a caller passes for one input: the header's input encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InputEncoding {
    /// Raw `u8` pixels, planar C×H×W; q = pixel − 128 ([`INPUT_U8_CHW`]).
    PixelsU8Chw,
    /// The int8 tensor, H×W×C ([`INPUT_I8_HWC`]).
    I8Hwc,
    /// `u8` values, H×W×C; q = u − 128 ([`INPUT_U8_HWC`]).
    U8Hwc,
}

impl InputEncoding {
    /// The encoding of a header code.
    pub const fn from_code(code: u8) -> Option<Self> {
        match code {
            INPUT_U8_CHW => Some(InputEncoding::PixelsU8Chw),
            INPUT_I8_HWC => Some(InputEncoding::I8Hwc),
            INPUT_U8_HWC => Some(InputEncoding::U8Hwc),
            _ => None,
        }
    }

    /// The header code.
    pub const fn code(self) -> u8 {
        match self {
            InputEncoding::PixelsU8Chw => INPUT_U8_CHW,
            InputEncoding::I8Hwc => INPUT_I8_HWC,
            InputEncoding::U8Hwc => INPUT_U8_HWC,
        }
    }

    /// Short name (`u8-chw-pixels`, `i8-hwc`, `u8-hwc`), as reports spell it.
    pub const fn name(self) -> &'static str {
        match self {
            InputEncoding::PixelsU8Chw => "u8-chw-pixels",
            InputEncoding::I8Hwc => "i8-hwc",
            InputEncoding::U8Hwc => "u8-hwc",
        }
    }

    /// Whether the input bytes are unsigned, the tensor q = u − 128.
    pub const fn is_u8(self) -> bool {
        !matches!(self, InputEncoding::I8Hwc)
    }
}

/// Byte offsets of the header fields.
pub mod header {
    /// `[u8; 8]` magic.
    pub const MAGIC: usize = 0;
    /// u16 version.
    pub const VERSION: usize = 8;
    /// u16 header length.
    pub const HEADER_LEN: usize = 10;
    /// u32 CRC-32 of `[16, file_len)`.
    pub const CRC: usize = 12;
    /// u32 file length.
    pub const FILE_LEN: usize = 16;
    /// u32 arena bytes for one image.
    pub const ARENA_BYTES: usize = 20;
    /// u16 ×3 input c, h, w.
    pub const INPUT_CHW: usize = 24;
    /// u16 input tensor id.
    pub const INPUT_TENSOR: usize = 30;
    /// u16 output tensor id.
    pub const OUTPUT_TENSOR: usize = 32;
    /// u8 input encoding (`INPUT_*`).
    pub const INPUT_ENCODING: usize = 34;
    /// u8 rounding code (`Rounding::code`).
    pub const ROUNDING: usize = 35;
    /// u32 tensor count.
    pub const N_TENSORS: usize = 36;
    /// u32 tensor table offset.
    pub const TENSOR_TABLE: usize = 40;
    /// u32 op count.
    pub const N_OPS: usize = 44;
    /// u32 op table offset.
    pub const OP_TABLE: usize = 48;
    /// u32 data offset.
    pub const DATA_OFFSET: usize = 52;
    /// u32 data length.
    pub const DATA_LEN: usize = 56;
    /// f32 output scale.
    pub const OUTPUT_SCALE: usize = 60;
    /// i32 output zero point.
    pub const OUTPUT_ZERO_POINT: usize = 64;
    /// f32 input scale (informative; = the input tensor's).
    pub const INPUT_SCALE: usize = 68;
    /// i32 input zero point (= the input tensor's).
    pub const INPUT_ZERO_POINT: usize = 72;
    /// `[u8; 4]` reserved.
    pub const RESERVED: usize = 76;
}

/// Byte offsets of the tensor record fields.
pub mod tensor {
    /// u16 ×3 c, h, w.
    pub const CHW: usize = 0;
    /// u16 reserved.
    pub const RESERVED0: usize = 6;
    /// f32 scale.
    pub const SCALE: usize = 8;
    /// i32 zero point.
    pub const ZERO_POINT: usize = 12;
    /// u32 arena offset.
    pub const OFFSET: usize = 16;
    /// u32 bytes.
    pub const BYTES: usize = 20;
    /// `[u8; 8]` reserved.
    pub const RESERVED1: usize = 24;
}

/// Byte offsets of the op record fields.
pub mod op {
    /// u8 kind.
    pub const KIND: usize = 0;
    /// u8 reserved.
    pub const RESERVED: usize = 1;
    /// u16 input 0.
    pub const INPUT0: usize = 2;
    /// u16 input 1.
    pub const INPUT1: usize = 4;
    /// u16 output.
    pub const OUTPUT: usize = 6;
    /// `[u8; 10]` the window ([`super::Window::BYTES`]): kernel h, w; stride h, w; pad top,
    /// left, bottom, right; dilation h, w.
    pub const WINDOW: usize = 8;
    /// u16 reserved.
    pub const RESERVED1: usize = 18;
    /// i32 act_min.
    pub const ACT_MIN: usize = 20;
    /// i32 act_max.
    pub const ACT_MAX: usize = 24;
    /// u32, u32 weights offset, length.
    pub const WEIGHTS: usize = 28;
    /// u32, u32 bias offset, length.
    pub const BIAS: usize = 36;
    /// u32, u32 multiplier offset, length.
    pub const MULTIPLIER: usize = 44;
    /// u32, u32 shift offset, length.
    pub const SHIFT: usize = 52;
    /// u32, u32 pad values offset, length.
    pub const PAD_VALUES: usize = 60;
    /// i32 a parameter of the kind (softmax: diff_min; pad: the pad value; tflite_add: the
    /// left shift), 0 for the others.
    pub const PARAM: usize = 68;
    /// `[u8; 8]` reserved.
    pub const RESERVED2: usize = 72;
}

/// An op's window: kernel, stride, padding and dilation (FORMAT.md, "Windows"); all zero for
/// ops without one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Window {
    /// Kernel height.
    pub kernel_h: u8,
    /// Kernel width.
    pub kernel_w: u8,
    /// Vertical stride.
    pub stride_h: u8,
    /// Horizontal stride.
    pub stride_w: u8,
    /// Rows of padding above the input.
    pub pad_top: u8,
    /// Columns of padding left of the input.
    pub pad_left: u8,
    /// Rows of padding below the input.
    pub pad_bottom: u8,
    /// Columns of padding right of the input.
    pub pad_right: u8,
    /// Vertical dilation.
    pub dilation_h: u8,
    /// Horizontal dilation.
    pub dilation_w: u8,
}

impl Window {
    /// Bytes in the op record.
    pub const BYTES: usize = 10;

    /// A k×k window with one stride, the same padding on every side and no dilation (octet's
    /// own layers).
    pub const fn square(k: u8, stride: u8, pad: u8) -> Window {
        Window {
            kernel_h: k,
            kernel_w: k,
            stride_h: stride,
            stride_w: stride,
            pad_top: pad,
            pad_left: pad,
            pad_bottom: pad,
            pad_right: pad,
            dilation_h: 1,
            dilation_w: 1,
        }
    }

    /// The record's bytes, in field order.
    pub const fn to_bytes(self) -> [u8; Window::BYTES] {
        [
            self.kernel_h,
            self.kernel_w,
            self.stride_h,
            self.stride_w,
            self.pad_top,
            self.pad_left,
            self.pad_bottom,
            self.pad_right,
            self.dilation_h,
            self.dilation_w,
        ]
    }

    /// [`Window::to_bytes`] reversed.
    pub const fn from_bytes(b: [u8; Window::BYTES]) -> Window {
        Window {
            kernel_h: b[0],
            kernel_w: b[1],
            stride_h: b[2],
            stride_w: b[3],
            pad_top: b[4],
            pad_left: b[5],
            pad_bottom: b[6],
            pad_right: b[7],
            dilation_h: b[8],
            dilation_w: b[9],
        }
    }

    /// Whether every field is zero (ops without a window).
    pub const fn is_none(&self) -> bool {
        let b = self.to_bytes();
        let mut i = 0;
        while i < Window::BYTES {
            if b[i] != 0 {
                return false;
            }
            i += 1;
        }
        true
    }
}

#[inline]
fn bytes<const N: usize>(b: &[u8], off: usize) -> [u8; N] {
    match b.get(off..off.wrapping_add(N)) {
        Some(s) => {
            let mut a = [0u8; N];
            a.copy_from_slice(s);
            a
        }
        None => [0u8; N],
    }
}

/// Writes `v`'s bytes at `off`. The writer's side of [`le_u16`] and friends: the writer owns
/// its buffer, so a write out of bounds is a bug in it and panics.
#[inline]
fn put<const N: usize>(b: &mut [u8], off: usize, v: [u8; N]) {
    b[off..off + N].copy_from_slice(&v);
}

/// Little-endian getters of a record view, one line per field: `name: type @ offset`
/// (0 when out of bounds).
macro_rules! getters {
    ($($(#[$doc:meta])* $name:ident: $ty:ident @ $off:expr;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(&self) -> $ty {
                $ty::from_le_bytes(bytes(self.0, $off))
            }
        )*
    };
}

/// Three little-endian u16 (c, h, w) at `off`: [`put_chw`] reversed.
fn chw(b: &[u8], off: usize) -> (u16, u16, u16) {
    (le_u16(b, off), le_u16(b, off + 2), le_u16(b, off + 4))
}

/// Whether the bytes of every `(start, len)` field (a record's reserved fields) are zero.
fn reserved_zero(b: &[u8], fields: &[(usize, usize)]) -> bool {
    fields.iter().all(|&(at, len)| {
        b.get(at..at + len)
            .is_some_and(|r| r.iter().all(|&x| x == 0))
    })
}

/// Little-endian u16 at `off` (0 when out of bounds).
#[inline]
pub fn le_u16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes(bytes(b, off))
}

/// Little-endian u32 at `off` (0 when out of bounds).
#[inline]
pub fn le_u32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(bytes(b, off))
}

/// Little-endian i32 at `off` (0 when out of bounds).
#[inline]
pub fn le_i32(b: &[u8], off: usize) -> i32 {
    i32::from_le_bytes(bytes(b, off))
}

/// Little-endian f32 at `off` (0 when out of bounds).
#[inline]
pub fn le_f32(b: &[u8], off: usize) -> f32 {
    f32::from_le_bytes(bytes(b, off))
}

/// The header's values, those the format does not fix: what [`HeaderFields::write_to`] writes
/// and [`Header::fields`] reads.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HeaderFields {
    /// File length.
    pub file_len: u32,
    /// Working arena for one image.
    pub arena_bytes: u32,
    /// Input (c, h, w).
    pub input_chw: (u16, u16, u16),
    /// Input tensor id.
    pub input_tensor: u16,
    /// Output tensor id.
    pub output_tensor: u16,
    /// Input encoding (`INPUT_*`).
    pub input_encoding: u8,
    /// Rounding code ([`crate::requant::Rounding::code`]).
    pub rounding: u8,
    /// Tensor count.
    pub n_tensors: u32,
    /// Tensor table offset.
    pub tensor_table: u32,
    /// Op count.
    pub n_ops: u32,
    /// Op table offset.
    pub op_table: u32,
    /// Data section offset.
    pub data_offset: u32,
    /// Data section length.
    pub data_len: u32,
    /// Output scale (informative).
    pub output_scale: f32,
    /// Output zero point.
    pub output_zero_point: i32,
    /// Input scale (informative).
    pub input_scale: f32,
    /// Input zero point.
    pub input_zero_point: i32,
}

/// (c, h, w) as three little-endian u16 at `off`.
fn put_chw(b: &mut [u8], off: usize, (c, h, w): (u16, u16, u16)) {
    put(b, off, c.to_le_bytes());
    put(b, off + 2, h.to_le_bytes());
    put(b, off + 4, w.to_le_bytes());
}

impl HeaderFields {
    /// Writes the header into `out[..HEADER_LEN]`: magic, version, header length, these
    /// values, zero reserved bytes. The CRC covers the whole file, so it comes last: [`seal`].
    pub fn write_to(&self, out: &mut [u8]) {
        let h = &mut out[..HEADER_LEN];
        h.fill(0);
        put(h, header::MAGIC, MAGIC);
        put(h, header::VERSION, VERSION.to_le_bytes());
        put(h, header::HEADER_LEN, (HEADER_LEN as u16).to_le_bytes());
        put(h, header::FILE_LEN, self.file_len.to_le_bytes());
        put(h, header::ARENA_BYTES, self.arena_bytes.to_le_bytes());
        put_chw(h, header::INPUT_CHW, self.input_chw);
        put(h, header::INPUT_TENSOR, self.input_tensor.to_le_bytes());
        put(h, header::OUTPUT_TENSOR, self.output_tensor.to_le_bytes());
        h[header::INPUT_ENCODING] = self.input_encoding;
        h[header::ROUNDING] = self.rounding;
        put(h, header::N_TENSORS, self.n_tensors.to_le_bytes());
        put(h, header::TENSOR_TABLE, self.tensor_table.to_le_bytes());
        put(h, header::N_OPS, self.n_ops.to_le_bytes());
        put(h, header::OP_TABLE, self.op_table.to_le_bytes());
        put(h, header::DATA_OFFSET, self.data_offset.to_le_bytes());
        put(h, header::DATA_LEN, self.data_len.to_le_bytes());
        put(h, header::OUTPUT_SCALE, self.output_scale.to_le_bytes());
        put(
            h,
            header::OUTPUT_ZERO_POINT,
            self.output_zero_point.to_le_bytes(),
        );
        put(h, header::INPUT_SCALE, self.input_scale.to_le_bytes());
        put(
            h,
            header::INPUT_ZERO_POINT,
            self.input_zero_point.to_le_bytes(),
        );
    }
}

/// Stores the CRC-32 of `file[CRC_START..]` in the header: the last step of writing a file.
pub fn seal(file: &mut [u8]) {
    let crc = crc32(&file[CRC_START..]);
    put(file, header::CRC, crc.to_le_bytes());
}

/// View of the 80-byte header.
#[derive(Clone, Copy, Debug)]
pub struct Header<'a>(&'a [u8]);

impl<'a> Header<'a> {
    /// The header at the start of `file`, if the file is long enough.
    pub fn new(file: &'a [u8]) -> Option<Self> {
        file.get(..HEADER_LEN).map(Header)
    }
    /// Magic bytes.
    pub fn magic(&self) -> [u8; 8] {
        bytes(self.0, header::MAGIC)
    }
    getters! {
        /// Format version.
        version: u16 @ header::VERSION;
        /// Header length.
        header_len: u16 @ header::HEADER_LEN;
        /// Stored CRC-32.
        crc: u32 @ header::CRC;
        /// Declared file length.
        file_len: u32 @ header::FILE_LEN;
        /// Working arena for one image.
        arena_bytes: u32 @ header::ARENA_BYTES;
        /// Input tensor id.
        input_tensor: u16 @ header::INPUT_TENSOR;
        /// Output tensor id.
        output_tensor: u16 @ header::OUTPUT_TENSOR;
        /// Input encoding (`INPUT_*`).
        input_encoding: u8 @ header::INPUT_ENCODING;
        /// Rounding code.
        rounding: u8 @ header::ROUNDING;
        /// Tensor count.
        n_tensors: u32 @ header::N_TENSORS;
        /// Tensor table offset.
        tensor_table: u32 @ header::TENSOR_TABLE;
        /// Op count.
        n_ops: u32 @ header::N_OPS;
        /// Op table offset.
        op_table: u32 @ header::OP_TABLE;
        /// Data section offset.
        data_offset: u32 @ header::DATA_OFFSET;
        /// Data section length.
        data_len: u32 @ header::DATA_LEN;
        /// Output scale (informative).
        output_scale: f32 @ header::OUTPUT_SCALE;
        /// Output zero point.
        output_zero_point: i32 @ header::OUTPUT_ZERO_POINT;
        /// Input scale (informative).
        input_scale: f32 @ header::INPUT_SCALE;
        /// Input zero point.
        input_zero_point: i32 @ header::INPUT_ZERO_POINT;
    }
    /// Input (c, h, w).
    pub fn input_chw(&self) -> (u16, u16, u16) {
        chw(self.0, header::INPUT_CHW)
    }
    /// Whether every reserved byte is zero.
    pub fn reserved_zero(&self) -> bool {
        reserved_zero(self.0, &[(header::RESERVED, HEADER_LEN - header::RESERVED)])
    }
    /// Every value [`HeaderFields::write_to`] writes.
    pub fn fields(&self) -> HeaderFields {
        HeaderFields {
            file_len: self.file_len(),
            arena_bytes: self.arena_bytes(),
            input_chw: self.input_chw(),
            input_tensor: self.input_tensor(),
            output_tensor: self.output_tensor(),
            input_encoding: self.input_encoding(),
            rounding: self.rounding(),
            n_tensors: self.n_tensors(),
            tensor_table: self.tensor_table(),
            n_ops: self.n_ops(),
            op_table: self.op_table(),
            data_offset: self.data_offset(),
            data_len: self.data_len(),
            output_scale: self.output_scale(),
            output_zero_point: self.output_zero_point(),
            input_scale: self.input_scale(),
            input_zero_point: self.input_zero_point(),
        }
    }
}

/// A tensor record's values: what [`TensorFields::write_to`] writes and
/// [`TensorRecord::fields`] reads.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TensorFields {
    /// (c, h, w).
    pub chw: (u16, u16, u16),
    /// Scale.
    pub scale: f32,
    /// Zero point.
    pub zero_point: i32,
    /// Arena offset.
    pub offset: u32,
    /// Byte count.
    pub bytes: u32,
}

impl TensorFields {
    /// Writes the record into `rec[..TENSOR_LEN]`, reserved bytes zero.
    pub fn write_to(&self, rec: &mut [u8]) {
        let r = &mut rec[..TENSOR_LEN];
        r.fill(0);
        put_chw(r, tensor::CHW, self.chw);
        put(r, tensor::SCALE, self.scale.to_le_bytes());
        put(r, tensor::ZERO_POINT, self.zero_point.to_le_bytes());
        put(r, tensor::OFFSET, self.offset.to_le_bytes());
        put(r, tensor::BYTES, self.bytes.to_le_bytes());
    }
}

/// View of a 32-byte tensor record.
#[derive(Clone, Copy, Debug)]
pub struct TensorRecord<'a>(&'a [u8]);

impl<'a> TensorRecord<'a> {
    /// A view of `rec`, if it is 32 bytes long.
    pub fn new(rec: &'a [u8]) -> Option<Self> {
        (rec.len() == TENSOR_LEN).then_some(TensorRecord(rec))
    }
    getters! {
        /// Scale.
        scale: f32 @ tensor::SCALE;
        /// Zero point.
        zero_point: i32 @ tensor::ZERO_POINT;
        /// Arena offset.
        offset: u32 @ tensor::OFFSET;
        /// Byte count.
        bytes: u32 @ tensor::BYTES;
    }
    /// (c, h, w).
    pub fn chw(&self) -> (u16, u16, u16) {
        chw(self.0, tensor::CHW)
    }
    /// Whether every reserved byte is zero.
    pub fn reserved_zero(&self) -> bool {
        reserved_zero(
            self.0,
            &[
                (tensor::RESERVED0, 2),
                (tensor::RESERVED1, TENSOR_LEN - tensor::RESERVED1),
            ],
        )
    }
    /// Every value [`TensorFields::write_to`] writes.
    pub fn fields(&self) -> TensorFields {
        TensorFields {
            chw: self.chw(),
            scale: self.scale(),
            zero_point: self.zero_point(),
            offset: self.offset(),
            bytes: self.bytes(),
        }
    }
}

/// An op record's values: what [`OpFields::write_to`] writes and [`OpRecord::fields`] reads.
/// Arrays are (offset, length) pairs, data-relative.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpFields {
    /// Kind code (`OP_*`).
    pub kind: u8,
    /// Input 0 tensor id.
    pub input0: u16,
    /// Input 1 tensor id ([`NO_TENSOR`] for all but add).
    pub input1: u16,
    /// Output tensor id.
    pub output: u16,
    /// Kernel, stride, padding, dilation.
    pub window: Window,
    /// Output clamp (act_min, act_max).
    pub act: (i32, i32),
    /// Weights.
    pub weights: (u32, u32),
    /// Bias.
    pub bias: (u32, u32),
    /// Multipliers.
    pub multiplier: (u32, u32),
    /// Shifts.
    pub shift: (u32, u32),
    /// Pad values.
    pub pad_values: (u32, u32),
    /// The kind's parameter ([`op::PARAM`]).
    pub param: i32,
}

impl OpFields {
    /// Writes the record into `rec[..OP_LEN]`, the reserved bytes zero.
    pub fn write_to(&self, rec: &mut [u8]) {
        let r = &mut rec[..OP_LEN];
        r.fill(0);
        r[op::KIND] = self.kind;
        put(r, op::INPUT0, self.input0.to_le_bytes());
        put(r, op::INPUT1, self.input1.to_le_bytes());
        put(r, op::OUTPUT, self.output.to_le_bytes());
        put(r, op::WINDOW, self.window.to_bytes());
        put(r, op::ACT_MIN, self.act.0.to_le_bytes());
        put(r, op::ACT_MAX, self.act.1.to_le_bytes());
        for (at, (offset, len)) in [
            (op::WEIGHTS, self.weights),
            (op::BIAS, self.bias),
            (op::MULTIPLIER, self.multiplier),
            (op::SHIFT, self.shift),
            (op::PAD_VALUES, self.pad_values),
        ] {
            put(r, at, offset.to_le_bytes());
            put(r, at + 4, len.to_le_bytes());
        }
        put(r, op::PARAM, self.param.to_le_bytes());
    }
}

/// View of a 64-byte op record.
#[derive(Clone, Copy, Debug)]
pub struct OpRecord<'a>(&'a [u8]);

impl<'a> OpRecord<'a> {
    /// A view of `rec`, if it is 64 bytes long.
    pub fn new(rec: &'a [u8]) -> Option<Self> {
        (rec.len() == OP_LEN).then_some(OpRecord(rec))
    }
    getters! {
        /// Kind code.
        kind: u8 @ op::KIND;
        /// Reserved byte.
        reserved: u8 @ op::RESERVED;
        /// Input 0 tensor id.
        input0: u16 @ op::INPUT0;
        /// Input 1 tensor id ([`NO_TENSOR`] for all but add).
        input1: u16 @ op::INPUT1;
        /// Output tensor id.
        output: u16 @ op::OUTPUT;
        /// The kind's parameter.
        param: i32 @ op::PARAM;
    }
    /// Kernel, stride, padding, dilation.
    pub fn window(&self) -> Window {
        Window::from_bytes(bytes(self.0, op::WINDOW))
    }
    /// Whether every reserved byte is zero.
    pub fn reserved_zero(&self) -> bool {
        reserved_zero(
            self.0,
            &[
                (op::RESERVED, 1),
                (op::RESERVED1, 2),
                (op::RESERVED2, OP_LEN - op::RESERVED2),
            ],
        )
    }
    /// Output clamp (act_min, act_max).
    pub fn act(&self) -> (i32, i32) {
        (le_i32(self.0, op::ACT_MIN), le_i32(self.0, op::ACT_MAX))
    }
    fn pair(&self, off: usize) -> (u32, u32) {
        (le_u32(self.0, off), le_u32(self.0, off + 4))
    }
    /// Weights (offset, length), data-relative.
    pub fn weights(&self) -> (u32, u32) {
        self.pair(op::WEIGHTS)
    }
    /// Bias (offset, length).
    pub fn bias(&self) -> (u32, u32) {
        self.pair(op::BIAS)
    }
    /// Multiplier (offset, length).
    pub fn multiplier(&self) -> (u32, u32) {
        self.pair(op::MULTIPLIER)
    }
    /// Shift (offset, length).
    pub fn shift(&self) -> (u32, u32) {
        self.pair(op::SHIFT)
    }
    /// Pad values (offset, length).
    pub fn pad_values(&self) -> (u32, u32) {
        self.pair(op::PAD_VALUES)
    }
    /// Every value [`OpFields::write_to`] writes.
    pub fn fields(&self) -> OpFields {
        OpFields {
            kind: self.kind(),
            input0: self.input0(),
            input1: self.input1(),
            output: self.output(),
            window: self.window(),
            act: self.act(),
            weights: self.weights(),
            bias: self.bias(),
            multiplier: self.multiplier(),
            shift: self.shift(),
            pad_values: self.pad_values(),
            param: self.param(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The writer's encoders and the reader's views agree field by field, on values that
    /// differ in every byte, with the format's fixed parts and reserved bytes in place.
    #[test]
    fn records_round_trip() {
        let h = HeaderFields {
            file_len: 0x0102_0304,
            arena_bytes: 0x0506_0708,
            input_chw: (0x090a, 0x0b0c, 0x0d0e),
            input_tensor: 0x0f10,
            output_tensor: 0x1112,
            input_encoding: INPUT_I8_HWC,
            rounding: 2,
            n_tensors: 0x1314_1516,
            tensor_table: 0x1718_191a,
            n_ops: 0x1b1c_1d1e,
            op_table: 0x1f20_2122,
            data_offset: 0x2324_2526,
            data_len: 0x2728_292a,
            output_scale: 0.123_456_79,
            output_zero_point: -0x2b2c_2d2e,
            input_scale: 0.5,
            input_zero_point: -0x3132_3334,
        };
        let mut file = [0xAAu8; HEADER_LEN + 4];
        h.write_to(&mut file);
        seal(&mut file);
        let view = Header::new(&file).unwrap();
        assert_eq!(view.fields(), h);
        assert_eq!(view.magic(), MAGIC);
        assert_eq!(view.version(), VERSION);
        assert_eq!(view.header_len() as usize, HEADER_LEN);
        assert_eq!(view.crc(), crc32(&file[CRC_START..]));
        assert!(view.reserved_zero());
        assert_eq!(
            file[HEADER_LEN..],
            [0xAA; 4],
            "nothing written past the header"
        );

        let t = TensorFields {
            chw: (0x0102, 0x0304, 0x0506),
            scale: 3.5e-3,
            zero_point: -0x0708_090a,
            offset: 0x0b0c_0d0e,
            bytes: 0x0f10_1112,
        };
        let mut rec = [0xAAu8; TENSOR_LEN];
        t.write_to(&mut rec);
        let view = TensorRecord::new(&rec).unwrap();
        assert_eq!(view.fields(), t);
        assert!(view.reserved_zero());

        let o = OpFields {
            kind: OP_ADD,
            input0: 0x0102,
            input1: 0x0304,
            output: 0x0506,
            window: Window::from_bytes([7, 8, 9, 10, 11, 12, 13, 14, 15, 16]),
            act: (-0x0b0c_0d0e, 0x0f10_1112),
            weights: (0x1314_1516, 0x1718_191a),
            bias: (0x1b1c_1d1e, 0x1f20_2122),
            multiplier: (0x2324_2526, 0x2728_292a),
            shift: (0x2b2c_2d2e, 0x2f30_3132),
            pad_values: (0x3334_3536, 0x3738_393a),
            param: -0x3b3c_3d3e,
        };
        let mut rec = [0xAAu8; OP_LEN];
        o.write_to(&mut rec);
        let view = OpRecord::new(&rec).unwrap();
        assert_eq!(view.fields(), o);
        assert!(view.reserved_zero());
    }

    /// The check value of the CRC catalogue, and crc32fast (zlib's CRC-32) on every length
    /// class of a table-driven loop.
    #[test]
    fn crc32_is_zlibs() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        let data: Vec<u8> = (0..5000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for n in [0, 1, 3, 15, 16, 17, 255, 4096, 5000] {
            assert_eq!(crc32(&data[..n]), crc32fast::hash(&data[..n]), "{n} bytes");
        }
    }
}
