//! docs/metrics.md (all but its correlator section) and the crate's
//! literal metric names against the catalog.
use std::path::Path;

use proto::metric::{check_docs, duplicates, literals, without_section};

use super::all;

/// Families still named by literals at their text-writer call sites, with
/// their HELP there: documented, not declared yet. Declaring one (a
/// `Family` beside its emit site, its group in `all`) removes it here.
const PENDING: &[&str] = &["faultline_gpu_memory_temperature_celsius"];

/// Names with the metric prefix that are not metric families.
const NOT_METRICS: &[&str] = &[];

#[test]
fn docs_match_the_declarations() {
    let md = include_str!("../../../../docs/metrics.md");
    let all = all();
    let drift: Vec<String> = check_docs(&all, &without_section(md, "## Correlator"))
        .into_iter()
        .filter(|d| {
            !PENDING
                .iter()
                .any(|p| d.starts_with(&format!("documented but not declared: {p} ")))
        })
        .collect();
    assert!(
        drift.is_empty(),
        "docs/metrics.md drifted:\n{}",
        drift.join("\n")
    );
    assert!(duplicates(&all).is_empty(), "{:?}", duplicates(&all));
}

#[test]
fn every_literal_name_is_declared() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let skip: Vec<&str> = PENDING.iter().chain(NOT_METRICS).copied().collect();
    let found = literals::undeclared(&src, &all(), &skip).expect("read src");
    assert!(
        found.is_empty(),
        "declare these (a proto::metric::Family beside the emit site, its group in agent::describe::all):\n{}",
        found.join("\n")
    );
}

/// A pending name that got declared leaves the list.
#[test]
fn pending_names_are_not_declared() {
    let all = all();
    let both: Vec<&&str> = PENDING
        .iter()
        .filter(|p| all.iter().any(|f| f.name == **p))
        .collect();
    assert!(
        both.is_empty(),
        "declared now, remove from PENDING: {both:?}"
    );
}
