//! The agent: starts every source ([`setup`]), then closes a window on each
//! tick by asking each source for its part ([`windows`], the two phases in
//! [`crate::sources`]), and hands the wire window to the recorder and the
//! sender ([`delivery`]). `main.rs` keeps the CLI and wiring only.
mod delivery;
mod describe;
pub mod host;
pub mod kernel;
pub mod probe_enabled;
mod setup;
pub mod shutdown;
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
    agent.delivery.finish(agent.console).await
}
