//! What a host shows below NCCL in its latest window (GPU utilisation and
//! XIDs, HCA port state, traffic and errors, CUDA launches per process,
//! the jobs' writes to storage): the evidence that tells a communicator
//! whose every rank waits apart from one that pauses.
use std::collections::BTreeMap;

use proto::v1::Window;

/// Entries kept per host of each kind (GPUs, ports, processes, jobs): a
/// node has 8–16 GPUs and HCAs; more are dropped (the window's own caps
/// already bound them).
const PER_HOST: usize = 64;
/// The IBA PortState of an active port.
const ACTIVE: u32 = 4;
/// Counters whose increase means a port is erroring: link-level events
/// (the link went down or retrained), not the sporadic symbol errors a
/// healthy link shows (those are the IB detector's to judge, and an open
/// `ib_link_*` incident names such a port).
const ERRORS: [&str; 2] = ["link_downed", "link_error_recovery"];

/// One HCA port as last reported.
#[derive(Clone, Debug, Default)]
pub(super) struct Port {
    pub state: u32,
    /// Traffic of the latest window, bytes/s (both directions).
    pub bps: f64,
    /// The traffic level before a collapse: follows `bps` while it stays
    /// within the collapse fraction of it, and is kept when it drops below.
    pub ref_bps: f64,
    /// Link-level error events in the latest window.
    pub errors: u64,
    data: Option<u64>,
    errs: Option<u64>,
}

impl Port {
    /// Whether the port is down (not ACTIVE).
    pub fn down(&self) -> bool {
        self.state != ACTIVE
    }

    /// Whether its traffic fell below `frac` of its level before.
    pub fn collapsed(&self, frac: f64) -> bool {
        self.ref_bps > 0.0 && self.bps < frac * self.ref_bps
    }
}

/// A host's latest window, as far as the hang rule needs it.
#[derive(Clone, Debug, Default)]
pub(super) struct Below {
    /// GPU index → NVML utilisation, %.
    pub util: BTreeMap<u32, u32>,
    /// GPU index → the latest XID (code, ms).
    pub xid: BTreeMap<u32, (i64, i64)>,
    /// `hca/port` → state and traffic.
    pub ports: BTreeMap<String, Port>,
    /// pid → CUDA kernel launches in the window; `cuda` whether the host
    /// sent CUDA rows at all (the probes run).
    pub launches: BTreeMap<u32, u64>,
    pub cuda: bool,
    /// job → bytes its cgroups wrote to block devices in the window.
    pub writes: BTreeMap<String, u64>,
    /// Bytes written to NFS/Lustre in the window (not per job).
    pub net_writes: u64,
    pub len_s: f64,
}

impl Below {
    /// Takes `w`: the latest samples replace the previous, port traffic is
    /// the counters' increase over the window. Returns the rows dropped
    /// past [`PER_HOST`].
    pub fn take(&mut self, w: &Window, collapse_frac: f64) -> usize {
        let mut dropped = 0;
        let len_s = ((w.end_unix_ms - w.start_unix_ms) as f64 / 1000.0).max(1e-3);
        self.len_s = len_s;
        self.util.clear();
        dropped += w.gpus.len().saturating_sub(PER_HOST);
        for g in w.gpus.iter().filter(|g| !g.lost).take(PER_HOST) {
            if let Some(u) = g.util_gpu_pct {
                self.util.insert(g.index, u);
            }
        }
        for e in &w.events {
            if e.kind != vocab::EventKind::GpuXid.as_str() {
                continue;
            }
            let gpu = e
                .entity
                .rsplit_once("/gpu")
                .and_then(|(_, i)| i.parse::<u32>().ok());
            if let Some(g) = gpu {
                if self.xid.len() < PER_HOST || self.xid.contains_key(&g) {
                    self.xid.insert(g, (e.code, e.unix_ms));
                } else {
                    dropped += 1;
                }
            }
        }
        for p in &w.ib_ports {
            let key = format!("{}/{}", p.hca, p.port);
            if !self.ports.contains_key(&key) && self.ports.len() >= PER_HOST {
                dropped += 1;
                continue;
            }
            let data = p.counters.get("port_xmit_data").copied().unwrap_or(0)
                + p.counters.get("port_rcv_data").copied().unwrap_or(0);
            let errs = ERRORS
                .iter()
                .map(|c| p.counters.get(*c).copied().unwrap_or(0))
                .sum::<u64>();
            let s = self.ports.entry(key).or_default();
            s.state = p.state;
            // Data counters count 4-byte words; a reset reads as no traffic.
            s.bps = s
                .data
                .map_or(0.0, |d| data.saturating_sub(d) as f64 * 4.0 / len_s);
            s.errors = s.errs.map_or(0, |e| errs.saturating_sub(e));
            if s.data.is_some() && s.bps >= collapse_frac * s.ref_bps {
                s.ref_bps = s.bps;
            }
            s.data = Some(data);
            s.errs = Some(errs);
        }
        self.launches.clear();
        self.cuda = !w.cuda.is_empty();
        dropped += w.cuda.len().saturating_sub(PER_HOST);
        for c in w.cuda.iter().take(PER_HOST) {
            *self.launches.entry(c.pid).or_default() += c.launches;
        }
        self.writes.clear();
        for b in w
            .block
            .iter()
            .filter(|b| b.op == "write" && !b.job.is_empty())
        {
            if self.writes.len() < PER_HOST || self.writes.contains_key(&b.job) {
                *self.writes.entry(b.job.clone()).or_default() += b.bytes;
            } else {
                dropped += 1;
            }
        }
        self.net_writes = w
            .nfs
            .iter()
            .filter(|o| o.op.eq_ignore_ascii_case("write"))
            .map(|o| o.bytes_sent)
            .sum();
        dropped
    }

    /// The ports a rank's `hcas` name here (`hca/port`, or every port of
    /// a whole `hca`).
    pub fn ports_of<'a>(&'a self, hcas: &'a [String]) -> impl Iterator<Item = (&'a str, &'a Port)> {
        self.ports.iter().filter_map(move |(k, p)| {
            let hca = k.split('/').next().unwrap_or(k);
            hcas.iter()
                .any(|h| h == k || h == hca)
                .then_some((k.as_str(), p))
        })
    }
}
