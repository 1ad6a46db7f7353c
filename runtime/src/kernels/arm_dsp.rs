//! Which targets have the Arm DSP extension (`SMLAD`, `SXTB16`: Armv7E-M, the Cortex-M4 and
//! M7), the one rule for both `build.rs` (which sets `cfg(octet_arm_dsp)` from it, including
//! this file) and [`crate::Kernels::auto_on_mcu`] (which firmware build scripts size their
//! arena with). Arm target features are unstable, so `target_feature = "dsp"` is not reported
//! on stable Rust: the target name decides (`thumbv7em-*` always has the extension; so does
//! every Armv7-A core, and `thumbv7neon-*` runs it in the same Thumb-2 encoding, which is how
//! the kernels' `asm!` runs its tests under QEMU user mode with `std`); a toolchain that does
//! report the feature (nightly, `-C target-feature=+dsp`) is honoured too.

/// Whether a target of architecture `arch` (`CARGO_CFG_TARGET_ARCH`), triple `triple` and
/// target features `features` (`CARGO_CFG_TARGET_FEATURE`, comma-separated) has the DSP
/// extension.
pub fn has_dsp(arch: &str, triple: &str, features: &str) -> bool {
    arch == "arm"
        && (triple.starts_with("thumbv7em-")
            || triple.starts_with("thumbv7neon-")
            || features.split(',').any(|f| f == "dsp"))
}
