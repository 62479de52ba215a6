//! A SIGINT that arrives while the agent is busy closing a window (not
//! waiting on the signal) still stops it: the handler is installed once.
//! Before, `tokio::signal::ctrl_c()` was created anew on every loop pass
//! and a signal between two passes was lost.
use std::time::Duration;

use collector::agent::shutdown::Shutdown;

#[tokio::test(flavor = "current_thread")]
async fn a_signal_between_two_waits_is_not_lost() {
    let _turn = tests::one_file_at_a_time(file!());
    let mut s = Shutdown::install().expect("signal handlers");
    // Busy, not waiting: the signal arrives now.
    // SAFETY: raise has no preconditions; SIGINT has a handler installed above.
    assert_eq!(unsafe { libc::raise(libc::SIGINT) }, 0);
    tokio::time::timeout(Duration::from_secs(5), s.recv())
        .await
        .expect("the SIGINT raised before the wait is seen");
    // And the next one too.
    // SAFETY: as above.
    assert_eq!(unsafe { libc::raise(libc::SIGTERM) }, 0);
    tokio::time::timeout(Duration::from_secs(5), s.recv())
        .await
        .expect("SIGTERM is seen");
}
