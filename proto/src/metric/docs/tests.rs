//! `check_docs` on small tables: agreement, and each kind of drift.
use super::*;
use crate::metric::Family;

const REQ: Family = Family::counter("faultline_req_total", &["device", "op"], "r");
const BYTES: Family = Family::counter("faultline_bytes_total", &["device", "op", "dir"], "b");
const UP: Family = Family::gauge("faultline_up", &[], "u");
const LAT: Family = Family::histogram("faultline_lat_seconds", &["op"], "l");
const RANKS: Family = Family::gauge("faultline_rank_info", &["comm", "rank", "pid"], "i");
const TX: Family = Family::counter("faultline_port_transmitted_total", &["port"], "t");
const RX: Family = Family::counter("faultline_port_received_total", &["port"], "r");
const TX2: Family = Family::counter("faultline_port_transmitted_bytes_total", &["port"], "t");
const RX2: Family = Family::counter("faultline_port_received_bytes_total", &["port"], "r");
const DROP2: Family = Family::counter("faultline_port_dropped_bytes_total", &["port"], "d");
const HW: Family = Family::counter("faultline_hw_rnr_total", &["port"], "h");

const ALL: &[&Family] = &[
    &REQ, &BYTES, &UP, &LAT, &RANKS, &TX, &RX, &TX2, &RX2, &DROP2, &HW,
];

const DOC: &str = "\
# title

| metric | type | labels | meaning |
|---|---|---|---|
| `faultline_req_total` | counter | `device`, `op` (`read`, `write`) | requests |
| `faultline_bytes_total` | counter | as `faultline_req_total`, + `dir` | bytes |
| `faultline_up` | gauge | — | 1 while up |
| `faultline_lat_seconds` | histogram | `op` | latency |
| `faultline_rank_info` | gauge | `comm`, `rank` (+ `pid` when `rank` is -1) | ranks |
| `faultline_port_transmitted_total` / `_received_total` | counter | `port` | port data |
| `faultline_port_transmitted_bytes_total` / `_received_bytes_total` / `_dropped_bytes_total` | counter | `port` | each against the first |
| `faultline_hw_<name>` | counter | `port` | hardware counters |

Prose with `faultline_not_a_row_total` is not a table.

| name | type | meaning |
|---|---|---|
| `faultline_other_section` | counter | outside the checked part |
";

#[test]
fn agreeing_docs_pass() {
    let md = DOC.replace("| name | type | meaning |\n|---|---|---|\n| `faultline_other_section` | counter | outside the checked part |\n", "");
    assert_eq!(check_docs(ALL, &md), Vec::<String>::new());
}

#[test]
fn declared_but_not_documented_fails() {
    const NEW: Family = Family::gauge("faultline_new", &[], "n");
    let md = DOC.replace("| name | type | meaning |\n|---|---|---|\n| `faultline_other_section` | counter | outside the checked part |\n", "");
    let mut all = ALL.to_vec();
    all.push(&NEW);
    assert_eq!(
        check_docs(&all, &md),
        vec!["declared but not documented: faultline_new"]
    );
}

#[test]
fn documented_but_not_declared_fails() {
    let out = check_docs(ALL, DOC);
    assert_eq!(out.len(), 1, "{out:?}");
    assert!(
        out[0].starts_with("documented but not declared: faultline_other_section"),
        "{out:?}"
    );
}

#[test]
fn type_mismatch_fails() {
    let md = section(DOC, "# title")
        .replace("| `faultline_up` | gauge |", "| `faultline_up` | counter |");
    let md = md.replace(
        "| `faultline_other_section` | counter | outside the checked part |\n",
        "",
    );
    let out = check_docs(ALL, &md);
    assert_eq!(out.len(), 1, "{out:?}");
    assert!(
        out[0].starts_with("type mismatch: faultline_up is declared gauge but documented counter"),
        "{out:?}"
    );
}

#[test]
fn label_mismatch_fails_either_way() {
    let base = DOC.replace(
        "| `faultline_other_section` | counter | outside the checked part |\n",
        "",
    );
    // A label documented that the family does not carry.
    let extra = base.replace(
        "| `faultline_lat_seconds` | histogram | `op` |",
        "| `faultline_lat_seconds` | histogram | `op`, `device` |",
    );
    let out = check_docs(ALL, &extra);
    assert_eq!(out.len(), 1, "{out:?}");
    assert!(
        out[0].starts_with("label mismatch: faultline_lat_seconds"),
        "{out:?}"
    );
    // A label the family carries left out, also through an "as" row.
    let missing = base.replace(
        "as `faultline_req_total`, + `dir`",
        "as `faultline_req_total`",
    );
    let out = check_docs(ALL, &missing);
    assert_eq!(out.len(), 1, "{out:?}");
    assert!(
        out[0].starts_with("label mismatch: faultline_bytes_total"),
        "{out:?}"
    );
    // An optional label in "(+ … when …)" counts; the word after "when" does not.
    let optional = base.replace("(+ `pid` when `rank` is -1)", "(`pid` when `rank` is -1)");
    let out = check_docs(ALL, &optional);
    assert!(
        out[0].starts_with("label mismatch: faultline_rank_info"),
        "{out:?}"
    );
}

#[test]
fn suffix_rows_and_patterns_name_their_families() {
    assert_eq!(
        expand(
            "faultline_a_data_transmitted_bytes_total",
            "_received_bytes_total"
        ),
        "faultline_a_data_received_bytes_total"
    );
    assert_eq!(
        expand(
            "faultline_gpu_nvlink_replay_errors_total",
            "_crc_flit_errors_total"
        ),
        "faultline_gpu_nvlink_crc_flit_errors_total"
    );
    assert_eq!(
        expand(
            "faultline_port_packets_transmitted_total",
            "_received_total"
        ),
        "faultline_port_packets_received_total"
    );
    assert!(glob("faultline_hw_<name>", "faultline_hw_rnr_total"));
    assert!(glob(
        "…_legacy_multicast_…",
        "faultline_ib_legacy_multicast_packets_total"
    ));
    assert!(glob("process_*", "process_cpu_seconds_total"));
    assert!(!glob("faultline_hw_<name>", "faultline_sw_rnr_total"));
    // The received half of a suffix row is documented: dropping the
    // suffix leaves it undocumented.
    let md = DOC.replace(" / `_received_total`", "").replace(
        "| `faultline_other_section` | counter | outside the checked part |\n",
        "",
    );
    assert_eq!(
        check_docs(ALL, &md),
        vec!["declared but not documented: faultline_port_received_total"]
    );
}

#[test]
fn sections_split_at_their_heading_level() {
    let md = "# a\nx\n## b\ny\n### c\nz\n## d\nw\n";
    assert_eq!(section(md, "## b"), "## b\ny\n### c\nz\n");
    assert_eq!(without_section(md, "## b"), "# a\nx\n## d\nw\n");
    assert_eq!(section(md, "## none"), "");
}
