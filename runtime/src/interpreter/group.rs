//! Images in groups: one op over several working areas at once, where a batched kernel covers
//! it (the AVX-512 VNNI conv and fully connected read each weight once for the whole group, the
//! AVX2 and AVX-VNNI packed fully connected once for four images).

#[cfg(target_arch = "x86_64")]
use super::Carved;
use crate::kernels::Resolved;
#[cfg(target_arch = "x86_64")]
use crate::kernels::{self, vnni::ConvImage, AMX_GROUP_IMAGES};
#[cfg(target_arch = "x86_64")]
use crate::model::OpParams;
use crate::model::PreparedOp;
use crate::{Model, Result};
#[cfg(target_arch = "x86_64")]
use core::mem::MaybeUninit;

impl Model<'_> {
    /// Whether running images in groups helps: some conv or fully connected layer runs a
    /// batched VNNI kernel, or a fully connected layer the packed AVX2 one.
    pub(super) fn groups_help(&self, k: Resolved) -> bool {
        #[cfg(target_arch = "x86_64")]
        if k.base() == Resolved::Vnni {
            return (0..self.num_ops() as u32).any(|j| {
                self.with_op(j, |p| {
                    Ok(match &p.params {
                        OpParams::Conv2d(c) => {
                            c.packed.is_fc()
                                || (c.is_uniform() && kernels::lanes_supported(&c.geometry()))
                        }
                        OpParams::FullyConnected(_) => true,
                        _ => false,
                    })
                })
                .unwrap_or(false)
            });
        }
        // AVX2 (and AVX-VNNI): the packed fully connected layer reads each weight once for
        // four images.
        #[cfg(target_arch = "x86_64")]
        if k == Resolved::Avx2 || k == Resolved::AvxVnni {
            return (0..self.num_ops() as u32).any(|j| {
                self.with_op(j, |p| {
                    Ok(matches!(&p.params, OpParams::FullyConnected(f)
                        if f.packed.of(kernels::Layout::Avx2Fc).is_some()))
                })
                .unwrap_or(false)
            });
        }
        let _ = k;
        false
    }

    /// Op `p` over every working area of `work` at once, when a batched kernel covers it
    /// (the VNNI conv and fully connected, the packed AVX2 fully connected), the areas in reverse order if `back`; `false` when the caller must run
    /// it area by area.
    pub(super) fn exec_group(
        &self,
        k: Resolved,
        p: &PreparedOp,
        work: &mut [u8],
        back: bool,
    ) -> Result<bool> {
        #[cfg(target_arch = "x86_64")]
        if k == Resolved::Avx2 || k == Resolved::AvxVnni {
            let OpParams::FullyConnected(f) = &p.params else {
                return Ok(false);
            };
            return self.with_images(k, p, work, back, |imgs| {
                // SAFETY: Resolved::Avx2 is only produced when AVX2 is available, AvxVnni when
                // AVX-VNNI is too.
                unsafe {
                    match k {
                        Resolved::AvxVnni => kernels::avx2::fully_connected_packed_vnni(f, imgs),
                        _ => kernels::avx2::fully_connected_packed(f, imgs),
                    }
                }
            });
        }
        #[cfg(target_arch = "x86_64")]
        if k.base() == Resolved::Vnni {
            // A conv the few-channel kernel covers runs image by image (it needs no group), as
            // does one the lanes kernel does not cover (window, geometry; either rounding).
            let batched = match &p.params {
                OpParams::FullyConnected(_) => true,
                OpParams::Conv2d(c) => {
                    c.packed.is_fc()
                        || (c.is_uniform()
                            && kernels::lanes_supported(&c.geometry())
                            && !kernels::vnni::narrow_preferred(c))
                }
                _ => false,
            };
            if !batched {
                return Ok(false);
            }
            return self.with_images(k, p, work, back, |imgs| {
                // SAFETY: Resolved::Vnni (also Amx's base) is only produced when AVX2 and
                // AVX-512 VNNI/BW/VL are available, Resolved::Amx only where the tiles may run.
                unsafe {
                    match &p.params {
                        OpParams::FullyConnected(f) => {
                            // The VNNI kernel takes any group, eight images a pass.
                            if !(k == Resolved::Amx && kernels::amx::fully_connected_batch(f, imgs))
                            {
                                kernels::vnni::fully_connected_batch(f, imgs);
                            }
                            true
                        }
                        // The conv kernels take up to GROUP_IMAGES images a call (an AMX group
                        // has more); each call's answer is the same (the op's parameters
                        // decide it).
                        OpParams::Conv2d(c) => imgs.chunks_mut(kernels::GROUP_IMAGES).all(|g| {
                            (k == Resolved::Amx && kernels::amx::conv2d(c, g))
                                || kernels::vnni::conv2d_implicit(c, g)
                                || kernels::vnni::conv2d_packed(c, g)
                                || kernels::vnni::conv2d_lanes_batch(c, g)
                        }),
                        _ => false,
                    }
                }
            });
        }
        let _ = (k, p, work, back);
        Ok(false)
    }

    /// `run` over op `p`'s buffers in every working area of `work` (in reverse order if
    /// `back`), areas of the set `k`: its answer, whether the group ran.
    #[cfg(target_arch = "x86_64")]
    fn with_images(
        &self,
        k: Resolved,
        p: &PreparedOp,
        work: &mut [u8],
        back: bool,
        run: impl FnOnce(&mut [ConvImage]) -> bool,
    ) -> Result<bool> {
        let layout = p.layout_error();
        // Only the areas there are get a slot written: initializing all 32 took 2% of anomaly
        // detection's samples at batch 64 on VNNI (`perf`, 6.3% → 4.0% here).
        let mut slots = [const { MaybeUninit::<ConvImage>::uninit() }; AMX_GROUP_IMAGES];
        let mut n = 0;
        let wb = self.work_bytes(k);
        // Every area gets a slot (no group is larger, `Model::group_images`): an area left out
        // would keep its stale bytes as if it had run.
        if work.len() / wb.max(1) > slots.len() {
            return Err(layout);
        }
        let scratch = self.scratch_range(wb);
        for (slot, w) in slots.iter_mut().zip(work.chunks_exact_mut(wb)) {
            let carved = Carved::new(w, p.output.range(), scratch.clone()).ok_or(layout)?;
            let input = crate::as_i8(carved.input(p.input.range()).ok_or(layout)?);
            let Carved { out, scratch, .. } = carved;
            slot.write(ConvImage {
                input,
                output: crate::as_i8_mut(out),
                scratch,
            });
            n += 1;
        }
        // SAFETY: the first n slots were written above (a ConvImage holds only slices: nothing
        // to drop).
        let imgs =
            unsafe { core::slice::from_raw_parts_mut(slots.as_mut_ptr().cast::<ConvImage>(), n) };
        if back {
            imgs.reverse();
        }
        Ok(run(imgs))
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use crate::kernels::{Kernels, Resolved, AMX_GROUP_IMAGES};
    use crate::Model;

    /// A model runs its images in groups (the batched VNNI conv) in either rounding.
    #[test]
    fn groups_in_both_roundings() {
        if !Kernels::vnni_available() {
            println!("SKIP: no AVX-512 VNNI");
            return;
        }
        for rounding in [1u8, 2] {
            let mut b = octet_testkit::small_resnet(1);
            b.rounding = rounding;
            let bytes = b.encode();
            let m = Model::parse(&bytes).unwrap();
            assert!(m.groups_help(Resolved::Vnni), "rounding {rounding}");
        }
    }

    /// A group of as many areas as there are slots runs every one of them; one more is an
    /// error, never an image skipped.
    #[test]
    fn every_area_of_a_group_runs() {
        let bytes = octet_testkit::small_resnet(1).encode();
        let m = Model::parse(&bytes).unwrap();
        let k = Resolved::Vnni;
        let wb = m.work_bytes(k);
        for (areas, fits) in [(AMX_GROUP_IMAGES, true), (AMX_GROUP_IMAGES + 1, false)] {
            let mut work = vec![0u8; areas * wb];
            let mut ran = 0;
            let r = m.with_op(0, |p| {
                m.with_images(k, p, &mut work, false, |imgs| {
                    ran = imgs.len();
                    true
                })
            });
            assert_eq!(r.is_ok(), fits, "{areas} areas");
            assert_eq!(ran, if fits { areas } else { 0 }, "{areas} areas");
        }
    }
}
