//! `Model::parse` on arbitrary bytes must return `Err` or a model that runs without panicking
//! (scalar and fastest kernels giving the same bytes).
#![no_main]

mod check;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| check::parses_or_is_refused(data));
