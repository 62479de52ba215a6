//! Waiting on signals with a deadline instead of sleeping a fixed time: on
//! a loaded machine a fixed sleep is either too short (a race) or wasted.
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

/// How long a benchmark waits for a process or server to become ready.
/// Generous: a loaded 2-core machine takes seconds to start one.
pub const READY: Duration = Duration::from_secs(60);

/// How often [`until`] checks its condition.
const POLL: Duration = Duration::from_millis(20);

/// Checks `done` until it returns `true`, for at most `timeout`; an error
/// from `done` (e.g. the process being waited on exited) ends the wait.
/// The error on timeout names `what` and the last state `done` reported.
pub fn until(
    what: &str,
    timeout: Duration,
    mut done: impl FnMut() -> Result<Option<String>>,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let state = match done()? {
            None => return Ok(()),
            Some(s) => s,
        };
        if Instant::now() >= deadline {
            bail!("timed out after {timeout:?} waiting for {what} ({state})");
        }
        std::thread::sleep(POLL);
    }
}

/// A loopback port free now, for a server the benchmark starts (it binds
/// it a moment later; [`port`] then waits for it to listen).
pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Waits until something listens on `127.0.0.1:port`, failing early when
/// `child` exits first.
pub fn port(child: &mut std::process::Child, port: u16, what: &str) -> Result<()> {
    until(
        &format!("{what} to listen on 127.0.0.1:{port}"),
        READY,
        || {
            if let Some(status) = child.try_wait()? {
                bail!("{what} exited ({status}) before listening on {port}");
            }
            Ok(std::net::TcpStream::connect(("127.0.0.1", port))
                .is_err()
                .then(|| "not listening yet".to_string()))
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn until_returns_once_the_condition_holds_and_names_it_on_timeout() {
        let mut n = 0;
        until("three polls", Duration::from_secs(5), || {
            n += 1;
            Ok((n < 3).then(|| format!("{n} polls")))
        })
        .unwrap();
        assert_eq!(n, 3);
        let t = Instant::now();
        let e = until("never", Duration::from_millis(100), || {
            Ok(Some("still 0".into()))
        })
        .unwrap_err()
        .to_string();
        assert!(t.elapsed() >= Duration::from_millis(100));
        assert_eq!(e, "timed out after 100ms waiting for never (still 0)");
        let e = until("an exit", Duration::from_secs(5), || bail!("exited"))
            .unwrap_err()
            .to_string();
        assert_eq!(e, "exited");
    }
}
