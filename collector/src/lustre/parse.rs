//! The Lustre client's per-target files as the kernel module writes them.
//!
//! `stats` (`lprocfs_stats_seq_show`): a `snapshot_time` line (and since
//! 2.12 `start_time`, `elapsed_time`), then one line per counter:
//! `NAME COUNT samples [UNIT] [MIN MAX SUM [SUMSQ]]`, cumulative since the
//! device was set up. The RPC counters of an OSC/MDC (`ost_read`,
//! `ost_write`, `mds_getattr`, `obd_ping`, …) are in `[usec]` (`[usecs]`
//! since 2.15): each sample is one RPC's time from sending the request to
//! its reply. `req_waittime` sums every RPC type again, so it is kept apart.
//!
//! `import` (`lprocfs_import_seq_show`): indented `key: value` lines; the
//! reader keeps the target's UUID, the import state (`FULL` when the target
//! is connected and serving), the server NID in use, the connection attempts
//! (a rise after the first is a reconnection) and the RPCs that timed out.
use std::collections::BTreeMap;

/// At most this many counters are kept per target (an OSC has about 20).
pub const MAX_OPS_PER_TARGET: usize = 64;

/// One RPC type's cumulative samples and summed time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RpcStat {
    pub samples: u64,
    pub sum_us: u64,
}

/// A parsed `stats` file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// The RPC types in microseconds, by name (`req_waittime` excluded).
    pub rpcs: BTreeMap<String, RpcStat>,
    /// `req_waittime`: every RPC of the target together.
    pub wait: RpcStat,
    /// Lines that fit no form, skipped.
    pub malformed: u64,
}

/// A parsed `import` file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Import {
    /// `lustrefs-OST0000_UUID`.
    pub target: String,
    /// `FULL`, `DISCONN`, `CONNECTING`, `EVICTED`, …
    pub state: String,
    /// The server NID in use (`172.20.20.5@o2ib`).
    pub nid: String,
    pub connection_attempts: u64,
    pub timeouts: u64,
}

/// Parses one `stats` file. Counters in other units (`[reqs]`, `[bytes]`,
/// `[regs]`) are skipped; so are counts without a sum (a counter that only
/// counts).
pub fn stats(text: &str) -> Stats {
    let mut s = Stats::default();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            [] => {}
            [name, ..] if name.ends_with("_time") => {}
            [name, count, "samples", unit, rest @ ..] if unit.starts_with('[') => {
                if !matches!(*unit, "[usec]" | "[usecs]") {
                    continue;
                }
                let (Ok(samples), Some(Ok(sum_us))) =
                    (count.parse::<u64>(), rest.get(2).map(|v| v.parse::<u64>()))
                else {
                    s.malformed += 1;
                    continue;
                };
                let stat = RpcStat { samples, sum_us };
                if *name == "req_waittime" {
                    s.wait = stat;
                } else if s.rpcs.len() < MAX_OPS_PER_TARGET || s.rpcs.contains_key(*name) {
                    s.rpcs.insert((*name).to_string(), stat);
                }
            }
            _ => s.malformed += 1,
        }
    }
    s
}

/// Parses one `import` file; keys are found wherever they are nested.
pub fn import(text: &str) -> Import {
    let mut i = Import::default();
    for line in text.lines() {
        let Some((k, v)) = line.trim().split_once(':') else {
            continue;
        };
        let v = v.trim();
        match k {
            "target" => v.clone_into(&mut i.target),
            "state" => v.clone_into(&mut i.state),
            "current_connection" => v.clone_into(&mut i.nid),
            "connection_attempts" => i.connection_attempts = v.parse().unwrap_or(0),
            "timeouts" => i.timeouts = v.parse().unwrap_or(0),
            _ => {}
        }
    }
    i
}

/// The client device directory's name split: `lustrefs-OST0000-osc-ffff…`
/// gives (`lustrefs`, `lustrefs-OST0000`, `ffff…`). Only a client's devices
/// (an instance in hex, the superblock's address) are taken: a server's
/// `…-osc-MDT0000` is the metadata server's own link to an OST.
pub fn device_name(dir: &str) -> Option<(&str, &str, &str)> {
    let (target, instance) = dir
        .rsplit_once("-osc-")
        .or_else(|| dir.rsplit_once("-mdc-"))?;
    if instance.is_empty() || !instance.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    // The target is `<fsname>-OSTxxxx` / `<fsname>-MDTxxxx`; the file
    // system name may itself contain dashes.
    let (fsname, index) = target.rsplit_once('-')?;
    if fsname.is_empty() || !(index.starts_with("OST") || index.starts_with("MDT")) {
        return None;
    }
    Some((fsname, target, instance))
}

/// The Lustre mounts of a `/proc/<pid>/mounts` text: file system name →
/// mount point (`172.20.20.1@o2ib:/lustrefs /mnt/lustre lustre …`), the
/// first mount of each. Mount points are unescaped (`\040` is a space).
pub fn mounts(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [source, mountpoint, "lustre", ..] = f.as_slice() else {
            continue;
        };
        let Some((_, fsname)) = source.rsplit_once(":/") else {
            continue;
        };
        out.entry(fsname.to_string())
            .or_insert_with(|| crate::nfs::parse::unescape(mountpoint));
    }
    out
}
