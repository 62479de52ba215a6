//! SIGINT and SIGTERM, installed once: a signal that arrives while the loop
//! is busy closing a window is kept until the loop next waits (a
//! `ctrl_c()` future created anew on every pass would miss it).
use tokio::signal::unix::{signal, Signal, SignalKind};

pub struct Shutdown {
    interrupt: Signal,
    terminate: Signal,
}

impl Shutdown {
    pub fn install() -> std::io::Result<Self> {
        Ok(Self {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
        })
    }

    /// Resolves on the next SIGINT or SIGTERM (including one that arrived
    /// since the last call).
    pub async fn recv(&mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
    }
}
