//! The correlator's config docs against its config: every key the file
//! can hold is in a key table of the docs that describe it (the
//! correlator's part of `docs/config.md`, `detection.md`, `history.md`,
//! `alerting.md`, `security.md`), every key documented there exists, and
//! each documented default is the one `check-config` prints
//! (`proto::config_doc`). A new field is found by tracing [`FileConfig`]'s
//! type, so it cannot be left out of the docs. Each key declared with a
//! flag or an environment variable ([`super::FLAGGED`]) has its row name
//! them (the correlator's tables have no flag column: anywhere in the row).
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

/// The correlator's part of `docs/NAME` (config.md opens with the
/// collector's keys).
fn part(name: &str) -> String {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/");
    let text = std::fs::read_to_string(format!("{dir}{name}")).expect("a doc");
    match text.find("\n## The correlator's") {
        Some(at) if name == "config.md" => text[at..].to_string(),
        _ => text,
    }
}

fn documented() -> Vec<Row> {
    DOCS.iter()
        .flat_map(|name| rows(&format!("docs/{name}"), &part(name)))
        .collect()
}

/// The declared flags and environment variables their rows do not name.
fn flags_unnamed(documented: &[Row]) -> Vec<String> {
    let mut problems = Vec::new();
    for d in super::FLAGGED {
        let Some(row) = documented.iter().find(|r| r.key == d.path) else {
            problems.push(format!("`{}` (declared with a flag) has no row", d.path));
            continue;
        };
        let text = part(row.file.trim_start_matches("docs/"));
        let line = text.lines().nth(row.line - 1).unwrap_or_default();
        let names = d
            .flag
            .map(|f| format!("--{f}"))
            .into_iter()
            .chain(d.env.map(str::to_string));
        for name in names {
            if !line.contains(&name) {
                problems.push(format!(
                    "{}:{}: `{}`'s row does not name `{name}`",
                    row.file, row.line, d.path
                ));
            }
        }
    }
    problems
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
    let documented = documented();
    let mut problems = check(&code, &documented);
    problems.extend(flags_unnamed(&documented));
    assert!(
        problems.is_empty(),
        "the docs and the correlator's config disagree:\n{}",
        problems.join("\n")
    );
}
