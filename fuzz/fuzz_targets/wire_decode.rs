//! A gRPC `Window` as received: decoded or refused; what decodes re-encodes
//! stably (encode ∘ decode is the identity on its own output; compared as
//! bytes, since a NaN float is not equal to itself).
#![no_main]
use libfuzzer_sys::fuzz_target;
use prost::Message as _;
use proto::v1::Window;

fuzz_target!(|data: &[u8]| {
    if let Ok(w) = Window::decode(data) {
        let bytes = w.encode_to_vec();
        let again = Window::decode(bytes.as_slice()).expect("re-decode");
        assert_eq!(again.encode_to_vec(), bytes);
    }
});
