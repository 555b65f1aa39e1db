//! Constrained decoding: token masks for label sets, regular expressions, JSON, JSON Schema and
//! context-free grammars.
//!
//! At each step of generation a [`Constraint`] fills a bitset of the tokens that keep the output
//! in the required format; the engine sets every other logit to −∞ ([`apply_mask`]) before the
//! sampling chain, so the remaining probabilities are renormalised (specification, "Constrained
//! decoding"). The constraint then advances by the chosen token.
//!
//! # Contents
//! - [`TokenVocab`]: the exact bytes of every token and the end-of-generation tokens, built once
//!   per model into a token trie and shared through an `Arc`; from raw bytes
//!   ([`TokenVocab::new`]) or from a `nextok-tokenizer` tokenizer (`TokenVocab::from_tokenizer`,
//!   control tokens left out).
//! - [`Constraint`]: `fill_mask`, `advance`, `rollback`, `is_complete`, `forced_tokens`.
//! - [`RegexConstraint`]: [`from_choices`](RegexConstraint::from_choices) and
//!   [`from_regex`](RegexConstraint::from_regex); one automaton, masks cached per state.
//! - [`GrammarConstraint`]: an Earley parser over bytes whose terminals are automata, built by
//!   [`json_any`], [`from_json_schema`], [`from_gbnf`] and [`from_lark`]. Grammars may be
//!   recursive, left recursion included.
//! - [`ConformanceRun`]: runs MaskBench-format schema files (`{schema, tests: [{data, valid}]}`)
//!   and returns counts and timings.
//!
//! # Example
//! ```
//! use std::sync::Arc;
//! use nextok_constraints::{apply_mask, Constraint, RegexConstraint, TokenVocab};
//!
//! // A toy vocabulary: token 3 ends generation.
//! let vocab = Arc::new(TokenVocab::new(
//!     vec![b"FRAUD".to_vec(), b"OK".to_vec(), b"I".to_vec(), b"</s>".to_vec()],
//!     &[3],
//! )?);
//! let mut c = RegexConstraint::from_choices(&["FRAUD", "OK"], &vocab)?;
//! let mut mask = vocab.empty_mask();
//! c.fill_mask(&mut mask)?;
//! let mut logits = vec![1.0f32, 0.5, 2.0, 0.0];
//! apply_mask(&mut logits, &mask);
//! assert_eq!(logits[2], f32::NEG_INFINITY);
//! c.advance(0)?;
//! assert!(c.is_complete());
//! # Ok::<(), nextok_constraints::Error>(())
//! ```
//!
//! # Exactness
//! Everything works on bytes: a token may cross grammar boundaries (`"}` or `",\n  "`) and a
//! multi-byte UTF-8 character may be split across tokens. Terminals built from regular
//! expressions match valid UTF-8 only. A token is in the mask exactly when `advance` accepts it,
//! and every grammar is pruned of rules that can never finish, so an incomplete output always
//! has an allowed next token (given a vocabulary holding every single byte, as byte-level BPE
//! vocabularies do).
//!
//! # Cost
//! A mask is the union, over the terminals in flight, of a bitset cached per (terminal, automaton
//! state) for the tokens that stay inside the terminal, plus a walk of the token trie below the few
//! nodes where a terminal may end. The cache lives in the [`TokenVocab`] and is shared by every
//! grammar built on it, so its first use of a state costs a trie walk and later uses a copy. The
//! walk takes whole subtrees at once where all their bytes lie in one byte category (printable
//! ASCII that a JSON string holds unescaped, letters and digits, letters, digits, JSON whitespace,
//! each recorded per trie node when the vocabulary is built) and the automaton can read more bytes
//! of that category than the subtree is deep without dying or accepting: inside a JSON string a
//! first mask is some tens of microseconds at 49k tokens, up to about a millisecond for automata
//! that die on rare byte pairs (keys that must not match a pattern). Those distances (an
//! automaton's radii) cost a pass over its whole transition table, most of a millisecond at
//! thousands of states, so they are computed only once a walk without them visits more than a few
//! thousand trie nodes: automata that die on most bytes (an object's keys, an enum) never need
//! them, and a state that reads most bytes (free text) computes them at once. Compiling a JSON
//! Schema parses it once into typed schemas (references become indices into a table of targets),
//! merges `allOf` and references on those types, then builds automata (byte classes, products, the
//! JSON string encoding, built directly) and an Earley grammar: a fraction of a millisecond for
//! most small schemas, a few for Unicode classes such as `\p{Letter}`, whose determinization
//! dominates; real-world schemas take about 2 ms at the median and up to a few hundred for patterns
//! whose automata run to tens of thousands of states. Automata of regular expressions (numeric
//! bounds, formats, patterns) are kept process-wide per pattern, up to 512 and about 4 million
//! table cells together, the string contents of a set of string keywords (patterns, format,
//! lengths) up to 1,024 of at most 4,096 states, and JSON string encodings per content, up to
//! 1,024, so schemas that repeat them (and a schema that compares the same patterns again and
//! again, as `oneOf` branches do) skip that work. Products of automata (intersections, differences,
//! unions) number their pairs of states through a table rather than a hash map, and a concatenation
//! is written out directly.
//!
//! # Crate features
//! - `tokenizer` (on by default): `TokenVocab::from_tokenizer`, over `nextok-tokenizer` without
//!   its own default features (no `tokenizers` crate, no template engine). Off, this crate
//!   depends on no other nextok crate.
//!
//! # What this crate does not know
//! It never sees a model or a device, and the constraints never see a tokenizer: only token
//! bytes and end-token ids. The one bridge is `TokenVocab::from_tokenizer`, which reads a
//! tokenizer's bytes once, with control tokens left out (their bytes are their text, and a
//! grammar must never produce `<|im_start|>`).
//!
//! # Untrusted input
//! Schemas, grammars and patterns may come from users: bad ones are typed errors, automata are
//! limited in size, and a known JSON Schema keyword this crate cannot enforce exactly is an
//! error naming it and its path ([`Error::UnsupportedKeyword`]) rather than silently ignored.
//! Unknown keywords are annotations, as JSON Schema says: [`compile_json_schema_report`] lists
//! them with their paths, and [`JsonOptions::strict`] refuses them
//! ([`Error::UnknownKeyword`]).
//!
//! Every grammar constraint is bounded by [`Limits`], set through [`JsonOptions::limits`],
//! [`compile_gbnf_with_limits`] and [`compile_lark_with_limits`] (the functions without
//! `_with_limits` use [`Limits::DEFAULT`]). Going past one is [`Error::LimitExceeded`], which
//! names the limit ([`Limit`]), the value reached and the bound:
//!
//! | limit | default | bounds | checked |
//! |---|---|---|---|
//! | `max_rules` | 1,000,000 | grammar rules after lowering (repeats, groups, alternatives) | at compile |
//! | `max_items` | 4,000,000 | symbols over all rules, plus one per rule (the parser's item table) | at compile |
//! | `max_terminals` | 20,000 | distinct terminal automata; each caches one vocabulary bitset per state it is seen in, so this bounds mask memory | at compile |
//! | `max_terminal_states` | 2,000,000 | automaton states over all terminals, and the trie of a string `enum` | at compile (a deferred pattern's, when first reached) |
//! | `max_mask_work` | 1,000,000 | work units (Earley items processed, completions, terminal steps) of one mask or one token | as the work is done |
//!
//! One automaton (a pattern, a format, a class) is also limited to 100,000 states
//! ([`Error::TooLarge`]). A string value's large `pattern` is built when generation first
//! reaches the value ([`JsonOptions::defer_large_patterns`], on by default), once the compile
//! has found a string it matches: should that build go past a limit, the `fill_mask` or
//! `advance` that reached it returns the error, as one past `max_mask_work` does. The JSON-Schema-Test-Suite's largest mask or token is a few hundred
//! work units, and a mask of a million takes some tens of milliseconds. The work limit is the
//! backstop; the costs that grew without bound on hostile input are linear now: a completion
//! finds the items waiting for it by binary search (chains of rules), nested repeats of a star
//! (`((x*){0,99}){0,99}`) collapse to the star, a string `enum` is one automaton terminal (its
//! trie), and duplicate names are found with sets (`required`, rule names). A constraint that
//! reports the work limit is left as it was before the call; its
//! [`GrammarConstraint::last_work`] says what a mask or token cost.
//!
//! ```
//! use nextok_constraints::{compile_gbnf_with_limits, Error, Limit, Limits};
//!
//! let limits = Limits::default().with_max_rules(10);
//! let e = compile_gbnf_with_limits("root ::= (\"a\" | \"b\")+ \"c\"{3,9}", &limits);
//! assert!(matches!(e, Err(Error::LimitExceeded { limit: Limit::Rules, max: 10, .. })));
//! ```

mod constraint;
mod dfa;
mod error;

mod grammar;
mod json;
mod limits;

mod vocab;

pub use constraint::{apply_mask, Constraint, GrammarConstraint, RegexConstraint};
pub use error::Error;
pub use grammar::Grammar;
pub use limits::{Limit, Limits};

pub use json::{
    compile_json_schema, compile_json_schema_report, from_json_schema, json_any, CompiledSchema,
    Draft, FormatMode, IgnoredKeyword, IgnoredReason, JsonOptions, SchemaResources,
};
pub use vocab::{decode_gpt2_byte_level, TokenVocab};
mod conformance;
pub use conformance::{
    ConformanceReport, ConformanceRun, Failure, Percentiles, Refusal, SchemaOutcome,
};
mod gbnf;
pub use gbnf::{
    compile_gbnf, compile_gbnf_for_vocab, compile_gbnf_with_limits, compile_lark,
    compile_lark_with_limits, from_gbnf, from_lark,
};

/// The README's example, compiled and run as a doctest.
// (Its first example builds a vocabulary from a tokenizer, so it needs the `tokenizer` feature.)
#[cfg(all(doctest, feature = "tokenizer"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
