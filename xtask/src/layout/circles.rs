//! Import circles between sibling modules: the child modules of the crate
//! root and of every folder module (`src/a/mod.rs` or `src/a.rs` with
//! `src/a/`, and inline `mod x { … }`). Each path a file names from
//! `crate::`, `self::` or `super::` (in `use` trees, nested groups
//! included, and in expressions) is resolved to a module path; a file under
//! child `x` of folder `F` naming something under another child `y` of `F`
//! is the edge `x -> y` of `F`. Every strongly connected component of more
//! than one child is a circle (Tarjan's algorithm).
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::lex::{Tok, Token};

/// Where an edge was first seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Site {
    pub file: String,
    pub line: usize,
}

/// The modules of one crate target and the paths their files name.
#[derive(Debug, Default)]
pub struct Graph {
    /// Every module seen, as its path below the crate root (the root: `[]`).
    modules: BTreeSet<Vec<String>>,
    /// Edges by folder: folder → child → child it names → first site.
    edges: BTreeMap<Vec<String>, BTreeMap<String, BTreeMap<String, Site>>>,
    /// Named paths not resolved to an edge yet: (from module, path, site).
    refs: Vec<(Vec<String>, Vec<String>, Site)>,
}

/// A strongly connected component of more than one child of `folder`.
#[derive(Debug, PartialEq, Eq)]
pub struct Circle {
    /// The folder module's path below the crate root (`[]`: the root).
    pub folder: Vec<String>,
    /// The children in the circle, sorted.
    pub modules: Vec<String>,
    /// One shortest cycle through the first module, ending where it starts.
    pub cycle: Vec<String>,
    /// Every edge between the children in the circle.
    pub edges: Vec<(String, String, Site)>,
}

impl Circle {
    /// `x -> y -> x`.
    pub fn cycle_text(&self) -> String {
        self.cycle.join(" -> ")
    }
}

impl Graph {
    /// Adds the file of module `module` (its path below the crate root:
    /// `src/a.rs` and `src/a/mod.rs` are `["a"]`, `src/a/b.rs` is
    /// `["a", "b"]`, the crate root file `[]`). `tokens` come without
    /// test-only items.
    pub fn add_file(&mut self, module: &[&str], file: &str, tokens: &[Token<'_>]) {
        let mut here: Vec<String> = module.iter().map(|s| s.to_string()).collect();
        self.add_module(&here);
        // Braces opened so far: the module path's length outside each (an
        // inline `mod x { … }` adds `x` inside its braces).
        let mut braces: Vec<usize> = Vec::new();
        let at = |k: usize| tokens.get(k).map(|t| t.tok);
        let mut i = 0;
        while let Some(tok) = at(i) {
            match tok {
                Tok::Punct('{') => {
                    braces.push(here.len());
                    let before = (i.checked_sub(2).and_then(at), i.checked_sub(1).and_then(at));
                    if let (Some(Tok::Ident("mod")), Some(Tok::Ident(name))) = before {
                        here.push(name.to_string());
                        self.add_module(&here);
                    }
                }
                Tok::Punct('}') => here.truncate(braces.pop().unwrap_or(here.len())),
                _ => {}
            }
            let Some((paths, next)) = named_paths(tokens, i) else {
                i += 1;
                continue;
            };
            let site = Site {
                file: file.to_string(),
                line: tokens[i].line,
            };
            for p in paths {
                if let Some(target) = resolve(&here, &p) {
                    self.refs.push((here.clone(), target, site.clone()));
                }
            }
            i = next;
        }
    }

    /// Registers `path` and every folder above it.
    fn add_module(&mut self, path: &[String]) {
        for n in 0..=path.len() {
            if !self.modules.contains(&path[..n]) {
                self.modules.insert(path[..n].to_vec());
            }
        }
    }

    /// Turns the named paths into edges between siblings: the folder is
    /// the longest common prefix of the naming module and the named path.
    fn resolve_edges(&mut self) {
        for (from, to, site) in std::mem::take(&mut self.refs) {
            let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if common >= from.len() || common >= to.len() {
                continue; // a module naming itself, an ancestor or a descendant
            }
            let folder = &from[..common];
            let mut child = folder.to_vec();
            child.push(to[common].clone());
            if !self.modules.contains(&child) {
                continue; // an item of the folder module, not a child module
            }
            self.edges
                .entry(folder.to_vec())
                .or_default()
                .entry(from[common].clone())
                .or_default()
                .entry(to[common].clone())
                .or_insert(site);
        }
    }

    /// Every circle, by folder, each module list sorted.
    pub fn circles(&mut self) -> Vec<Circle> {
        self.resolve_edges();
        let mut out = Vec::new();
        for (folder, edges) in &self.edges {
            let names: BTreeSet<&str> = edges
                .iter()
                .flat_map(|(from, to)| {
                    std::iter::once(from.as_str()).chain(to.keys().map(String::as_str))
                })
                .collect();
            let names: Vec<&str> = names.into_iter().collect();
            let index: BTreeMap<&str, usize> =
                names.iter().enumerate().map(|(i, n)| (*n, i)).collect();
            let succ: Vec<Vec<usize>> = names
                .iter()
                .map(|n| {
                    edges
                        .get(*n)
                        .into_iter()
                        .flat_map(|to| to.keys().map(|t| index[t.as_str()]))
                        .collect()
                })
                .collect();
            for comp in tarjan(&succ).into_iter().filter(|c| c.len() > 1) {
                let set: BTreeSet<&str> = comp.iter().map(|&v| names[v]).collect();
                let inside: Vec<(String, String, Site)> = set
                    .iter()
                    .flat_map(|from| {
                        edges
                            .get(*from)
                            .into_iter()
                            .flatten()
                            .filter(|(to, _)| set.contains(to.as_str()))
                            .map(|(to, site)| (from.to_string(), to.clone(), site.clone()))
                    })
                    .collect();
                let modules: Vec<String> = set.iter().map(|s| s.to_string()).collect();
                out.push(Circle {
                    folder: folder.clone(),
                    cycle: shortest_cycle(&modules, &inside),
                    modules,
                    edges: inside,
                });
            }
        }
        out.sort_by(|a, b| (&a.folder, &a.modules).cmp(&(&b.folder, &b.modules)));
        out
    }
}

/// The shortest cycle through `modules[0]` along `edges` (breadth first).
fn shortest_cycle(modules: &[String], edges: &[(String, String, Site)]) -> Vec<String> {
    let Some(start) = modules.first() else {
        return Vec::new();
    };
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = VecDeque::from([start.as_str()]);
    while let Some(v) = queue.pop_front() {
        for (_, to, _) in edges.iter().filter(|(f, _, _)| f == v) {
            if to == start {
                let mut cycle = vec![start.clone()];
                let mut at = v;
                while at != start {
                    cycle.push(at.to_string());
                    at = came_from[at];
                }
                cycle.push(start.clone());
                cycle.reverse();
                return cycle;
            }
            if !came_from.contains_key(to.as_str()) {
                came_from.insert(to, v);
                queue.push_back(to);
            }
        }
    }
    modules.to_vec()
}

/// `target` below the crate root, for the path `p` (starting with `crate`,
/// `self` or `super`) named in module `here`; `None` when it climbs above
/// the root.
fn resolve(here: &[String], p: &[&str]) -> Option<Vec<String>> {
    let (mut base, rest): (Vec<String>, &[&str]) = match *p.first()? {
        "crate" => (Vec::new(), &p[1..]),
        "self" => (here.to_vec(), &p[1..]),
        "super" => {
            let ups = p.iter().take_while(|s| **s == "super").count();
            let keep = here.len().checked_sub(ups)?;
            (here[..keep].to_vec(), &p[ups..])
        }
        _ => return None,
    };
    base.extend(
        rest.iter()
            .take_while(|s| !matches!(**s, "self" | "super" | "crate"))
            .map(|s| s.to_string()),
    );
    Some(base)
}

/// The paths named at token `i` when a path from `crate::`, `self::` or
/// `super::` starts there (a `use` tree is every path it names), and the
/// token after them.
fn named_paths<'a>(t: &[Token<'a>], i: usize) -> Option<(Vec<Vec<&'a str>>, usize)> {
    let at = |k: usize| t.get(k).map(|t| t.tok);
    let sep = |k: usize| at(k) == Some(Tok::Punct(':')) && at(k + 1) == Some(Tok::Punct(':'));
    // Part of a longer path (`x::crate`) or a visibility (`pub(in crate::a)`).
    let prev = i.checked_sub(1).and_then(at);
    let longer = prev == Some(Tok::Punct(':')) && i.checked_sub(2).and_then(at) == prev;
    if longer || prev == Some(Tok::Ident("in")) {
        return None;
    }
    match at(i)? {
        Tok::Ident("crate" | "self" | "super") if sep(i + 1) => {}
        _ => return None,
    }
    let mut out = Vec::new();
    let next = use_tree(t, i, Vec::new(), &mut out);
    Some((out, next))
}

/// Parses the path or `use` tree starting at `k` below `prefix` into
/// `out`; returns the token after it.
fn use_tree<'a>(
    t: &[Token<'a>],
    mut k: usize,
    mut prefix: Vec<&'a str>,
    out: &mut Vec<Vec<&'a str>>,
) -> usize {
    let at = |k: usize| t.get(k).map(|t| t.tok);
    let sep = |k: usize| at(k) == Some(Tok::Punct(':')) && at(k + 1) == Some(Tok::Punct(':'));
    loop {
        match at(k) {
            Some(Tok::Ident(name)) => {
                if name != "self" || prefix.is_empty() {
                    prefix.push(name);
                }
                k += 1;
                if sep(k) {
                    k += 2;
                    continue;
                }
                if at(k) == Some(Tok::Ident("as")) {
                    k += 2;
                }
                out.push(prefix);
                return k;
            }
            Some(Tok::Punct('{')) => {
                k += 1;
                loop {
                    match at(k) {
                        Some(Tok::Punct('}')) => return k + 1,
                        None => return k,
                        _ => {}
                    }
                    let before = k;
                    k = use_tree(t, k, prefix.clone(), out);
                    match at(k) {
                        Some(Tok::Punct(',')) => k += 1,
                        Some(Tok::Punct('}')) => {}
                        _ if k == before => k += 1,
                        _ => {}
                    }
                }
            }
            _ => {
                // `*`, a turbofish, or the end of the path.
                out.push(prefix);
                return k;
            }
        }
    }
}

/// Strongly connected components of the graph `succ` (vertex → successors).
fn tarjan(succ: &[Vec<usize>]) -> Vec<Vec<usize>> {
    struct St<'a> {
        succ: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        stack: Vec<usize>,
        on_stack: Vec<bool>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(s: &mut St<'_>, v: usize) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for &w in &s.succ[v] {
            match s.index[w] {
                None => {
                    visit(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(iw) if s.on_stack[w] => s.low[v] = s.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack[w] = false;
                comp.push(w);
                if w == v {
                    break;
                }
            }
            s.out.push(comp);
        }
    }
    let n = succ.len();
    let mut s = St {
        succ,
        index: vec![None; n],
        low: vec![0; n],
        stack: Vec::new(),
        on_stack: vec![false; n],
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if s.index[v].is_none() {
            visit(&mut s, v);
        }
    }
    s.out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::lex::parse;

    /// `(module path, source)` files of one crate target.
    fn circles(files: &[(&str, &str)]) -> Vec<Circle> {
        let mut g = Graph::default();
        for (m, src) in files {
            let module: Vec<&str> = m.split('/').filter(|s| !s.is_empty()).collect();
            g.add_file(&module, &format!("{m}.rs"), &parse(src).tokens);
        }
        g.circles()
    }

    fn edges(c: &Circle) -> Vec<(&str, &str, usize)> {
        c.edges
            .iter()
            .map(|(f, t, s)| (f.as_str(), t.as_str(), s.line))
            .collect()
    }

    #[test]
    fn a_two_module_circle_between_top_level_modules() {
        let c = circles(&[
            ("", "mod a;\nmod b;\nmod c;\n"),
            ("a", "use crate::b::Thing;\nfn f() {}\n"),
            ("b", "fn g() {}\nuse crate::{c, a::Other};\n"),
            ("c", ""),
        ]);
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0].folder, Vec::<String>::new());
        assert_eq!(c[0].modules, ["a", "b"]);
        assert_eq!(c[0].cycle_text(), "a -> b -> a");
        assert_eq!(edges(&c[0]), [("a", "b", 1), ("b", "a", 2)]);
    }

    #[test]
    fn a_two_module_circle_inside_a_folder() {
        let c = circles(&[
            ("nvml", "mod dcgm;\nmod prom;\npub use prom::Family;\n"),
            ("nvml/dcgm", "use super::prom::Family;\n"),
            (
                "nvml/prom",
                "struct S {\n    f: crate::nvml::dcgm::Field,\n}\n",
            ),
        ]);
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0].folder, ["nvml"]);
        assert_eq!(c[0].cycle_text(), "dcgm -> prom -> dcgm");
        assert_eq!(edges(&c[0]), [("dcgm", "prom", 1), ("prom", "dcgm", 2)]);
    }

    #[test]
    fn a_three_module_circle_inside_a_folder_through_groups_and_self() {
        let c = circles(&[
            (
                "engine",
                "mod config;\nmod nfs;\nmod incidents;\nmod gpu;\n",
            ),
            (
                "engine/config",
                "use super::{stats::median, nfs::{self, NfsConfig}};\n",
            ),
            (
                "engine/nfs",
                "use crate::engine::{incidents::Finding as F};\n",
            ),
            (
                "engine/incidents",
                "pub fn f(c: &super::config::Config) {}\nuse super::super::engine::config::X;\n",
            ),
            ("engine/gpu", "use super::incidents::Finding;\n"),
        ]);
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0].modules, ["config", "incidents", "nfs"]);
        assert_eq!(c[0].cycle_text(), "config -> nfs -> incidents -> config");
        assert_eq!(
            edges(&c[0]),
            [
                ("config", "nfs", 1),
                ("incidents", "config", 1),
                ("nfs", "incidents", 1)
            ]
        );
    }

    #[test]
    fn a_circle_in_a_nested_folder_from_files_deeper_down() {
        let c = circles(&[
            ("history", "pub mod store;\npub mod recorder;\n"),
            ("history/recorder", "use super::store::Store;\n"),
            ("history/store", "mod schema;\nmod usage;\nmod write;\n"),
            ("history/store/schema", "use super::usage::Column;\n"),
            // `usage.rs` with `usage/`: a file below it names its sibling.
            ("history/store/usage", "mod sums;\n"),
            (
                "history/store/usage/sums",
                "use super::super::schema::VERSION;\n",
            ),
            (
                "history/store/write",
                "use crate::history::store::schema;\n",
            ),
        ]);
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0].folder, ["history", "store"]);
        assert_eq!(c[0].cycle_text(), "schema -> usage -> schema");
        assert_eq!(
            c[0].edges[1].2.file, "history/store/usage/sums.rs",
            "the edge is usage's, first seen in its child"
        );
    }

    #[test]
    fn inline_modules_are_children_of_their_file() {
        let c = circles(&[(
            "listen",
            "mod conn { use super::table::Slot; }\nmod table { fn f() { super::conn::close(); } }\n",
        )]);
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0].folder, ["listen"]);
        assert_eq!(c[0].modules, ["conn", "table"]);
    }

    #[test]
    fn one_way_imports_parents_and_children_make_no_circle() {
        let c = circles(&[
            ("", "mod a;\nmod b;\nmod c;\nmod d;\n"),
            ("a", "use crate::{b, c::{x, y}};\nmod inner;\n"),
            (
                "a/inner",
                "use super::super::d::Z;\nuse super::Parent;\nuse crate::a::Parent as P;\n",
            ),
            ("b", "fn f() { crate::c::run(); crate::d::go() }"),
            ("c", "mod x;\nmod y;\nuse self::x::X;\npub struct Item;\n"),
            // A sibling imported one way, and the parent's own item.
            ("c/x", "use super::y::Y;\nuse super::Item;\n"),
            ("c/y", "use crate::c::Item;\nuse crate::d::go;\n"),
            ("d", "pub fn go() {}"),
        ]);
        assert_eq!(c, []);
    }

    #[test]
    fn comments_strings_and_test_modules_make_no_edge() {
        let files = [
            ("", "mod a;\nmod b;\n"),
            ("a", "use crate::b;"),
            (
                "b",
                "// crate::a\nconst S: &str = \"crate::a\";\n\
                 #[cfg(test)]\nmod tests { use crate::a; }\n\
                 pub(in crate::a) fn f(&self) { self.x; }\nuse super::a as _x;\n",
            ),
        ];
        // `super::a` from `b` is the crate root's `a`: one real edge.
        let c = circles(&files);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].edges[1].2.line, 6, "{c:?}");
        let c = circles(&[
            ("", "mod a;\nmod b;\n"),
            ("a", "use crate::b;"),
            (
                "b",
                "// crate::a\n#[cfg(test)]\nmod tests { use crate::a; }\nmod inner { use super::a; }\n",
            ),
        ]);
        assert_eq!(c, [], "`super` in an inline module is `b`");
    }

    #[test]
    fn a_three_module_circle_beside_a_tail() {
        let c = circles(&[
            ("", "mod a;\nmod b;\nmod c;\nmod d;\n"),
            ("a", "use crate::b;"),
            ("b", "use crate::c;"),
            ("c", "use crate::{a, d};"),
            ("d", ""),
        ]);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].modules, ["a", "b", "c"]);
        assert_eq!(c[0].edges.len(), 3);
    }
}
