//! The optional per-event rings (`BLOCK_EVENTS` under `[block]
//! sample_every`, `CUDA_EVENTS` under `[cuda] events_per_sec`), drained by
//! the agent as events arrive, between windows: each record is counted
//! (`faultline_probe_events_total{probe}`, by the ring) and handed on (the
//! agent prints it as a console detail line). A ring whose key is 0 is never
//! written, so it is not taken.
use std::io;

use super::{ring::Decode, ring::EventRing, ProbeError, Probes};

pub struct EventDrain<R> {
    ring: EventRing<R>,
    batch: Vec<R>,
    /// Events drained since start.
    pub total: u64,
}

impl<R: Decode> EventDrain<R> {
    /// Takes `R`'s ring when its stream is on (`on`), else `None`.
    pub fn take(probes: &mut Probes, on: bool) -> Result<Option<Self>, ProbeError> {
        if !on {
            return Ok(None);
        }
        Ok(Some(Self {
            ring: probes.take_ring::<R>()?,
            batch: Vec::with_capacity(256),
            total: 0,
        }))
    }

    /// Waits for the next batch and hands each record to `each`; returns
    /// how many were drained.
    pub async fn drain(&mut self, each: impl FnMut(R)) -> io::Result<u64> {
        self.ring.recv_batch(&mut self.batch).await?;
        let n = self.batch.len() as u64;
        self.total += n;
        self.batch.drain(..).for_each(each);
        Ok(n)
    }

    /// What is in the ring now, without waiting (counted in `total`).
    pub fn take_ready(&mut self) -> Vec<R> {
        let mut out = Vec::new();
        self.ring.drain_now(&mut out);
        self.total += out.len() as u64;
        out
    }
}

/// Drains `d` when present; never completes when its stream is off.
pub async fn next<R: Decode>(
    d: &mut Option<EventDrain<R>>,
    each: impl FnMut(R),
) -> io::Result<u64> {
    match d {
        Some(d) => d.drain(each).await,
        None => std::future::pending().await,
    }
}
