//! The key tables of a Markdown config doc: each row's full key
//! (`section.key`), its documented default and where it is.

/// One documented key.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// `section.key` (`stream.spool_max_bytes`); a key of no section alone.
    pub key: String,
    /// The first `` `value` `` of the default column, if it has one.
    pub default: Option<String>,
    /// The flag column's text, if the table has one.
    pub flag: Option<String>,
    /// The file (as given) and 1-based line of the row.
    pub file: String,
    pub line: usize,
}

/// The rows of every key table in `text`. A table is a header row whose
/// first cell is `key`; a first cell may name several keys
/// (`` `nvme.p50_ms` / `nvme.p99_ms` `` with `` `0.2` / `2` ``).
pub fn rows(file: &str, text: &str) -> Vec<Row> {
    let mut out = Vec::new();
    // (heading level, section it names) of the headings above.
    let mut headings: Vec<(usize, Option<String>)> = Vec::new();
    let mut introduced: Option<String> = None;
    // Outside a table: None; in a key table: Some(its default column);
    // in another table: Some(Some(usize::MAX)), whose rows are skipped.
    let mut default_col: Option<Option<usize>> = None;
    let mut flag_col: Option<usize> = None;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if let Some(level) = heading_level(t) {
            headings.retain(|(l, _)| *l < level);
            headings.push((level, last_section(t)));
            introduced = None;
            default_col = None;
            continue;
        }
        if !t.starts_with('|') {
            default_col = None;
            if let Some(s) = last_section(t) {
                introduced = Some(s);
            }
            continue;
        }
        let cells = cells(t);
        match default_col {
            None => {
                if cells.first().map(String::as_str) == Some("key") {
                    default_col = Some(cells.iter().position(|c| c == "default"));
                    flag_col = cells.iter().position(|c| c == "flag");
                } else {
                    default_col = Some(Some(OTHER));
                }
                continue;
            }
            Some(Some(OTHER)) => continue,
            Some(col) => {
                if cells.first().is_none_or(|c| c.starts_with("---")) {
                    continue;
                }
                // The nearest heading's, else the introducing line's,
                // else the section of a heading above.
                let section = headings
                    .last()
                    .and_then(|(_, s)| s.clone())
                    .or_else(|| introduced.clone())
                    .or_else(|| headings.iter().rev().find_map(|(_, s)| s.clone()));
                let names = ticked(&cells[0]);
                if names.is_empty() {
                    continue;
                }
                let defaults = col
                    .and_then(|c| cells.get(c))
                    .map(|c| ticked(c))
                    .unwrap_or_default();
                for (n, name) in names.iter().enumerate() {
                    let default = if names.len() == 1 {
                        defaults.first()
                    } else {
                        defaults.get(n).filter(|_| defaults.len() == names.len())
                    };
                    out.push(Row {
                        key: match &section {
                            Some(s) => format!("{s}.{name}"),
                            None => name.clone(),
                        },
                        default: default.cloned(),
                        flag: flag_col.and_then(|c| cells.get(c)).cloned(),
                        file: file.to_string(),
                        line: i + 1,
                    });
                }
            }
        }
    }
    out
}

/// The "default column" of a table that is not a key table.
const OTHER: usize = usize::MAX;

fn heading_level(line: &str) -> Option<usize> {
    let level = line.chars().take_while(|&c| c == '#').count();
    (level > 0 && line[level..].starts_with(' ')).then_some(level)
}

/// The last `` `[a.b]` `` a line names, as `a.b`.
fn last_section(line: &str) -> Option<String> {
    ticked(line)
        .into_iter()
        .filter_map(|t| Some(t.strip_prefix('[')?.strip_suffix(']')?.to_string()))
        .rfind(|s| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._".contains(c))
        })
}

/// A table row's cells, trimmed.
fn cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    inner.split('|').map(|c| c.trim().to_string()).collect()
}

/// The `` `…` `` spans of a text, in order.
fn ticked(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_come_from_headings_or_the_introducing_line() {
        let doc = "\
# Storage — `[detect.storage]`

| key | unit | default | anchor |
|---|---|---|---|
| `min_peers` | devices | `4` | as for links |
| `nvme.p50_ms` / `nvme.p99_ms` | ms | `0.2` / `2` | NVMe |

### Sub heading without a section

| key | default |
|---|---|
| `hold_s` | unset |

## Bounded state

All keys live under `[detect.limits]`:

| key | default | bounds |
|---|---|---|
| `max_hosts` | `100000` | hosts |

| # | rule |
|---|---|
| `1` | not a key table |
";
        let got: Vec<_> = rows("d.md", doc)
            .into_iter()
            .map(|r| (r.key, r.default, r.line))
            .collect();
        let s = |x: &str| Some(x.to_string());
        assert_eq!(
            got,
            [
                ("detect.storage.min_peers".to_string(), s("4"), 5),
                ("detect.storage.nvme.p50_ms".to_string(), s("0.2"), 6),
                ("detect.storage.nvme.p99_ms".to_string(), s("2"), 6),
                ("detect.storage.hold_s".to_string(), None, 12),
                ("detect.limits.max_hosts".to_string(), s("100000"), 20),
            ]
        );
    }
}
