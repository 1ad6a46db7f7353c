//! The tile unit: whether it can run here, its configuration, and the instructions the
//! kernels use (stable Rust reaches them only through `asm!`).

use core::arch::asm;
use core::arch::x86_64::{__cpuid, __cpuid_count, _xgetbv};
use core::sync::atomic::{AtomicU8, Ordering};

/// Rows of every tile (and i32 columns of the sums, 4-byte groups of the weights).
pub(super) const ROWS: usize = 16;
/// Bytes per tile row: 64 inputs of A, 16 × 4 weights of B, 16 i32 sums of C.
pub(super) const ROW_BYTES: usize = 64;

/// XCR0 bits 17 and 18: the OS manages the tile configuration and data state.
const XCR0_TILE: u64 = 3 << 17;
/// `arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`.
#[cfg(all(feature = "std", target_os = "linux"))]
const ARCH_REQ_XCOMP_PERM: usize = 0x1023;
#[cfg(all(feature = "std", target_os = "linux"))]
const XFEATURE_XTILEDATA: usize = 18;
#[cfg(all(feature = "std", target_os = "linux"))]
const SYS_ARCH_PRCTL: usize = 158;

// Bit 0: known; bit 1: available.
static STATE: AtomicU8 = AtomicU8::new(0);

/// Whether the AMX kernels can run here: the AVX-512 VNNI set (the rest of `Kernels::Amx`),
/// AMX-TILE and AMX-INT8 (CPUID leaf 7, EDX bits 24 and 25), the tile state enabled by the OS
/// (XCR0) and, on Linux with `std`, granted to this process (asked once, cached).
pub fn available() -> bool {
    let s = STATE.load(Ordering::Relaxed);
    if s & 1 != 0 {
        return s & 2 != 0;
    }
    let ok = crate::Kernels::vnni_available() && cpu_has_tiles() && permitted();
    STATE.store(1 | (ok as u8) << 1, Ordering::Relaxed);
    ok
}

fn cpu_has_tiles() -> bool {
    // SAFETY: CPUID exists on every x86-64 CPU; XGETBV only runs where leaf 1 reports OSXSAVE
    // (vnni_available checked it first).
    #[allow(unused_unsafe)]
    unsafe {
        if __cpuid(0).eax < 7 || __cpuid(1).ecx & (1 << 27) == 0 {
            return false;
        }
        let edx = __cpuid_count(7, 0).edx;
        edx & (1 << 24) != 0 && edx & (1 << 25) != 0 && _xgetbv(0) & XCR0_TILE == XCR0_TILE
    }
}

/// Linux: the kernel's answer to the request for the tile data state (0: granted).
#[cfg(all(feature = "std", target_os = "linux"))]
fn permitted() -> bool {
    let ret: isize;
    // SAFETY: arch_prctl(ARCH_REQ_XCOMP_PERM) only changes which state this process may use.
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") SYS_ARCH_PRCTL as isize => ret,
            in("rdi") ARCH_REQ_XCOMP_PERM,
            in("rsi") XFEATURE_XTILEDATA,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret == 0
}

/// Without `std` (or off Linux) the embedding program asks for the state itself.
#[cfg(not(all(feature = "std", target_os = "linux")))]
fn permitted() -> bool {
    true
}

/// The tile configuration the kernels load: palette 1, eight tiles of 16 rows × 64 bytes
/// (tiles 0–3 the sums, 4–5 the inputs, 6–7 the weights).
#[repr(C, align(64))]
struct Config {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    colsb: [u16; 16],
    rows: [u8; 16],
}

const CONFIG: Config = {
    let mut colsb = [0u16; 16];
    let mut rows = [0u8; 16];
    let mut t = 0;
    while t < 8 {
        colsb[t] = ROW_BYTES as u16;
        rows[t] = ROWS as u8;
        t += 1;
    }
    Config {
        palette: 1,
        start_row: 0,
        reserved: [0; 14],
        colsb,
        rows,
    }
};

/// The 2 × 2 sum tiles as stored, each row on a cache line of its own: a row split over two
/// lines costs `tilestored` and every load of the epilogue two accesses.
#[repr(C, align(64))]
pub(super) struct Sums(pub(super) [[[i32; ROWS]; ROWS]; 4]);

/// The tiles configured for this thread until dropped (then released, so the thread's
/// context switches stop saving them).
pub(super) struct Tiles(());

impl Tiles {
    /// # Safety
    /// [`available`] must hold.
    #[inline]
    pub(super) unsafe fn configure() -> Tiles {
        asm!("ldtilecfg [{}]", in(reg) &CONFIG, options(nostack, readonly));
        Tiles(())
    }

    /// The 2 × 2 sums (tiles 0–3) zeroed.
    #[inline(always)]
    pub(super) fn zero(&self) {
        // SAFETY: the tiles are configured (self exists).
        unsafe {
            asm!(
                "tilezero tmm0",
                "tilezero tmm1",
                "tilezero tmm2",
                "tilezero tmm3",
                options(nostack, nomem)
            )
        };
    }

    /// One step of 64 inputs: input tiles from `a0` and `a1` (rows `sa` bytes apart), weight
    /// tiles from `b0` and `b1` (rows 64 bytes apart), sums `c[i][j] += a_i · b_j`: signed
    /// inputs by signed weights (`tdpbssd`), or by unsigned ones (`tdpbsud`) where not
    /// `SIGNED`.
    ///
    /// # Safety
    /// Each pointer is readable for 16 rows of 64 bytes at its stride.
    #[inline(always)]
    pub(super) unsafe fn step<const SIGNED: bool>(
        &self,
        a0: *const i8,
        a1: *const i8,
        sa: usize,
        b0: *const u8,
        b1: *const u8,
    ) {
        // One instruction sequence, two opcodes (an `asm!` template is a literal).
        macro_rules! step {
            ($op:literal) => {
                asm!(
                    "tileloadd tmm4, [{a0} + {sa}*1]",
                    "tileloadd tmm6, [{b0} + {sb}*1]",
                    concat!($op, " tmm0, tmm4, tmm6"),
                    "tileloadd tmm7, [{b1} + {sb}*1]",
                    concat!($op, " tmm1, tmm4, tmm7"),
                    "tileloadd tmm5, [{a1} + {sa}*1]",
                    concat!($op, " tmm2, tmm5, tmm6"),
                    concat!($op, " tmm3, tmm5, tmm7"),
                    a0 = in(reg) a0,
                    a1 = in(reg) a1,
                    sa = in(reg) sa,
                    b0 = in(reg) b0,
                    b1 = in(reg) b1,
                    sb = in(reg) ROW_BYTES,
                    options(nostack, readonly)
                )
            };
        }
        if SIGNED {
            step!("tdpbssd")
        } else {
            step!("tdpbsud")
        }
    }

    /// The 2 × 2 sums into `c` (`c.0[2i + j]`, 16 rows of 16 i32 each).
    #[inline(always)]
    pub(super) fn store(&self, c: &mut Sums) {
        let p = c.0.as_mut_ptr() as *mut u8;
        let t = ROWS * ROW_BYTES;
        // SAFETY: c holds four tiles of 16 rows × 64 bytes.
        unsafe {
            asm!(
                "tilestored [{c0} + {s}*1], tmm0",
                "tilestored [{c1} + {s}*1], tmm1",
                "tilestored [{c2} + {s}*1], tmm2",
                "tilestored [{c3} + {s}*1], tmm3",
                c0 = in(reg) p,
                c1 = in(reg) p.add(t),
                c2 = in(reg) p.add(2 * t),
                c3 = in(reg) p.add(3 * t),
                s = in(reg) ROW_BYTES,
                options(nostack)
            )
        };
    }
}

impl Drop for Tiles {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the tiles are configured (self exists).
        unsafe { asm!("tilerelease", options(nostack, nomem)) };
    }
}
