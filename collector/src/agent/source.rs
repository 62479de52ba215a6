//! What the agent loop asks of each source, and what it lends them.
use std::time::SystemTime;

use anyhow::Result;
use proto::v1 as pb;

use crate::{http::Exposition, identity::IdentityCache, nvml, probes::Probes};

/// The console: per-entity detail lines only without `--quiet` (journald
/// gets one summary line per window, not one per device, kernel and port).
#[derive(Clone, Copy, Debug)]
pub struct Console {
    pub quiet: bool,
}

impl Console {
    /// A per-entity line (a device, a kernel, a port, an event).
    pub fn detail(&self, line: impl std::fmt::Display) {
        if !self.quiet {
            println!("  {line}");
        }
    }

    /// A line that is always printed (startup facts, the window summary).
    pub fn info(&self, line: impl std::fmt::Display) {
        println!("{line}");
    }
}

/// What the GPU source learned this window, for sources that describe
/// processes' GPUs (CUDA lines).
#[derive(Debug, Default)]
pub struct GpuFacts {
    pub gpus: Vec<nvml::GpuInfo>,
    pub samples: Vec<nvml::GpuSample>,
    /// Processes the CUDA probes saw last window and the CUDA device
    /// ordinals they used (for the GPU series' workload labels).
    pub cuda_pids: std::collections::BTreeMap<u32, std::collections::BTreeSet<i32>>,
}

/// Lent to every source for one window.
pub struct Ctx<'a> {
    /// The node's name (entity prefix).
    pub host: &'a str,
    /// The window's end.
    pub now: SystemTime,
    pub probes: &'a mut Probes,
    pub ids: &'a mut IdentityCache,
    pub expo: &'a Exposition,
    pub console: Console,
    pub gpu: &'a mut GpuFacts,
    /// What sources leave for the usage source (which runs last).
    pub feed: &'a mut crate::sources::usage::UsageFeed,
}

/// One signal family. Each window it turns its new snapshot into a delta
/// against the last one, and that into the wire rows (`wire`), its console
/// lines and its metrics.
pub trait Source {
    fn window(&mut self, cx: &mut Ctx<'_>, wire: &mut pb::Window) -> Result<()>;
}
