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

/// An ELF file, parsed, for reading its symbols' code.
type Elf<'a> = object::File<'a, &'a ReadCache<File>>;

fn open(path: &Path) -> Result<ReadCache<File>, String> {
    File::open(path)
        .map(ReadCache::new)
        .map_err(|e| format!("opening {}: {e}", path.display()))
}

fn parse<'a>(path: &Path, cache: &'a ReadCache<File>) -> Result<Elf<'a>, String> {
    object::File::parse(cache).map_err(|e| format!("parsing {}: {e}", path.display()))
}

/// The first `len` bytes of `symbol`'s code in `obj` (dynamic symbols
/// first, then the symbol table).
fn code_in(obj: &Elf<'_>, symbol: &str, len: u64) -> Result<Vec<u8>, String> {
    let sym = obj
        .dynamic_symbols()
        .chain(obj.symbols())
        .find(|s| s.name() == Ok(symbol) && s.is_definition())
        .ok_or_else(|| format!("{symbol} not defined"))?;
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

/// The first `len` bytes of `symbol`'s code in the ELF file `path`.
pub fn code_of(path: &Path, symbol: &str, len: u64) -> Result<Vec<u8>, String> {
    let cache = open(path)?;
    code_in(&parse(path, &cache)?, symbol, len).map_err(|e| format!("{e} in {}", path.display()))
}

/// For each of `symbols`, the offset from it at which to attach its uprobes
/// in `path`: past a leading `endbr64`, else 0 (also when the code cannot
/// be read: the attach then reports its own error). The file is parsed once.
pub fn offsets_of<'s>(path: &Path, symbols: impl Iterator<Item = &'s str>) -> Vec<u64> {
    let cache = open(path);
    let obj = cache
        .as_ref()
        .map_err(Clone::clone)
        .and_then(|c| parse(path, c));
    symbols
        .map(|symbol| {
            match obj
                .as_ref()
                .map_err(Clone::clone)
                .and_then(|o| code_in(o, symbol, ENDBR64.len() as u64))
            {
                Ok(code) => skip(&code),
                Err(e) => {
                    tracing::debug!(symbol, error = %e, "reading a probed function's first instruction");
                    0
                }
            }
        })
        .collect()
}

/// [`offsets_of`] for one symbol.
pub fn offset_of(path: &Path, symbol: &str) -> u64 {
    offsets_of(path, std::iter::once(symbol))
        .first()
        .copied()
        .unwrap_or(0)
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
