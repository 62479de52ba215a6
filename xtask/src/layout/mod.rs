//! `cargo xtask layout`: the workspace's shape, checked.
//!
//! - No import circle between the top-level modules of a crate target
//!   (the collector's and the correlator's library and binary): each
//!   strongly connected component of more than one module is reported with
//!   its edges and where each one is first named ([`circles`]).
//! - No Rust file over [`MAX_FILE_LINES`] lines outside test-only items, and
//!   no function over [`MAX_FN_LINES`] lines, in the workspace's crates
//!   (`tests/` directories, test-only modules and generated files aside;
//!   [`length`]).
//!
//! A file or function that has to stay over a limit is listed in
//! [`ALLOW_FILE`] with the reason. Either kind of finding fails the check.
use std::{
    collections::BTreeSet,
    fs,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context as _, Result};

mod allow;
mod circles;
mod length;
mod lex;

use allow::AllowList;

pub const MAX_FILE_LINES: usize = 600;
pub const MAX_FN_LINES: usize = 120;
/// The allow-list, relative to the workspace root.
pub const ALLOW_FILE: &str = "xtask/layout-allow.txt";
/// Crates whose top-level modules must not import each other in a circle.
const LAYERED: &[&str] = &["collector", "correlator"];

/// One Rust file of a crate.
struct Source {
    /// Relative to the workspace root, `/`-separated.
    rel: String,
    path: PathBuf,
    text: String,
}

pub fn run() -> Result<()> {
    let root = super::workspace_root();
    let allow = AllowList::load(&root.join(ALLOW_FILE))?;
    let mut problems = 0;

    println!("layout: import circles between top-level modules");
    for name in LAYERED {
        let src = root.join(name).join("src");
        for target in ["lib.rs", "main.rs"] {
            if !src.join(target).exists() {
                continue;
            }
            let found = target_circles(&root, &src, target)?;
            let what = format!("{name} ({})", target.trim_end_matches(".rs"));
            if found.is_empty() {
                println!("  {what}: none");
            }
            for c in &found {
                problems += 1;
                println!("  {what}: CIRCLE {}", c.modules.join(" "));
                for (from, to, site) in &c.edges {
                    println!("      {from} -> {to}  ({}:{})", site.file, site.line);
                }
            }
        }
    }

    println!("layout: files over {MAX_FILE_LINES} lines, functions over {MAX_FN_LINES} lines");
    let mut used = BTreeSet::new();
    let mut over = 0;
    for dir in member_dirs(&root)? {
        for s in crate_sources(&root, &dir)? {
            for finding in lengths(&s) {
                match allow.reason(&finding.key) {
                    Some(reason) => {
                        used.insert(finding.key.clone());
                        println!("  allowed {}  ({reason})", finding.text);
                    }
                    None => {
                        over += 1;
                        println!("  {}", finding.text);
                    }
                }
            }
        }
    }
    if over == 0 {
        println!("  none");
    }
    problems += over;
    for stale in allow.keys().filter(|k| !used.contains(*k)) {
        println!("  note: {ALLOW_FILE}: `{stale}` is within the limits now; remove the entry");
    }
    if problems > 0 {
        bail!(
            "layout: {problems} problem(s): break each circle, split each file or function \
             (or list it in {ALLOW_FILE} with the reason it must stay)"
        );
    }
    println!("layout: ok");
    Ok(())
}

/// A file or function over its limit.
struct Finding {
    /// Its allow-list key: `file PATH` or `fn PATH NAME`.
    key: String,
    text: String,
}

fn lengths(s: &Source) -> Vec<Finding> {
    let p = lex::parse(&s.text);
    let mut out = Vec::new();
    if p.code_lines() > MAX_FILE_LINES {
        out.push(Finding {
            key: format!("file {}", s.rel),
            text: format!("FILE {}: {} lines (non-test)", s.rel, p.code_lines()),
        });
    }
    for f in length::functions(&p) {
        if f.lines > MAX_FN_LINES {
            out.push(Finding {
                key: format!("fn {} {}", s.rel, f.name),
                text: format!("FN {}:{} {}: {} lines", s.rel, f.line, f.name, f.lines),
            });
        }
    }
    out
}

/// The circles of the crate target rooted at `src/<target>`: its modules
/// are those the root file declares; each one's files are `src/<m>.rs` and
/// everything under `src/<m>/`.
fn target_circles(root: &Path, src: &Path, target: &str) -> Result<Vec<circles::Circle>> {
    let root_text = read(&src.join(target))?;
    let declared = top_level_mods(&lex::parse(&root_text));
    let mut graph = circles::Graph::new(declared.iter().cloned());
    let sources = crate_sources(root, src)?;
    for s in &sources {
        let Ok(rel) = s.path.strip_prefix(src) else {
            continue;
        };
        let parts: Vec<&str> = rel.iter().filter_map(|p| p.to_str()).collect();
        let Some(first) = parts.first() else { continue };
        let module = first.trim_end_matches(".rs");
        if !declared.contains(module) {
            continue;
        }
        // `a.rs`, `a/mod.rs`: depth 1; `a/b.rs`, `a/b/mod.rs`: 2; …
        let depth = parts.len() - usize::from(parts.last() == Some(&"mod.rs"));
        let p = lex::parse(&s.text);
        graph.add_file(module, depth.max(1), &s.rel, &p.tokens);
    }
    Ok(graph.circles())
}

/// `mod x;` / `mod x { … }` declared at the top of a crate root.
fn top_level_mods(p: &lex::Parsed<'_>) -> BTreeSet<String> {
    let mut depth = 0usize;
    let mut out = BTreeSet::new();
    for (i, t) in p.tokens.iter().enumerate() {
        match t.tok {
            lex::Tok::Punct('{') => depth += 1,
            lex::Tok::Punct('}') => depth = depth.saturating_sub(1),
            lex::Tok::Ident("mod") if depth == 0 => {
                if let Some(lex::Tok::Ident(name)) = p.tokens.get(i + 1).map(|t| t.tok) {
                    out.insert(name.to_string());
                }
            }
            _ => {}
        }
    }
    out
}

/// The workspace members' directories (`cargo metadata`).
fn member_dirs(root: &Path) -> Result<Vec<PathBuf>> {
    let mut c = super::cargo();
    c.current_dir(root)
        .args(["metadata", "--no-deps", "--format-version", "1"]);
    let out = c.output().context("running cargo metadata")?;
    if !out.status.success() {
        bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("parsing cargo metadata's output")?;
    let mut dirs: Vec<PathBuf> = v["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["manifest_path"].as_str())
        .filter_map(|m| Path::new(m).parent().map(Path::to_path_buf))
        .collect();
    dirs.sort();
    Ok(dirs)
}

/// The Rust files under `dir` that are code of the crate: not in `tests/`,
/// `target/`, hidden or nested-crate directories, not generated, not a
/// test-only module's file (`#[cfg(test)] mod x;`, `tests.rs`, `*_tests.rs`).
fn crate_sources(root: &Path, dir: &Path) -> Result<Vec<Source>> {
    let mut files = Vec::new();
    walk(dir, dir, &mut files)?;
    files.sort();
    let mut sources = Vec::new();
    let mut test_only: Vec<PathBuf> = Vec::new();
    for path in files {
        let text = read(&path)?;
        let p = lex::parse(&text);
        for m in &p.test_mods {
            let base = module_dir(&path);
            test_only.push(base.join(format!("{m}.rs")));
            test_only.push(base.join(m));
        }
        let rel = path
            .strip_prefix(root)
            .unwrap_or(&path)
            .iter()
            .filter_map(|p| p.to_str())
            .collect::<Vec<_>>()
            .join("/");
        sources.push(Source { rel, path, text });
    }
    sources.retain(|s| {
        let name = s.path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        name != "tests.rs"
            && !name.ends_with("_tests.rs")
            && !generated(&s.text)
            && !test_only.iter().any(|t| s.path.starts_with(t))
    });
    Ok(sources)
}

/// The directory a file's child modules live in.
fn module_dir(file: &Path) -> PathBuf {
    let parent = file.parent().unwrap_or(Path::new("."));
    match file.file_name().and_then(|n| n.to_str()) {
        Some("mod.rs" | "lib.rs" | "main.rs" | "build.rs") | None => parent.to_path_buf(),
        Some(n) => parent.join(n.trim_end_matches(".rs")),
    }
}

fn walk(top: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let entries = fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))?;
    for e in entries {
        let e = e.with_context(|| format!("listing {}", dir.display()))?;
        let path = e.path();
        let name = e.file_name();
        let name = name.to_str().unwrap_or("");
        let kind = e
            .file_type()
            .with_context(|| format!("reading {}", path.display()))?;
        if kind.is_dir() {
            let nested_crate = path != top && path.join("Cargo.toml").exists();
            if !(name.starts_with('.') || name == "target" || name == "tests" || nested_crate) {
                walk(top, &path, out)?;
            }
        } else if kind.is_file() && name.ends_with(".rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// Marked as generated in its first lines.
fn generated(text: &str) -> bool {
    text.lines()
        .take(5)
        .any(|l| l.contains("@generated") || l.contains("DO NOT EDIT"))
}

fn read(p: &Path) -> Result<String> {
    fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// Findings by allow-list key.
    fn findings(rel: &str, text: &str) -> BTreeMap<String, String> {
        lengths(&Source {
            rel: rel.into(),
            path: rel.into(),
            text: text.into(),
        })
        .into_iter()
        .map(|f| (f.key, f.text))
        .collect()
    }

    #[test]
    fn a_long_file_and_function_are_findings_under_their_keys() {
        let mut src = String::from("fn big() {\n");
        for _ in 0..130 {
            src.push_str("    step();\n");
        }
        src.push_str("}\n");
        for k in 0..480 {
            src.push_str(&format!("fn f{k}() {{}}\n"));
        }
        let f = findings("c/src/x.rs", &src);
        assert_eq!(
            f.keys().collect::<Vec<_>>(),
            ["file c/src/x.rs", "fn c/src/x.rs big"]
        );
        assert_eq!(
            f["file c/src/x.rs"],
            "FILE c/src/x.rs: 612 lines (non-test)"
        );
        assert_eq!(f["fn c/src/x.rs big"], "FN c/src/x.rs:1 big: 132 lines");
    }

    #[test]
    fn crate_roots_declare_the_top_level_modules() {
        let p = lex::parse(
            "pub mod a;\n#[cfg(feature = \"x\")]\nmod b;\n#[cfg(test)]\nmod tests;\nmod c { mod d {} }\n",
        );
        let m: Vec<String> = top_level_mods(&p).into_iter().collect();
        assert_eq!(m, ["a", "b", "c"]);
    }

    #[test]
    fn child_modules_live_beside_mod_rs_and_under_a_named_file() {
        assert_eq!(module_dir(Path::new("s/a/mod.rs")), Path::new("s/a"));
        assert_eq!(module_dir(Path::new("s/lib.rs")), Path::new("s"));
        assert_eq!(module_dir(Path::new("s/a/b.rs")), Path::new("s/a/b"));
    }
}
