//! The xorshift64* stream the tests draw their data from: the kernels' tests (`test_util`), the
//! models of [`crate::models`] and every suite that wants reproducible bytes.

/// xorshift64* stream for test data.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    /// A stream from any seed (0 included), scrambled so that close seeds differ at once.
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    /// The next value. (Not `Iterator::next`: the stream never ends, and every suite calls it.)
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// A value in `lo..=hi`.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % ((hi - lo + 1) as u64)) as i64
    }
    /// A value in `0..n` (0 when n is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    /// A value in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
    /// `n` values in `lo..=hi`.
    pub fn i8s(&mut self, n: usize, lo: i64, hi: i64) -> Vec<i8> {
        (0..n).map(|_| self.range(lo, hi) as i8).collect()
    }
    /// `n` values in `lo..=hi` as the file's little-endian i32 bytes.
    pub fn i32s(&mut self, n: usize, lo: i64, hi: i64) -> Vec<u8> {
        (0..n)
            .flat_map(|_| (self.range(lo, hi) as i32).to_le_bytes())
            .collect()
    }
}
