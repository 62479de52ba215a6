//! Reads docs/metrics.md's tables (first column `metric` or `name`: the
//! family names in backticks, then `type` and `labels` columns) and says
//! where they and the declared families disagree, either way.
use std::collections::{BTreeMap, BTreeSet};

use super::Family;

/// One table row: its names, its type and its labels as written.
#[derive(Debug)]
struct Row {
    line: usize,
    names: Vec<String>,
    patterns: Vec<String>,
    kind: Option<String>,
    labels: Option<Labels>,
}

#[derive(Debug)]
enum Labels {
    Set(BTreeSet<String>),
    /// "as `other_family`, + `extra`".
    As(String, BTreeSet<String>),
}

/// Every disagreement between `families` and the metric tables of
/// `markdown`: a family declared but not documented, documented but not
/// declared, or documented with another type or label set. Empty when they
/// agree. Names with `…`, `*` or `<…>` in the docs are patterns: they
/// document the declared families they match and need no declaration.
pub fn check_docs(families: &[&Family], markdown: &str) -> Vec<String> {
    let rows = rows(markdown);
    let declared: BTreeMap<&str, &Family> = families.iter().map(|f| (f.name, *f)).collect();
    let mut out = Vec::new();
    let mut documented: BTreeSet<&str> = BTreeSet::new();
    for row in &rows {
        for name in &row.names {
            let Some(f) = declared.get(name.as_str()) else {
                out.push(format!(
                    "documented but not declared: {name} (docs line {})",
                    row.line
                ));
                continue;
            };
            documented.insert(f.name);
            let Some(kind) = &row.kind else { continue };
            if kind != f.kind.as_str() {
                out.push(format!(
                    "type mismatch: {name} is declared {} but documented {kind} (docs line {})",
                    f.kind.as_str(),
                    row.line
                ));
            }
            if let Some(doc) = resolve(&rows, row, 0) {
                let decl: BTreeSet<String> = f.labels.iter().map(|l| l.to_string()).collect();
                if doc != decl {
                    out.push(format!(
                        "label mismatch: {name} is declared with {decl:?} but documented with {doc:?} (docs line {})",
                        row.line
                    ));
                }
            }
        }
    }
    for f in families {
        let by_pattern = rows
            .iter()
            .flat_map(|r| &r.patterns)
            .any(|p| glob(p, f.name));
        if !documented.contains(f.name) && !by_pattern {
            out.push(format!("declared but not documented: {}", f.name));
        }
    }
    out
}

/// A row's label set, following "as `other`" references (not in circles).
fn resolve(rows: &[Row], row: &Row, depth: usize) -> Option<BTreeSet<String>> {
    match row.labels.as_ref()? {
        Labels::Set(s) => Some(s.clone()),
        Labels::As(other, extra) => {
            let target = rows.iter().find(|r| r.names.iter().any(|n| n == other))?;
            if depth > 8 {
                return None;
            }
            let mut s = resolve(rows, target, depth + 1)?;
            s.extend(extra.iter().cloned());
            Some(s)
        }
    }
}

/// The text from the line starting with `heading` to the next heading of
/// the same level (empty when there is none).
pub fn section<'a>(markdown: &'a str, heading: &str) -> &'a str {
    let (start, end) = bounds(markdown, heading);
    &markdown[start..end]
}

/// `markdown` without [`section`]`(markdown, heading)`.
pub fn without_section(markdown: &str, heading: &str) -> String {
    let (start, end) = bounds(markdown, heading);
    format!("{}{}", &markdown[..start], &markdown[end..])
}

fn bounds(markdown: &str, heading: &str) -> (usize, usize) {
    let level = heading.chars().take_while(|c| *c == '#').count();
    let mut offset = 0;
    let mut start = None;
    for line in markdown.split_inclusive('\n') {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if let Some(s) = start {
            if hashes > 0 && hashes <= level && line[hashes..].starts_with(' ') {
                return (s, offset);
            }
        } else if line.starts_with(heading) {
            start = Some(offset);
        }
        offset += line.len();
    }
    match start {
        Some(s) => (s, markdown.len()),
        None => (markdown.len(), markdown.len()),
    }
}

fn cells(line: &str) -> Vec<&str> {
    let t = line.trim();
    let t = t.strip_prefix('|').unwrap_or(t);
    let t = t.strip_suffix('|').unwrap_or(t);
    t.split('|').map(str::trim).collect()
}

fn rows(markdown: &str) -> Vec<Row> {
    let lines: Vec<&str> = markdown.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i + 1 < lines.len() {
        let head = cells(lines[i]);
        let sep = lines[i + 1].trim_start();
        let is_table = lines[i].trim_start().starts_with('|')
            && (sep.starts_with("|-") || sep.starts_with("| -"));
        if !is_table || !matches!(head.first(), Some(&"metric") | Some(&"name")) {
            i += 1;
            continue;
        }
        let type_col = head.iter().position(|c| *c == "type");
        let labels_col = head.iter().position(|c| *c == "labels");
        i += 2;
        while i < lines.len() && lines[i].trim_start().starts_with('|') {
            let c = cells(lines[i]);
            out.push(row(i + 1, &c, type_col, labels_col));
            i += 1;
        }
    }
    out
}

fn row(line: usize, c: &[&str], type_col: Option<usize>, labels_col: Option<usize>) -> Row {
    let mut names = Vec::new();
    let mut patterns = Vec::new();
    let mut last_full: Option<String> = None;
    for (tok, depth) in tokens(c.first().copied().unwrap_or("")) {
        if depth > 0 {
            continue;
        }
        let name = match (tok.strip_prefix('_'), &last_full) {
            (Some(_), Some(base)) => expand(base, &tok),
            _ => tok.clone(),
        };
        if name.contains(['…', '*', '<']) {
            patterns.push(name);
        } else if name.starts_with("faultline_") {
            if !tok.starts_with('_') {
                last_full = Some(name.clone());
            }
            names.push(name);
        }
    }
    let kind = type_col
        .and_then(|t| c.get(t))
        .and_then(|t| t.split([' ', '(']).next())
        .filter(|t| !t.is_empty())
        .map(str::to_string);
    let labels = labels_col.and_then(|l| c.get(l)).map(|cell| labels(cell));
    Row {
        line,
        names,
        patterns,
        kind,
        labels,
    }
}

/// `base` with the segment before the tail it shares with `suffix`
/// replaced by the rest of `suffix` (`…_replay_errors_total` and
/// `_crc_flit_errors_total`, `…_transmitted_bytes_total` and
/// `_received_bytes_total`).
fn expand(base: &str, suffix: &str) -> String {
    let b: Vec<&str> = base.split('_').collect();
    let s: Vec<&str> = suffix.split('_').skip(1).collect();
    let common = b
        .iter()
        .rev()
        .zip(s.iter().rev())
        .take_while(|(x, y)| x == y)
        .count()
        .min(s.len().saturating_sub(1));
    let keep = b.len().saturating_sub(common + 1);
    let mut out: Vec<&str> = b[..keep].to_vec();
    out.extend(&s);
    out.join("_")
}

fn labels(cell: &str) -> Labels {
    let cell = cell.trim();
    let mut set = BTreeSet::new();
    let toks = label_tokens(cell);
    if let Some(rest) = cell.strip_prefix("as ") {
        let mut it = tokens(rest).into_iter().map(|t| t.0);
        let other = it.next().unwrap_or_default();
        set.extend(toks.into_iter().filter(|t| *t != other));
        return Labels::As(other, set);
    }
    set.extend(toks);
    Labels::Set(set)
}

/// Backticked tokens outside parentheses, and those in a "(+ `a`, `b`
/// when …)" group before its "when".
fn label_tokens(cell: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut plus = false;
    let mut when = false;
    let mut rest = cell;
    while let Some(c) = rest.chars().next() {
        match c {
            '`' => {
                let body = &rest[1..];
                let end = body.find('`').unwrap_or(body.len());
                if depth == 0 || (depth == 1 && plus && !when) {
                    out.push(body[..end].to_string());
                }
                rest = body.get(end + 1..).unwrap_or("");
                continue;
            }
            '(' => {
                depth += 1;
                if depth == 1 {
                    plus = rest[1..].trim_start().starts_with('+');
                    when = false;
                }
            }
            ')' => depth = depth.saturating_sub(1),
            'w' if depth == 1 && rest.starts_with("when ") => when = true,
            _ => {}
        }
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// Backticked tokens with the parenthesis depth they stand at.
fn tokens(cell: &str) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut rest = cell;
    while let Some(c) = rest.chars().next() {
        match c {
            '`' => {
                let body = &rest[1..];
                let end = body.find('`').unwrap_or(body.len());
                out.push((body[..end].to_string(), depth));
                rest = body.get(end + 1..).unwrap_or("");
                continue;
            }
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            _ => {}
        }
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// Whether `name` matches `pattern`, whose `…`, `*` and `<…>` stand for
/// any text.
fn glob(pattern: &str, name: &str) -> bool {
    let mut parts = Vec::new();
    let mut cur = String::new();
    let mut in_angle = false;
    for c in pattern.chars() {
        match c {
            '<' => in_angle = true,
            '>' if in_angle => {
                in_angle = false;
                parts.push(std::mem::take(&mut cur));
            }
            _ if in_angle => {}
            '…' | '*' => parts.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    parts.push(cur);
    let (first, rest) = parts
        .split_first()
        .map_or(("", &[][..]), |(f, r)| (f.as_str(), r));
    let Some(mut tail) = name.strip_prefix(first) else {
        return false;
    };
    if rest.is_empty() {
        return tail.is_empty();
    }
    for (i, p) in rest.iter().enumerate() {
        if i == rest.len() - 1 {
            return tail.ends_with(p.as_str());
        }
        match tail.find(p.as_str()) {
            Some(at) => tail = &tail[at + p.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests;
