//! `docs/config.md` against the collector's config: every key the file can
//! hold is in a key table of its collector part, every key documented
//! there exists, each documented default is the one `check-config`
//! prints, and each declared key's flag and environment variable are in
//! its row (`proto::config_doc`). A new field is found by tracing
//! [`FileConfig`]'s type, so it cannot be left out of the docs.
use proto::config_doc::{check, check_flags, defaults, rows, trace};

use super::FileConfig;

/// The collector's part of `docs/config.md` (the correlator's follows).
fn collector_docs() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/config.md");
    let text = std::fs::read_to_string(path).expect("docs/config.md");
    let end = text
        .find("\n## The correlator's")
        .expect("docs/config.md has the correlator's part after the collector's");
    text[..end].to_string()
}

#[test]
fn docs_config_md_documents_every_key_with_its_default_and_no_other() {
    let traced = trace::<FileConfig>().expect("the tracer knows every field type");
    let printed: toml::Table = FileConfig::default()
        .to_toml()
        .parse()
        .expect("check-config prints TOML");
    let code = defaults(&traced, &printed);
    assert!(code.contains_key("stream.spool_max_bytes") && code.contains_key("stream.record"));
    let documented = rows("docs/config.md", &collector_docs());
    let declared = [
        &super::collector::DECLARED[..],
        &crate::stream::section::DECLARED[..],
        &crate::block::section::DECLARED[..],
        &crate::cuda::section::DECLARED[..],
        &crate::nccl::section::DECLARED[..],
        &crate::verbs::section::DECLARED[..],
        &crate::nvml::DECLARED[..],
        &crate::ib::section::DECLARED[..],
        &crate::nfs::section::DECLARED[..],
        &crate::lustre::section::DECLARED[..],
        &crate::switches::section::DECLARED[..],
        &crate::otlp::section::DECLARED[..],
        &crate::usage::section::DECLARED[..],
        &crate::kmsg::section::DECLARED[..],
    ]
    .concat();
    let mut problems = check(&code, &documented);
    problems.extend(check_flags(&declared, &documented));
    assert!(
        problems.is_empty(),
        "docs/config.md and the collector's config disagree:\n{}",
        problems.join("\n")
    );
}
