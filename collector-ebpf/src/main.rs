//! faultline's eBPF probes. One module per probe family; each program's doc
//! comment names the exact tracepoint or symbol it hooks.
//!
//! Built for `bpfel-unknown-none` with the pinned nightly by `collector/build.rs`
//! and embedded into the collector binary.
#![no_std]
#![no_main]
// Atomic add without compare-and-swap (BPF_ATOMIC add), which core's atomics
// do not expose for the BPF target.
#![feature(core_intrinsics)]
#![allow(internal_features)]

mod bench;
mod block;
mod cuda;
mod exec;
mod stats;
mod verbs;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // The verifier rejects any reachable panic path, so this is never executed.
    loop {}
}

/// The kernel checks the license of programs that call GPL-only helpers.
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
