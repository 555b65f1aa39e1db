//! Grammar texts: llama.cpp's GBNF and a Lark-like EBNF, parsed into one small AST and compiled
//! to a [`Grammar`](crate::Grammar).
//!
//! Both formats describe the same thing, a context-free grammar whose terminals are literals,
//! character classes and (in Lark) regular expressions. The semantics are scannerless: a
//! terminal is just a sub-language, so there is no lexer priority or longest match to emulate.
//!
//! GBNF also names whole tokens, as llama.cpp's grammars do: `<[1000]>` is the token of id 1000,
//! `<|im_end|>` (any text between `<` and `>`) the one token with that text (a special token of
//! the vocabulary, or a token whose bytes are exactly the text), and `!<[1000]>` or
//! `!<|im_end|>` any one token but that one. A token reference matches one whole token, never
//! bytes inside one, so a grammar's sentences are then sequences of tokens; token texts are
//! resolved against a [`TokenVocab`] ([`compile_gbnf_for_vocab`], [`from_gbnf`]).

use std::collections::HashMap;
use std::sync::Arc;

use crate::constraint::GrammarConstraint;
use crate::dfa::Dfa;
use crate::grammar::{Grammar, GrammarBuilder, Sym};
use crate::limits::{Limit, Limits};
use crate::vocab::TokenVocab;
use crate::Error;

/// Upper bound on `{m,n}` and `~ m..n` repetition counts, so a tiny text cannot build a huge
/// grammar.
const MAX_REPEAT: u32 = 1000;

/// A parsed expression.
#[derive(Clone, Debug)]
pub(crate) enum Expr {
    /// Literal bytes (case-insensitive when the flag is set).
    Lit(Vec<u8>, bool),
    /// A regular expression in regex-automata syntax.
    Regex(String),
    /// A rule reference.
    Ref(String),
    /// A sequence.
    Seq(Vec<Expr>),
    /// Alternatives.
    Alt(Vec<Expr>),
    /// Between `min` and `max` (None: unbounded) repetitions.
    Repeat(Box<Expr>, u32, Option<u32>),
    /// One whole token (GBNF's `<[id]>` or `<text>`), or with the flag any one token but it
    /// (`!<[id]>`).
    Token(TokenRef, bool),
}

/// How a GBNF grammar names a token.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum TokenRef {
    /// `<[id]>`.
    Id(u32),
    /// `<text>`: the token with that text, found in the vocabulary at compile time.
    Text(String),
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Name(String),
    Define,
    Str(Vec<u8>, bool),
    Regex(String),
    Dot,
    LParen,
    RParen,
    LBracket,
    RBracket,
    Pipe,
    Star,
    Plus,
    Quest,
    Bang,
    Tilde,
    DotDot,
    Num(u32),
    Brace(u32, Option<u32>),
    Directive(String, String),
    Token(TokenRef),
}

#[derive(Clone, Copy, PartialEq)]
enum Dialect {
    Gbnf,
    Lark,
}

struct Lexer<'a> {
    src: &'a str,
    pos: usize,
    line: usize,
    col: usize,
    dialect: Dialect,
}

fn syntax(line: usize, column: usize, reason: &'static str) -> Error {
    Error::GrammarSyntax {
        line,
        column,
        reason,
    }
}

impl<'a> Lexer<'a> {
    fn peek(&self) -> Option<char> {
        self.src[self.pos..].chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        if c == '\n' {
            self.line += 1;
            self.col = 1;
        } else {
            self.col += 1;
        }
        Some(c)
    }

    fn err(&self, reason: &'static str) -> Error {
        syntax(self.line, self.col, reason)
    }

    /// Reads an escape after a backslash, returning the character.
    fn escape(&mut self) -> Result<char, Error> {
        let c = self.bump().ok_or_else(|| self.err("unfinished escape"))?;
        let hex = |lx: &mut Self, n: usize| -> Result<char, Error> {
            let mut v = 0u32;
            for _ in 0..n {
                let d = lx
                    .bump()
                    .and_then(|c| c.to_digit(16))
                    .ok_or_else(|| lx.err("bad hex escape"))?;
                v = v * 16 + d;
            }
            char::from_u32(v).ok_or_else(|| lx.err("escape is not a Unicode scalar value"))
        };
        Ok(match c {
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'x' => hex(self, 2)?,
            'u' => hex(self, 4)?,
            'U' => hex(self, 8)?,
            other => other,
        })
    }

    fn tokens(mut self) -> Result<Vec<(Tok, usize, usize)>, Error> {
        let mut out = Vec::new();
        loop {
            // Skip blanks and comments.
            while let Some(c) = self.peek() {
                if c.is_whitespace() {
                    self.bump();
                } else if (c == '#' && self.dialect == Dialect::Gbnf)
                    || self.src[self.pos..].starts_with("//")
                {
                    while self.peek().is_some_and(|c| c != '\n') {
                        self.bump();
                    }
                } else {
                    break;
                }
            }
            let (line, col) = (self.line, self.col);
            let Some(c) = self.bump() else { break };
            let tok = match c {
                '"' => {
                    let mut s = String::new();
                    loop {
                        match self.bump() {
                            None => return Err(syntax(line, col, "unterminated string")),
                            Some('"') => break,
                            Some('\\') => s.push(self.escape()?),
                            Some(c) => s.push(c),
                        }
                    }
                    let ci = self.dialect == Dialect::Lark && self.peek() == Some('i') && {
                        let next = self.src[self.pos + 1..].chars().next();
                        !next.is_some_and(|c| c.is_alphanumeric() || c == '_')
                    };
                    if ci {
                        self.bump();
                    }
                    Tok::Str(s.into_bytes(), ci)
                }
                '[' if self.dialect == Dialect::Gbnf => {
                    let mut re = String::from("[");
                    if self.peek() == Some('^') {
                        self.bump();
                        re.push('^');
                    }
                    let mut first = true;
                    loop {
                        let c = self
                            .bump()
                            .ok_or_else(|| syntax(line, col, "unterminated character class"))?;
                        if c == ']' && !first {
                            break;
                        }
                        first = false;
                        let c = if c == '\\' { self.escape()? } else { c };
                        re.push_str(&format!("\\x{{{:x}}}", c as u32));
                        if self.peek() == Some('-') && !self.src[self.pos + 1..].starts_with(']') {
                            self.bump();
                            let d = self
                                .bump()
                                .ok_or_else(|| syntax(line, col, "unterminated range"))?;
                            let d = if d == '\\' { self.escape()? } else { d };
                            if d < c {
                                return Err(syntax(line, col, "character range out of order"));
                            }
                            re.push_str(&format!("-\\x{{{:x}}}", d as u32));
                        }
                    }
                    re.push(']');
                    Tok::Regex(re)
                }
                '/' if self.dialect == Dialect::Lark => {
                    let mut re = String::new();
                    loop {
                        match self.bump() {
                            None | Some('\n') => {
                                return Err(syntax(line, col, "unterminated regular expression"))
                            }
                            Some('/') => break,
                            Some('\\') => {
                                let e = self.bump().ok_or_else(|| {
                                    syntax(line, col, "unterminated regular expression")
                                })?;
                                if e != '/' {
                                    re.push('\\');
                                }
                                re.push(e);
                            }
                            Some(c) => re.push(c),
                        }
                    }
                    let mut flags = String::new();
                    while let Some(f @ ('i' | 's' | 'm' | 'x' | 'u')) = self.peek() {
                        self.bump();
                        if f != 'u' {
                            flags.push(f);
                        }
                    }
                    if flags.is_empty() {
                        Tok::Regex(format!("(?:{re})"))
                    } else {
                        Tok::Regex(format!("(?{flags}:{re})"))
                    }
                }
                '%' if self.dialect == Dialect::Lark => {
                    let mut name = String::new();
                    while self.peek().is_some_and(|c| c.is_alphanumeric() || c == '_') {
                        name.push(self.bump().unwrap_or(' '));
                    }
                    let mut rest = String::new();
                    while self.peek().is_some_and(|c| c != '\n') {
                        rest.push(self.bump().unwrap_or(' '));
                    }
                    Tok::Directive(name, rest.trim().to_string())
                }
                ':' if self.dialect == Dialect::Gbnf && self.src[self.pos..].starts_with(":=") => {
                    self.bump();
                    self.bump();
                    Tok::Define
                }
                ':' if self.dialect == Dialect::Lark => Tok::Define,
                // `..` is Lark's range (`~ 2..5`); in GBNF every `.` is one any-character, so
                // `...` is three of them, as llama.cpp reads it.
                '.' if self.dialect == Dialect::Lark && self.peek() == Some('.') => {
                    self.bump();
                    Tok::DotDot
                }
                '.' => Tok::Dot,
                // llama.cpp's token references: `<[id]>` or `<text>`.
                '<' if self.dialect == Dialect::Gbnf => {
                    if self.peek() == Some('[') {
                        self.bump();
                        let mut id: u32 = 0;
                        let mut digits = 0;
                        while let Some(d) = self.peek().and_then(|c| c.to_digit(10)) {
                            self.bump();
                            digits += 1;
                            id = id
                                .checked_mul(10)
                                .and_then(|v| v.checked_add(d))
                                .ok_or_else(|| syntax(line, col, "token id too large"))?;
                        }
                        if digits == 0 || self.bump() != Some(']') || self.bump() != Some('>') {
                            return Err(syntax(line, col, "expected a token id as <[123]>"));
                        }
                        Tok::Token(TokenRef::Id(id))
                    } else {
                        let mut text = String::new();
                        loop {
                            match self.bump() {
                                None => return Err(syntax(line, col, "unterminated token <...>")),
                                Some('>') => break,
                                Some(c) => text.push(c),
                            }
                        }
                        Tok::Token(TokenRef::Text(format!("<{text}>")))
                    }
                }
                '(' => Tok::LParen,
                ')' => Tok::RParen,
                '[' => Tok::LBracket,
                ']' => Tok::RBracket,
                '|' => Tok::Pipe,
                '*' => Tok::Star,
                '+' => Tok::Plus,
                '?' => Tok::Quest,
                '!' => Tok::Bang,
                '~' => Tok::Tilde,
                '{' => {
                    let mut body = String::new();
                    loop {
                        match self.bump() {
                            None => return Err(syntax(line, col, "unterminated {}")),
                            Some('}') => break,
                            Some(c) => body.push(c),
                        }
                    }
                    let num = |s: &str| -> Result<u32, Error> {
                        s.trim()
                            .parse::<u32>()
                            .map_err(|_| syntax(line, col, "bad repetition count"))
                    };
                    let (min, max) = match body.split_once(',') {
                        None => (num(&body)?, Some(num(&body)?)),
                        Some((a, b)) if b.trim().is_empty() => (num(a)?, None),
                        Some((a, b)) => (num(a)?, Some(num(b)?)),
                    };
                    if min > MAX_REPEAT || max.is_some_and(|m| m > MAX_REPEAT || m < min) {
                        return Err(syntax(line, col, "repetition count out of range"));
                    }
                    Tok::Brace(min, max)
                }
                c if c.is_ascii_digit() => {
                    let mut v = c.to_digit(10).unwrap_or(0);
                    while let Some(d) = self.peek().and_then(|c| c.to_digit(10)) {
                        self.bump();
                        v = v
                            .checked_mul(10)
                            .and_then(|v| v.checked_add(d))
                            .ok_or_else(|| syntax(line, col, "number too large"))?;
                    }
                    Tok::Num(v)
                }
                c if c.is_alphabetic() || c == '_' => {
                    let mut s = c.to_string();
                    while let Some(c) = self.peek() {
                        let ok = c.is_alphanumeric()
                            || c == '_'
                            || (c == '-' && self.dialect == Dialect::Gbnf);
                        if !ok {
                            break;
                        }
                        s.push(c);
                        self.bump();
                    }
                    Tok::Name(s)
                }
                _ => return Err(syntax(line, col, "unexpected character")),
            };
            out.push((tok, line, col));
        }
        Ok(out)
    }
}

/// A parsed grammar text.
pub(crate) struct Ast {
    /// Rules in order of definition; a name may be defined once.
    pub(crate) rules: Vec<(String, Expr)>,
    /// Lark `%ignore` expressions.
    pub(crate) ignore: Vec<Expr>,
}

struct Parser {
    toks: Vec<(Tok, usize, usize)>,
    i: usize,
    dialect: Dialect,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.i).map(|t| &t.0)
    }

    fn here(&self) -> (usize, usize) {
        self.toks
            .get(self.i)
            .or(self.toks.last())
            .map_or((1, 1), |t| (t.1, t.2))
    }

    fn err(&self, reason: &'static str) -> Error {
        let (l, c) = self.here();
        syntax(l, c, reason)
    }

    /// Whether a rule definition starts at token `i` (`name ::=`, or Lark's `?name:`,
    /// `NAME.2:`).
    fn def_at(&self, mut i: usize) -> bool {
        // Lark's `?rule:` and `!rule:` prefixes. GBNF has none: there a `?` ending a line is
        // the postfix of the rule above (`a ::= "s"?` then `b ::= ...`), which was once read as
        // a prefix of `b` and dropped.
        while self.dialect == Dialect::Lark
            && matches!(self.toks.get(i).map(|t| &t.0), Some(Tok::Quest | Tok::Bang))
        {
            i += 1;
        }
        if !matches!(self.toks.get(i).map(|t| &t.0), Some(Tok::Name(_))) {
            return false;
        }
        i += 1;
        if self.dialect == Dialect::Lark && matches!(self.toks.get(i).map(|t| &t.0), Some(Tok::Dot))
        {
            i += 2;
        }
        matches!(self.toks.get(i).map(|t| &t.0), Some(Tok::Define))
    }

    fn parse(mut self) -> Result<Ast, Error> {
        let mut ast = Ast {
            rules: Vec::new(),
            ignore: Vec::new(),
        };
        // Names defined so far (a set: a scan of the rules made long grammars quadratic).
        let mut defined: std::collections::HashSet<String> = std::collections::HashSet::new();
        while let Some(t) = self.peek().cloned() {
            if let Tok::Directive(name, rest) = t {
                self.i += 1;
                match name.as_str() {
                    "ignore" => {
                        let toks = Lexer {
                            src: &rest,
                            pos: 0,
                            line: 1,
                            col: 1,
                            dialect: Dialect::Lark,
                        }
                        .tokens()?;
                        let mut p = Parser {
                            toks,
                            i: 0,
                            dialect: Dialect::Lark,
                            depth: 0,
                        };
                        let e = p.alts()?;
                        if p.peek().is_some() {
                            return Err(self.err("unexpected text after %ignore"));
                        }
                        ast.ignore.push(e);
                    }
                    "import" => {
                        // `%import common.NAME` (optionally `-> ALIAS`, not supported).
                        let name = rest
                            .strip_prefix("common.")
                            .ok_or_else(|| self.err("only %import common.NAME is supported"))?;
                        let re = common_terminal(name.trim())
                            .ok_or_else(|| self.err("unknown common terminal"))?;
                        defined.insert(name.trim().to_string());
                        ast.rules
                            .push((name.trim().to_string(), Expr::Regex(re.to_string())));
                    }
                    _ => return Err(self.err("unsupported directive")),
                }
                continue;
            }
            if !self.def_at(self.i) {
                return Err(self.err("expected a rule definition"));
            }
            while matches!(self.peek(), Some(Tok::Quest | Tok::Bang)) {
                self.i += 1;
            }
            let Some(Tok::Name(name)) = self.peek().cloned() else {
                return Err(self.err("expected a rule name"));
            };
            self.i += 1;
            if matches!(self.peek(), Some(Tok::Dot)) {
                self.i += 2;
            }
            self.i += 1;
            let body = self.alts()?;
            if !defined.insert(name.clone()) {
                return Err(self.err("rule defined twice"));
            }
            ast.rules.push((name, body));
        }
        Ok(ast)
    }

    fn alts(&mut self) -> Result<Expr, Error> {
        self.depth += 1;
        if self.depth > 200 {
            return Err(self.err("nesting too deep"));
        }
        let mut alts = vec![self.seq()?];
        while self.peek() == Some(&Tok::Pipe) {
            self.i += 1;
            alts.push(self.seq()?);
        }
        self.depth -= 1;
        Ok(if alts.len() == 1 {
            alts.pop().unwrap_or(Expr::Seq(vec![]))
        } else {
            Expr::Alt(alts)
        })
    }

    fn seq(&mut self) -> Result<Expr, Error> {
        let mut items = Vec::new();
        loop {
            match self.peek() {
                None | Some(Tok::Pipe | Tok::RParen | Tok::RBracket | Tok::Directive(..)) => break,
                _ if self.def_at(self.i) => break,
                _ => items.push(self.postfix()?),
            }
        }
        Ok(if items.len() == 1 {
            items.pop().unwrap_or(Expr::Seq(vec![]))
        } else {
            Expr::Seq(items)
        })
    }

    fn postfix(&mut self) -> Result<Expr, Error> {
        let mut e = self.atom()?;
        loop {
            e = match self.peek() {
                Some(Tok::Star) => Expr::Repeat(Box::new(e), 0, None),
                Some(Tok::Plus) => Expr::Repeat(Box::new(e), 1, None),
                Some(Tok::Quest) if !self.def_at(self.i) => Expr::Repeat(Box::new(e), 0, Some(1)),
                Some(Tok::Brace(a, b)) if self.dialect == Dialect::Gbnf => {
                    Expr::Repeat(Box::new(e), *a, *b)
                }
                Some(Tok::Tilde) if self.dialect == Dialect::Lark => {
                    self.i += 1;
                    let Some(Tok::Num(a)) = self.peek().cloned() else {
                        return Err(self.err("expected a count after ~"));
                    };
                    let mut b = a;
                    if self.toks.get(self.i + 1).map(|t| &t.0) == Some(&Tok::DotDot) {
                        self.i += 2;
                        let Some(Tok::Num(m)) = self.peek().cloned() else {
                            return Err(self.err("expected a count after .."));
                        };
                        b = m;
                    }
                    if a > MAX_REPEAT || b > MAX_REPEAT || b < a {
                        return Err(self.err("repetition count out of range"));
                    }
                    Expr::Repeat(Box::new(e), a, Some(b))
                }
                _ => return Ok(e),
            };
            self.i += 1;
        }
    }

    fn atom(&mut self) -> Result<Expr, Error> {
        let (line, col) = self.here();
        let t = self
            .peek()
            .cloned()
            .ok_or_else(|| self.err("unexpected end of grammar"))?;
        self.i += 1;
        Ok(match t {
            Tok::Str(s, ci) => Expr::Lit(s, ci),
            Tok::Regex(r) => Expr::Regex(r),
            Tok::Dot if self.dialect == Dialect::Gbnf => Expr::Regex("(?s:.)".into()),
            Tok::Token(r) => Expr::Token(r, false),
            Tok::Bang if self.dialect == Dialect::Gbnf => match self.peek().cloned() {
                Some(Tok::Token(r)) => {
                    self.i += 1;
                    Expr::Token(r, true)
                }
                _ => return Err(syntax(line, col, "expected a token after !")),
            },
            Tok::Name(n) => Expr::Ref(n),
            Tok::LParen => {
                let e = self.alts()?;
                if self.peek() != Some(&Tok::RParen) {
                    return Err(self.err("expected )"));
                }
                self.i += 1;
                e
            }
            Tok::LBracket if self.dialect == Dialect::Lark => {
                let e = self.alts()?;
                if self.peek() != Some(&Tok::RBracket) {
                    return Err(self.err("expected ]"));
                }
                self.i += 1;
                Expr::Repeat(Box::new(e), 0, Some(1))
            }
            _ => {
                return Err(syntax(
                    line,
                    col,
                    "expected a literal, a class, a rule name or a group",
                ))
            }
        })
    }
}

/// Lark's `common` terminals we know.
fn common_terminal(name: &str) -> Option<&'static str> {
    Some(match name {
        "WS" => r"[ \t\f\r\n]+",
        "WS_INLINE" => r"[ \t]+",
        "NEWLINE" => r"(\r?\n)+",
        "CR" => r"\r",
        "LF" => r"\n",
        "DIGIT" => r"[0-9]",
        "HEXDIGIT" => r"[0-9a-fA-F]",
        "INT" => r"[0-9]+",
        "SIGNED_INT" => r"[+-]?[0-9]+",
        "DECIMAL" => r"[0-9]+\.[0-9]*|\.[0-9]+",
        "NUMBER" => r"[0-9]+(\.[0-9]*)?([eE][+-]?[0-9]+)?|\.[0-9]+([eE][+-]?[0-9]+)?",
        "SIGNED_NUMBER" => r"[+-]?([0-9]+(\.[0-9]*)?([eE][+-]?[0-9]+)?|\.[0-9]+([eE][+-]?[0-9]+)?)",
        "LETTER" => r"[A-Za-z]",
        "LCASE_LETTER" => r"[a-z]",
        "UCASE_LETTER" => r"[A-Z]",
        "WORD" => r"[A-Za-z]+",
        "CNAME" => r"[A-Za-z_][A-Za-z0-9_]*",
        "ESCAPED_STRING" => r#""([^"\\\n]|\\.)*""#,
        _ => return None,
    })
}

pub(crate) fn parse_gbnf(text: &str) -> Result<Ast, Error> {
    let toks = Lexer {
        src: text,
        pos: 0,
        line: 1,
        col: 1,
        dialect: Dialect::Gbnf,
    }
    .tokens()?;
    Parser {
        toks,
        i: 0,
        dialect: Dialect::Gbnf,
        depth: 0,
    }
    .parse()
}

pub(crate) fn parse_lark(text: &str) -> Result<Ast, Error> {
    let toks = Lexer {
        src: text,
        pos: 0,
        line: 1,
        col: 1,
        dialect: Dialect::Lark,
    }
    .tokens()?;
    Parser {
        toks,
        i: 0,
        dialect: Dialect::Lark,
        depth: 0,
    }
    .parse()
}

/// A group of one item is that item.
fn peel(mut e: &Expr) -> &Expr {
    loop {
        match e {
            Expr::Seq(v) | Expr::Alt(v) if v.len() == 1 => e = &v[0],
            _ => return e,
        }
    }
}

/// Simplifies `inner{min,max}` where `inner` is itself a repeat, algebraically:
/// `(X*){m,n}` is `X*` (a star matches the empty string and is closed under concatenation),
/// `(X+){m,n}` is `X{m,}`, and `(X?){m,}` is `X*` (for `n ≥ 1`). Applied until the body is
/// no such repeat (inner repeats first), so nested bounded repeats of a star, which made every
/// Earley set grow with the product of the counts, are one star.
fn collapse(inner: &Expr, min: u32, max: Option<u32>) -> (&Expr, u32, Option<u32>) {
    if max == Some(0) {
        return (inner, min, max);
    }
    let Expr::Repeat(body, a, b) = peel(inner) else {
        return (inner, min, max);
    };
    let (body, a, b) = collapse(body, *a, *b);
    match (a, b) {
        (0, None) => (body, 0, None),
        (1, None) => (body, min, None),
        (0, Some(1)) if max.is_none() => (body, 0, None),
        _ => (inner, min, max),
    }
}

/// Compiles a parsed grammar with start rule `start`, checking its size against `limits`
/// (rules first, as they are made, so that a huge grammar stops early). Token texts
/// (`<|im_end|>`) need a vocabulary: [`compile_for_vocab`].
pub(crate) fn compile_with(ast: &Ast, start: &str, limits: &Limits) -> Result<Grammar, Error> {
    compile_for_vocab(ast, start, limits, None)
}

/// [`compile_with`], with token texts found in `vocab` and token ids checked against it.
pub(crate) fn compile_for_vocab(
    ast: &Ast,
    start: &str,
    limits: &Limits,
    vocab: Option<&TokenVocab>,
) -> Result<Grammar, Error> {
    crate::limits::check(Limit::Rules, ast.rules.len(), limits.max_rules)?;
    let mut c = Compile {
        b: GrammarBuilder::default(),
        names: HashMap::new(),
        ignore: None,
        vocab,
    };
    for (name, _) in &ast.rules {
        let nt = c.b.nt(name.clone());
        c.names.insert(name.clone(), nt);
    }
    if !ast.ignore.is_empty() {
        // Lark's %ignore: any number of ignored pieces between the items of rules (not inside
        // terminals, whose names are upper case).
        let ig = c.b.nt("%ignore");
        c.b.rule(ig, vec![]);
        for e in &ast.ignore {
            let s = c.expr(e, false)?;
            c.b.rule(ig, vec![Sym::Nt(ig), s]);
        }
        c.ignore = Some(Sym::Nt(ig));
    }
    for (name, body) in &ast.rules {
        let is_rule = c.ignore.is_some() && name.chars().next().is_some_and(|ch| ch.is_lowercase());
        let s = c.expr(body, is_rule)?;
        let nt = c.names[name];
        c.b.rule(nt, vec![s]);
    }
    let root = *c.names.get(start).ok_or_else(|| Error::MissingStart {
        name: start.to_string(),
    })?;
    let top = match c.ignore {
        Some(ig) => {
            c.b.alts("<ignored start>", vec![vec![ig, Sym::Nt(root), ig]])
        }
        None => Sym::Nt(root),
    };
    c.b.build_with(top, limits)
}

struct Compile<'v> {
    b: GrammarBuilder,
    names: HashMap<String, u32>,
    ignore: Option<Sym>,
    vocab: Option<&'v TokenVocab>,
}

impl Compile<'_> {
    /// The id a token reference names.
    fn token_id(&self, r: &TokenRef) -> Result<u32, Error> {
        match (r, self.vocab) {
            (TokenRef::Id(id), None) => Ok(*id),
            (TokenRef::Id(id), Some(v)) if (*id as usize) < v.len() => Ok(*id),
            (TokenRef::Id(id), Some(v)) => Err(Error::TokenOutOfRange {
                token: *id,
                vocab_size: v.len(),
            }),
            (TokenRef::Text(text), v) => v
                .and_then(|v| v.token_for_text(text))
                .ok_or_else(|| Error::UnknownToken { text: text.clone() }),
        }
    }

    fn expr(&mut self, e: &Expr, in_rule: bool) -> Result<Sym, Error> {
        Ok(match e {
            Expr::Token(r, negated) => {
                let id = self.token_id(r)?;
                self.b.token(vec![id], *negated)
            }
            Expr::Lit(bytes, false) => self.b.literal(bytes),
            Expr::Lit(bytes, true) => {
                let text = String::from_utf8_lossy(bytes);
                self.b
                    .regex(&format!("(?i:{})", crate::constraint::regex_escape(&text)))?
            }
            Expr::Regex(r) => self.b.terminal(Dfa::from_regex(r)?)?,
            Expr::Ref(n) => Sym::Nt(
                *self
                    .names
                    .get(n)
                    .ok_or_else(|| Error::UndefinedRule { name: n.clone() })?,
            ),
            Expr::Seq(items) => {
                let mut syms = Vec::new();
                for (i, it) in items.iter().enumerate() {
                    if i > 0 && in_rule {
                        if let Some(ig) = self.ignore {
                            syms.push(ig);
                        }
                    }
                    syms.push(self.expr(it, in_rule)?);
                }
                self.b.alts("<seq>", vec![syms])
            }
            Expr::Alt(alts) => {
                let mut out = Vec::new();
                for a in alts {
                    out.push(vec![self.expr(a, in_rule)?]);
                }
                self.b.alts("<alt>", out)
            }
            Expr::Repeat(inner, min, max) => {
                let (inner, min, max) = collapse(inner, *min, *max);
                let (min, max) = (&min, &max);
                let x = self.expr(inner, in_rule)?;
                let sep: Vec<Sym> = if in_rule {
                    self.ignore.into_iter().collect()
                } else {
                    vec![]
                };
                // Mandatory copies, then either a left-recursive star or nested optionals.
                let mut seq: Vec<Sym> = Vec::new();
                for i in 0..*min {
                    if i > 0 {
                        seq.extend(&sep);
                    }
                    seq.push(x);
                }
                let tail = match max {
                    None => {
                        let star = self.b.nt("<star>");
                        self.b.rule(star, vec![]);
                        let mut r = vec![Sym::Nt(star)];
                        r.extend(&sep);
                        r.push(x);
                        self.b.rule(star, r);
                        Some(Sym::Nt(star))
                    }
                    Some(m) if *m > *min => {
                        let mut opt = self.b.alts("<opt>", vec![vec![], vec![x]]);
                        for _ in *min + 1..*m {
                            let mut r = vec![x];
                            r.extend(&sep);
                            r.push(opt);
                            opt = self.b.alts("<opt>", vec![vec![], r]);
                        }
                        Some(opt)
                    }
                    _ => None,
                };
                if let Some(t) = tail {
                    if !seq.is_empty() {
                        seq.extend(&sep);
                    }
                    seq.push(t);
                }
                self.b.alts("<repeat>", vec![seq])
            }
        })
    }
}

/// A constraint for a GBNF grammar (llama.cpp's format); the start rule is `root`, and token
/// texts (`<|im_end|>`) are tokens of `vocab`.
pub fn from_gbnf(text: &str, vocab: &Arc<TokenVocab>) -> Result<GrammarConstraint, Error> {
    Ok(GrammarConstraint::new(
        compile_gbnf_for_vocab(text, "root", vocab, &Limits::DEFAULT)?,
        vocab,
    ))
}

/// Compiles GBNF text with start rule `root`, under `limits`, for one vocabulary: token texts
/// (`<|im_end|>`, `<think>`) become the vocabulary's token of that text
/// ([`TokenVocab::token_for_text`]; [`Error::UnknownToken`] when there is none) and token ids
/// (`<[1000]>`) must lie in it ([`Error::TokenOutOfRange`]).
///
/// ```
/// use std::sync::Arc;
/// use nextok_constraints::{compile_gbnf_for_vocab, Constraint, GrammarConstraint, Limits, TokenVocab};
///
/// // Token 0 ends the output; token 1 is a special token `<|im_end|>` without bytes.
/// let mut tokens = vec![b"<eos>".to_vec(), Vec::new()];
/// tokens.extend((b'a'..=b'z').map(|b| vec![b]));
/// let vocab = Arc::new(TokenVocab::new(tokens, &[0])?.with_special_tokens([("<|im_end|>", 1)])?);
/// let g = compile_gbnf_for_vocab("root ::= (!<|im_end|>)+ <|im_end|>", "root", &vocab, &Limits::DEFAULT)?;
/// let mut c = GrammarConstraint::new(g, &vocab);
/// for t in [2, 3, 1] {
///     c.advance(t)?; // "a", "b", then the special token
/// }
/// assert!(c.is_complete());
/// # Ok::<(), nextok_constraints::Error>(())
/// ```
pub fn compile_gbnf_for_vocab(
    text: &str,
    root: &str,
    vocab: &TokenVocab,
    limits: &Limits,
) -> Result<Arc<Grammar>, Error> {
    Ok(Arc::new(compile_for_vocab(
        &parse_gbnf(text)?,
        root,
        limits,
        Some(vocab),
    )?))
}

/// Compiles GBNF text to a grammar (start rule `root`). Token ids (`<[1000]>`) are kept as
/// they are; token texts (`<|im_end|>`) need a vocabulary ([`compile_gbnf_for_vocab`]) and are
/// [`Error::UnknownToken`] here.
pub fn compile_gbnf(text: &str) -> Result<Arc<Grammar>, Error> {
    compile_gbnf_with_limits(text, &Limits::DEFAULT)
}

/// Compiles GBNF text to a grammar (start rule `root`) whose size and work per mask are bounded
/// by `limits`.
pub fn compile_gbnf_with_limits(text: &str, limits: &Limits) -> Result<Arc<Grammar>, Error> {
    Ok(Arc::new(compile_with(&parse_gbnf(text)?, "root", limits)?))
}

/// A constraint for a Lark-like EBNF grammar; the start rule is `start`.
///
/// Supported: rules (`name: a | b`, with `?`/`!` prefixes ignored), terminals (`NAME: ...`,
/// priorities ignored), `"literal"` and `"literal"i`, `/regex/flags`, `( )`, `[ ]`, `?`, `*`,
/// `+`, `~ n` and `~ n..m`, `%ignore`, and `%import common.NAME` for Lark's common terminals.
pub fn from_lark(text: &str, vocab: &Arc<TokenVocab>) -> Result<GrammarConstraint, Error> {
    Ok(GrammarConstraint::new(compile_lark(text)?, vocab))
}

/// Compiles Lark-like text to a grammar (start rule `start`).
pub fn compile_lark(text: &str) -> Result<Arc<Grammar>, Error> {
    compile_lark_with_limits(text, &Limits::DEFAULT)
}

/// Compiles Lark-like text to a grammar (start rule `start`) whose size and work per mask are
/// bounded by `limits`.
pub fn compile_lark_with_limits(text: &str, limits: &Limits) -> Result<Arc<Grammar>, Error> {
    Ok(Arc::new(compile_with(&parse_lark(text)?, "start", limits)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gbnf_basics() {
        let g = compile_gbnf(
            "# arithmetic, left recursive\nroot ::= expr\nexpr ::= expr \"+\" term | term\nterm ::= [0-9]+ | \"(\" expr \")\"\n",
        )
        .unwrap();
        for ok in ["1", "1+2", "(1+2)+30", "((7))"] {
            assert!(g.recognizes(ok.as_bytes()), "{ok}");
        }
        for bad in ["", "+", "1+", "(1", "a"] {
            assert!(!g.recognizes(bad.as_bytes()), "{bad}");
        }
        let g = compile_gbnf("root ::= [^\"\\\\]{2,3} \"\\n\"? .").unwrap();
        assert!(g.recognizes("abé".as_bytes()) && g.recognizes(b"ab\nx") && !g.recognizes(b"a\"x"));
    }

    #[test]
    fn gbnf_dots_are_each_one_character() {
        // Issue 13: `...` was lexed as Lark's `..` range token and refused; llama.cpp reads three
        // any-characters.
        let g = compile_gbnf("root ::= ... \"abc\" ...").unwrap();
        assert!(g.recognizes(b"xyzabcpqr"));
        assert!(g.recognizes("éé.abc...".as_bytes()));
        assert!(!g.recognizes(b"xyabcpqr") && !g.recognizes(b"xyzabcpq"));
        let g = compile_gbnf("root ::= \"a\"..").unwrap();
        assert!(g.recognizes(b"a12") && !g.recognizes(b"a1"));
        // Lark keeps its range.
        let g = compile_lark("start: \"a\" ~ 2..3").unwrap();
        assert!(g.recognizes(b"aa") && g.recognizes(b"aaa") && !g.recognizes(b"a"));
    }

    #[test]
    fn gbnf_optional_at_the_end_of_a_line() {
        // A `?` ending a rule's line was taken for a Lark prefix of the next rule and dropped,
        // so `rest` was required (llama.cpp's JSON Schema grammars end lines so).
        let g = compile_gbnf("root ::= num rest \"}\"\nrest ::= \"s\"?\nnum ::= [0-9]+").unwrap();
        assert!(g.recognizes(b"1}") && g.recognizes(b"12s}") && !g.recognizes(b"1ss}"));
    }

    #[test]
    fn lark_basics() {
        let g = compile_lark(
            "start: pair (\",\" pair)*\npair: KEY \"=\" VALUE\nKEY: /[a-z]+/\nVALUE: INT | \"yes\"i\n%import common.INT\n%ignore \" \"\n",
        )
        .unwrap();
        for ok in ["a=1", "a = 1 , b=YES", " x=Yes "] {
            assert!(g.recognizes(ok.as_bytes()), "{ok}");
        }
        for bad in ["a=", "a=1,", "A=1", "a=1 2"] {
            assert!(!g.recognizes(bad.as_bytes()), "{bad}");
        }
    }

    #[test]
    fn errors_are_typed() {
        assert!(matches!(
            compile_gbnf("root ::= foo"),
            Err(Error::UndefinedRule { .. })
        ));
        assert!(matches!(
            compile_gbnf("rot ::= \"a\""),
            Err(Error::MissingStart { .. })
        ));
        assert!(matches!(
            compile_gbnf("root ::= \"a"),
            Err(Error::GrammarSyntax { line: 1, .. })
        ));
        assert!(matches!(
            compile_gbnf("root ::= [z-a]"),
            Err(Error::GrammarSyntax { .. })
        ));
        assert!(matches!(
            compile_lark("start: /a/ %bogus"),
            Err(Error::GrammarSyntax { .. })
        ));
        assert!(matches!(
            compile_gbnf("root ::= root"),
            Err(Error::EmptyLanguage)
        ));
    }
}
