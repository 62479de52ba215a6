//! `FAULTLINE_REVISION` and `FAULTLINE_RUSTC` for `faultline_build_info`
//! (the collector's build script sets the same two, from the same file).
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    build_info(std::path::Path::new(&dir));
}

include!("../build-support/build_info.rs");
