//! The correlator's config docs against its config: every key the file
//! can hold is in a key table of the docs that describe it (the
//! correlator's part of `docs/config.md`, `detection.md`, `history.md`,
//! `alerting.md`, `security.md`), every key documented there exists, and
//! each documented default is the one `check-config` prints
//! (`proto::config_doc`). A new field is found by tracing [`FileConfig`]'s
//! type, so it cannot be left out of the docs.
use proto::config_doc::{check, defaults, rows, trace, Row};

use super::FileConfig;

/// The docs holding the correlator's key tables, with the part of each
/// that is the correlator's.
const DOCS: [&str; 5] = [
    "config.md",
    "detection.md",
    "history.md",
    "alerting.md",
    "security.md",
];

fn documented() -> Vec<Row> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/");
    DOCS.iter()
        .flat_map(|name| {
            let text = std::fs::read_to_string(format!("{dir}{name}")).expect("a doc");
            // config.md opens with the collector's keys.
            let ours = match text.find("\n## The correlator's") {
                Some(at) if *name == "config.md" => text[at..].to_string(),
                _ => text,
            };
            rows(&format!("docs/{name}"), &ours)
        })
        .collect()
}

#[test]
fn the_docs_document_every_key_with_its_default_and_no_other() {
    let traced = trace::<FileConfig>().expect("the tracer knows every field type");
    let printed: toml::Table = FileConfig::default()
        .to_toml()
        .expect("check-config prints the defaults")
        .parse()
        .expect("TOML");
    let code = defaults(&traced, &printed);
    assert!(code.contains_key("detect.limits.max_hosts") && code.contains_key("history.path"));
    let problems = check(&code, &documented());
    assert!(
        problems.is_empty(),
        "the docs and the correlator's config disagree:\n{}",
        problems.join("\n")
    );
}
