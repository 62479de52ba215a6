//! Lengths: a file's lines outside test-only items, and each function's
//! lines from its `fn` to the closing brace of its body (nested functions
//! counted on their own too; functions inside test-only items not at all).
use super::lex::{item_end, Parsed, Tok};

/// A function with a body.
#[derive(Debug, PartialEq, Eq)]
pub struct Function<'a> {
    pub name: &'a str,
    /// Line of its `fn`.
    pub line: usize,
    pub lines: usize,
}

/// Every function with a body in the file.
pub fn functions<'a>(p: &Parsed<'a>) -> Vec<Function<'a>> {
    let t = &p.tokens;
    let mut out = Vec::new();
    for (i, w) in t.windows(2).enumerate() {
        let (Tok::Ident("fn"), Tok::Ident(name)) = (w[0].tok, w[1].tok) else {
            continue;
        };
        // The signature runs to a `;` (no body) or to the body's braces.
        let end = item_end(t, i + 2);
        let Some(last) = end.checked_sub(1).and_then(|k| t.get(k)) else {
            continue;
        };
        if last.tok == Tok::Punct('}') {
            out.push(Function {
                name,
                line: w[0].line,
                lines: last.line - w[0].line + 1,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::lex::parse;

    fn body(name: &str, lines: usize) -> String {
        let mut s = format!("pub(crate) async fn {name}(a: [u8; 4]) -> u32 {{\n");
        for k in 0..lines - 2 {
            s.push_str(&format!("    let _x{k} = \"}}\"; // }}\n"));
        }
        s.push_str("}\n");
        s
    }

    #[test]
    fn functions_are_measured_from_fn_to_closing_brace() {
        let src = format!(
            "trait T {{\n    fn no_body(&self) -> [u8; 2];\n}}\n{}{}\
             #[cfg(test)]\nmod tests {{\n{}}}\n",
            body("long", 121),
            body("at_limit", 120),
            body("in_tests", 200),
        );
        let p = parse(&src);
        let f = functions(&p);
        assert_eq!(
            f,
            [
                Function {
                    name: "long",
                    line: 4,
                    lines: 121
                },
                Function {
                    name: "at_limit",
                    line: 125,
                    lines: 120
                },
            ]
        );
        // 3 + 121 + 120 lines of code; the test module's 203 are not.
        assert_eq!(p.code_lines(), 244);
        assert_eq!(p.lines, 244 + 203);
    }

    #[test]
    fn nested_functions_and_where_clauses() {
        let src = "fn outer<T>(t: T) -> impl Fn() -> u8\nwhere\n    T: Copy,\n{\n    fn inner() {\n    }\n    || 1\n}\nlet f: fn(u8) -> u8 = id;\n";
        let f = functions(&parse(src));
        let got: Vec<(&str, usize, usize)> = f.iter().map(|f| (f.name, f.line, f.lines)).collect();
        assert_eq!(got, [("outer", 1, 8), ("inner", 5, 2)]);
    }
}
