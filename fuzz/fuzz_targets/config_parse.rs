//! Configuration files of both binaries: parsed and validated, or one error;
//! a collector config that validates yields a usable window length.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(c) = collector::config::FileConfig::parse(text, "fuzz") {
        assert!(!c.collector.window().is_zero());
    }
    let _ = correlator::config::parse(text, "fuzz");
});
