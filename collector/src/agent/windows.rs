//! The window loop: drains the rings as they fill, runs the launch
//! controller, and on each tick closes a window over every source.
use std::time::{Instant, SystemTime};

use anyhow::{Context as _, Result};
use proto::v1 as pb;
use tokio::time::{interval, MissedTickBehavior};

use super::{kernel, setup::Agent, shutdown, Stop};
use crate::{
    probes::drain,
    sources::{self, Ctx},
};

impl Agent {
    /// Runs windows of `window` until a signal or the duration; the window
    /// open at that moment is closed and reported. Returns how many closed.
    pub async fn run_windows(&mut self, window: std::time::Duration, stop: Stop) -> Result<u64> {
        let console = self.console;
        let mut tick = interval(window);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        tick.tick().await;
        let deadline = async {
            match stop.duration {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending::<()>().await,
            }
        };
        tokio::pin!(deadline);
        let mut shutdown =
            shutdown::Shutdown::install().context("installing the signal handlers")?;
        let mut window_start = SystemTime::now();
        let mut window_no = 0u64;
        loop {
            // A signal or the deadline still closes the current window, so the last
            // partial window is reported before the probes detach.
            let last = tokio::select! {
                r = self.exec.drain(&mut self.ids, console) => { r?; continue; }
                r = drain::next(&mut self.block_events, |e| console.detail(e)) => {
                    r.context("reading the block event ring")?;
                    continue;
                }
                r = drain::next(&mut self.cuda_events, |e| console.detail(e)) => {
                    r.context("reading the CUDA event ring")?;
                    continue;
                }
                _ = sleep_until(self.launch.as_ref().map(|l| l.next_event(self.probes.launch_probes_attached()))) => {
                    if let Some(l) = self.launch.as_mut() {
                        if let Some(line) = l.on_event(&mut self.probes)? {
                            console.info(line);
                        }
                    }
                    continue;
                }
                _ = tick.tick() => false,
                _ = &mut deadline => true,
                _ = shutdown.recv() => true,
            };
            window_no += 1;
            let now = SystemTime::now();
            self.close_window(window_no, window_start, now)?;
            window_start = now;
            if last {
                self.print_pending_events();
                return Ok(window_no);
            }
        }
    }

    /// Window `seq` from `start` to `now`: every source's part, then the
    /// record file and the sender.
    fn close_window(&mut self, seq: u64, start: SystemTime, now: SystemTime) -> Result<()> {
        let mut wire = pb::Window {
            origin: Some(self.origin.clone()),
            seq,
            start_unix_ms: vocab::time::unix_ms(start),
            end_unix_ms: vocab::time::unix_ms(now),
            ..Default::default()
        };
        let k = self.probes.kernel_stats()?;
        self.console.info(format_args!(
            "window {seq}: seq={seq} exec events={} total={} kernel: exec_events={} exec_ring_full={}",
            self.exec.window,
            self.exec.total,
            k[collector_common::stat::EXEC_EVENTS as usize],
            k[collector_common::stat::EXEC_RING_FULL as usize],
        ));
        self.exec.window = 0;
        let mut cx = Ctx {
            host: &self.host,
            now,
            probes: &mut self.probes,
            ids: &mut self.ids,
            expo: &self.expo,
            console: self.console,
        };
        sources::close_window(&mut self.sources, &mut cx, &mut wire)?;
        kernel::export(&k);
        kernel::export_misses(&self.probes.recursion_misses());
        self.delivery.publish(wire);
        Ok(())
    }

    /// What the event rings hold at the end is printed, not lost.
    fn print_pending_events(&mut self) {
        let console = self.console;
        if let Some(d) = self.block_events.as_mut() {
            d.take_ready().into_iter().for_each(|e| console.detail(e));
        }
        if let Some(d) = self.cuda_events.as_mut() {
            d.take_ready().into_iter().for_each(|e| console.detail(e));
        }
    }
}

/// Sleeps until `t`; never returns for `None`.
async fn sleep_until(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t.into()).await,
        None => std::future::pending().await,
    }
}
