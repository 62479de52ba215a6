//! Finds the metric names a crate's sources spell as string literals, so a
//! test can require each to be declared in the crate's catalog.
use std::{fs, io, path::Path};

use super::Family;

/// Every `"faultline_…"` string literal under `dir` (`.rs` files, walked
/// recursively) that names no family in `families` and is not in
/// `not_metrics` (bucket or stream names that share the prefix), as
/// `path:line: name`. A literal ending in `_` is a prefix, not a name.
pub fn undeclared(
    dir: &Path,
    families: &[&Family],
    not_metrics: &[&str],
) -> io::Result<Vec<String>> {
    let mut out = Vec::new();
    walk(dir, &mut |path, text| {
        for (n, line) in text.lines().enumerate() {
            for name in names(line) {
                let known = families.iter().any(|f| f.name == name) || not_metrics.contains(&name);
                if !known {
                    out.push(format!("{}:{}: {name}", path.display(), n + 1));
                }
            }
        }
    })?;
    out.sort();
    Ok(out)
}

/// The `"faultline_[a-z0-9_]+"` literals of one line (prefixes left out).
pub fn names(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("\"faultline_") {
        let body = &rest[at + 1..];
        let len = body
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(body.len());
        let name = &body[..len];
        if body[len..].starts_with('"') && !name.ends_with('_') {
            out.push(name);
        }
        rest = &body[len..];
    }
    out
}

fn walk(dir: &Path, f: &mut dyn FnMut(&Path, &str)) -> io::Result<()> {
    let mut entries: Vec<_> = fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.path());
    for e in entries {
        let path = e.path();
        if e.file_type()?.is_dir() {
            walk(&path, f)?;
        } else if path.extension().is_some_and(|x| x == "rs") {
            f(&path, &fs::read_to_string(&path)?);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_are_found_and_prefixes_skipped() {
        let line = r#"counter!("faultline_a_total", "x" => "faultline_b"); format!("faultline_c_{n}"); "faultline_d_" "Faultline_e""#;
        assert_eq!(names(line), vec!["faultline_a_total", "faultline_b"]);
    }

    #[test]
    fn an_undeclared_literal_is_reported() {
        let dir = std::env::temp_dir().join(format!("faultline-literals-{}", std::process::id()));
        fs::create_dir_all(dir.join("sub")).expect("temp dir");
        fs::write(
            dir.join("sub/a.rs"),
            "let _ = \"faultline_known_total\";\nlet _ = \"faultline_new_total\";\n",
        )
        .expect("write");
        fs::write(dir.join("b.txt"), "\"faultline_not_rust\"").expect("write");
        const KNOWN: Family = Family::counter("faultline_known_total", &[], "k");
        let out = undeclared(&dir, &[&KNOWN], &[]).expect("scan");
        assert_eq!(out.len(), 1, "{out:?}");
        assert!(
            out[0].ends_with("sub/a.rs:2: faultline_new_total"),
            "{out:?}"
        );
        assert!(undeclared(&dir, &[&KNOWN], &["faultline_new_total"])
            .expect("scan")
            .is_empty());
        let _ = fs::remove_dir_all(&dir);
    }
}
