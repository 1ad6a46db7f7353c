//! Choosing a kernel set: [`Kernels`] (what a caller asks for), CPU feature detection (with or
//! without `std`), and [`Resolved`] (what runs on this CPU, checked once per run).

/// Which kernels `Model::run_with` uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Kernels {
    /// The scalar reference kernels.
    Scalar,
    /// AVX2 kernels (error if the CPU lacks AVX2).
    Avx2,
    /// AVX-512 VNNI (512-bit vectors) for conv2d, AVX2 for fully_connected (error if the CPU
    /// lacks AVX2, AVX-512 VNNI, BW or VL).
    Avx512Vnni,
    /// AVX-VNNI (`vpdpbusd` on 256-bit vectors, Alder Lake and later) for conv2d, AVX2 for the
    /// rest (error if the CPU lacks AVX2 or AVX-VNNI).
    AvxVnni,
    /// AMX-INT8 tiles (Xeon from Sapphire Rapids on) for conv2d over weights packed at prepare
    /// (`Model::prepare_packed`), the AVX-512 VNNI set for the rest (error if the CPU lacks
    /// either, or the OS does not grant the tile state: [`Kernels::amx_available`]).
    Amx,
    /// aarch64 NEON kernels without `dotprod` (error if not on aarch64 or the CPU lacks NEON).
    Neon,
    /// aarch64 NEON kernels with `SDOT` (error if the CPU lacks NEON or `dotprod`).
    NeonDot,
    /// Cortex-M kernels with the DSP extension, `SMLAD` (error unless built for Armv7E-M,
    /// `thumbv7em-*`).
    CortexM,
    /// The fastest available (AMX, then AVX-512 VNNI, then AVX-VNNI, then AVX2; on aarch64 NEON with dotprod, then
    /// NEON; on Armv7E-M the Cortex-M kernels; then scalar).
    #[default]
    Auto,
}

/// AVX2 detection without `std`: CPUID leaf 7 (AVX2), leaf 1 (OSXSAVE, AVX) and XCR0 (the OS
/// saves the YMM state). The answer is cached in an atomic.
#[cfg(all(
    target_arch = "x86_64",
    not(target_feature = "avx2"),
    not(feature = "std")
))]
mod cpuid {
    use core::arch::x86_64::{__cpuid, __cpuid_count, _xgetbv};
    use core::sync::atomic::{AtomicU8, Ordering};

    // Bit 0: known; bit 1: AVX2; bit 2: AVX-512 VNNI + BW + VL.
    static STATE: AtomicU8 = AtomicU8::new(0);

    fn state() -> u8 {
        let s = STATE.load(Ordering::Relaxed);
        if s & 1 != 0 {
            return s;
        }
        let avx2 = detect_avx2();
        let vnni = avx2 && detect_vnni();
        let s = 1 | (avx2 as u8) << 1 | (vnni as u8) << 2;
        STATE.store(s, Ordering::Relaxed);
        s
    }

    pub(super) fn avx2() -> bool {
        state() & 2 != 0
    }

    pub(super) fn vnni() -> bool {
        state() & 4 != 0
    }

    #[allow(unused_unsafe)]
    fn detect_vnni() -> bool {
        // SAFETY: called only after detect_avx2 saw OSXSAVE, so XGETBV is available.
        unsafe {
            // XCR0: SSE, AVX, opmask, ZMM_Hi256 and Hi16_ZMM state enabled by the OS.
            if _xgetbv(0) & 0xE6 != 0xE6 {
                return false;
            }
            let l7 = __cpuid_count(7, 0);
            let f = l7.ebx & (1 << 16) != 0;
            let bw = l7.ebx & (1 << 30) != 0;
            let vl = l7.ebx & (1 << 31) != 0;
            let vnni = l7.ecx & (1 << 11) != 0;
            f && bw && vl && vnni
        }
    }

    #[allow(unused_unsafe)]
    fn detect_avx2() -> bool {
        // SAFETY: CPUID exists on every x86-64 CPU; XGETBV is executed only when CPUID
        // reports OSXSAVE.
        unsafe {
            let max_leaf = __cpuid(0).eax;
            if max_leaf < 7 {
                return false;
            }
            let l1 = __cpuid(1);
            let osxsave = l1.ecx & (1 << 27) != 0;
            let avx = l1.ecx & (1 << 28) != 0;
            if !(osxsave && avx) {
                return false;
            }
            if _xgetbv(0) & 0b110 != 0b110 {
                return false;
            }
            __cpuid_count(7, 0).ebx & (1 << 5) != 0
        }
    }
}

/// Kernels resolved against the CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Resolved {
    Scalar,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    Vnni,
    #[cfg(target_arch = "x86_64")]
    AvxVnni,
    #[cfg(target_arch = "x86_64")]
    Amx,
    #[cfg(target_arch = "aarch64")]
    Neon,
    #[cfg(target_arch = "aarch64")]
    NeonDot,
    #[cfg(octet_arm_dsp)]
    CortexM,
}

impl Resolved {
    /// The set whose kernels run the ops this one has none of its own for: the AMX set's
    /// AVX-512 VNNI (every op but its convs); every other set itself.
    #[inline]
    pub(crate) const fn base(self) -> Resolved {
        match self {
            #[cfg(target_arch = "x86_64")]
            Resolved::Amx => Resolved::Vnni,
            k => k,
        }
    }

    /// The kernel set that names this resolution.
    pub(crate) const fn kernels(self) -> Kernels {
        match self {
            Resolved::Scalar => Kernels::Scalar,
            #[cfg(target_arch = "x86_64")]
            Resolved::Avx2 => Kernels::Avx2,
            #[cfg(target_arch = "x86_64")]
            Resolved::Vnni => Kernels::Avx512Vnni,
            #[cfg(target_arch = "x86_64")]
            Resolved::AvxVnni => Kernels::AvxVnni,
            #[cfg(target_arch = "x86_64")]
            Resolved::Amx => Kernels::Amx,
            #[cfg(target_arch = "aarch64")]
            Resolved::Neon => Kernels::Neon,
            #[cfg(target_arch = "aarch64")]
            Resolved::NeonDot => Kernels::NeonDot,
            #[cfg(octet_arm_dsp)]
            Resolved::CortexM => Kernels::CortexM,
        }
    }
}

impl Kernels {
    /// Whether AVX2 kernels can run here: detected at run time (with `std` through
    /// `is_x86_feature_detected!`, without it through CPUID and XGETBV, cached), or known at
    /// compile time (`-C target-feature=+avx2`).
    pub fn avx2_available() -> bool {
        #[cfg(all(target_arch = "x86_64", target_feature = "avx2"))]
        {
            true
        }
        #[cfg(all(target_arch = "x86_64", not(target_feature = "avx2"), feature = "std"))]
        {
            std::is_x86_feature_detected!("avx2")
        }
        #[cfg(all(
            target_arch = "x86_64",
            not(target_feature = "avx2"),
            not(feature = "std")
        ))]
        {
            cpuid::avx2()
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    /// Whether the AVX-512 VNNI kernels can run here (AVX2, AVX-512 F, BW, VL and VNNI, and the
    /// OS saves the AVX-512 state); detected like [`Kernels::avx2_available`].
    pub fn vnni_available() -> bool {
        #[cfg(all(
            target_arch = "x86_64",
            target_feature = "avx2",
            target_feature = "avx512bw",
            target_feature = "avx512vl",
            target_feature = "avx512vnni"
        ))]
        {
            true
        }
        #[cfg(all(
            target_arch = "x86_64",
            not(all(
                target_feature = "avx2",
                target_feature = "avx512bw",
                target_feature = "avx512vl",
                target_feature = "avx512vnni"
            )),
            feature = "std"
        ))]
        {
            std::is_x86_feature_detected!("avx2")
                && std::is_x86_feature_detected!("avx512f")
                && std::is_x86_feature_detected!("avx512bw")
                && std::is_x86_feature_detected!("avx512vl")
                && std::is_x86_feature_detected!("avx512vnni")
        }
        #[cfg(all(
            target_arch = "x86_64",
            not(all(
                target_feature = "avx2",
                target_feature = "avx512bw",
                target_feature = "avx512vl",
                target_feature = "avx512vnni"
            )),
            not(feature = "std")
        ))]
        {
            cpuid::vnni()
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    /// Whether the NEON kernels can run here: known at compile time (`target_feature = "neon"`,
    /// the default of aarch64 Linux targets), else detected with `std`.
    pub fn neon_available() -> bool {
        #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
        {
            true
        }
        #[cfg(all(target_arch = "aarch64", not(target_feature = "neon"), feature = "std"))]
        {
            std::arch::is_aarch64_feature_detected!("neon")
        }
        #[cfg(not(all(target_arch = "aarch64", any(target_feature = "neon", feature = "std"))))]
        {
            false
        }
    }

    /// Whether the NEON kernels with `SDOT` can run here (NEON and `dotprod`): detected at run
    /// time with `std`, else known at compile time (`-C target-feature=+dotprod`).
    pub fn dotprod_available() -> bool {
        #[cfg(all(target_arch = "aarch64", target_feature = "dotprod"))]
        {
            Self::neon_available()
        }
        #[cfg(all(
            target_arch = "aarch64",
            not(target_feature = "dotprod"),
            feature = "std"
        ))]
        {
            Self::neon_available() && std::arch::is_aarch64_feature_detected!("dotprod")
        }
        #[cfg(not(all(
            target_arch = "aarch64",
            any(target_feature = "dotprod", feature = "std")
        )))]
        {
            false
        }
    }

    /// Whether the Cortex-M DSP kernels can run here: known at compile time (built for
    /// Armv7E-M or Armv7-A in Thumb-2, `cfg(octet_arm_dsp)`; Armv7-M cores such as the
    /// Cortex-M3 lack `SMLAD`).
    pub const fn cortex_m_available() -> bool {
        cfg!(octet_arm_dsp)
    }

    /// Every kernel set, the reference first (each may be unavailable here: see
    /// [`Kernels::resolved_name`]).
    pub const ALL: [Kernels; 9] = [
        Kernels::Scalar,
        Kernels::Avx2,
        Kernels::AvxVnni,
        Kernels::Avx512Vnni,
        Kernels::Amx,
        Kernels::Neon,
        Kernels::NeonDot,
        Kernels::CortexM,
        Kernels::Auto,
    ];

    /// Lower-case name (`scalar`, `avx2`, `avx-vnni`, `avx512-vnni`, `amx`, `neon`, `neon-dotprod`,
    /// `cortex-m-dsp`, `auto`), as command lines and benchmark files spell it.
    pub const fn name(self) -> &'static str {
        match self {
            Kernels::Scalar => "scalar",
            Kernels::Avx2 => "avx2",
            Kernels::AvxVnni => "avx-vnni",
            Kernels::Avx512Vnni => "avx512-vnni",
            Kernels::Amx => "amx",
            Kernels::Neon => "neon",
            Kernels::NeonDot => "neon-dotprod",
            Kernels::CortexM => "cortex-m-dsp",
            Kernels::Auto => "auto",
        }
    }

    /// The kernel set of a [`Kernels::name`].
    pub fn from_name(name: &str) -> Option<Kernels> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// One line for `--help`.
    pub const fn help(self) -> &'static str {
        match self {
            Kernels::Scalar => "the scalar reference kernels",
            Kernels::Avx2 => "x86-64 AVX2",
            Kernels::AvxVnni => "x86-64 AVX-VNNI (256-bit vpdpbusd) for conv2d, AVX2 for the rest",
            Kernels::Avx512Vnni => "x86-64 AVX-512 VNNI for conv2d, AVX2 for the rest",
            Kernels::Amx => "x86-64 AMX-INT8 tiles for conv2d, AVX-512 VNNI for the rest",
            Kernels::Neon => "aarch64 NEON without dotprod",
            Kernels::NeonDot => "aarch64 NEON with SDOT (dotprod)",
            Kernels::CortexM => {
                "Cortex-M DSP extension, SMLAD (builds for Armv7E-M and Armv7-A Thumb-2 only)"
            }
            Kernels::Auto => "the fastest this CPU has",
        }
    }

    /// The kernel sets this CPU can run (the reference first, `Auto` last).
    pub fn available() -> impl Iterator<Item = Kernels> {
        Self::ALL.into_iter().filter(|k| k.resolve().is_ok())
    }

    /// The kernel set this choice runs on this CPU (`scalar`, `avx2`, `avx512-vnni`, …), for
    /// benchmarks and reports; an error when it cannot run here.
    pub fn resolved_name(self) -> crate::Result<&'static str> {
        Ok(self.resolve()?.kernels().name())
    }

    /// The set `Auto` runs on a microcontroller target, which has no run-time detection: the
    /// Cortex-M kernels where the target has the DSP extension, else the scalar reference.
    /// For build scripts sizing a firmware's arena on the host: `arch`, `triple` and `features`
    /// are the target's `CARGO_CFG_TARGET_ARCH`, `TARGET` and `CARGO_CFG_TARGET_FEATURE`.
    pub fn auto_on_mcu(arch: &str, triple: &str, features: &str) -> Kernels {
        if super::arm_dsp::has_dsp(arch, triple, features) {
            Kernels::CortexM
        } else {
            Kernels::Scalar
        }
    }

    /// The set `Auto` runs on this CPU; any other set itself.
    pub fn resolved_kernels(self) -> Kernels {
        match self {
            Kernels::Auto => self.resolve().map_or(Kernels::Scalar, Resolved::kernels),
            k => k,
        }
    }

    /// Whether the AVX-VNNI kernels can run here: AVX2 and AVX-VNNI (CPUID leaf 7 subleaf 1,
    /// EAX bit 4; the YMM state saved by the OS, as for AVX2).
    pub fn avx_vnni_available() -> bool {
        #[cfg(all(target_arch = "x86_64", feature = "std"))]
        {
            std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("avxvnni")
        }
        #[cfg(all(target_arch = "x86_64", not(feature = "std")))]
        {
            // SAFETY: CPUID exists on every x86-64 CPU; leaf 7 on every one with AVX2.
            #[allow(unused_unsafe)]
            let eax = unsafe { core::arch::x86_64::__cpuid_count(7, 1).eax };
            Self::avx2_available() && eax & (1 << 4) != 0
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    /// Whether the AMX kernels can run here: the AVX-512 VNNI set, AMX-TILE and AMX-INT8, the
    /// tile state enabled by the OS and, on Linux with `std`, granted to this process
    /// (`arch_prctl(ARCH_REQ_XCOMP_PERM)`, asked once). Without `std` the embedding program
    /// must ask for it before the first run.
    pub fn amx_available() -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            super::amx::available()
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    pub(crate) fn resolve(self) -> crate::Result<Resolved> {
        match self {
            Kernels::Scalar => Ok(Resolved::Scalar),
            #[cfg(target_arch = "x86_64")]
            Kernels::Avx2 if Self::avx2_available() => Ok(Resolved::Avx2),
            Kernels::Avx2 => Err(crate::RuntimeError::KernelsUnavailable),
            #[cfg(target_arch = "x86_64")]
            Kernels::Avx512Vnni if Self::vnni_available() => Ok(Resolved::Vnni),
            Kernels::Avx512Vnni => Err(crate::RuntimeError::KernelsUnavailable),
            #[cfg(target_arch = "x86_64")]
            Kernels::AvxVnni if Self::avx_vnni_available() => Ok(Resolved::AvxVnni),
            Kernels::AvxVnni => Err(crate::RuntimeError::KernelsUnavailable),
            #[cfg(target_arch = "x86_64")]
            Kernels::Amx if Self::amx_available() => Ok(Resolved::Amx),
            Kernels::Amx => Err(crate::RuntimeError::KernelsUnavailable),
            #[cfg(target_arch = "aarch64")]
            Kernels::Neon if Self::neon_available() => Ok(Resolved::Neon),
            Kernels::Neon => Err(crate::RuntimeError::KernelsUnavailable),
            #[cfg(target_arch = "aarch64")]
            Kernels::NeonDot if Self::dotprod_available() => Ok(Resolved::NeonDot),
            Kernels::NeonDot => Err(crate::RuntimeError::KernelsUnavailable),
            #[cfg(octet_arm_dsp)]
            Kernels::CortexM => Ok(Resolved::CortexM),
            #[cfg(not(octet_arm_dsp))]
            Kernels::CortexM => Err(crate::RuntimeError::KernelsUnavailable),
            #[cfg(target_arch = "aarch64")]
            Kernels::Auto if Self::dotprod_available() => Ok(Resolved::NeonDot),
            #[cfg(target_arch = "aarch64")]
            Kernels::Auto if Self::neon_available() => Ok(Resolved::Neon),
            #[cfg(target_arch = "x86_64")]
            Kernels::Auto if Self::amx_available() => Ok(Resolved::Amx),
            #[cfg(target_arch = "x86_64")]
            Kernels::Auto if Self::vnni_available() => Ok(Resolved::Vnni),
            #[cfg(target_arch = "x86_64")]
            Kernels::Auto if Self::avx_vnni_available() => Ok(Resolved::AvxVnni),
            #[cfg(target_arch = "x86_64")]
            Kernels::Auto if Self::avx2_available() => Ok(Resolved::Avx2),
            #[cfg(octet_arm_dsp)]
            Kernels::Auto => Ok(Resolved::CortexM),
            #[cfg(not(octet_arm_dsp))]
            Kernels::Auto => Ok(Resolved::Scalar),
        }
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::Kernels;

    #[test]
    fn detection_agrees_with_std() {
        assert_eq!(
            Kernels::avx2_available(),
            std::is_x86_feature_detected!("avx2")
        );
        let vnni = std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512vl")
            && std::is_x86_feature_detected!("avx512vnni");
        assert_eq!(Kernels::vnni_available(), vnni);
        assert_eq!(
            Kernels::avx_vnni_available(),
            std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("avxvnni")
        );
        println!("avx2 {} vnni {vnni}", Kernels::avx2_available());
    }
}

#[cfg(all(test, target_arch = "aarch64"))]
mod neon_tests {
    use super::{Kernels, Resolved};
    use crate::RuntimeError;

    #[test]
    fn detection_agrees_with_std() {
        let neon = std::arch::is_aarch64_feature_detected!("neon");
        let dot = neon && std::arch::is_aarch64_feature_detected!("dotprod");
        assert_eq!(Kernels::neon_available(), neon);
        assert_eq!(Kernels::dotprod_available(), dot);
        println!("neon {neon} dotprod {dot}");
    }

    #[test]
    fn resolution() {
        assert!(!Kernels::avx2_available());
        assert_eq!(
            Kernels::Avx2.resolve(),
            Err(RuntimeError::KernelsUnavailable)
        );
        assert_eq!(Kernels::Neon.resolve(), Ok(Resolved::Neon));
        if Kernels::dotprod_available() {
            assert_eq!(Kernels::NeonDot.resolve(), Ok(Resolved::NeonDot));
            assert_eq!(Kernels::Auto.resolve(), Ok(Resolved::NeonDot));
        } else {
            assert_eq!(
                Kernels::NeonDot.resolve(),
                Err(RuntimeError::KernelsUnavailable)
            );
            assert_eq!(Kernels::Auto.resolve(), Ok(Resolved::Neon));
        }
    }
}

#[cfg(all(test, not(target_arch = "aarch64")))]
mod neon_elsewhere_tests {
    use super::Kernels;
    use crate::RuntimeError;

    #[test]
    fn neon_kernels_unavailable() {
        assert!(!Kernels::neon_available() && !Kernels::dotprod_available());
        assert_eq!(
            Kernels::Neon.resolve(),
            Err(RuntimeError::KernelsUnavailable)
        );
        assert_eq!(
            Kernels::NeonDot.resolve(),
            Err(RuntimeError::KernelsUnavailable)
        );
    }
}

#[cfg(all(test, not(octet_arm_dsp)))]
mod cortex_m_elsewhere_tests {
    use super::Kernels;
    use crate::RuntimeError;

    #[test]
    fn cortex_m_kernels_unavailable() {
        assert!(!Kernels::cortex_m_available());
        assert_eq!(
            Kernels::CortexM.resolve(),
            Err(RuntimeError::KernelsUnavailable)
        );
        assert!(Kernels::available().all(|k| k != Kernels::CortexM));
        assert_eq!(Kernels::from_name("cortex-m-dsp"), Some(Kernels::CortexM));
    }
}

/// `--kernels`: `--help` lists the kernel sets with their help; clap refuses other names. The
/// Cortex-M kernels are accepted but not listed: a program with a command line never runs on
/// the microcontrollers they are built for.
#[cfg(feature = "clap")]
impl clap::ValueEnum for Kernels {
    fn value_variants<'a>() -> &'a [Self] {
        &Self::ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        let listed = !matches!(self, Kernels::CortexM);
        let value = clap::builder::PossibleValue::new(self.name());
        Some(value.help(self.help()).hide(!listed))
    }
}

#[cfg(test)]
mod mcu_tests {
    use super::Kernels;

    #[test]
    fn auto_on_microcontrollers() {
        let auto = |arch, triple, features| Kernels::auto_on_mcu(arch, triple, features);
        assert_eq!(auto("arm", "thumbv7em-none-eabihf", ""), Kernels::CortexM);
        assert_eq!(
            auto("arm", "thumbv7em-none-eabi", "v7,thumb2"),
            Kernels::CortexM
        );
        assert_eq!(auto("arm", "thumbv7m-none-eabi", ""), Kernels::Scalar);
        assert_eq!(
            auto("arm", "thumbv7m-none-eabi", "thumb2,dsp"),
            Kernels::CortexM
        );
        assert_eq!(auto("arm", "thumbv6m-none-eabi", "dsp2"), Kernels::Scalar);
        assert_eq!(
            auto("arm", "thumbv7neon-unknown-linux-gnueabihf", "v7,neon"),
            Kernels::CortexM
        );
        assert_eq!(
            auto("arm", "armv7-unknown-linux-gnueabihf", "v7"),
            Kernels::Scalar
        );
        assert_eq!(
            auto("x86_64", "thumbv7em-lookalike", "dsp"),
            Kernels::Scalar
        );
    }
}
