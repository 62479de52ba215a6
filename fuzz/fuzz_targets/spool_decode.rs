//! A spool file as found on disk after a crash or a disk fault: the window
//! its name says, or a named kind of damage (quarantined) — never a panic,
//! never a window without origin; what decodes survives a re-encode.
#![no_main]
use collector::stream::spool::{decode_file, encode_file};
use libfuzzer_sys::fuzz_target;

const NAME: &str = "00000000001700000000-42~00000000000000000007.win";

fuzz_target!(|data: &[u8]| {
    if let Ok(w) = decode_file(NAME, data) {
        assert_eq!(w.seq, 7);
        let again = decode_file(NAME, &encode_file(&w)).expect("a re-encoded window decodes");
        // Equal as a value unless it holds a NaN (a damaged file's float
        // bits), which is not equal to itself; as `wire_decode` does.
        if !format!("{w:?}").contains("NaN") {
            assert_eq!(again, w);
        }
    }
});
