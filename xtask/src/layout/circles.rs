//! Import circles between the top-level modules of one crate: which module
//! names which (`crate::X…`, `use crate::{X, …}`, and `super::…` paths that
//! climb to the crate root), then every strongly connected component of more
//! than one module (Tarjan's algorithm).
use std::collections::{BTreeMap, BTreeSet};

use super::lex::{Tok, Token};

/// Where an edge was first seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Site {
    pub file: String,
    pub line: usize,
}

/// Top-level modules and the modules each one names.
#[derive(Debug, Default)]
pub struct Graph {
    edges: BTreeMap<String, BTreeMap<String, Site>>,
}

/// A strongly connected component of more than one module, with the edges
/// inside it.
#[derive(Debug, PartialEq, Eq)]
pub struct Circle {
    pub modules: Vec<String>,
    pub edges: Vec<(String, String, Site)>,
}

impl Graph {
    pub fn new<S: Into<String>>(modules: impl IntoIterator<Item = S>) -> Self {
        Self {
            edges: modules
                .into_iter()
                .map(|m| (m.into(), BTreeMap::new()))
                .collect(),
        }
    }

    pub fn modules(&self) -> impl Iterator<Item = &str> {
        self.edges.keys().map(String::as_str)
    }

    /// Adds the references of one file of top-level module `module`, the
    /// file's own module `depth` below the crate root (`src/a.rs` and
    /// `src/a/mod.rs`: 1, `src/a/b.rs`: 2). `tokens` come without test-only
    /// items.
    pub fn add_file(&mut self, module: &str, depth: usize, file: &str, tokens: &[Token<'_>]) {
        // Braces opened so far: whether each is an inline `mod x { … }`.
        let mut braces: Vec<bool> = Vec::new();
        let at = |k: usize| tokens.get(k).map(|t| t.tok);
        let mut i = 0;
        while let Some(tok) = at(i) {
            match tok {
                Tok::Punct('{') => {
                    let inline_mod = i >= 2
                        && at(i - 2) == Some(Tok::Ident("mod"))
                        && matches!(at(i - 1), Some(Tok::Ident(_)));
                    braces.push(inline_mod);
                }
                Tok::Punct('}') => {
                    braces.pop();
                }
                _ => {}
            }
            let here = depth + braces.iter().filter(|&&m| m).count();
            if let Some((names, next)) = root_path(tokens, i, here) {
                for name in names {
                    self.add_edge(module, name, file, tokens[i].line);
                }
                i = next;
            } else {
                i += 1;
            }
        }
    }

    fn add_edge(&mut self, from: &str, to: &str, file: &str, line: usize) {
        if from == to || !self.edges.contains_key(to) {
            return;
        }
        if let Some(out) = self.edges.get_mut(from) {
            out.entry(to.to_string()).or_insert_with(|| Site {
                file: file.to_string(),
                line,
            });
        }
    }

    /// Every circle, each module list sorted, in a stable order.
    pub fn circles(&self) -> Vec<Circle> {
        let names: Vec<&str> = self.modules().collect();
        let index: BTreeMap<&str, usize> = names.iter().enumerate().map(|(i, n)| (*n, i)).collect();
        let succ: Vec<Vec<usize>> = names
            .iter()
            .map(|n| self.edges[*n].keys().map(|t| index[t.as_str()]).collect())
            .collect();
        let mut out: Vec<Circle> = tarjan(&succ)
            .into_iter()
            .filter(|c| c.len() > 1)
            .map(|comp| {
                let set: BTreeSet<&str> = comp.iter().map(|&v| names[v]).collect();
                let edges = set
                    .iter()
                    .flat_map(|from| {
                        self.edges[*from]
                            .iter()
                            .filter(|(to, _)| set.contains(to.as_str()))
                            .map(|(to, site)| (from.to_string(), to.clone(), site.clone()))
                    })
                    .collect();
                Circle {
                    modules: set.into_iter().map(str::to_string).collect(),
                    edges,
                }
            })
            .collect();
        out.sort_by(|a, b| a.modules.cmp(&b.modules));
        out
    }
}

/// A path from the crate root at token `i` (`crate::x`, `crate::{x, y::z}`,
/// or `super::` repeated `depth` times): the top-level names it starts
/// with, and the token after them.
fn root_path<'a>(t: &[Token<'a>], i: usize, depth: usize) -> Option<(Vec<&'a str>, usize)> {
    let at = |k: usize| t.get(k).map(|t| t.tok);
    let sep = |k: usize| at(k) == Some(Tok::Punct(':')) && at(k + 1) == Some(Tok::Punct(':'));
    // Part of a longer path (`x::crate`) or a visibility (`pub(in crate::a)`).
    let prev = i.checked_sub(1).and_then(at);
    if matches!(prev, Some(Tok::Punct(':') | Tok::Ident("in"))) {
        return None;
    }
    let after = match at(i)? {
        Tok::Ident("crate") if sep(i + 1) => i + 3,
        Tok::Ident("super") => {
            let mut k = i;
            let mut ups = 0;
            while at(k) == Some(Tok::Ident("super")) && sep(k + 1) {
                ups += 1;
                k += 3;
            }
            if ups == 0 || ups != depth {
                return None;
            }
            k
        }
        _ => return None,
    };
    match at(after)? {
        Tok::Ident(name) => Some((vec![name], after + 1)),
        Tok::Punct('{') => Some(group_heads(t, after)),
        _ => None,
    }
}

/// The first name of each item of the `{…}` group opening at `open`, and
/// the token after the group.
fn group_heads<'a>(t: &[Token<'a>], open: usize) -> (Vec<&'a str>, usize) {
    let mut heads = Vec::new();
    let mut depth = 0usize;
    let mut item_start = true;
    let mut k = open;
    while let Some(tok) = t.get(k).map(|t| t.tok) {
        match tok {
            Tok::Punct('{') => {
                depth += 1;
                item_start = depth == 1;
            }
            Tok::Punct('}') => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return (heads, k + 1);
                }
            }
            Tok::Punct(',') if depth == 1 => item_start = true,
            Tok::Ident(name) if depth == 1 && item_start => {
                if name != "self" {
                    heads.push(name);
                }
                item_start = false;
            }
            _ => item_start = false,
        }
        k += 1;
    }
    (heads, t.len())
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

    /// `(module, depth, source)` files of one crate.
    fn graph(modules: &[&str], files: &[(&str, usize, &str)]) -> Graph {
        let mut g = Graph::new(modules.iter().copied());
        for (k, (m, depth, src)) in files.iter().enumerate() {
            g.add_file(m, *depth, &format!("{m}/{k}.rs"), &parse(src).tokens);
        }
        g
    }

    #[test]
    fn a_two_module_circle_is_found_with_its_edges() {
        let g = graph(
            &["a", "b", "c"],
            &[
                ("a", 1, "use crate::b::Thing;\nfn f() {}\n"),
                ("b", 1, "fn g() {}\nuse crate::{c, a::Other};\n"),
            ],
        );
        let c = g.circles();
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0].modules, ["a", "b"]);
        let edges: Vec<(&str, &str, usize)> = c[0]
            .edges
            .iter()
            .map(|(f, t, s)| (f.as_str(), t.as_str(), s.line))
            .collect();
        assert_eq!(edges, [("a", "b", 1), ("b", "a", 2)]);
    }

    #[test]
    fn a_dag_passes() {
        let g = graph(
            &["a", "b", "c", "d"],
            &[
                ("a", 1, "use crate::{b, c::{x, y}};"),
                ("b", 1, "fn f() { crate::c::run(); crate::d::go() }"),
                ("c", 2, "use super::super::d::Z;"),
                ("d", 1, "pub fn go() {}"),
            ],
        );
        assert_eq!(g.circles(), []);
        let heads: Vec<&str> = g.edges["a"].keys().map(String::as_str).collect();
        assert_eq!(heads, ["b", "c"]);
        assert!(g.edges["c"].contains_key("d"), "super::super from depth 2");
    }

    #[test]
    fn comments_strings_and_test_modules_make_no_edge() {
        let g = graph(
            &["a", "b"],
            &[
                ("a", 1, "use crate::b;"),
                (
                    "b",
                    1,
                    "// crate::a\nconst S: &str = \"crate::a\";\n\
                     #[cfg(test)]\nmod tests { use crate::a; }\n\
                     pub(in crate::a) fn f() {}\nuse super::a as _x;\n",
                ),
            ],
        );
        // `super::a` from depth 1 is the crate root's `a`: one real edge.
        let c = g.circles();
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].edges[1].2.line, 6, "{c:?}");
        let g = graph(
            &["a", "b"],
            &[
                ("a", 1, "use crate::b;"),
                (
                    "b",
                    1,
                    "// crate::a\n#[cfg(test)]\nmod tests { use crate::a; }\nmod inner { use super::a; }\n",
                ),
            ],
        );
        assert_eq!(g.circles(), [], "`super` in an inline module is `b`");
    }

    #[test]
    fn a_three_module_circle_beside_a_tail() {
        let g = graph(
            &["a", "b", "c", "d"],
            &[
                ("a", 1, "use crate::b;"),
                ("b", 1, "use crate::c;"),
                ("c", 1, "use crate::{a, d};"),
            ],
        );
        let c = g.circles();
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].modules, ["a", "b", "c"]);
        assert_eq!(c[0].edges.len(), 3);
    }
}
