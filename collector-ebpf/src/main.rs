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
// aya-ebpf's map methods take `impl Borrow<K>`: keys are passed by reference
// so that large keys are not copied again on the 512-byte BPF stack.
#![allow(clippy::needless_borrows_for_generic_args)]

mod block;
mod block_btf;
mod cuda;
mod exec;
mod helpers;
mod nccl;
mod object;
mod stats;
mod verbs;
