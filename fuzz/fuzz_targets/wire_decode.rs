//! A gRPC `Window` as received: decoded or refused; what decodes survives a
//! re-encode (same length; equal as a value unless it holds a NaN, which is
//! not equal to itself — maps re-encode in any order, so bytes may differ).
#![no_main]
use libfuzzer_sys::fuzz_target;
use prost::Message as _;
use proto::v1::Window;

fuzz_target!(|data: &[u8]| {
    if let Ok(w) = Window::decode(data) {
        let bytes = w.encode_to_vec();
        let again = Window::decode(bytes.as_slice()).expect("re-decode");
        assert_eq!(again.encoded_len(), bytes.len());
        if !format!("{w:?}").contains("NaN") {
            assert_eq!(again, w);
        }
    }
});
