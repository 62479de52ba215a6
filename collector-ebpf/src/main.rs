//! faultline's eBPF probes. One module per probe family; each program's doc
//! comment names the exact tracepoint or symbol it hooks.
//!
//! Built for `bpfel-unknown-none` with the pinned nightly by `collector/build.rs`
//! and embedded into the collector binary. The benchmarks' programs are an
//! object of their own (`bench_main.rs`): nothing here is unread.
#![no_std]
#![no_main]
// Atomic add without compare-and-swap (BPF_ATOMIC add), which core's atomics
// do not expose for the BPF target.
#![feature(core_intrinsics)]
#![allow(internal_features)]

mod block;
mod block_btf;
mod cuda;
mod exec;
mod helpers;
mod nccl;
mod object;
mod stats;
mod verbs;
