//! A small Rust lexer for the layout check: identifiers and punctuation with
//! their line numbers; comments dropped, literals reduced to one token, and
//! test-only items (`#[cfg(test)]`, `#[cfg(all(test, …))]`) cut out.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tok<'a> {
    Ident(&'a str),
    Punct(char),
    /// A string, character or number literal (contents dropped).
    Lit,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Token<'a> {
    pub tok: Tok<'a>,
    /// 1-based line the token starts on.
    pub line: usize,
}

/// One source file, lexed, with its test-only items removed.
#[derive(Debug)]
pub struct Parsed<'a> {
    pub tokens: Vec<Token<'a>>,
    /// Modules declared test-only and kept in files of their own
    /// (`#[cfg(test)] mod tests;`).
    pub test_mods: Vec<&'a str>,
    /// Lines of the file.
    pub lines: usize,
    /// Lines taken by test-only items.
    pub test_lines: usize,
}

impl Parsed<'_> {
    /// Lines of the file outside test-only items.
    pub fn code_lines(&self) -> usize {
        self.lines.saturating_sub(self.test_lines)
    }
}

pub fn parse(src: &str) -> Parsed<'_> {
    let all = tokens(src);
    let mut out = Parsed {
        tokens: Vec::with_capacity(all.len()),
        test_mods: Vec::new(),
        lines: src.lines().count(),
        test_lines: 0,
    };
    let mut i = 0;
    while i < all.len() {
        let Some(after_attr) = test_attr(&all, i) else {
            out.tokens.push(all[i]);
            i += 1;
            continue;
        };
        let item = skip_attrs(&all, after_attr);
        let end = item_end(&all, item);
        if let Some(name) = mod_decl(&all[item..end]) {
            out.test_mods.push(name);
        }
        let last = end.saturating_sub(1).max(i);
        out.test_lines += all[last].line - all[i].line + 1;
        i = end;
    }
    out
}

fn is(t: Option<&Token<'_>>, want: Tok<'_>) -> bool {
    t.is_some_and(|t| t.tok == want)
}

/// The index of the closing token matching the opener at `open` (or the end).
fn matching(t: &[Token<'_>], open: usize) -> usize {
    let mut depth = 0usize;
    for (k, tok) in t.iter().enumerate().skip(open) {
        match tok.tok {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']' | '}') => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return k;
                }
            }
            _ => {}
        }
    }
    t.len().saturating_sub(1)
}

/// When `#[cfg(test)]` or `#[cfg(all(test, …))]` starts at `i`: the index
/// just past its `]`.
fn test_attr(t: &[Token<'_>], i: usize) -> Option<usize> {
    let at = |k: usize, want: Tok<'_>| is(t.get(i + k), want);
    if !(at(0, Tok::Punct('#'))
        && at(1, Tok::Punct('['))
        && at(2, Tok::Ident("cfg"))
        && at(3, Tok::Punct('(')))
    {
        return None;
    }
    let test_only = (at(4, Tok::Ident("test")) && at(5, Tok::Punct(')')))
        || (at(4, Tok::Ident("all")) && at(5, Tok::Punct('(')) && at(6, Tok::Ident("test")));
    test_only.then(|| matching(t, i + 1) + 1)
}

/// Past the outer attributes starting at `k`.
fn skip_attrs(t: &[Token<'_>], mut k: usize) -> usize {
    while is(t.get(k), Tok::Punct('#')) && is(t.get(k + 1), Tok::Punct('[')) {
        k = matching(t, k + 1) + 1;
    }
    k
}

/// The end (exclusive) of the item starting at `start`: up to a `;` outside
/// brackets or through the first braced block.
pub fn item_end(t: &[Token<'_>], start: usize) -> usize {
    let mut k = start;
    while let Some(tok) = t.get(k) {
        match tok.tok {
            Tok::Punct(';') => return k + 1,
            Tok::Punct('{') => return matching(t, k) + 1,
            Tok::Punct('(' | '[') => k = matching(t, k) + 1,
            _ => k += 1,
        }
    }
    t.len()
}

/// `[pub[(…)]] mod NAME;` → NAME.
fn mod_decl<'a>(item: &[Token<'a>]) -> Option<&'a str> {
    let mut k = 0;
    if is(item.first(), Tok::Ident("pub")) {
        k = 1;
        if is(item.get(1), Tok::Punct('(')) {
            k = matching(item, 1) + 1;
        }
    }
    match (
        item.get(k).map(|t| t.tok),
        item.get(k + 1).map(|t| t.tok),
        item.get(k + 2).map(|t| t.tok),
    ) {
        (Some(Tok::Ident("mod")), Some(Tok::Ident(name)), Some(Tok::Punct(';'))) => Some(name),
        _ => None,
    }
}

fn ident_start(c: char) -> bool {
    c == '_' || c.is_alphabetic()
}

fn ident_char(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

/// Every token of `src`.
pub fn tokens(src: &str) -> Vec<Token<'_>> {
    let mut l = Lexer {
        src,
        b: src.char_indices().collect(),
        i: 0,
        line: 1,
        out: Vec::new(),
    };
    while let Some(c) = l.ch(0) {
        match c {
            '\n' => {
                l.line += 1;
                l.i += 1;
            }
            c if c.is_whitespace() => l.i += 1,
            '/' if l.ch(1) == Some('/') => {
                while l.ch(0).is_some_and(|c| c != '\n') {
                    l.i += 1;
                }
            }
            '/' if l.ch(1) == Some('*') => l.block_comment(),
            '"' => {
                let line = l.line;
                l.string(1);
                l.push(Tok::Lit, line);
            }
            '\'' => l.quote(),
            c if c.is_ascii_digit() => l.number(),
            c if ident_start(c) => l.word(),
            c => {
                l.push(Tok::Punct(c), l.line);
                l.i += 1;
            }
        }
    }
    l.out
}

struct Lexer<'a> {
    src: &'a str,
    /// Byte offset and character, by character index.
    b: Vec<(usize, char)>,
    /// The next character.
    i: usize,
    line: usize,
    out: Vec<Token<'a>>,
}

impl<'a> Lexer<'a> {
    /// The character `k` after the next one.
    fn ch(&self, k: usize) -> Option<char> {
        self.b.get(self.i + k).map(|&(_, c)| c)
    }

    fn offset(&self, i: usize) -> usize {
        self.b.get(i).map_or(self.src.len(), |&(o, _)| o)
    }

    fn push(&mut self, tok: Tok<'a>, line: usize) {
        self.out.push(Token { tok, line });
    }

    /// `/* … */`, nested.
    fn block_comment(&mut self) {
        let mut depth = 0usize;
        while let Some(c) = self.ch(0) {
            if c == '/' && self.ch(1) == Some('*') {
                depth += 1;
                self.i += 2;
            } else if c == '*' && self.ch(1) == Some('/') {
                depth -= 1;
                self.i += 2;
                if depth == 0 {
                    return;
                }
            } else {
                self.line += usize::from(c == '\n');
                self.i += 1;
            }
        }
    }

    /// A string whose contents start `skip` characters on: past its end.
    fn string(&mut self, skip: usize) {
        self.i += skip;
        while let Some(c) = self.ch(0) {
            match c {
                '\\' => {
                    self.line += usize::from(self.ch(1) == Some('\n'));
                    self.i += 2;
                }
                '"' => {
                    self.i += 1;
                    return;
                }
                c => {
                    self.line += usize::from(c == '\n');
                    self.i += 1;
                }
            }
        }
    }

    /// `#…#"…"#…#` from its first `#`: `false` (nothing consumed) when no
    /// quote follows the hashes (a raw identifier).
    fn raw_string(&mut self) -> bool {
        let hashes = (0..).take_while(|&k| self.ch(k) == Some('#')).count();
        if self.ch(hashes) != Some('"') {
            return false;
        }
        self.i += hashes + 1;
        while let Some(c) = self.ch(0) {
            if c == '"' && (1..=hashes).all(|h| self.ch(h) == Some('#')) {
                self.i += 1 + hashes;
                return true;
            }
            self.line += usize::from(c == '\n');
            self.i += 1;
        }
        true
    }

    /// A character literal's length when one starts at the quote here;
    /// `None` for a lifetime or a label.
    fn char_literal(&self) -> Option<usize> {
        match self.ch(1)? {
            '\\' => {
                // Past the backslash and the escaped character (`'\''`).
                let mut k = 3;
                while self.ch(k).is_some_and(|x| x != '\'' && x != '\n') {
                    k += 1;
                }
                (self.ch(k) == Some('\'')).then_some(k + 1)
            }
            '\n' => None,
            _ => (self.ch(2) == Some('\'')).then_some(3),
        }
    }

    /// A character literal, or a lifetime's quote (its name follows as an
    /// identifier).
    fn quote(&mut self) {
        match self.char_literal() {
            Some(n) => {
                self.push(Tok::Lit, self.line);
                self.i += n;
            }
            None => {
                self.push(Tok::Punct('\''), self.line);
                self.i += 1;
            }
        }
    }

    fn number(&mut self) {
        self.push(Tok::Lit, self.line);
        self.i += 1;
        while self.ch(0).is_some_and(|c| {
            ident_char(c) || (c == '.' && self.ch(1).is_some_and(|d| d.is_ascii_digit()))
        }) {
            self.i += 1;
        }
    }

    /// An identifier, a raw identifier, or a prefixed literal (`b"…"`,
    /// `r#"…"#`, `b'x'`, `c"…"`).
    fn word(&mut self) {
        let (start, line) = (self.i, self.line);
        while self.ch(0).is_some_and(ident_char) {
            self.i += 1;
        }
        let word = &self.src[self.offset(start)..self.offset(self.i)];
        let prefix = matches!(word, "b" | "r" | "br" | "c" | "cr");
        if prefix && self.ch(0) == Some('"') {
            self.string(1);
            self.push(Tok::Lit, line);
        } else if prefix && word.ends_with('r') && self.ch(0) == Some('#') {
            if self.raw_string() {
                self.push(Tok::Lit, line);
            } else {
                self.i += 1;
                let s = self.i;
                while self.ch(0).is_some_and(ident_char) {
                    self.i += 1;
                }
                let raw = &self.src[self.offset(s)..self.offset(self.i)];
                self.push(Tok::Ident(raw), line);
            }
        } else if word == "b" && self.ch(0) == Some('\'') {
            self.i += self.char_literal().unwrap_or(1);
            self.push(Tok::Lit, line);
        } else {
            self.push(Tok::Ident(word), line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idents(src: &str) -> Vec<&str> {
        parse(src)
            .tokens
            .iter()
            .filter_map(|t| match t.tok {
                Tok::Ident(s) => Some(s),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn comments_strings_and_chars_are_not_code() {
        let src = "a // crate::x\n/* crate::y /* nested */ */ b \"crate::z \\\" q\" 'c' '\\'' \
                   r#\"crate::w\"# br\"v\" c b'x' 'life r#type 1.5 x.0";
        assert_eq!(idents(src), ["a", "b", "c", "life", "type", "x"]);
    }

    #[test]
    fn lines_are_counted_through_comments_and_strings() {
        let t = tokens("a\n/* x\n y */ \"s\ns\" b\n'\\n' c");
        let lines: Vec<usize> = t.iter().map(|t| t.line).collect();
        assert_eq!(lines, [1, 3, 4, 5, 5]);
    }

    #[test]
    fn test_only_items_are_cut() {
        let src = "fn a() {}\n#[cfg(test)]\nmod tests {\n    fn t() {}\n}\n\
                   #[cfg(test)]\n#[path = \"x.rs\"]\nmod more;\n#[cfg(all(test, unix))]\nuse x::y;\nfn b() {}\n";
        let p = parse(src);
        assert_eq!(p.test_mods, ["more"]);
        assert_eq!(p.lines, 11);
        // 4 + 3 + 2 lines of test-only items.
        assert_eq!(p.test_lines, 9);
        assert_eq!(p.code_lines(), 2);
        let names: Vec<&str> = p
            .tokens
            .iter()
            .filter_map(|t| match t.tok {
                Tok::Ident(s) => Some(s),
                _ => None,
            })
            .collect();
        assert_eq!(names, ["fn", "a", "fn", "b"]);
    }
}
