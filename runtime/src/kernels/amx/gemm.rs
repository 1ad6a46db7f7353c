//! The tile product of a layer packed as [`AmxFc`] with rows of inputs: 32 rows at a time
//! (two input tiles) staged on the stack, `align64(K)` bytes each, zero past K; for each pair
//! of 16-row blocks, four sum tiles over every step of 64 inputs (each weight tile read once
//! per 32 rows, each input tile once per 32 outputs), stored and requantized row by row by
//! the packed VNNI epilogue (16 outputs of one row per vector, the block's constants loaded
//! once per pass).

use core::arch::x86_64::*;
use core::mem::MaybeUninit;

use super::tiles::{Tiles, ROWS, ROW_BYTES};
use crate::kernels::vnni::{BlockEpi, Limits};
use crate::kernels::{AmxFc, FcParams, AMX_K_STEP, AMX_MAX_K, FC_BLOCK_ROWS, FC_EPI_BYTES};
use crate::requant::Rounding;

/// Rows per pass: two input tiles.
const PASS: usize = 2 * ROWS;

/// Layer `p` from its packed weights `w` over `n` rows: `row(i, dst)`, called for `i` from 0
/// to `n − 1` in order, writes row `i`'s K inputs at `dst` and gives where its N outputs go.
///
/// # Safety
/// [`super::available`] holds; `w` holds `AmxFc::bytes` of `p` with K ≤ [`AMX_MAX_K`];
/// `row` writes at most K bytes and gives a pointer to N writable bytes.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn rows(
    p: &FcParams,
    w: &[u8],
    n: usize,
    mut row: impl FnMut(usize, *mut i8) -> *mut i8,
) {
    let l = AmxFc { k: p.k, n: p.n }.padded();
    let (kp, k_steps) = (l.k, l.k / AMX_K_STEP);
    debug_assert!(kp <= AMX_MAX_K && w.len() >= l.bytes());
    let mut a = MaybeUninit::<[i8; PASS * AMX_MAX_K]>::uninit();
    let a = a.as_mut_ptr() as *mut i8;
    // The bytes past K of every row meet zero weights; rows past n in the last pass are
    // multiplied too (their sums dropped): all initialized once.
    core::ptr::write_bytes(a, 0, PASS * kp);
    let lim = Limits::new(&p.out);
    let double = p.out.rounding == Rounding::Double;
    let (bb, blocks, tile) = (l.block_bytes(), l.blocks(), ROWS * ROW_BYTES);
    let mut c = [[[0i32; ROWS]; ROWS]; 4];
    let mut out = [core::ptr::null_mut::<i8>(); PASS];
    let tiles = Tiles::configure();
    for r0 in (0..n).step_by(PASS) {
        let m = (n - r0).min(PASS);
        for (i, o) in out.iter_mut().enumerate().take(m) {
            *o = row(r0 + i, a.add(i * kp));
        }
        for b0 in (0..blocks).step_by(2) {
            // An odd last block runs as both of the pair; the second's sums are dropped.
            let b1 = (b0 + 1).min(blocks - 1);
            let w0 = w.as_ptr().add(b0 * bb + FC_EPI_BYTES);
            let w1 = w.as_ptr().add(b1 * bb + FC_EPI_BYTES);
            tiles.zero();
            for s in 0..k_steps {
                let at = s * AMX_K_STEP;
                tiles.step(
                    a.add(at),
                    a.add(ROWS * kp + at),
                    kp,
                    w0.add(s * tile),
                    w1.add(s * tile),
                );
            }
            tiles.store(&mut c);
            for (j, b) in [b0, b1]
                .into_iter()
                .enumerate()
                .take(1 + (b1 > b0) as usize)
            {
                let epi = BlockEpi::load(w.as_ptr().add(b * bb));
                let first = b * FC_BLOCK_ROWS;
                let mask = ((1u32 << (p.n - first).min(FC_BLOCK_ROWS)) - 1) as u16;
                for (i, &o) in out.iter().enumerate().take(m) {
                    let sums = _mm512_loadu_si512(c[2 * (i / ROWS) + j][i % ROWS].as_ptr() as _);
                    let v = epi.apply(sums, _mm512_setzero_si512(), &lim, double);
                    _mm_mask_storeu_epi8(o.add(first), mask, v);
                }
            }
        }
    }
    drop(tiles);
}
