//! Where on a function its uprobe goes.
//!
//! An x86-64 kernel takes a uprobe on most instructions by single-stepping a
//! copy of the instruction out of line, which is a second trap (`#DB`). A few
//! it emulates inside the first trap: `push`, `nop`, jumps and calls. On the
//! VM measured here a single-stepped entry cost 9.3–9.6 µs per hit and an
//! emulated one 0.7–0.8 µs: the single step is most of a hit.
//!
//! A CET-enabled build (`-fcf-protection`, the default of several
//! distributions' compilers) starts every function with `endbr64`, which is
//! single-stepped. `endbr64` changes no register, flag or memory, so the
//! probe goes on the next instruction instead, usually the prologue's first
//! `push`: the arguments, stack pointer and return address are exactly as at
//! entry, and every call still passes there. Entry probe and return probe of
//! a function go on the same address, so they share one breakpoint.
use std::{fs::File, path::Path};

use object::{Object, ObjectSection, ObjectSymbol, ReadCache};

/// `endbr64`.
pub const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];

/// Bytes at the start of a function's code to probe past: the `endbr64`
/// marker, if that is how it starts.
pub fn skip(code: &[u8]) -> u64 {
    if code.starts_with(&ENDBR64) {
        ENDBR64.len() as u64
    } else {
        0
    }
}

/// The first `len` bytes of `symbol`'s code in the ELF file `path`
/// (dynamic symbols first, then the symbol table).
pub fn code_of(path: &Path, symbol: &str, len: u64) -> Result<Vec<u8>, String> {
    let f = File::open(path).map_err(|e| format!("opening {}: {e}", path.display()))?;
    let cache = ReadCache::new(f);
    let obj =
        object::File::parse(&cache).map_err(|e| format!("parsing {}: {e}", path.display()))?;
    let sym = obj
        .dynamic_symbols()
        .chain(obj.symbols())
        .find(|s| s.name() == Ok(symbol) && s.is_definition())
        .ok_or_else(|| format!("{symbol} not defined in {}", path.display()))?;
    let index = sym
        .section_index()
        .ok_or_else(|| format!("{symbol} is in no section"))?;
    let section = obj
        .section_by_index(index)
        .map_err(|e| format!("{symbol}'s section: {e}"))?;
    let len = len.min(sym.size().max(1));
    section
        .data_range(sym.address(), len)
        .map_err(|e| format!("reading {symbol}'s code: {e}"))?
        .map(<[u8]>::to_vec)
        .ok_or_else(|| format!("{symbol}'s code is outside its section"))
}

/// The offset from `symbol` at which to attach its uprobes in `path`: past
/// a leading `endbr64`, else 0 (also when the code cannot be read: the
/// attach then reports its own error).
pub fn offset_of(path: &Path, symbol: &str) -> u64 {
    match code_of(path, symbol, ENDBR64.len() as u64) {
        Ok(code) => skip(&code),
        Err(e) => {
            tracing::debug!(symbol, error = %e, "reading a probed function's first instruction");
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_leading_endbr64_is_skipped() {
        assert_eq!(skip(&[0xf3, 0x0f, 0x1e, 0xfa, 0x55]), 4);
        // push %rbp, a 5-byte nop, test %rdi,%rdi: probed where they are.
        assert_eq!(skip(&[0x55, 0x48, 0x89, 0xe5]), 0);
        assert_eq!(skip(&[0x0f, 0x1f, 0x44, 0x00, 0x00]), 0);
        assert_eq!(skip(&[0x48, 0x85, 0xff]), 0);
        // endbr32 is not endbr64; a short read is nothing to skip.
        assert_eq!(skip(&[0xf3, 0x0f, 0x1e, 0xfb]), 0);
        assert_eq!(skip(&[0xf3, 0x0f]), 0);
    }
}
