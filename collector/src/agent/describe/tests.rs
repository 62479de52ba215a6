//! docs/metrics.md (all but its correlator section) and the crate's
//! literal metric names against the catalog.
use std::path::Path;

use proto::metric::{check_docs, duplicates, literals, without_section};

use super::all;

/// Names with the metric prefix that are not metric families.
const NOT_METRICS: &[&str] = &[];

#[test]
fn docs_match_the_declarations() {
    let md = include_str!("../../../../docs/metrics.md");
    let all = all();
    let drift = check_docs(&all, &without_section(md, "## Correlator"));
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
    let found = literals::undeclared(&src, &all(), NOT_METRICS).expect("read src");
    assert!(
        found.is_empty(),
        "declare these (a proto::metric::Family beside the emit site, its group in agent::describe::all):\n{}",
        found.join("\n")
    );
}
