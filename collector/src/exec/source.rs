//! Exec events from the exec ring, drained as they arrive (between
//! windows): each invalidates the process's cached identity.
use anyhow::{Context as _, Result};

use crate::{
    exec::{ExecRecord, ExecRing},
    identity::IdentityCache,
    sources::Console,
};

pub struct ExecSource {
    ring: ExecRing,
    batch: Vec<ExecRecord>,
    /// Events in the current window and since start.
    pub window: u64,
    pub total: u64,
}

impl ExecSource {
    pub fn new(ring: ExecRing) -> Self {
        Self {
            ring,
            batch: Vec::with_capacity(256),
            window: 0,
            total: 0,
        }
    }

    /// Waits for the next batch of exec events and handles it.
    pub async fn drain(&mut self, ids: &mut IdentityCache, console: Console) -> Result<()> {
        self.ring
            .recv_batch(&mut self.batch)
            .await
            .context("reading the exec ring")?;
        let n = self.batch.len() as u64;
        self.window += n;
        self.total += n;
        for e in &self.batch {
            // Exec changes a process's identity: re-read it on next use.
            ids.invalidate(e.pid);
            console.detail(format_args!(
                "exec pid={} comm={} file={} cgroup={}",
                e.pid, e.comm, e.filename, e.cgroup_id
            ));
        }
        self.batch.clear();
        Ok(())
    }
}
