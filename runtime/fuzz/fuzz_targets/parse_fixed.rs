//! Like `parse`, but first makes the header's file_len and CRC match the input, so the fuzzer
//! explores the validation behind the CRC check.
#![no_main]

mod check;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| check::parses_or_is_refused(&check::repaired(data)));
