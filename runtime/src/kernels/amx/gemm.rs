//! The tile product of a layer packed in blocks of 16 rows ([`PackedFc`]'s order: a block's
//! constants, then per 4 inputs a weight tile's row) with rows of inputs: 32 rows at a time
//! (two input tiles) staged on the stack, `align64(K)` bytes each, zero past K, or read where
//! they lie ([`Inputs`]: a conv's input at a pixel stride); for each pair
//! of 16-row blocks, four sum tiles over every step of 64 inputs (each weight tile read once
//! per 32 rows, each input tile once per 32 outputs), stored and requantized row by row by
//! the packed VNNI epilogue (16 outputs of one row per vector, the block's constants loaded
//! once per pass).
//!
//! The epilogue of one pair runs while the tiles multiply the next: the sums are stored first,
//! and the next pair's steps are issued between the epilogue's rows, so that the tile unit
//! and the vector units can work at once.

use core::arch::x86_64::*;
use core::mem::MaybeUninit;

use super::tiles::{Sums, Tiles, ROWS, ROW_BYTES};
use crate::kernels::vnni::{BlockEpi, Limits};
use crate::kernels::{FcParams, PackedFc, AMX_K_STEP, AMX_MAX_K, FC_BLOCK_ROWS, FC_EPI_BYTES};
use crate::requant::Rounding;

/// Rows per pass: two input tiles.
const PASS: usize = 2 * ROWS;

/// Bytes of a weight tile.
const TILE: usize = ROWS * ROW_BYTES;

/// A pass's rows: where each one's outputs go and what its sums need added.
pub(super) struct PassRows {
    pub(super) out: [*mut i8; PASS],
    pub(super) corr: [__m512i; PASS],
}

/// Where a pass's two input tiles lie: rows staged on the stack ([`rows`]), or the conv's
/// (padded) input itself, read in place at a pixel stride (`conv2d`'s implicit form).
pub(super) trait Inputs {
    /// Starts the pass of rows `r0..r0 + m` (m ≤ [`PASS`]), its first `m` rows written.
    ///
    /// # Safety
    /// As [`product`]'s.
    unsafe fn pass(&mut self, r0: usize, m: usize, rows: &mut PassRows);

    /// Step `s`'s two input tiles of the current pass and their row stride: each readable for
    /// 16 rows of 64 bytes.
    fn tiles(&self, s: usize) -> (*const i8, *const i8, usize);
}

/// Rows staged 32 at a time at a stride of `kp` bytes.
struct Staged<R> {
    a: *mut i8,
    kp: usize,
    row: R,
}

impl<R: FnMut(usize, *mut i8) -> (*mut i8, i32)> Inputs for Staged<R> {
    #[inline(always)]
    unsafe fn pass(&mut self, r0: usize, m: usize, rows: &mut PassRows) {
        for i in 0..m {
            let (o, k) = (self.row)(r0 + i, self.a.add(i * self.kp));
            (rows.out[i], rows.corr[i]) = (o, _mm512_set1_epi32(k));
        }
    }

    #[inline(always)]
    fn tiles(&self, s: usize) -> (*const i8, *const i8, usize) {
        let at = s * AMX_K_STEP;
        (
            self.a.wrapping_add(at),
            self.a.wrapping_add(ROWS * self.kp + at),
            self.kp,
        )
    }
}

/// Layer `p` from its blocks `w` (laid out as `l`) over `n` rows: `row(i, dst)`, called for
/// `i` from 0 to `n − 1` in order, writes row `i`'s K inputs at `dst` and gives where its N
/// outputs go and what its sums need added (the −128·Σx of weights stored as u8 w + 128).
/// Signed weights (`AmxFc`, K a multiple of 64) where `SIGNED`, else unsigned (`PackedFc`:
/// the last block's last tile may reach past `w`, so it is read from a copy).
///
/// # Safety
/// [`super::available`] holds; `w` holds `l.bytes()` with `l.n` = `p.n` and `l.k` = `p.k`
/// (padded to 64 where `SIGNED`), K ≤ [`AMX_MAX_K`]; `row` writes at most K bytes and gives
/// a pointer to N writable bytes.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn rows<const SIGNED: bool>(
    p: &FcParams,
    w: &[u8],
    l: PackedFc,
    n: usize,
    row: impl FnMut(usize, *mut i8) -> (*mut i8, i32),
) {
    let kp = l.k.next_multiple_of(AMX_K_STEP);
    // The rows are staged at a stride of kp bytes in PASS·AMX_MAX_K.
    assert!(kp <= AMX_MAX_K);
    // Aligned as the sums are: an input tile's rows (kp bytes apart) on whole cache lines.
    #[repr(C, align(64))]
    struct Staging([i8; PASS * AMX_MAX_K]);
    let mut a = MaybeUninit::<Staging>::uninit();
    let a = a.as_mut_ptr() as *mut i8;
    // The bytes past K of every row meet zero weights (or, in the last step of a block that
    // is not the last, the next block's bytes: times zero, nothing); rows past n in the last
    // pass are multiplied too (their sums dropped): all initialized once.
    core::ptr::write_bytes(a, 0, PASS * kp);
    product::<SIGNED>(p, w, l, n, &mut Staged { a, kp, row });
}

/// [`rows`]' product with the input tiles from `src`.
///
/// # Safety
/// As [`rows`]'; `src` gives, for every pass, tiles readable for every step of `l`.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn product<const SIGNED: bool>(
    p: &FcParams,
    w: &[u8],
    l: PackedFc,
    n: usize,
    src: &mut impl Inputs,
) {
    let kp = l.k.next_multiple_of(AMX_K_STEP);
    let k_steps = kp / AMX_K_STEP;
    debug_assert!(w.len() >= l.bytes() && (!SIGNED || kp == l.k));
    let lim = Limits::new(&p.out);
    let double = p.out.rounding == Rounding::Double;
    let (bb, blocks) = (l.block_bytes(), l.blocks());
    let weights = |b: usize| w.as_ptr().add(b * bb + FC_EPI_BYTES);
    // The last block's last tile, where it reaches past `w`: its bytes up to the end, zeros
    // after (they meet inputs past K).
    let mut last = [0u8; TILE];
    let last_tile = weights(blocks - 1).add((k_steps - 1) * TILE);
    let in_w = w.as_ptr().add(w.len()).offset_from(last_tile) as usize;
    let last_tile = if in_w >= TILE {
        last_tile
    } else {
        core::ptr::copy_nonoverlapping(last_tile, last.as_mut_ptr(), in_w);
        last.as_ptr()
    };
    let tile = |b: usize, s: usize| {
        if b + 1 == blocks && s + 1 == k_steps {
            last_tile
        } else {
            weights(b).add(s * TILE)
        }
    };
    let pairs = blocks.div_ceil(2);
    // An odd last block runs as both of its pair; the second's sums are dropped.
    let pair = |q: usize| (2 * q, (2 * q + 1).min(blocks - 1));
    let mut c = Sums([[[0i32; ROWS]; ROWS]; 4]);
    let mut rows = PassRows {
        out: [core::ptr::null_mut(); PASS],
        corr: [_mm512_setzero_si512(); PASS],
    };
    let tiles = Tiles::configure();
    for r0 in (0..n).step_by(PASS) {
        let m = (n - r0).min(PASS);
        src.pass(r0, m, &mut rows);
        let src = &*src;
        let step = |q: usize, s: usize| {
            let (b0, b1) = pair(q);
            let (a0, a1, sa) = src.tiles(s);
            tiles.step::<SIGNED>(a0, a1, sa, tile(b0, s), tile(b1, s));
        };
        tiles.zero();
        for s in 0..k_steps {
            step(0, s);
        }
        tiles.store(&mut c);
        for q in 0..pairs {
            let next = q + 1 < pairs;
            if next {
                tiles.zero();
            }
            let (b0, b1) = pair(q);
            let mut s = 0;
            // The next pair's steps, spread over this pair's rows (m of them per block).
            let spread = (1 + (b1 > b0) as usize) * m;
            for (j, b) in [b0, b1]
                .into_iter()
                .enumerate()
                .take(1 + (b1 > b0) as usize)
            {
                let epi = BlockEpi::load(w.as_ptr().add(b * bb));
                let first = b * FC_BLOCK_ROWS;
                let mask = ((1u32 << (p.n - first).min(FC_BLOCK_ROWS)) - 1) as u16;
                for i in 0..m {
                    let sums = _mm512_loadu_si512(c.0[2 * (i / ROWS) + j][i % ROWS].as_ptr() as _);
                    let v = epi.apply(sums, rows.corr[i], &lim, double);
                    _mm_mask_storeu_epi8(rows.out[i].add(first), mask, v);
                    let done = j * m + i + 1;
                    while next && s < k_steps && s * spread < done * k_steps {
                        step(q + 1, s);
                        s += 1;
                    }
                }
            }
            if next {
                while s < k_steps {
                    step(q + 1, s);
                    s += 1;
                }
                tiles.store(&mut c);
            }
        }
    }
    drop(tiles);
}
