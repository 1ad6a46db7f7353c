//! Sets `cfg(octet_arm_dsp)` when the target is an Arm core with the DSP extension, for the
//! Cortex-M kernels (`kernels::cortex_m`); the rule is `src/kernels/arm_dsp.rs`, shared with
//! the library.

use std::env;

#[path = "src/kernels/arm_dsp.rs"]
mod arm_dsp;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(octet_arm_dsp)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=src/kernels/arm_dsp.rs");
    let var = |k: &str| env::var(k).unwrap_or_default();
    if arm_dsp::has_dsp(
        &var("CARGO_CFG_TARGET_ARCH"),
        &var("TARGET"),
        &var("CARGO_CFG_TARGET_FEATURE"),
    ) {
        println!("cargo::rustc-cfg=octet_arm_dsp");
    }
}
