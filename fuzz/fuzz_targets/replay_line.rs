//! One line of a replay file (`docs/replay.md`): parsed or refused with a
//! message, never a panic; an accepted line is a window with a host and seq.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(line) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(w) = correlator::replay::parse_line(line) {
        assert!(w.seq >= 1);
        assert!(w.origin.is_some_and(|o| !o.hostname.is_empty()));
    }
});
