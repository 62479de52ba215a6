fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    // Every message also (de)serialises as JSON with serde: the replay format
    // is the wire format in JSON, one window per line (docs/replay.md).
    tonic_prost_build::configure()
        .type_attribute(
            ".",
            "#[derive(serde::Serialize, serde::Deserialize)] #[serde(default, deny_unknown_fields)]",
        )
        .compile_protos(&["proto/faultline.proto"], &["proto"])?;
    // The kubelet's pod-resources API (the collector's client; the tests'
    // fake kubelet serves it).
    tonic_prost_build::configure()
        .build_transport(false)
        .compile_protos(&["proto/kubelet_podresources.proto"], &["proto"])?;
    Ok(())
}
