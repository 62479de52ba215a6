//! What every eBPF object of this crate carries: the panic handler and the license.

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // The verifier rejects any reachable panic path, so this is never executed.
    loop {}
}

/// The kernel checks the license of programs that call GPL-only helpers.
// SAFETY: `license` is the section name the loader reads; the symbol is unique.
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
