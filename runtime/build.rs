//! Sets `cfg(octet_arm_dsp)` when the target is an Arm core with the DSP extension, for the
//! Cortex-M kernels (`kernels::cortex_m`): `target_feature = "dsp"` is not reported on stable
//! Rust (Arm target features are unstable), so the target name decides: Armv7E-M
//! (`thumbv7em-*`, Cortex-M4/M7) always has it. A toolchain that does report the feature
//! (`CARGO_CFG_TARGET_FEATURE`, nightly with `-C target-feature=+dsp`) is honoured too.

use std::env;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(octet_arm_dsp)");
    println!("cargo::rerun-if-changed=build.rs");
    let arm = env::var("CARGO_CFG_TARGET_ARCH").is_ok_and(|a| a == "arm");
    let target = env::var("TARGET").unwrap_or_default();
    let features = env::var("CARGO_CFG_TARGET_FEATURE").unwrap_or_default();
    let dsp = target.starts_with("thumbv7em-") || features.split(',').any(|f| f == "dsp");
    if arm && dsp {
        println!("cargo::rustc-cfg=octet_arm_dsp");
    }
}
