//! Every grammar of llama.cpp's `tests/test-grammar-integration.cpp` (issue #17), from the facts
//! file `conformance/gbnf/llama-cpp-grammar-integration.json` (made by
//! `tools/llama-grammar-facts.py`, which records each verdict while llama.cpp's own asserts run):
//! each grammar llama.cpp builds must compile, and accept exactly the strings llama.cpp accepts,
//! token references (`<[10]>`, `!<[11]>`) included; each grammar llama.cpp refuses for a missing
//! rule or root must be refused. llama.cpp also refuses left-recursive grammars, which an Earley
//! parser reads as they are: those must compile here (a deliberate difference).
//!
//! Strings are fed as llama.cpp's test feeds them: one token per code point, and token ids where
//! the string names them.

use std::collections::BTreeMap;
use std::sync::Arc;

use nextok_constraints::{
    compile_gbnf_for_vocab, Constraint, GrammarConstraint, Limits, TokenVocab,
};
use serde_json::Value;

/// Ids below this are special tokens without bytes (the strings name 10 to 21); id 0 ends the
/// output.
const SPECIAL: u32 = 64;

/// The vocabulary: id 0 the end token, ids 1 to 63 special tokens without bytes, then one
/// token per byte, then one per non-ASCII code point of the strings.
struct Vocab {
    vocab: Arc<TokenVocab>,
    chars: BTreeMap<char, u32>,
}

impl Vocab {
    fn new(cases: &[Value]) -> Vocab {
        let mut tokens: Vec<Vec<u8>> = vec![b"<eos>".to_vec()];
        tokens.extend((1..SPECIAL).map(|_| Vec::new()));
        tokens.extend((0..=255u8).map(|b| vec![b]));
        let mut chars = BTreeMap::new();
        for c in cases {
            for s in strings(c) {
                for p in s.as_array().expect("a string is a list of pieces") {
                    for ch in p.as_str().unwrap_or("").chars().filter(|c| !c.is_ascii()) {
                        chars.entry(ch).or_insert_with(|| {
                            tokens.push(ch.to_string().into_bytes());
                            tokens.len() as u32 - 1
                        });
                    }
                }
            }
        }
        let special = (1..SPECIAL).map(|id| (format!("<|special_{id}|>"), id));
        let vocab = TokenVocab::new(tokens, &[0])
            .and_then(|v| v.with_special_tokens(special))
            .expect("vocab");
        Vocab {
            vocab: Arc::new(vocab),
            chars,
        }
    }

    /// The tokens of a string: one per code point, token ids as they are.
    fn tokens(&self, pieces: &Value) -> Vec<u32> {
        let mut out = Vec::new();
        for p in pieces.as_array().expect("pieces") {
            match p {
                Value::Number(n) => {
                    let id = n.as_u64().expect("a token id") as u32;
                    assert!(id < SPECIAL, "token {id} is outside the special range");
                    out.push(id);
                }
                Value::String(s) => out.extend(s.chars().map(|c| {
                    if c.is_ascii() {
                        SPECIAL + c as u32
                    } else {
                        self.chars[&c]
                    }
                })),
                other => panic!("unexpected piece {other}"),
            }
        }
        out
    }
}

fn strings(case: &Value) -> impl Iterator<Item = &Value> {
    let list = |k: &str| case[k].as_array().expect("a list of strings").iter();
    list("passing").chain(list("failing"))
}

/// Whether the constraint accepts the whole token sequence, checking at each step that the
/// mask allows exactly what `advance` accepts.
fn accepts(c: &mut GrammarConstraint, tokens: &[u32], mismatches: &mut usize) -> bool {
    let mut mask = c.vocab().empty_mask();
    for &t in tokens {
        c.fill_mask(&mut mask).expect("mask within the limits");
        let allowed = mask[(t / 64) as usize] >> (t % 64) & 1 == 1;
        let ok = c.advance(t).is_ok();
        if ok != allowed {
            *mismatches += 1;
        }
        if !ok {
            return false;
        }
    }
    c.fill_mask(&mut mask).expect("mask within the limits");
    if c.is_complete() != (mask[0] & 1 == 1) {
        *mismatches += 1;
    }
    c.is_complete()
}

#[test]
fn llama_cpp_grammar_integration() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../conformance/gbnf/llama-cpp-grammar-integration.json"
    );
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("facts file")).expect("JSON");
    let cases = doc["cases"].as_array().expect("cases");
    let v = Vocab::new(cases);
    let (mut grammars, mut refusals, mut strings_seen, mut agreed, mut mismatches) =
        (0, 0, 0, 0, 0);
    let mut left_recursive = 0;
    let mut disagreements = Vec::new();
    for case in cases {
        let grammar = case["grammar"].as_str().expect("grammar");
        let root = case["root"].as_str().expect("root");
        let desc = case["description"].as_str().unwrap_or("");
        let compiled = compile_gbnf_for_vocab(grammar, root, &v.vocab, &Limits::DEFAULT);
        if case["builds"] == Value::Bool(false) {
            if desc == "build failure" {
                // llama.cpp's left-recursion check; an Earley parser needs none.
                assert!(compiled.is_ok(), "left recursion refused: {grammar}");
                left_recursive += 1;
            } else {
                assert!(
                    compiled.is_err(),
                    "{desc}: compiled, llama.cpp refuses it: {grammar}"
                );
                refusals += 1;
            }
            continue;
        }
        let g = compiled.unwrap_or_else(|e| panic!("{desc}: {e}\n{grammar}"));
        grammars += 1;
        for (list, expected) in [("passing", true), ("failing", false)] {
            for (i, s) in case[list].as_array().expect("strings").iter().enumerate() {
                strings_seen += 1;
                let mut c = GrammarConstraint::new(Arc::clone(&g), &v.vocab);
                let got = accepts(&mut c, &v.tokens(s), &mut mismatches);
                if got == expected {
                    agreed += 1;
                } else {
                    disagreements.push(format!("{desc}: {list}[{i}] {s}"));
                }
            }
        }
    }
    println!(
        "llama.cpp grammar integration: {grammars} grammars compiled, {refusals} refused as llama.cpp refuses them, \
         {left_recursive} left-recursive ones compiled (llama.cpp refuses them); \
         {agreed} of {strings_seen} strings agree; {mismatches} mask mismatches"
    );
    assert!(
        disagreements.is_empty(),
        "disagreements:\n{}",
        disagreements.join("\n")
    );
    assert_eq!(mismatches, 0, "a mask bit disagreed with advance");
    // The facts file's size when it was made: a shorter file means a broken extraction.
    assert_eq!((grammars, refusals, left_recursive), (48, 4, 4));
    assert_eq!(strings_seen, 387);
}

#[test]
fn token_texts_need_a_vocabulary_entry() {
    let tokens: Vec<Vec<u8>> = vec![
        b"<eos>".to_vec(),
        Vec::new(),
        b"<think>".to_vec(),
        b"a".to_vec(),
    ];
    let vocab = TokenVocab::new(tokens, &[0])
        .and_then(|v| v.with_special_tokens([("<|im_end|>", 1)]))
        .expect("vocab");
    // A special token by its text, and a normal token whose bytes are the text.
    assert_eq!(vocab.token_for_text("<|im_end|>"), Some(1));
    assert_eq!(vocab.token_for_text("<think>"), Some(2));
    assert_eq!(vocab.token_for_text("<nope>"), None);
    let g = compile_gbnf_for_vocab(
        "root ::= <think> \"a\"* <|im_end|>",
        "root",
        &vocab,
        &Limits::DEFAULT,
    )
    .expect("compiles");
    assert!(g.uses_tokens());
    let vocab = Arc::new(vocab);
    let mut c = GrammarConstraint::new(Arc::clone(&g), &vocab);
    let mut mask = vocab.empty_mask();
    c.fill_mask(&mut mask).unwrap();
    // Only <think> may come first: the bytes of `a` are no match for a token reference.
    assert_eq!(mask, [1 << 2]);
    for t in [2, 3, 3, 1] {
        c.advance(t).unwrap();
    }
    assert!(c.is_complete());
    // Unknown texts and ids outside the vocabulary are typed errors; without a vocabulary a text
    // cannot be resolved.
    assert!(matches!(
        compile_gbnf_for_vocab("root ::= <nope>", "root", &vocab, &Limits::DEFAULT),
        Err(nextok_constraints::Error::UnknownToken { text }) if text == "<nope>"
    ));
    assert!(matches!(
        compile_gbnf_for_vocab("root ::= <[4]>", "root", &vocab, &Limits::DEFAULT),
        Err(nextok_constraints::Error::TokenOutOfRange {
            token: 4,
            vocab_size: 4
        })
    ));
    assert!(matches!(
        nextok_constraints::compile_gbnf("root ::= <|im_end|>"),
        Err(nextok_constraints::Error::UnknownToken { .. })
    ));
    for bad in [
        "root ::= <[12",
        "root ::= <[]>",
        "root ::= !\"a\"",
        "root ::= <abc",
    ] {
        assert!(
            matches!(
                nextok_constraints::compile_gbnf(bad),
                Err(nextok_constraints::Error::GrammarSyntax { .. })
            ),
            "{bad}"
        );
    }
}

#[test]
fn an_end_token_named_by_the_grammar_is_read_there() {
    // SmolLM2's `<|im_end|>` is an end token; a grammar that names it reads it as a token (the
    // output goes on), while elsewhere it ends the output once the grammar is complete.
    let tokens: Vec<Vec<u8>> = vec![b"x".to_vec(), Vec::new(), b"y".to_vec()];
    let vocab = Arc::new(
        TokenVocab::new(tokens, &[1])
            .and_then(|v| v.with_special_tokens([("<|im_end|>", 1)]))
            .expect("vocab"),
    );
    let g = compile_gbnf_for_vocab(
        "root ::= \"x\" <|im_end|> \"y\"",
        "root",
        &vocab,
        &Limits::DEFAULT,
    )
    .expect("compiles");
    let mut c = GrammarConstraint::new(g, &vocab);
    c.advance(0).unwrap();
    c.advance(1).unwrap();
    assert!(!c.is_finished() && !c.is_complete());
    c.advance(2).unwrap();
    assert!(c.is_complete());
    c.advance(1).unwrap();
    assert!(c.is_finished());
    // Rolling back undoes the token read as a token.
    c.rollback(3).unwrap();
    assert_eq!(c.num_tokens(), 1);
    assert!(c.advance(2).is_err());
    // A negated reference never reads an end token: it stays an end, allowed where the
    // grammar is complete, as llama.cpp has it.
    let g = compile_gbnf_for_vocab("root ::= \"x\" (!<[2]>)*", "root", &vocab, &Limits::DEFAULT)
        .expect("compiles");
    let mut c = GrammarConstraint::new(g, &vocab);
    c.advance(0).unwrap();
    let mut mask = vocab.empty_mask();
    c.fill_mask(&mut mask).unwrap();
    // `x` by the reference, the end token because the grammar is complete; never `y`.
    assert_eq!(mask, [0b011]);
    c.advance(0).unwrap();
    c.advance(1).unwrap();
    assert!(c.is_finished());
}
