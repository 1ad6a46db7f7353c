//! The deepest stack a piece of code used: the free stack painted with a pattern before, and
//! searched for the lowest overwritten word after.

use cortex_m_semihosting::hprintln;

/// What fills the unused stack, to find afterwards how deep it went.
const PAINT: u32 = 0x5EED_C0DE;
/// Bytes painted below the stack pointer; a deeper stack is reported as an error.
const STACK_WINDOW: usize = 128 * 1024;
/// Bytes left unpainted below the stack pointer (the painting code's own frame).
const STACK_MARGIN: usize = 256;

extern "C" {
    /// The top of the stack (cortex-m-rt's link.x: the end of RAM).
    static _stack_start: u32;
    /// The end of .bss and .uninit: the stack may not grow below it.
    static __sheap: u32;
}

/// A painted stack region `[lo, hi)`, word addresses.
pub struct Painted {
    lo: usize,
    hi: usize,
}

impl Painted {
    /// Paints the free stack below the caller's frame.
    #[inline(always)]
    pub fn new() -> Painted {
        let hi = (cortex_m::register::msp::read() as usize - STACK_MARGIN) & !3;
        let floor = core::ptr::addr_of!(__sheap) as usize;
        let lo = hi.saturating_sub(STACK_WINDOW).max(floor);
        let mut a = lo;
        while a < hi {
            // SAFETY: free stack between the end of .bss and the stack pointer, word-aligned.
            unsafe { (a as *mut u32).write_volatile(PAINT) };
            a += 4;
        }
        Painted { lo, hi }
    }

    /// The deepest stack use since `new`, in bytes below the top of the stack; `None` when
    /// the stack went below the painted window.
    pub fn used(&self) -> Option<usize> {
        let top = core::ptr::addr_of!(_stack_start) as usize;
        let mut a = self.lo;
        // SAFETY: as in `new`; only reads.
        while a < self.hi && unsafe { (a as *const u32).read_volatile() } == PAINT {
            a += 4;
        }
        (a > self.lo).then_some(top - a)
    }
}

/// `used`, reporting a stack deeper than the window (`what` names the code).
pub fn stack_or_fail(used: Option<usize>, what: &str) -> Option<usize> {
    if used.is_none() {
        hprintln!(
            "error: {}: the stack went deeper than the painted {} bytes (raise STACK_WINDOW in firmware/src/stack.rs)",
            what,
            STACK_WINDOW
        );
    }
    used
}
