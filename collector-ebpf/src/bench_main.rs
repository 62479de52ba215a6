//! The benchmarks' eBPF object (`faultline-bench-probes`): the ring-drain
//! producer and the empty uprobe. Kept out of the collector's object so that
//! production carries no ring nobody reads.
#![no_std]
#![no_main]
#![feature(core_intrinsics)]
#![allow(internal_features)]
// aya-ebpf's map methods take `impl Borrow<K>`: keys are passed by reference
// so that large keys are not copied again on the 512-byte BPF stack.
#![allow(clippy::needless_borrows_for_generic_args)]

mod bench;
// Only `now_ns` is used here; the rest serves the production object.
#[allow(dead_code, unused_imports, unused_macros)]
mod helpers;
mod object;
mod stats;
