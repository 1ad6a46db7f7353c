//! Carving one working area into an op's output, its scratch and the read-only rest, so that
//! an op reads its inputs and writes its output and scratch through safe, disjoint slices.

use core::ops::Range;

/// The working arena split into an op's output, its scratch, and the read-only rest.
pub(crate) struct Carved<'x> {
    pieces: [(usize, &'x [u8]); 3],
    pub(crate) out: &'x mut [u8],
    pub(crate) scratch: &'x mut [u8],
}

impl<'x> Carved<'x> {
    /// `work` split around `out` and `scratch` (empty: none), or `None` when they overlap or
    /// do not fit.
    pub(crate) fn new(
        work: &'x mut [u8],
        out: Range<usize>,
        scratch: Range<usize>,
    ) -> Option<Self> {
        let scratch = if scratch.is_empty() {
            out.end..out.end
        } else {
            scratch
        };
        let out_first = out.start <= scratch.start;
        let (a, b) = if out_first {
            (out, scratch)
        } else {
            (scratch, out)
        };
        if a.start > a.end || a.end > b.start || b.start > b.end || b.end > work.len() {
            return None;
        }
        let (p0, rest) = work.split_at_mut(a.start);
        let (ma, rest) = rest.split_at_mut(a.end - a.start);
        let (p1, rest) = rest.split_at_mut(b.start - a.end);
        let (mb, p2) = rest.split_at_mut(b.end - b.start);
        let (out, scratch) = if out_first { (ma, mb) } else { (mb, ma) };
        let (p0, p1, p2): (&'x [u8], &'x [u8], &'x [u8]) = (p0, p1, p2);
        Some(Carved {
            pieces: [(0, p0), (a.end, p1), (b.end, p2)],
            out,
            scratch,
        })
    }

    /// The read-only bytes `r` (within one piece: not the output or scratch).
    pub(crate) fn input(&self, r: Range<usize>) -> Option<&'x [u8]> {
        self.pieces.iter().find_map(|&(base, piece)| {
            if r.start >= base && r.end <= base + piece.len() {
                piece.get(r.start - base..r.end - base)
            } else {
                None
            }
        })
    }
}
