//! The systemd unit grants CAP_SYS_RESOURCE "to raise RLIMIT_MEMLOCK on
//! kernels that still charge BPF maps to it", and the DaemonSet too; no code
//! did. `raise_memlock` lifts a low soft limit (a container's default) to
//! the hard limit (unlimited with the capability).
#[test]
fn a_low_memlock_limit_is_raised() {
    let _turn = tests::one_file_at_a_time(file!());
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into a valid rlimit.
    assert_eq!(
        unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) },
        0
    );
    let hard = lim.rlim_max;
    assert!(hard > 64 << 10, "hard limit {hard} too low to test");
    lim.rlim_cur = 64 << 10;
    // SAFETY: setrlimit reads a valid rlimit; lowering the soft limit needs no privilege.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) }, 0);
    let now = collector::privilege::raise_memlock().expect("raise");
    let want = if hard == libc::RLIM_INFINITY {
        u64::MAX
    } else {
        hard
    };
    assert!(
        now >= want,
        "soft limit {now} raised to at least the old hard limit {want}"
    );
}
