//! The layout check's allow-list: files and functions that stay over a
//! limit, each with the reason.
//!
//! One entry a line, `#` starts a comment:
//!
//! ```text
//! file PATH -- reason
//! fn PATH NAME -- reason
//! circle FOLDER MODULE MODULE... -- reason
//! ```
//!
//! `PATH` is relative to the workspace root; `fn` entries name every
//! function called `NAME` in that file. A `circle` entry names a folder as
//! the check prints it (`collector/src/nvml`) and the modules of one circle
//! in it, sorted (`dcgm prom`); it allows exactly that circle.
use std::{collections::BTreeMap, path::Path};

use anyhow::{bail, Context as _, Result};

#[derive(Debug, Default)]
pub struct AllowList(BTreeMap<String, String>);

impl AllowList {
    /// The list in `path`; empty when there is no such file.
    pub fn load(path: &Path) -> Result<Self> {
        match std::fs::read_to_string(path) {
            Ok(text) => Self::parse(&text).with_context(|| format!("in {}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }

    pub fn parse(text: &str) -> Result<Self> {
        let mut out = BTreeMap::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let Some((key, reason)) = line.split_once(" -- ") else {
                bail!(
                    "line {}: `{line}` has no reason (`file PATH -- reason`, `fn PATH NAME -- reason`, \
                     `circle FOLDER MODULE MODULE... -- reason`)",
                    n + 1
                );
            };
            let words: Vec<&str> = key.split_whitespace().collect();
            let well_formed = matches!(words.as_slice(), ["file", _] | ["fn", _, _])
                || (words.first() == Some(&"circle") && words.len() >= 4);
            if !well_formed || reason.trim().is_empty() {
                bail!(
                    "line {}: `{line}`: expected `file PATH -- reason`, `fn PATH NAME -- reason` \
                     or `circle FOLDER MODULE MODULE... -- reason`",
                    n + 1
                );
            }
            out.insert(words.join(" "), reason.trim().to_string());
        }
        Ok(Self(out))
    }

    /// Why `key` (`file PATH`, `fn PATH NAME`, `circle FOLDER MODULES...`)
    /// may stay.
    pub fn reason(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.0.keys()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_need_a_kind_a_path_and_a_reason() {
        let a = AllowList::parse(
            "# comment\n\nfile a/src/x.rs -- a generated table # trailing\nfn  a/src/y.rs  run -- one match\n\
             circle c/src/nvml dcgm prom -- being broken (owner)\n",
        )
        .expect("parses");
        assert_eq!(a.reason("file a/src/x.rs"), Some("a generated table"));
        assert_eq!(a.reason("fn a/src/y.rs run"), Some("one match"));
        assert_eq!(
            a.reason("circle c/src/nvml dcgm prom"),
            Some("being broken (owner)")
        );
        assert_eq!(a.keys().count(), 3);
        for bad in [
            "file a/src/x.rs",
            "fn a/src/y.rs -- no name",
            "file x -- ",
            "dir x -- r",
            "circle c/src/nvml dcgm -- one module is no circle",
        ] {
            let e = AllowList::parse(bad).expect_err(bad);
            assert!(format!("{e}").starts_with("line 1: "), "{e}");
        }
    }
}
