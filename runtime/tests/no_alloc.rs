//! `run` performs no heap allocation: a counting global allocator sees no change. Only the
//! test's own thread counts: the test harness's threads allocate when the machine is busy.

use octet_testkit as common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

use octet_runtime::{Kernels, Model};

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    // `const` so reading it never allocates (the allocator itself reads it).
    static COUNTED: Cell<bool> = const { Cell::new(false) };
}

fn count() {
    if COUNTED.with(Cell::get) {
        ALLOCS.fetch_add(1, Ordering::SeqCst);
    }
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn parse_and_run_do_not_allocate() {
    COUNTED.with(|c| c.set(true));
    for bytes in [common::lenet(1).encode(), common::small_resnet(2).encode()] {
        let pixels = common::Rng::new(3).bytes(4 * 1024 * 3);
        let mut arena = vec![0u8; 1 << 20];
        // Warm up anything lazily initialised (CPU feature detection).
        let kernels: [Option<Kernels>; Kernels::ALL.len()] = core::array::from_fn(|i| {
            let k = Kernels::ALL[i];
            k.resolved_name().is_ok().then_some(k)
        });
        let before = ALLOCS.load(Ordering::SeqCst);
        let m = Model::parse(&bytes).unwrap();
        let n = 2 * m.input_len();
        for k in kernels.into_iter().flatten() {
            let out = m.run_with(k, &pixels[..n], &mut arena).unwrap();
            assert_eq!(out.len(), 2 * m.output_len());
        }
        let out = m.run(&pixels[..n], &mut arena).unwrap();
        assert_eq!(out.len(), 2 * m.output_len());
        assert_eq!(ALLOCS.load(Ordering::SeqCst), before);
    }
}
