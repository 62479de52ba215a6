//! InfiniBand sysfs attribute parsers on arbitrary file contents: a value
//! or `None`, never a panic; a counter written back reads the same.
#![no_main]
use collector::ib::sysfs::{parse_counter, parse_id, parse_lid, parse_rate};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = parse_id(text);
    let _ = parse_lid(text);
    let _ = parse_rate(text);
    if let Some(v) = parse_counter(text) {
        assert_eq!(parse_counter(&format!("{v}\n")), Some(v));
    }
});
