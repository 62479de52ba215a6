//! Logs on stderr for the correlator's and the simulator's binaries:
//! `RUST_LOG` when set (and valid), `default` otherwise; colour codes only
//! when stderr is a terminal and `NO_COLOR` is unset or empty.

/// Installs the subscriber (a no-op when one is already installed).
pub fn init(default: &str) {
    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|f| tracing_subscriber::EnvFilter::try_new(f).ok())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(vocab::term::colour(std::io::IsTerminal::is_terminal(
            &std::io::stderr(),
        )))
        .with_writer(std::io::stderr)
        .try_init();
}
