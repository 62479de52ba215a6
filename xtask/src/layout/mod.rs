//! `cargo xtask layout`: the workspace's shape, checked.
//!
//! - No import circle between sibling modules of any crate target of the
//!   workspace: the top-level modules of a library or binary, and the child
//!   modules of every folder module (`src/nvml/`, `src/history/store/`,
//!   inline `mod x { … }`). Each strongly connected component of more than
//!   one module is reported as a cycle (`collector/src/nvml: dcgm -> prom ->
//!   dcgm`) with its edges and where each one is first named ([`circles`]).
//! - No Rust file over [`MAX_FILE_LINES`] lines outside test-only items, and
//!   no function over [`MAX_FN_LINES`] lines, in the workspace's crates
//!   (`tests/` directories, test-only modules and generated files aside;
//!   [`length`]).
//!
//! A file or function that has to stay over a limit, or a circle that has
//! to stay for now, is listed in [`ALLOW_FILE`] with the reason. Either kind of finding fails the check.
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
    let mut crates = Vec::new();
    for dir in member_dirs(&root)? {
        let sources = crate_sources(&root, &dir)?;
        crates.push((dir, sources));
    }
    let mut used = BTreeSet::new();

    println!("layout: import circles between sibling modules (crate roots and folders)");
    let mut problems = 0;
    for (dir, sources) in &crates {
        for found in crate_circles(&root, dir, sources)? {
            let c = &found.circle;
            let key = format!("circle {} {}", found.folder, c.modules.join(" "));
            let verdict = match allow.reason(&key) {
                Some(reason) => {
                    used.insert(key.clone());
                    format!("allowed ({reason})")
                }
                None => {
                    problems += 1;
                    "CIRCLE".to_string()
                }
            };
            println!("  {verdict} {}: {}", found.folder, c.cycle_text());
            if c.modules.len() + 1 > c.cycle.len() {
                println!("      (one circle of: {})", c.modules.join(" "));
            }
            for (from, to, site) in &c.edges {
                println!("      {from} -> {to}  ({}:{})", site.file, site.line);
            }
        }
    }
    if problems == 0 {
        println!("  none");
    }

    println!("layout: files over {MAX_FILE_LINES} lines, functions over {MAX_FN_LINES} lines");
    let mut over = 0;
    for s in crates.iter().flat_map(|(_, sources)| sources) {
        for finding in lengths(s) {
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
    if over == 0 {
        println!("  none");
    }
    problems += over;
    for stale in allow.keys().filter(|k| !used.contains(*k)) {
        println!("  note: {ALLOW_FILE}: `{stale}` is no longer found; remove the entry");
    }
    if problems > 0 {
        bail!(
            "layout: {problems} problem(s). A circle: move what both sides need into a module \
             of its own that both import (or up into the folder's mod.rs), or hand it in as a \
             parameter or trait, so the imports run one way. A long file or function: split it. \
             (Or list it in {ALLOW_FILE} with the reason it must stay.)"
        );
    }
    println!("layout: ok");
    Ok(())
}

/// A circle of one crate target, with the folder it is in.
struct FoundCircle {
    /// `crate/src/a/b` (with ` (bin)` for a binary target beside a library).
    folder: String,
    circle: circles::Circle,
}

/// The circles of each target (`src/lib.rs`, `src/main.rs`) of the crate
/// in `dir`.
fn crate_circles(root: &Path, dir: &Path, sources: &[Source]) -> Result<Vec<FoundCircle>> {
    let src = dir.join("src");
    let rel_src = rel_path(root, &src);
    let mut out = Vec::new();
    for target in ["lib.rs", "main.rs"] {
        if !src.join(target).exists() {
            continue;
        }
        let bin_beside_lib = target == "main.rs" && src.join("lib.rs").exists();
        for circle in target_circles(&src, target, sources)? {
            let mut folder = [rel_src.as_str()]
                .into_iter()
                .chain(circle.folder.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join("/");
            if bin_beside_lib {
                folder.push_str(" (bin)");
            }
            out.push(FoundCircle { folder, circle });
        }
    }
    Ok(out)
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
fn target_circles(src: &Path, target: &str, sources: &[Source]) -> Result<Vec<circles::Circle>> {
    let root_text = read(&src.join(target))?;
    let declared = top_level_mods(&lex::parse(&root_text));
    let mut graph = circles::Graph::default();
    for s in sources {
        let Ok(rel) = s.path.strip_prefix(src) else {
            continue;
        };
        let parts: Vec<&str> = rel.iter().filter_map(|p| p.to_str()).collect();
        let Some(module) = module_path(&parts) else {
            continue;
        };
        let own = match module.first() {
            None => parts == [target],
            Some(first) => declared.contains(*first),
        };
        if own {
            graph.add_file(&module, &s.rel, &lex::parse(&s.text).tokens);
        }
    }
    Ok(graph.circles())
}

/// The module path of the file at `parts` below `src/`: `a.rs` and
/// `a/mod.rs` are `a`, `a/b.rs` is `a::b`, a crate root `[]`.
fn module_path<'a>(parts: &[&'a str]) -> Option<Vec<&'a str>> {
    let (last, dirs) = parts.split_last()?;
    let mut m = dirs.to_vec();
    match *last {
        "mod.rs" => {}
        "lib.rs" | "main.rs" if dirs.is_empty() => {}
        name => m.push(name.strip_suffix(".rs")?),
    }
    Some(m)
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
        let rel = rel_path(root, &path);
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

/// `path` relative to `root`, `/`-separated.
fn rel_path(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .iter()
        .filter_map(|p| p.to_str())
        .collect::<Vec<_>>()
        .join("/")
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

    /// A crate `c` in a fresh directory under the temp dir, with `files`
    /// under `c/src/`; its circles as `FOLDER: CYCLE`.
    fn tree_circles(name: &str, files: &[(&str, &str)]) -> Vec<String> {
        let root = std::env::temp_dir().join(format!("xtask-layout-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        for (path, text) in files {
            let p = root.join("c/src").join(path);
            fs::create_dir_all(p.parent().expect("has a parent")).expect("mkdir");
            fs::write(&p, text).expect("write");
        }
        let dir = root.join("c");
        let sources = crate_sources(&root, &dir).expect("sources");
        let found = crate_circles(&root, &dir, &sources).expect("circles");
        fs::remove_dir_all(&root).expect("clean up");
        found
            .iter()
            .map(|f| format!("{}: {}", f.folder, f.circle.cycle_text()))
            .collect()
    }

    #[test]
    fn a_circle_in_a_folder_of_a_tree_on_disk_is_found_and_one_way_passes() {
        let lib = "pub mod nvml;\npub mod stream;\n";
        let files = [
            ("lib.rs", lib),
            // `nvml.rs` beside `nvml/`; a test module's import makes no edge.
            ("nvml.rs", "mod dcgm;\nmod prom;\n"),
            ("nvml/dcgm.rs", "use super::prom::Family;\n"),
            ("nvml/prom.rs", "use crate::nvml::dcgm::Field;\n"),
            (
                "stream/mod.rs",
                "mod nats;\nmod sender;\n#[cfg(test)]\nmod tests;\n",
            ),
            ("stream/nats.rs", "use super::sender::Sender;\n"),
            ("stream/sender.rs", "pub struct Sender;\n"),
            (
                "stream/tests.rs",
                "use super::nats::*;\nuse crate::stream::sender::*;\n",
            ),
        ];
        assert_eq!(
            tree_circles("circle", &files),
            ["c/src/nvml: dcgm -> prom -> dcgm"]
        );
        let mut one_way = files;
        one_way[3].1 = "pub struct Field;\n";
        assert_eq!(tree_circles("one-way", &one_way), Vec::<String>::new());
    }

    #[test]
    fn a_file_and_its_folder_are_one_module() {
        fn m(p: &str) -> Option<Vec<&str>> {
            module_path(&p.split('/').collect::<Vec<_>>())
        }
        assert_eq!(m("lib.rs"), Some(vec![]));
        assert_eq!(m("a.rs"), Some(vec!["a"]));
        assert_eq!(m("a/mod.rs"), Some(vec!["a"]));
        assert_eq!(m("a/b.rs"), Some(vec!["a", "b"]));
        assert_eq!(m("a/b/mod.rs"), Some(vec!["a", "b"]));
        assert_eq!(m("a/lib.rs"), Some(vec!["a", "lib"]));
        assert_eq!(m("a/notes.txt"), None);
    }

    #[test]
    fn child_modules_live_beside_mod_rs_and_under_a_named_file() {
        assert_eq!(module_dir(Path::new("s/a/mod.rs")), Path::new("s/a"));
        assert_eq!(module_dir(Path::new("s/lib.rs")), Path::new("s"));
        assert_eq!(module_dir(Path::new("s/a/b.rs")), Path::new("s/a/b"));
    }
}
