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

/// The 5-byte nop (`nopl 0x0(%rax,%rax,1)`) that kernels since 6.18 turn
/// into a call to a uprobe trampoline after the first hit (no trap at all).
pub const NOP5: [u8; 5] = [0x0f, 0x1f, 0x44, 0x00, 0x00];

/// How the kernel takes a uprobe on an instruction, by kind: what a hit
/// costs depends on it more than on anything else (the module docs), so
/// bounded-overhead mode calibrates its per-hit cost on an entry of the
/// probed function's own kind (`super::calibrate::HitCalibrator`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// `push` of a general register: emulated in the trap.
    Push,
    /// `nop` (`0x90`, also with an operand-size prefix): emulated.
    Nop,
    /// A multi-byte `nop` (`0f 1f /0`) other than [`NOP5`]: emulated by
    /// kernels that emulate any nop, else single-stepped.
    LongNop,
    /// [`NOP5`]: optimised into a trampoline call where the kernel can.
    Nop5,
    /// `jmp`, `call` or a conditional jump with an immediate target: emulated.
    Branch,
    /// Anything else: single-stepped out of line (a second trap).
    Stepped,
}

impl EntryKind {
    /// Every kind.
    pub const ALL: [Self; 6] = [
        Self::Push,
        Self::Nop,
        Self::LongNop,
        Self::Nop5,
        Self::Branch,
        Self::Stepped,
    ];

    /// The instruction at the start of `code`'s kind.
    pub fn of(code: &[u8]) -> Self {
        if code.starts_with(&NOP5) {
            return Self::Nop5;
        }
        match code {
            [0x50..=0x57, ..] | [0x41, 0x50..=0x57, ..] => Self::Push,
            [0x90, ..] | [0x66, 0x90, ..] => Self::Nop,
            [0x0f, 0x1f, ..] | [0x66, 0x0f, 0x1f, ..] => Self::LongNop,
            [0xe8 | 0xe9 | 0xeb | 0x70..=0x7f, ..] | [0x0f, 0x80..=0x8f, ..] => Self::Branch,
            _ => Self::Stepped,
        }
    }

    /// A short name, for logs, metrics and the bench.
    pub fn name(self) -> &'static str {
        match self {
            Self::Push => "push",
            Self::Nop => "nop",
            Self::LongNop => "long nop",
            Self::Nop5 => "nop5",
            Self::Branch => "branch",
            Self::Stepped => "single-stepped",
        }
    }
}

/// Where a function's uprobes go: `skip` bytes in, on an instruction of `kind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    pub skip: u64,
    pub kind: EntryKind,
}

impl Placement {
    /// Where a function whose code cannot be read is probed: at its start,
    /// taken as single-stepped (the costly kind).
    pub const UNREAD: Self = Self {
        skip: 0,
        kind: EntryKind::Stepped,
    };

    /// The placement for a function whose code starts with `code`.
    pub fn of(code: &[u8]) -> Self {
        let skip = skip(code);
        Self {
            skip,
            kind: EntryKind::of(code.get(skip as usize..).unwrap_or_default()),
        }
    }
}

/// Bytes of a function's code read to place its probes: `endbr64` and the
/// longest instruction classified after it.
const READ: u64 = 16;

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

/// For each of `symbols`, where to attach its uprobes in `path`: past a
/// leading `endbr64`, else at the start (also when the code cannot be read:
/// the attach then reports its own error, and the kind is taken as
/// single-stepped, the costly one). The file is parsed once.
pub fn placements_of<'s>(path: &Path, symbols: impl Iterator<Item = &'s str>) -> Vec<Placement> {
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
                .and_then(|o| code_in(o, symbol, READ))
            {
                Ok(code) => Placement::of(&code),
                Err(e) => {
                    tracing::debug!(symbol, error = %e, "reading a probed function's first instruction");
                    Placement::UNREAD
                }
            }
        })
        .collect()
}

/// [`placements_of`] for one symbol.
pub fn placement_of(path: &Path, symbol: &str) -> Placement {
    placements_of(path, std::iter::once(symbol))
        .first()
        .copied()
        .unwrap_or(Placement::UNREAD)
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

    #[test]
    fn entries_are_classified_the_way_the_kernel_takes_them() {
        use EntryKind::*;
        let cases: &[(&[u8], EntryKind)] = &[
            (&[0x55, 0x48, 0x89, 0xe5], Push),       // push %rbp
            (&[0x41, 0x57, 0x41, 0x56], Push),       // push %r15
            (&[0x90, 0xc3], Nop),                    // nop
            (&[0x66, 0x90], Nop),                    // xchg %ax,%ax
            (&[0x0f, 0x1f, 0x40, 0x00], LongNop),    // nopl 0x0(%rax)
            (&[0x0f, 0x1f, 0x44, 0x00, 0x00], Nop5), // the optimisable nop
            (&[0xe9, 0, 0, 0, 0], Branch),           // jmp rel32
            (&[0x74, 0x05], Branch),                 // je rel8
            (&[0x0f, 0x84, 0, 0, 0, 0], Branch),     // je rel32
            (&[0x48, 0x85, 0xff], Stepped),          // test %rdi,%rdi
            (&[0x48, 0x89, 0xf8], Stepped),          // mov %rdi,%rax
            (&[0x48, 0x83, 0xec, 0x28], Stepped),    // sub $0x28,%rsp
            (&[0xf3, 0x0f, 0x1e, 0xfa], Stepped),    // endbr64 itself
            (&[0x40, 0x55], Stepped),                // rex push: stepped
            (&[], Stepped),
        ];
        for (code, kind) in cases {
            assert_eq!(EntryKind::of(code), *kind, "{code:02x?}");
        }
        // Past endbr64: the prologue's push.
        let cet = [0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5];
        assert_eq!(
            Placement::of(&cet),
            Placement {
                skip: 4,
                kind: Push
            }
        );
        assert_eq!(
            Placement::of(&[0x48, 0x85, 0xff]),
            Placement {
                skip: 0,
                kind: Stepped
            }
        );
    }
}
