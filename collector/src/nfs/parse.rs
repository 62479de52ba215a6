//! `/proc/<pid>/mountstats` as the kernel writes it: one `device … mounted
//! on … with fstype …` line per mount (`fs/nfs/super.c`, `nfs_show_stats`
//! for NFS mounts), and for `nfs`/`nfs4` mounts indented lines after it:
//! `opts:`, `age:`, `events:`, `bytes:`, the transport (`xprt:`), and after
//! `per-op statistics` one line per RPC procedure
//! (`net/sunrpc/stats.c`, `_print_rpc_iostats`):
//!
//! `NAME: ops transmissions major_timeouts bytes_sent bytes_recv queue_ms
//! rtt_ms execute_ms [errors]` — cumulative since the mount; the ninth field
//! (RPCs completed with an error status) since Linux 5.1. Every RPC counts at
//! least one transmission, so transmissions − ops are retransmissions.
//!
//! The `xprt:` line's fields depend on the transport (`xs_tcp_print_stats`:
//! `tcp srcport bind_count connect_count connect_time idle_time sends recvs
//! bad_xids req_u bklog_u [max_slots sending_u pending_u]`; `udp srcport
//! bind_count sends recvs bad_xids req_u bklog_u [...]`; RDMA its own).
//! Device names and mount points are escaped by `seq_escape` (space, tab,
//! newline and backslash as `\ooo`).
use std::collections::BTreeMap;

/// At most this many procedures are kept per mount (NFSv4.2 has about 70).
pub const MAX_OPS_PER_MOUNT: usize = 128;

/// One procedure's cumulative counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpStats {
    pub ops: u64,
    pub transmissions: u64,
    pub timeouts: u64,
    pub bytes_sent: u64,
    pub bytes_recv: u64,
    pub queue_ms: u64,
    pub rtt_ms: u64,
    pub execute_ms: u64,
    /// Since Linux 5.1 (statistics version 1.1's ninth field).
    pub errors: Option<u64>,
}

/// The transport's counters that matter for a mount's health.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Xprt {
    /// `tcp`, `udp`, `rdma`, ...
    pub proto: String,
    /// TCP connections made (re-connections after the first).
    pub connect_count: Option<u64>,
    pub sends: Option<u64>,
    pub recvs: Option<u64>,
    pub bad_xids: Option<u64>,
}

/// One NFS mount.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mount {
    /// As the kernel names it: `server:/export`.
    pub device: String,
    pub server: String,
    pub export: String,
    pub mountpoint: String,
    /// `nfs` or `nfs4`.
    pub fstype: String,
    /// Every `xprt:` line (several with `nconnect`).
    pub xprts: Vec<Xprt>,
    /// Per procedure, by the kernel's name (`READ`, `WRITE`, `GETATTR`, …).
    pub ops: BTreeMap<String, OpStats>,
}

impl Mount {
    /// Reconnections over every transport of the mount.
    pub fn connects(&self) -> u64 {
        self.xprts.iter().filter_map(|x| x.connect_count).sum()
    }
}

/// A parsed file: its NFS mounts in file order, and lines that did not
/// have their expected form (skipped).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Parsed {
    pub mounts: Vec<Mount>,
    pub malformed: u64,
}

/// `seq_escape`'s `\ooo` octal escapes undone.
pub fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (u32::from(b[i + 1] - b'0') << 6)
                | (u32::from(b[i + 2] - b'0') << 3)
                | u32::from(b[i + 3] - b'0');
            if let Ok(v) = u8::try_from(v) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `server:/export` split into the server (an IPv6 address keeps its
/// brackets) and the export; `None` when it has no `:`.
pub fn split_device(dev: &str) -> Option<(&str, &str)> {
    if dev.starts_with('[') {
        let end = dev.find("]:")?;
        return Some((&dev[..=end], &dev[end + 2..]));
    }
    dev.split_once(':')
}

/// The `device … mounted on … with fstype …` header: (device, mount point,
/// fstype), unescaped.
fn header(line: &str) -> Option<(String, String, String)> {
    let t: Vec<&str> = line.split_whitespace().collect();
    match t.as_slice() {
        ["device", dev, "mounted", "on", mp, "with", "fstype", fs, ..] => {
            Some((unescape(dev), unescape(mp), (*fs).to_string()))
        }
        _ => None,
    }
}

/// A per-op line's numbers: 8 (statistics 1.0) or 9 (1.1) fields.
fn op_stats(rest: &str) -> Option<OpStats> {
    let v: Vec<u64> = rest
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    if v.len() < 8 {
        return None;
    }
    Some(OpStats {
        ops: v[0],
        transmissions: v[1],
        timeouts: v[2],
        bytes_sent: v[3],
        bytes_recv: v[4],
        queue_ms: v[5],
        rtt_ms: v[6],
        execute_ms: v[7],
        errors: v.get(8).copied(),
    })
}

/// An `xprt:` line's value (`tcp 832 0 1 0 11 6428 …`).
fn xprt(rest: &str) -> Option<Xprt> {
    let mut t = rest.split_whitespace();
    let proto = t.next()?.to_string();
    let n: Vec<Option<u64>> = t.map(|s| s.parse().ok()).collect();
    let at = |i: usize| n.get(i).copied().flatten();
    Some(match proto.as_str() {
        "tcp" => Xprt {
            connect_count: at(2),
            sends: at(5),
            recvs: at(6),
            bad_xids: at(7),
            proto,
        },
        "udp" => Xprt {
            connect_count: None,
            sends: at(2),
            recvs: at(3),
            bad_xids: at(4),
            proto,
        },
        _ => Xprt {
            proto,
            ..Xprt::default()
        },
    })
}

/// Parses the file's text. Mounts of other filesystems are skipped; an NFS
/// mount whose device has no `server:` part, or a line that does not have
/// its expected form, is counted in `malformed` and skipped.
pub fn parse(text: &str) -> Parsed {
    let mut out = Parsed::default();
    // The NFS mount being read, and whether its per-op lines have begun.
    let mut cur: Option<Mount> = None;
    let mut per_op = false;
    for line in text.lines() {
        if line.starts_with("device ") {
            out.mounts.extend(cur.take());
            per_op = false;
            let Some((device, mountpoint, fstype)) = header(line) else {
                out.malformed += 1;
                continue;
            };
            if fstype != "nfs" && fstype != "nfs4" {
                continue;
            }
            let Some((server, export)) = split_device(&device) else {
                out.malformed += 1;
                continue;
            };
            cur = Some(Mount {
                server: server.to_string(),
                export: export.to_string(),
                device,
                mountpoint,
                fstype,
                ..Mount::default()
            });
            continue;
        }
        let Some(m) = cur.as_mut() else { continue };
        let l = line.trim();
        if l.is_empty() {
            continue;
        }
        if l == "per-op statistics" {
            per_op = true;
            continue;
        }
        let Some((key, rest)) = l.split_once(':') else {
            out.malformed += 1;
            continue;
        };
        if key == "xprt" {
            match xprt(rest) {
                Some(x) => m.xprts.push(x),
                None => out.malformed += 1,
            }
        } else if per_op {
            match op_stats(rest) {
                Some(s) if m.ops.len() < MAX_OPS_PER_MOUNT || m.ops.contains_key(key) => {
                    m.ops.insert(key.to_string(), s);
                }
                _ => out.malformed += 1,
            }
        }
    }
    out.mounts.extend(cur);
    out
}
