//! The config docs check both binaries run as a unit test: every key the
//! config type holds ([`trace`]) is in a key table of the docs, every key
//! a table documents is in the type, and a table's default (its first
//! `` `value` ``) is the default the binary prints (`check-config`'s TOML).
//! Tables are Markdown with a header row whose first column is `key`; a
//! table's section is the last `` `[section]` `` named by its heading,
//! else by a line between that heading and the table, else by a heading
//! above.
mod table;
mod trace;

use std::collections::BTreeMap;

use crate::config_key::Declared;

pub use table::{rows, Row};
pub use trace::{trace, Traced};

/// A key's default as the binary prints it.
#[derive(Clone, Debug, PartialEq)]
pub enum Printed {
    /// Not printed: an `Option` that is `None`.
    Unset,
    /// A number, string or bool, as TOML writes it (strings unquoted).
    Scalar(String),
    /// A list or table.
    Other,
    /// A section (`[detect.incidents.severity]`): a row may name it
    /// (pointing at its own table), none needs to.
    Section,
}

/// The disagreements between the keys of the code (with their defaults)
/// and the documented rows, one line each; empty: none.
pub fn check(code: &BTreeMap<String, Printed>, docs: &[Row]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut documented: BTreeMap<&str, &Row> = BTreeMap::new();
    for row in docs {
        documented.entry(row.key.as_str()).or_insert(row);
        match code.get(&row.key) {
            None => problems.push(format!(
                "{}:{}: `{}` is documented but the config has no such key",
                row.file, row.line, row.key
            )),
            Some(d) => {
                if let Some(why) = default_differs(d, row.default.as_deref()) {
                    problems.push(format!("{}:{}: `{}`: {why}", row.file, row.line, row.key));
                }
            }
        }
    }
    for (key, d) in code {
        if *d != Printed::Section && !documented.contains_key(key.as_str()) {
            problems.push(format!(
                "`{key}` is in the config but in no key table of the docs"
            ));
        }
    }
    problems
}

/// The declared keys whose documented row does not name their flag
/// (`--spool-max-bytes`) or environment variable in its flag column.
pub fn check_flags(declared: &[Declared], docs: &[Row]) -> Vec<String> {
    let mut problems = Vec::new();
    for d in declared {
        let Some(row) = docs.iter().find(|r| r.key == d.path) else {
            continue; // `check` names it.
        };
        let cell = row.flag.as_deref().unwrap_or_default();
        let names = d
            .flag
            .map(|f| format!("--{f}"))
            .into_iter()
            .chain(d.env.map(str::to_string));
        for name in names {
            let said = cell.split('`').skip(1).step_by(2).any(|t| t == name);
            if !said {
                problems.push(format!(
                    "{}:{}: `{}`'s flag column does not name `{name}`",
                    row.file, row.line, d.path
                ));
            }
        }
    }
    problems
}

/// Why a documented default is not the code's, if it is not.
fn default_differs(code: &Printed, doc: Option<&str>) -> Option<String> {
    match (code, doc) {
        (Printed::Unset, Some(d)) => Some(format!("documented default `{d}`, the code's is unset")),
        (Printed::Scalar(c), Some(d)) => {
            let d = d.trim_matches('"');
            let same = match (c.parse::<f64>(), number(d)) {
                (Ok(a), Some(b)) => a == b || (a - b).abs() <= 1e-12 * a.abs(),
                _ => c == d,
            };
            (!same).then(|| format!("documented default `{d}`, the code's is `{c}`"))
        }
        (Printed::Scalar(c), None) => Some(format!(
            "documents no default in backquotes, the code's is `{c}`"
        )),
        (Printed::Unset | Printed::Other | Printed::Section, None)
        | (Printed::Other | Printed::Section, Some(_)) => None,
    }
}

/// A documented number: `5`, `1e-14`, or a fraction `1/3600`.
fn number(d: &str) -> Option<f64> {
    match d.split_once('/') {
        Some((n, q)) => Some(n.trim().parse::<f64>().ok()? / q.trim().parse::<f64>().ok()?),
        None => d.parse().ok(),
    }
}

/// Each key of `traced` with its default from the printed TOML
/// (`check-config`'s output parsed back).
pub fn defaults(traced: &Traced, printed: &toml::Table) -> BTreeMap<String, Printed> {
    let sections = traced
        .sections
        .iter()
        .map(|s| (s.clone(), Printed::Section));
    let keys = traced.keys.iter().map(|key| {
        let mut at: Option<&toml::Value> = None;
        let mut table = Some(printed);
        for part in key.split('.') {
            at = table.and_then(|t| t.get(part));
            table = at.and_then(toml::Value::as_table);
        }
        let d = match at {
            None => Printed::Unset,
            Some(toml::Value::String(s)) => Printed::Scalar(s.clone()),
            Some(toml::Value::Integer(i)) => Printed::Scalar(i.to_string()),
            Some(toml::Value::Float(f)) => Printed::Scalar(f.to_string()),
            Some(toml::Value::Boolean(b)) => Printed::Scalar(b.to_string()),
            Some(_) => Printed::Other,
        };
        (key.clone(), d)
    });
    sections.chain(keys).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "\
## `[stream]`

| key | type | default | flag | meaning |
|---|---|---|---|---|
| `spool_max_bytes` | integer | `67108864` (64 MiB) | `--spool-max-bytes` | bound |
| `endpoint` | URL | unset | `--correlator` | where |
| `ghost` | bool | `true` | — | documented only |
| `limits` | table | see below | — | a section |
| `rate` | float | `1/3600` | — | a fraction |
";

    fn code(spool: &str) -> BTreeMap<String, Printed> {
        BTreeMap::from([
            (
                "stream.spool_max_bytes".into(),
                Printed::Scalar(spool.into()),
            ),
            ("stream.endpoint".into(), Printed::Unset),
            ("stream.record".into(), Printed::Unset),
            ("stream.limits".into(), Printed::Section),
            (
                "stream.rate".into(),
                Printed::Scalar("0.0002777777777777778".into()),
            ),
        ])
    }

    #[test]
    fn names_each_undocumented_undeclared_and_differing_key() {
        let rows = rows("config.md", DOC);
        let p = check(&code("67108864"), &rows);
        assert_eq!(
            p,
            [
                "config.md:7: `stream.ghost` is documented but the config has no such key",
                "`stream.record` is in the config but in no key table of the docs",
            ]
        );
        let declared = |flag, env| Declared {
            path: "stream.spool_max_bytes",
            flag: Some(flag),
            env,
        };
        assert!(check_flags(&[declared("spool-max-bytes", None)], &rows).is_empty());
        assert_eq!(
            check_flags(&[declared("spool-bytes", Some("SPOOL"))], &rows),
            [
                "config.md:5: `stream.spool_max_bytes`'s flag column does not name `--spool-bytes`",
                "config.md:5: `stream.spool_max_bytes`'s flag column does not name `SPOOL`",
            ]
        );
        let p = check(&code("4096"), &rows);
        assert!(
            p[0].contains(
                "`stream.spool_max_bytes`: documented default `67108864`, the code's is `4096`"
            ),
            "{p:?}"
        );
    }
}
