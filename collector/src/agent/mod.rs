//! The agent: starts every source ([`setup`]), then closes a window on each
//! tick by asking each source for its part ([`windows`], the two phases in
//! [`crate::sources`]), and hands the wire window to the recorder and the
//! sender ([`delivery`]). `main.rs` keeps the CLI and wiring only.
mod delivery;
pub mod describe;
pub mod host;
pub mod kernel;
pub mod probe_enabled;
mod setup;
pub mod shutdown;
mod start;
mod windows;

use std::time::Duration;

use anyhow::Result;

pub use delivery::{join_sender, SenderFailed};

use crate::config::FileConfig;

/// What ends the run: a signal or `--duration`.
pub struct Stop {
    pub duration: Option<Duration>,
}

/// Runs the agent until SIGINT/SIGTERM or the duration; the window open at
/// that moment is closed and reported before the probes detach. A sender
/// that panicked makes the run an error.
pub async fn run(cfg: FileConfig, stop: Stop) -> Result<()> {
    let mut agent = setup::Agent::start(&cfg).await?;
    let windows = agent.run_windows(cfg.collector.window(), stop).await?;
    agent.console.info(format_args!(
        "stopped after {windows} windows, {} exec events",
        agent.exec.total
    ));
    let setup::Agent {
        probes,
        delivery,
        console,
        ..
    } = agent;
    // Everything is delivered (or spooled) before the probes go: removing
    // them takes the kernel a grace period per uprobe, one after another
    // (~0.1 s each on a busy host), and a supervisor may kill the process
    // meanwhile (docs/running.md).
    let delivered = delivery.finish(console).await;
    let t0 = std::time::Instant::now();
    let uprobes = probes.uprobe_links();
    drop(probes);
    tracing::info!(
        uprobes,
        seconds = t0.elapsed().as_secs_f64(),
        "probes detached"
    );
    delivered
}
