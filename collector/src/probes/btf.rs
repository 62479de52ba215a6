//! Struct member offsets from the running kernel's BTF
//! (`/sys/kernel/btf/vmlinux`), for the block probes' BTF-enabled raw
//! tracepoints, which read `struct request` and friends at these offsets.
//!
//! A minimal reader of the BTF type section (format:
//! `Documentation/bpf/btf.rst`): it walks the type records once and keeps
//! the named structs' members and the named enumerators' values; nothing
//! else of the kernel's types is kept.
use std::collections::HashMap;

/// Where the kernel publishes its own BTF.
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

#[derive(Debug, thiserror::Error)]
pub enum BtfError {
    #[error("reading {path}: {source}; the kernel needs CONFIG_DEBUG_INFO_BTF for the BTF block probes (the classic tracepoints are used instead)")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}: not a BTF blob this reader understands")]
    Format(String),
    #[error("struct {0} not found in the kernel's BTF")]
    NoStruct(String),
    #[error("member {1} of struct {0} not found in the kernel's BTF")]
    NoMember(String, String),
}

const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_ENUM64: u32 = 19;

/// The structs of interest and their members: name → (member → (bit offset, type id)).
pub struct StructOffsets {
    structs: HashMap<String, Vec<(String, u32, u32)>>,
    /// Type id → members of the anonymous structs/unions inside the wanted ones.
    anon: HashMap<u32, Vec<(String, u32, u32)>>,
    /// The wanted enumerators (of any enum) and their values.
    enumerators: HashMap<String, i64>,
}

impl StructOffsets {
    /// Reads `path` and keeps the members of the structs, and the values of
    /// the enumerators, named in `wanted`.
    pub fn load(path: &str, wanted: &[&str]) -> Result<Self, BtfError> {
        let data = std::fs::read(path).map_err(|source| BtfError::Read {
            path: path.into(),
            source,
        })?;
        Self::parse(&data, wanted).ok_or_else(|| BtfError::Format(path.into()))
    }

    fn parse(d: &[u8], wanted: &[&str]) -> Option<Self> {
        let u16_at = |o: usize| d.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
        let u32_at = |o: usize| {
            d.get(o..o + 4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        };
        if u16_at(0)? != 0xeb9f {
            return None;
        }
        let hdr_len = u32_at(4)? as usize;
        let (type_off, type_len) = (u32_at(8)? as usize, u32_at(12)? as usize);
        let (str_off, str_len) = (u32_at(16)? as usize, u32_at(20)? as usize);
        let types = hdr_len.checked_add(type_off)?;
        let types_end = types.checked_add(type_len)?;
        let strs = hdr_len.checked_add(str_off)?;
        let strs_end = strs.checked_add(str_len)?;
        if types_end > d.len() || strs_end > d.len() {
            return None;
        }
        let name = |off: u32| -> Option<&str> {
            let start = strs.checked_add(off as usize)?;
            let rest = d.get(start..strs_end)?;
            let end = rest.iter().position(|&b| b == 0)?;
            std::str::from_utf8(&rest[..end]).ok()
        };
        let mut structs = HashMap::new();
        let mut all_members: HashMap<u32, Vec<(String, u32, u32)>> = HashMap::new();
        let mut anon_ids = Vec::new();
        let mut enumerators = HashMap::new();
        let mut p = types;
        let mut id = 1u32;
        while p + 12 <= types_end {
            let name_off = u32_at(p)?;
            let info = u32_at(p + 4)?;
            p += 12;
            let vlen = (info & 0xffff) as usize;
            let kind = (info >> 24) & 0x1f;
            let kind_flag = info >> 31 == 1;
            let extra = match kind {
                1 | 14 | 17 => 4, // INT, VAR, DECL_TAG
                3 => 12,          // ARRAY
                KIND_STRUCT | KIND_UNION => 12 * vlen,
                6 | 13 => 8 * vlen,        // ENUM, FUNC_PROTO
                15 | 19 => 12 * vlen,      // DATASEC, ENUM64
                2 | 7..=12 | 16 | 18 => 0, // PTR, FWD, TYPEDEF.., FLOAT, TYPE_TAG
                _ => return None,
            };
            if kind == KIND_STRUCT || kind == KIND_UNION {
                let sname = name(name_off)?;
                let keep = wanted.contains(&sname);
                let mut members = Vec::new();
                for i in 0..vlen {
                    let m = p + 12 * i;
                    let mname = name(u32_at(m)?)?;
                    let mtype = u32_at(m + 4)?;
                    let raw = u32_at(m + 8)?;
                    let bits = if kind_flag { raw & 0x00ff_ffff } else { raw };
                    if keep && mname.is_empty() {
                        anon_ids.push(mtype);
                    }
                    members.push((mname.to_string(), bits, mtype));
                }
                if keep {
                    structs.entry(sname.to_string()).or_insert(members);
                } else if sname.is_empty() {
                    all_members.insert(id, members);
                }
            }
            if kind == KIND_ENUM || kind == KIND_ENUM64 {
                // Records of (name, value) or (name, value low, value high);
                // kind_flag marks a signed 32-bit value.
                let size = if kind == KIND_ENUM { 8 } else { 12 };
                for i in 0..vlen {
                    let e = p + size * i;
                    let ename = name(u32_at(e)?)?;
                    if !wanted.contains(&ename) {
                        continue;
                    }
                    let lo = u32_at(e + 4)?;
                    let v = match (kind, kind_flag) {
                        (KIND_ENUM, true) => i64::from(lo as i32),
                        (KIND_ENUM, false) => i64::from(lo),
                        _ => ((u64::from(u32_at(e + 8)?) << 32) | u64::from(lo)) as i64,
                    };
                    enumerators.entry(ename.to_string()).or_insert(v);
                }
            }
            p += extra;
            id += 1;
        }
        // Anonymous structs/unions nested in the wanted ones (looked up by id).
        let anon = anon_ids
            .into_iter()
            .filter_map(|t| all_members.remove(&t).map(|m| (t, m)))
            .collect();
        Some(Self {
            structs,
            anon,
            enumerators,
        })
    }

    /// The value of enumerator `name`, if the BTF has it (and it was wanted).
    pub fn enumerator(&self, name: &str) -> Option<i64> {
        self.enumerators.get(name).copied()
    }

    /// Byte offset of `member` in `strukt` (also inside anonymous
    /// struct/union members, one level deep).
    pub fn offset(&self, strukt: &str, member: &str) -> Result<u32, BtfError> {
        let members = self
            .structs
            .get(strukt)
            .ok_or_else(|| BtfError::NoStruct(strukt.into()))?;
        for (name, bits, ty) in members {
            if name == member {
                return Ok(bits / 8);
            }
            if name.is_empty() {
                if let Some(inner) = self.anon.get(ty) {
                    if let Some((_, b, _)) = inner.iter().find(|(n, _, _)| n == member) {
                        return Ok((bits + b) / 8);
                    }
                }
            }
        }
        Err(BtfError::NoMember(strukt.into(), member.into()))
    }
}

/// The globals of the BTF block programs: (symbol, byte offset).
pub fn block_globals(path: &str) -> Result<Vec<(&'static str, u32)>, BtfError> {
    let s = StructOffsets::load(
        path,
        &[
            "request",
            "request_queue",
            "gendisk",
            "task_struct",
            "css_set",
            "cgroup",
            "kernfs_node",
            "__RQF_IO_STAT",
            "__RQF_FLUSH_SEQ",
        ],
    )?;
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let flush_seq = flush_seq_mask(s.enumerator("__RQF_FLUSH_SEQ"), &release);
    if flush_seq == 0 {
        tracing::warn!(
            release = release.trim(),
            "RQF_FLUSH_SEQ not in the kernel's BTF: a PREFLUSH/FUA write with data is counted twice by the block probes (once for its data, once when its flush sequence ends)"
        );
    }
    Ok(vec![
        ("BTF_RQ_OFF_Q", s.offset("request", "q")?),
        ("BTF_RQ_OFF_CMD_FLAGS", s.offset("request", "cmd_flags")?),
        ("BTF_RQ_OFF_DATA_LEN", s.offset("request", "__data_len")?),
        ("BTF_RQ_OFF_SECTOR", s.offset("request", "__sector")?),
        ("BTF_Q_OFF_DISK", s.offset("request_queue", "disk")?),
        ("BTF_DISK_OFF_MAJOR", s.offset("gendisk", "major")?),
        (
            "BTF_DISK_OFF_FIRST_MINOR",
            s.offset("gendisk", "first_minor")?,
        ),
        ("BTF_RQ_OFF_RQ_FLAGS", s.offset("request", "rq_flags")?),
        // The submitter's cgroup id, `current->cgroups->dfl_cgrp->kn->id`
        // (what `bpf_get_current_cgroup_id()` returns), read with loads.
        ("BTF_TASK_OFF_CGROUPS", s.offset("task_struct", "cgroups")?),
        ("BTF_CSS_SET_OFF_DFL_CGRP", s.offset("css_set", "dfl_cgrp")?),
        ("BTF_CGROUP_OFF_KN", s.offset("cgroup", "kn")?),
        ("BTF_KN_OFF_ID", s.offset("kernfs_node", "id")?),
        (
            "BTF_RQ_OFF_START_TIME",
            s.offset("request", "start_time_ns")?,
        ),
        // The kernel's start stamp times a request only with this flag;
        // without it in the BTF (the flags are an enum from 6.11) the probes keep
        // their own clock (mask 0).
        (
            "BTF_RQF_IO_STAT",
            s.enumerator("__RQF_IO_STAT")
                .filter(|b| (0..32).contains(b))
                .map_or(0, |b| 1u32 << b),
        ),
        // Which completion of a PREFLUSH/FUA write counts it.
        ("BTF_RQF_FLUSH_SEQ", flush_seq),
    ])
}

/// The first kernel whose request flags are an enum (`__RQF_*`); before
/// it they were macros, `RQF_FLUSH_SEQ` = `1 << 4` from 4.x to 6.10.
const RQF_ENUM_SINCE: (u32, u32) = (6, 11);

/// `RQF_FLUSH_SEQ` as a mask: the BTF's enumerator when it has one; else
/// the macros' bit on a kernel `release` (`uname -r`) from before the enum;
/// else 0 (unknown: an enum kernel whose BTF lacks it).
pub fn flush_seq_mask(enumerator: Option<i64>, release: &str) -> u32 {
    if let Some(b) = enumerator.filter(|b| (0..32).contains(b)) {
        return 1 << b;
    }
    let mut parts = release.trim().split(['.', '-']);
    let num = |p: Option<&str>| p.and_then(|p| p.parse::<u32>().ok());
    match (num(parts.next()), num(parts.next())) {
        (Some(major), Some(minor)) if (major, minor) < RQF_ENUM_SINCE => 1 << 4,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flush_seq_from_the_enumerator_else_the_macro_bit_before_6_11() {
        assert_eq!(flush_seq_mask(Some(1), "6.18.44-fc-v1252"), 1 << 1);
        assert_eq!(flush_seq_mask(Some(1), "6.8.0-49-generic"), 1 << 1);
        assert_eq!(flush_seq_mask(None, "6.8.0-49-generic\n"), 1 << 4);
        assert_eq!(flush_seq_mask(None, "5.14.0-503.el9.x86_64"), 1 << 4);
        assert_eq!(flush_seq_mask(None, "6.11.0"), 0);
        assert_eq!(flush_seq_mask(None, "6.12.10-200.fc41.x86_64"), 0);
        assert_eq!(flush_seq_mask(None, ""), 0);
        assert_eq!(flush_seq_mask(Some(40), "6.12.0"), 0);
    }

    /// A hand-made BTF blob: `struct s { int a; union { int b; long c; }; int d; }`
    /// and `enum e { X = 3, Y = -1 }`.
    fn blob() -> Vec<u8> {
        let strs = b"\0s\0a\0b\0c\0d\0int\0e\0X\0Y\0".to_vec();
        let off = |n: &str| {
            let pat = format!("\0{n}\0");
            (strs
                .windows(pat.len())
                .position(|w| w == pat.as_bytes())
                .unwrap()
                + 1) as u32
        };
        let mut t: Vec<u8> = Vec::new();
        let mut push = |v: &[u32]| v.iter().for_each(|x| t.extend_from_slice(&x.to_le_bytes()));
        // [1] INT "int" size 4
        push(&[off("int"), 1 << 24, 4, 32]);
        // [2] STRUCT "s" vlen 3: a@0, <anon union [3]>@32, d@96
        push(&[off("s"), (4 << 24) | 3, 16]);
        push(&[off("a"), 1, 0]);
        push(&[0, 3, 32]);
        push(&[off("d"), 1, 96]);
        // [3] UNION "" vlen 2: b@0, c@0
        push(&[0, (5 << 24) | 2, 8]);
        push(&[off("b"), 1, 0]);
        push(&[off("c"), 1, 0]);
        // [4] ENUM "e" vlen 2, signed (kind_flag), size 4: X = 3, Y = -1
        push(&[off("e"), (1 << 31) | (6 << 24) | 2, 4]);
        push(&[off("X"), 3]);
        push(&[off("Y"), u32::MAX]);
        let mut d = Vec::new();
        d.extend_from_slice(&0xeb9fu16.to_le_bytes());
        d.extend_from_slice(&[1, 0]);
        for v in [24u32, 0, t.len() as u32, t.len() as u32, strs.len() as u32] {
            d.extend_from_slice(&v.to_le_bytes());
        }
        d.extend_from_slice(&t);
        d.extend_from_slice(&strs);
        d
    }

    #[test]
    fn finds_members_and_anonymous_union_members() {
        let s = StructOffsets::parse(&blob(), &["s"]).unwrap();
        assert_eq!(s.offset("s", "a").unwrap(), 0);
        assert_eq!(s.offset("s", "b").unwrap(), 4);
        assert_eq!(s.offset("s", "c").unwrap(), 4);
        assert_eq!(s.offset("s", "d").unwrap(), 12);
        assert!(matches!(s.offset("s", "zz"), Err(BtfError::NoMember(..))));
        assert!(matches!(s.offset("t", "a"), Err(BtfError::NoStruct(..))));
    }

    #[test]
    fn finds_wanted_enumerators_only() {
        let s = StructOffsets::parse(&blob(), &["s", "X", "Y"]).unwrap();
        assert_eq!(s.enumerator("X"), Some(3));
        assert_eq!(s.enumerator("Y"), Some(-1));
        assert_eq!(s.enumerator("Z"), None);
        let s = StructOffsets::parse(&blob(), &["s"]).unwrap();
        assert_eq!(s.enumerator("X"), None);
        // The members after the enum are still read.
        assert_eq!(s.offset("s", "d").unwrap(), 12);
    }

    #[test]
    fn truncated_blob_is_refused() {
        let b = blob();
        assert!(StructOffsets::parse(&b[..30], &["s"]).is_none());
        assert!(StructOffsets::parse(&[0u8; 4], &["s"]).is_none());
    }

    /// On this kernel (when it has BTF) the block offsets resolve, and
    /// `request.q` is the struct's first member as in every kernel since 5.x.
    #[test]
    fn running_kernel_block_offsets() {
        if !std::path::Path::new(VMLINUX_BTF).exists() {
            return;
        }
        let g = block_globals(VMLINUX_BTF).unwrap();
        assert_eq!(g[0], ("BTF_RQ_OFF_Q", 0));
        let (flag, offsets): (Vec<_>, Vec<_>) =
            g.iter().partition(|(n, _)| *n == "BTF_RQF_IO_STAT");
        assert!(offsets.iter().all(|(_, o)| *o < 1 << 16), "{g:?}");
        // One bit, or 0 on a kernel whose BTF does not name it.
        assert!(flag[0].1.count_ones() <= 1, "{flag:?}");
    }
}
