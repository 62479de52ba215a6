//! Every number in the correlator's config file is range-checked: for each
//! numeric key of the defaults (found by walking them, so a key added later
//! is covered too), `nan`, `-1` and `inf` are refused by name. `hang_min_s`,
//! `hang_intervals`, `forget_s` and `update_delta` used to take all three.
use correlator::config::{parse_file, FileConfig};

/// `(dotted path, value)` of every integer or float leaf under `t`.
fn numbers(prefix: &str, t: &toml::Table, out: &mut Vec<String>) {
    for (k, v) in t {
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Table(t) => numbers(&path, t, out),
            toml::Value::Integer(_) | toml::Value::Float(_) => out.push(path),
            _ => {}
        }
    }
}

#[test]
fn nan_minus_one_and_inf_are_refused_for_every_number_by_name() {
    let _turn = tests::one_file_at_a_time(file!());
    let text = toml::to_string(&FileConfig::default()).expect("defaults as TOML");
    let table: toml::Table = toml::from_str(&text).expect("parse defaults");
    let mut keys = Vec::new();
    for section in ["detect", "history", "alertmanager"] {
        let t = table[section].as_table().expect("a section");
        numbers(section, t, &mut keys);
    }
    assert!(keys.len() > 80, "{} numeric keys: {keys:?}", keys.len());
    for k in ["detect.nccl.hang_min_s", "detect.incidents.update_delta"] {
        assert!(keys.iter().any(|x| x == k), "{k} not walked");
    }
    let mut accepted = Vec::new();
    let bads = [
        ("nan", toml::Value::Float(f64::NAN)),
        ("-1", toml::Value::Integer(-1)),
        ("inf", toml::Value::Float(f64::INFINITY)),
        ("-inf", toml::Value::Float(f64::NEG_INFINITY)),
    ];
    for key in &keys {
        for (bad, v) in &bads {
            // The defaults with this one key set wrong (a table such as
            // `[detect.storage.nvme]` needs its other keys).
            let mut doc = table.clone();
            let mut t = &mut doc;
            let path: Vec<&str> = key.split('.').collect();
            for seg in &path[..path.len() - 1] {
                t = t[*seg].as_table_mut().expect("a table");
            }
            t.insert(path[path.len() - 1].to_string(), v.clone());
            let text = toml::to_string(&doc).expect("as TOML");
            match parse_file(&text, "r.toml") {
                Ok(_) => accepted.push(format!("{key} = {bad}")),
                Err(e) => {
                    let e = e.to_string();
                    // `detect.storage.nvme.p50_ms` is named as such, an
                    // integer's type error names its path.
                    if !e.contains(key.as_str()) {
                        accepted.push(format!("{key} = {bad} refused without its name: {e}"));
                    }
                }
            }
        }
    }
    assert!(accepted.is_empty(), "accepted or unnamed: {accepted:#?}");
}
