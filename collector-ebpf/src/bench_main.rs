//! The benchmarks' eBPF object (`faultline-bench-probes`): the ring-drain
//! producer and the empty uprobe. Kept out of the collector's object so that
//! production carries no ring nobody reads.
#![no_std]
#![no_main]
#![feature(core_intrinsics)]
#![allow(internal_features)]

mod bench;
// Only `now_ns` is used here; the rest serves the production object.
#[allow(dead_code, unused_imports, unused_macros)]
mod helpers;
mod object;
mod stats;
