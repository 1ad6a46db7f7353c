//! Integer-only inference with no heap allocation. Filled by the int8 issue.
#![no_std]
