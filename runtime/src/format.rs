//! Zero-copy views of the `.o8` records (see `runtime/FORMAT.md`), and the format's constants.
//!
//! Fields are read with `from_le_bytes` on bounds-checked slices; a view over too short a
//! slice reads zeros rather than panicking (the constructors check the length anyway).

/// File magic.
pub const MAGIC: [u8; 8] = *b"OCTET8\r\n";
/// Format version (2: the scratch rule with the pixels-in-lanes VNNI conv, FORMAT.md).
pub const VERSION: u16 = 2;
/// Header length in bytes.
pub const HEADER_LEN: usize = 80;
/// Tensor record length in bytes.
pub const TENSOR_LEN: usize = 32;
/// Op record length in bytes.
pub const OP_LEN: usize = 64;
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
/// Op kind code: add.
pub const OP_ADD: u8 = 5;

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
    /// u16 reserved.
    pub const RESERVED0: usize = 34;
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
    /// `[u8; 12]` reserved.
    pub const RESERVED1: usize = 68;
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
    /// u8 kernel_h.
    pub const KERNEL_H: usize = 8;
    /// u8 kernel_w.
    pub const KERNEL_W: usize = 9;
    /// u8 stride.
    pub const STRIDE: usize = 10;
    /// u8 pad.
    pub const PAD: usize = 11;
    /// i32 act_min.
    pub const ACT_MIN: usize = 12;
    /// i32 act_max.
    pub const ACT_MAX: usize = 16;
    /// u32, u32 weights offset, length.
    pub const WEIGHTS: usize = 20;
    /// u32, u32 bias offset, length.
    pub const BIAS: usize = 28;
    /// u32, u32 multiplier offset, length.
    pub const MULTIPLIER: usize = 36;
    /// u32, u32 shift offset, length.
    pub const SHIFT: usize = 44;
    /// u32, u32 pad values offset, length.
    pub const PAD_VALUES: usize = 52;
    /// u32 scratch arena offset.
    pub const SCRATCH: usize = 60;
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
    /// Format version.
    pub fn version(&self) -> u16 {
        le_u16(self.0, header::VERSION)
    }
    /// Header length.
    pub fn header_len(&self) -> u16 {
        le_u16(self.0, header::HEADER_LEN)
    }
    /// Stored CRC-32.
    pub fn crc(&self) -> u32 {
        le_u32(self.0, header::CRC)
    }
    /// Declared file length.
    pub fn file_len(&self) -> u32 {
        le_u32(self.0, header::FILE_LEN)
    }
    /// Working arena for one image.
    pub fn arena_bytes(&self) -> u32 {
        le_u32(self.0, header::ARENA_BYTES)
    }
    /// Input (c, h, w).
    pub fn input_chw(&self) -> (u16, u16, u16) {
        (
            le_u16(self.0, header::INPUT_CHW),
            le_u16(self.0, header::INPUT_CHW + 2),
            le_u16(self.0, header::INPUT_CHW + 4),
        )
    }
    /// Input tensor id.
    pub fn input_tensor(&self) -> u16 {
        le_u16(self.0, header::INPUT_TENSOR)
    }
    /// Output tensor id.
    pub fn output_tensor(&self) -> u16 {
        le_u16(self.0, header::OUTPUT_TENSOR)
    }
    /// Whether every reserved byte is zero.
    pub fn reserved_zero(&self) -> bool {
        le_u16(self.0, header::RESERVED0) == 0
            && self
                .0
                .get(header::RESERVED1..HEADER_LEN)
                .is_some_and(|r| r.iter().all(|&b| b == 0))
    }
    /// Tensor count.
    pub fn n_tensors(&self) -> u32 {
        le_u32(self.0, header::N_TENSORS)
    }
    /// Tensor table offset.
    pub fn tensor_table(&self) -> u32 {
        le_u32(self.0, header::TENSOR_TABLE)
    }
    /// Op count.
    pub fn n_ops(&self) -> u32 {
        le_u32(self.0, header::N_OPS)
    }
    /// Op table offset.
    pub fn op_table(&self) -> u32 {
        le_u32(self.0, header::OP_TABLE)
    }
    /// Data section offset.
    pub fn data_offset(&self) -> u32 {
        le_u32(self.0, header::DATA_OFFSET)
    }
    /// Data section length.
    pub fn data_len(&self) -> u32 {
        le_u32(self.0, header::DATA_LEN)
    }
    /// Output scale (informative).
    pub fn output_scale(&self) -> f32 {
        le_f32(self.0, header::OUTPUT_SCALE)
    }
    /// Output zero point.
    pub fn output_zero_point(&self) -> i32 {
        le_i32(self.0, header::OUTPUT_ZERO_POINT)
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
    /// (c, h, w).
    pub fn chw(&self) -> (u16, u16, u16) {
        (
            le_u16(self.0, tensor::CHW),
            le_u16(self.0, tensor::CHW + 2),
            le_u16(self.0, tensor::CHW + 4),
        )
    }
    /// Scale.
    pub fn scale(&self) -> f32 {
        le_f32(self.0, tensor::SCALE)
    }
    /// Zero point.
    pub fn zero_point(&self) -> i32 {
        le_i32(self.0, tensor::ZERO_POINT)
    }
    /// Arena offset.
    pub fn offset(&self) -> u32 {
        le_u32(self.0, tensor::OFFSET)
    }
    /// Byte count.
    pub fn bytes(&self) -> u32 {
        le_u32(self.0, tensor::BYTES)
    }
    /// Whether every reserved byte is zero.
    pub fn reserved_zero(&self) -> bool {
        le_u16(self.0, tensor::RESERVED0) == 0
            && self
                .0
                .get(tensor::RESERVED1..TENSOR_LEN)
                .is_some_and(|r| r.iter().all(|&b| b == 0))
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
    /// Kind code.
    pub fn kind(&self) -> u8 {
        self.0.get(op::KIND).copied().unwrap_or(0)
    }
    /// Reserved byte.
    pub fn reserved(&self) -> u8 {
        self.0.get(op::RESERVED).copied().unwrap_or(0)
    }
    /// Input 0 tensor id.
    pub fn input0(&self) -> u16 {
        le_u16(self.0, op::INPUT0)
    }
    /// Input 1 tensor id ([`NO_TENSOR`] for all but add).
    pub fn input1(&self) -> u16 {
        le_u16(self.0, op::INPUT1)
    }
    /// Output tensor id.
    pub fn output(&self) -> u16 {
        le_u16(self.0, op::OUTPUT)
    }
    /// (kernel_h, kernel_w, stride, pad).
    pub fn window(&self) -> (u8, u8, u8, u8) {
        let b = bytes::<4>(self.0, op::KERNEL_H);
        (b[0], b[1], b[2], b[3])
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
    /// Scratch arena offset.
    pub fn scratch(&self) -> u32 {
        le_u32(self.0, op::SCRATCH)
    }
}

#[cfg(test)]
mod tests {
    /// The check value of the CRC catalogue, and crc32fast (zlib's CRC-32) on every length
    /// class of a table-driven loop.
    #[test]
    fn crc32_is_zlibs() {
        assert_eq!(super::crc32(b"123456789"), 0xCBF4_3926);
        let data: Vec<u8> = (0..5000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for n in [0, 1, 3, 15, 16, 17, 255, 4096, 5000] {
            assert_eq!(
                super::crc32(&data[..n]),
                crc32fast::hash(&data[..n]),
                "{n} bytes"
            );
        }
    }
}
