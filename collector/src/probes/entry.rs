//! Where on a function its uprobe goes.
//!
//! An x86-64 kernel takes a uprobe on most instructions by single-stepping a
//! copy of the instruction out of line, which is a second trap (`#DB`). A few
//! it emulates inside the first trap: `push`, `nop`, jumps and calls. On the
//! VM measured here a single-stepped entry cost 9.3–9.6 µs per hit and an
//! emulated one 0.7–0.8 µs: the single step is most of a hit.
//!
//! So a probe goes on the first instruction the kernel emulates, as long as
//! everything before it changes nothing a probe reads: no register but the
//! flags, no memory, not the stack pointer. The arguments, the stack and the
//! return address are then exactly as at entry, and every call still passes
//! there (straight-line code from the entry), so entry probe and return
//! probe of a function share that one breakpoint. Two such runs are common:
//!
//! - a CET-enabled build (`-fcf-protection`, the default of several
//!   distributions' compilers) starts every function with `endbr64`, which
//!   is single-stepped; the next instruction is usually the prologue's
//!   `push`;
//! - a function that checks its arguments first starts `test %rdi,%rdi;
//!   je …` (or `cmp`): the conditional jump is emulated.
//!
//! Past an instruction that writes anything else (`mov`, `sub %rsp`, a
//! `push` with a REX.W prefix…) the probe stays at the start, single-stepped.
use std::{
    fs::File,
    path::{Path, PathBuf},
    sync::Arc,
};

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

/// Bytes of a function's code read to place its probes: `endbr64`, a few
/// flag-only instructions and the longest instruction classified after them.
const READ: u64 = 32;

/// The length of the instruction at the start of `code` if it writes only
/// the flags (`test` and `cmp` of registers and immediates, with an optional
/// REX prefix), else `None`. Memory operands are not taken, so nothing
/// skipped can fault either.
pub fn flags_only_len(code: &[u8]) -> Option<usize> {
    let rex = usize::from(matches!(code.first(), Some(0x40..=0x4f)));
    let rest = code.get(rex..)?;
    // `mod` = 11: a register operand.
    let reg = |m: u8| m >> 6 == 0b11;
    // The `/digit` of a group opcode.
    let digit = |m: u8| (m >> 3) & 7;
    let len = match rest {
        // test r/m, r; cmp r/m, r and r, r/m.
        [0x84 | 0x85 | 0x38 | 0x39 | 0x3a | 0x3b, m, ..] if reg(*m) => 2,
        // cmp al, imm8; test al, imm8.
        [0x3c | 0xa8, _, ..] => 2,
        // cmp eax, imm32; test eax, imm32.
        [0x3d | 0xa9, _, _, _, _, ..] => 5,
        // cmp r/m8, imm8 and cmp r/m, imm8 (group 1, /7).
        [0x80 | 0x83, m, _, ..] if reg(*m) && digit(*m) == 7 => 3,
        // cmp r/m, imm32 (group 1, /7).
        [0x81, m, _, _, _, _, ..] if reg(*m) && digit(*m) == 7 => 6,
        // test r/m8, imm8 (group 3, /0).
        [0xf6, m, _, ..] if reg(*m) && digit(*m) == 0 => 3,
        // test r/m, imm32 (group 3, /0).
        [0xf7, m, _, _, _, _, ..] if reg(*m) && digit(*m) == 0 => 6,
        _ => return None,
    };
    Some(rex + len)
}

/// Bytes at the start of a function's code to probe past: a leading
/// `endbr64`, then flag-only instructions ([`flags_only_len`]) when they lead
/// to an instruction the kernel emulates; else just the `endbr64`.
pub fn skip(code: &[u8]) -> u64 {
    let base = if code.starts_with(&ENDBR64) {
        ENDBR64.len()
    } else {
        0
    };
    let mut at = base;
    while let Some(rest) = code.get(at..).filter(|r| !r.is_empty()) {
        if EntryKind::of(rest) != EntryKind::Stepped {
            return at as u64;
        }
        match flags_only_len(rest) {
            Some(n) => at += n,
            None => break,
        }
    }
    base as u64
}

/// An ELF file, parsed, for reading its symbols' code.
type Elf<'a> = object::File<'a, &'a ReadCache<File>>;

/// Why a function's code could not be read from an ELF file.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ElfError {
    #[error("opening {}: {source}", .path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: Arc<std::io::Error>,
    },
    #[error("parsing {}: {source}", .path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: object::Error,
    },
    #[error("{0} not defined")]
    NotDefined(String),
    #[error("{0} is in no section")]
    NoSection(String),
    #[error("{symbol}'s section: {source}")]
    Section {
        symbol: String,
        #[source]
        source: object::Error,
    },
    #[error("reading {symbol}'s code: {source}")]
    Read {
        symbol: String,
        #[source]
        source: object::Error,
    },
    #[error("{0}'s code is outside its section")]
    OutsideSection(String),
    /// A symbol's error, said of its file.
    #[error("{source} in {}", .path.display())]
    In {
        path: PathBuf,
        #[source]
        source: Box<ElfError>,
    },
}

impl ElfError {
    /// `self`, said of the file at `path`.
    pub fn in_file(self, path: &Path) -> Self {
        Self::In {
            path: path.to_path_buf(),
            source: Box::new(self),
        }
    }
}

pub(super) fn open(path: &Path) -> Result<ReadCache<File>, ElfError> {
    File::open(path)
        .map(ReadCache::new)
        .map_err(|source| ElfError::Open {
            path: path.to_path_buf(),
            source: Arc::new(source),
        })
}

pub(super) fn parse<'a>(path: &Path, cache: &'a ReadCache<File>) -> Result<Elf<'a>, ElfError> {
    object::File::parse(cache).map_err(|source| ElfError::Parse {
        path: path.to_path_buf(),
        source,
    })
}

/// The first `len` bytes of `symbol`'s code in `obj` (dynamic symbols
/// first, then the symbol table).
fn code_in(obj: &Elf<'_>, symbol: &str, len: u64) -> Result<Vec<u8>, ElfError> {
    let sym = obj
        .dynamic_symbols()
        .chain(obj.symbols())
        .find(|s| s.name() == Ok(symbol) && s.is_definition())
        .ok_or_else(|| ElfError::NotDefined(symbol.to_string()))?;
    let index = sym
        .section_index()
        .ok_or_else(|| ElfError::NoSection(symbol.to_string()))?;
    let section = obj
        .section_by_index(index)
        .map_err(|source| ElfError::Section {
            symbol: symbol.to_string(),
            source,
        })?;
    let len = len.min(sym.size().max(1));
    section
        .data_range(sym.address(), len)
        .map_err(|source| ElfError::Read {
            symbol: symbol.to_string(),
            source,
        })?
        .map(<[u8]>::to_vec)
        .ok_or_else(|| ElfError::OutsideSection(symbol.to_string()))
}

/// The first `len` bytes of `symbol`'s code in the ELF file `path`.
pub fn code_of(path: &Path, symbol: &str, len: u64) -> Result<Vec<u8>, ElfError> {
    let cache = open(path)?;
    code_in(&parse(path, &cache)?, symbol, len).map_err(|e| e.in_file(path))
}

/// For each of `symbols`, where to attach its uprobes in `path`: at
/// [`skip`], else at the start (also when the code cannot be read:
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
    fn probes_skip_only_what_changes_nothing_they_read() {
        // A leading endbr64, onto the push.
        assert_eq!(skip(&[0xf3, 0x0f, 0x1e, 0xfa, 0x55]), 4);
        // push %rbp and a 5-byte nop: probed where they are.
        assert_eq!(skip(&[0x55, 0x48, 0x89, 0xe5]), 0);
        assert_eq!(skip(&[0x0f, 0x1f, 0x44, 0x00, 0x00]), 0);
        // test %rdi,%rdi; je: onto the (emulated) jump.
        assert_eq!(skip(&[0x48, 0x85, 0xff, 0x74, 0x4b]), 3);
        // endbr64; test %esi,%esi; cmp $0x7,%edx; jne rel32.
        let code = [
            0xf3, 0x0f, 0x1e, 0xfa, 0x85, 0xf6, 0x83, 0xfa, 0x07, 0x0f, 0x85, 0, 0, 0, 0,
        ];
        assert_eq!(skip(&code), 9);
        // test %r8d,%r8d; sete %al (writes %al): at the start.
        assert_eq!(skip(&[0x45, 0x85, 0xc0, 0x0f, 0x94, 0xc0, 0x74, 0x00]), 0);
        // endbr64; test %rdi,%rdi; sete: just past the endbr64.
        assert_eq!(
            skip(&[0xf3, 0x0f, 0x1e, 0xfa, 0x48, 0x85, 0xff, 0x0f, 0x94]),
            4
        );
        // test with a memory operand (may fault) is not skipped.
        assert_eq!(skip(&[0x48, 0x85, 0x3f, 0x74, 0x00]), 0);
        // mov %rdi,%rax; jmp: mov writes a register.
        assert_eq!(skip(&[0x48, 0x89, 0xf8, 0xeb, 0x00]), 0);
        // Code that ends mid-way: nothing past what was read.
        assert_eq!(skip(&[0x48, 0x85, 0xff]), 0);
        assert_eq!(skip(&[0x48, 0x85]), 0);
        // endbr32 is not endbr64; a short read is nothing to skip.
        assert_eq!(skip(&[0xf3, 0x0f, 0x1e, 0xfb]), 0);
        assert_eq!(skip(&[0xf3, 0x0f]), 0);
    }

    #[test]
    fn flag_only_instructions_are_decoded_to_their_length() {
        let cases: &[(&[u8], Option<usize>)] = &[
            (&[0x48, 0x85, 0xff], Some(3)),             // test %rdi,%rdi
            (&[0x85, 0xf6], Some(2)),                   // test %esi,%esi
            (&[0x84, 0xc0], Some(2)),                   // test %al,%al
            (&[0x48, 0x39, 0xf7], Some(3)),             // cmp %rsi,%rdi
            (&[0x3c, 0x05], Some(2)),                   // cmp $5,%al
            (&[0x3d, 1, 0, 0, 0], Some(5)),             // cmp $1,%eax
            (&[0x83, 0xff, 0x07], Some(3)),             // cmp $7,%edi
            (&[0x48, 0x81, 0xfe, 0, 1, 0, 0], Some(7)), // cmp $0x100,%rsi
            (&[0x40, 0xf6, 0xc7, 0x01], Some(4)),       // test $1,%dil
            (&[0xf7, 0xc6, 0, 0, 1, 0], Some(6)),       // test $0x10000,%esi
            (&[0x83, 0xc7, 0x07], None),                // add $7,%edi
            (&[0x83, 0x3f, 0x07], None),                // cmpl $7,(%rdi)
            (&[0xf7, 0xd7], None),                      // not %edi
            (&[0x48, 0x89, 0xf8], None),                // mov %rdi,%rax
            (&[0x66, 0x85, 0xff], None),                // operand-size prefix
            (&[0x48, 0x81, 0xfe, 0], None),             // cut short
            (&[], None),
        ];
        for (code, len) in cases {
            assert_eq!(flags_only_len(code), *len, "{code:02x?}");
        }
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
            Placement::of(&[0x48, 0x85, 0xff, 0x74, 0x4b]),
            Placement {
                skip: 3,
                kind: Branch
            }
        );
        assert_eq!(
            Placement::of(&[0x48, 0x89, 0xf8, 0xeb, 0x00]),
            Placement {
                skip: 0,
                kind: Stepped
            }
        );
    }
}
