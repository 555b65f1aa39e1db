//! The [`Constraint`] trait and its two implementations: [`RegexConstraint`] (one automaton,
//! masks cached per state) and [`GrammarConstraint`] (an Earley parser over bytes).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use crate::dfa::{Dfa, DEAD};
use crate::grammar::{Chart, Grammar, Radii, TerminalMask};
use crate::vocab::TokenVocab;
use crate::Error;

/// Something that follows the output token by token and says which tokens may come next.
///
/// The mask is a bitset over the vocabulary: bit `i` of word `i / 64` is token `i`. An
/// end-of-generation token is allowed exactly when [`Constraint::is_complete`] holds; after one
/// is accepted the constraint is finished and allows nothing.
pub trait Constraint {
    /// The vocabulary this constraint works on.
    fn vocab(&self) -> &Arc<TokenVocab>;

    /// Overwrites `mask` with the tokens allowed next.
    fn fill_mask(&mut self, mask: &mut [u64]) -> Result<(), Error>;

    /// Accepts `token`, or refuses it (leaving the state unchanged) if it is not allowed.
    fn advance(&mut self, token: u32) -> Result<(), Error>;

    /// Undoes the last `n` accepted tokens.
    fn rollback(&mut self, n: usize) -> Result<(), Error>;

    /// Whether the output so far is a whole sentence (so an end token is allowed).
    fn is_complete(&self) -> bool;

    /// Whether an end token has been accepted.
    fn is_finished(&self) -> bool;

    /// Number of tokens accepted so far.
    fn num_tokens(&self) -> usize;

    /// The tokens that are forced from here: while exactly one token is allowed, it is taken,
    /// up to `max` tokens; the state is left unchanged. An engine appends them without sampling.
    fn forced_tokens(&mut self, max: usize) -> Result<Vec<u32>, Error> {
        let mut mask = self.vocab().empty_mask();
        let mut out = Vec::new();
        while out.len() < max && !self.is_finished() {
            self.fill_mask(&mut mask)?;
            let mut only = None;
            let mut count = 0;
            for (w, &word) in mask.iter().enumerate() {
                if word != 0 {
                    count += word.count_ones();
                    only = Some(w as u32 * 64 + word.trailing_zeros());
                }
            }
            match (count, only) {
                (1, Some(t)) => {
                    self.advance(t)?;
                    out.push(t);
                }
                _ => break,
            }
        }
        self.rollback(out.len())?;
        Ok(out)
    }
}

/// Sets every logit whose token is not in `mask` to negative infinity.
///
/// Softmax then gives forbidden tokens exactly zero and renormalises the rest, as the
/// specification's "Constrained decoding" section describes. Logits beyond the mask's bits are
/// forbidden too.
pub fn apply_mask(logits: &mut [f32], mask: &[u64]) {
    for (i, l) in logits.iter_mut().enumerate() {
        let allowed = mask.get(i >> 6).is_some_and(|w| w >> (i & 63) & 1 == 1);
        if !allowed {
            *l = f32::NEG_INFINITY;
        }
    }
}

fn check_mask(vocab: &TokenVocab, mask: &mut [u64]) -> Result<(), Error> {
    if mask.len() != vocab.mask_words() {
        return Err(Error::MaskLength {
            expected: vocab.mask_words(),
            actual: mask.len(),
        });
    }
    mask.fill(0);
    Ok(())
}

fn set_eos(vocab: &TokenVocab, mask: &mut [u64]) {
    for &t in vocab.eos_tokens() {
        mask[(t >> 6) as usize] |= 1 << (t & 63);
    }
}

/// A constraint given by one automaton: a regular expression or a set of choices.
///
/// Its state is one automaton state, so each state's mask is computed once (a walk of the token
/// trie) and cached.
#[derive(Clone, Debug)]
pub struct RegexConstraint {
    vocab: Arc<TokenVocab>,
    dfa: Arc<Dfa>,
    /// States after each accepted token; `states[0]` is the start.
    states: Vec<u32>,
    finished: bool,
    cache: HashMap<u32, Arc<Vec<u64>>>,
    /// The automaton's radii, computed with the first mask.
    radii: OnceLock<Arc<Radii>>,
}

impl RegexConstraint {
    /// The output must match `pattern` (Rust `regex` syntax) as a whole: the pattern is
    /// anchored at both ends and the output is valid UTF-8.
    pub fn from_regex(pattern: &str, vocab: &Arc<TokenVocab>) -> Result<RegexConstraint, Error> {
        Self::from_dfa(Dfa::from_regex(pattern)?, vocab)
    }

    /// [`RegexConstraint::from_regex`] with the automaton's states bounded by
    /// [`Limits::max_terminal_states`](crate::Limits) (each state caches one mask).
    pub fn from_regex_with_limits(
        pattern: &str,
        vocab: &Arc<TokenVocab>,
        limits: &crate::Limits,
    ) -> Result<RegexConstraint, Error> {
        let dfa = Dfa::from_regex(pattern)?;
        crate::limits::check(
            crate::Limit::TerminalStates,
            dfa.num_states(),
            limits.max_terminal_states,
        )?;
        Self::from_dfa(dfa, vocab)
    }

    /// The output must be exactly one of `choices`: their trie, built in time linear in their
    /// total length (at most [`Limits::DEFAULT`](crate::Limits::DEFAULT)`.max_terminal_states`
    /// nodes).
    pub fn from_choices<S: AsRef<str>>(
        choices: &[S],
        vocab: &Arc<TokenVocab>,
    ) -> Result<RegexConstraint, Error> {
        if choices.is_empty() {
            return Err(Error::EmptyChoice { index: 0 });
        }
        let mut words: Vec<&[u8]> = Vec::new();
        for (i, c) in choices.iter().enumerate() {
            if c.as_ref().is_empty() {
                return Err(Error::EmptyChoice { index: i });
            }
            words.push(c.as_ref().as_bytes());
        }
        let limit = crate::Limits::DEFAULT.max_terminal_states;
        Self::from_dfa(Dfa::literals(&words, limit)?, vocab)
    }

    /// About how many bytes the constraint's automaton holds on the heap (shared by its
    /// clones), for a cache of constraints to bound its memory by.
    pub fn heap_bytes(&self) -> usize {
        self.dfa.heap_bytes()
    }

    pub(crate) fn from_dfa(dfa: Dfa, vocab: &Arc<TokenVocab>) -> Result<RegexConstraint, Error> {
        if dfa.is_empty_language() {
            return Err(Error::EmptyLanguage);
        }
        let start = dfa.start();
        Ok(RegexConstraint {
            vocab: Arc::clone(vocab),
            dfa: Arc::new(dfa),
            states: vec![start],
            finished: false,
            cache: HashMap::new(),
            radii: OnceLock::new(),
        })
    }

    fn state(&self) -> u32 {
        *self.states.last().unwrap_or(&DEAD)
    }

    fn compute_mask(&self, state: u32) -> Vec<u64> {
        let radii = self
            .radii
            .get_or_init(|| Arc::new(Radii::compute(&self.dfa)));
        TerminalMask::compute(&self.vocab, &self.dfa, radii, state, false)
            .inside
            .into_dense(self.vocab.mask_words())
    }
}

/// Escapes `text` so that it matches itself literally.
pub(crate) fn regex_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if "\\.+*?()|[]{}^$#&-~ \t\n\r".contains(c) {
            match c {
                ' ' => out.push_str("\\x20"),
                '\t' => out.push_str("\\t"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                _ => {
                    out.push('\\');
                    out.push(c);
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

impl Constraint for RegexConstraint {
    fn vocab(&self) -> &Arc<TokenVocab> {
        &self.vocab
    }

    fn fill_mask(&mut self, mask: &mut [u64]) -> Result<(), Error> {
        check_mask(&self.vocab, mask)?;
        if self.finished {
            return Ok(());
        }
        let s = self.state();
        let cached = match self.cache.get(&s) {
            Some(m) => Arc::clone(m),
            None => {
                let m = Arc::new(self.compute_mask(s));
                self.cache.insert(s, Arc::clone(&m));
                m
            }
        };
        mask.copy_from_slice(&cached);
        if self.is_complete() {
            set_eos(&self.vocab, mask);
        }
        Ok(())
    }

    fn advance(&mut self, token: u32) -> Result<(), Error> {
        let bytes = self
            .vocab
            .token_bytes(token)
            .ok_or(Error::TokenOutOfRange {
                token,
                vocab_size: self.vocab.len(),
            })?;
        if self.finished {
            return Err(Error::Finished { token });
        }
        let refused = Error::TokenRefused {
            token,
            position: self.states.len() - 1,
        };
        if self.vocab.is_eos(token) {
            if !self.is_complete() {
                return Err(refused);
            }
            self.finished = true;
            let s = self.state();
            self.states.push(s);
            return Ok(());
        }
        if bytes.is_empty() {
            return Err(refused);
        }
        let mut s = self.state();
        for &b in bytes {
            s = self.dfa.next(s, b);
            if s == DEAD {
                return Err(refused);
            }
        }
        self.states.push(s);
        Ok(())
    }

    fn rollback(&mut self, n: usize) -> Result<(), Error> {
        let available = self.states.len() - 1;
        if n > available {
            return Err(Error::RollbackTooFar {
                requested: n,
                available,
            });
        }
        if n > 0 {
            self.finished = false;
        }
        self.states.truncate(self.states.len() - n);
        Ok(())
    }

    fn is_complete(&self) -> bool {
        !self.finished && self.dfa.is_accept(self.state())
    }

    fn is_finished(&self) -> bool {
        self.finished
    }

    fn num_tokens(&self) -> usize {
        self.states.len() - 1
    }
}

/// A constraint given by a context-free grammar (JSON, JSON Schema, GBNF, Lark), followed by an
/// Earley parser over bytes.
#[derive(Clone, Debug)]
pub struct GrammarConstraint {
    vocab: Arc<TokenVocab>,
    grammar: Arc<Grammar>,
    chart: Chart,
    /// Chart depth before each accepted token.
    depths: Vec<usize>,
    finished: bool,
    /// Work units of the last `fill_mask` or `advance`.
    last_work: u64,
}

impl GrammarConstraint {
    /// A constraint for a compiled grammar; many constraints may share one grammar.
    pub fn new(grammar: Arc<Grammar>, vocab: &Arc<TokenVocab>) -> GrammarConstraint {
        let mut chart = Chart::new(&grammar);
        chart.reserve_mask(&grammar, vocab.mask_words());
        GrammarConstraint {
            vocab: Arc::clone(vocab),
            grammar,
            chart,
            depths: Vec::new(),
            finished: false,
            last_work: 0,
        }
    }

    /// Work units (Earley items processed, completions matched, terminal steps) of the last
    /// `fill_mask` or `advance`: what [`Limits::max_mask_work`](crate::Limits) bounds. A
    /// measure of cost that does not depend on the machine.
    pub fn last_work(&self) -> u64 {
        self.last_work
    }

    /// Whether masks are computed the plain way: the places where a terminal ends walked one
    /// at a time instead of as one, and every terminal's mask walked from the token trie
    /// instead of taken from another terminal's or looked up along one path (`false`, the
    /// default, takes the shortcuts; both ways give the same masks). For tests that check
    /// that the two agree; a vocabulary of its own keeps the shortcuts' masks out of its
    /// shared cache.
    #[doc(hidden)]
    pub fn set_plain_masks(&mut self, on: bool) {
        self.chart.plain_masks = on;
    }

    /// The compiled grammar, to start more constraints from it cheaply.
    pub fn grammar(&self) -> &Arc<Grammar> {
        &self.grammar
    }

    /// Whether `bytes` can be read from the current state (the state is left unchanged).
    pub fn accepts_prefix(&mut self, bytes: &[u8]) -> bool {
        let base = self.chart.depth();
        self.chart.start_work();
        let ok = bytes
            .iter()
            .all(|&b| self.chart.push_byte(&self.grammar, b));
        self.chart.truncate(base);
        ok
    }
}

impl Constraint for GrammarConstraint {
    fn vocab(&self) -> &Arc<TokenVocab> {
        &self.vocab
    }

    fn fill_mask(&mut self, mask: &mut [u64]) -> Result<(), Error> {
        check_mask(&self.vocab, mask)?;
        if self.finished {
            return Ok(());
        }
        self.chart.start_work();
        let r = self.chart.fill_mask(&self.grammar, &self.vocab, mask);
        self.last_work = self.chart.work();
        r?;
        if self.is_complete() {
            set_eos(&self.vocab, mask);
        }
        Ok(())
    }

    fn advance(&mut self, token: u32) -> Result<(), Error> {
        let vocab = Arc::clone(&self.vocab);
        let bytes = vocab.token_bytes(token).ok_or(Error::TokenOutOfRange {
            token,
            vocab_size: vocab.len(),
        })?;
        if self.finished {
            return Err(Error::Finished { token });
        }
        let refused = Error::TokenRefused {
            token,
            position: self.depths.len(),
        };
        let base = self.chart.depth();
        // An end token ends the output, unless the grammar names it in a token reference
        // (GBNF's `<|im_end|>`) where it stands.
        let eos = vocab.is_eos(token);
        if eos && !self.chart.expects_token(&self.grammar, token, true) {
            if !self.is_complete() {
                return Err(refused);
            }
            self.finished = true;
            self.depths.push(base);
            return Ok(());
        }
        self.chart.start_work();
        if !self.chart.push_token(&self.grammar, token, bytes, eos) {
            self.last_work = self.chart.work();
            let over = self.chart.check_work(&self.grammar);
            self.chart.truncate(base);
            over?;
            return Err(refused);
        }
        self.last_work = self.chart.work();
        if let Err(e) = self.chart.check_work(&self.grammar) {
            self.chart.truncate(base);
            return Err(e);
        }
        self.depths.push(base);
        Ok(())
    }

    fn rollback(&mut self, n: usize) -> Result<(), Error> {
        let available = self.depths.len();
        if n > available {
            return Err(Error::RollbackTooFar {
                requested: n,
                available,
            });
        }
        if n == 0 {
            return Ok(());
        }
        let depth = self.depths[available - n];
        self.depths.truncate(available - n);
        self.chart.truncate(depth);
        self.finished = false;
        Ok(())
    }

    fn is_complete(&self) -> bool {
        !self.finished && self.chart.is_complete(&self.grammar)
    }

    fn is_finished(&self) -> bool {
        self.finished
    }

    fn num_tokens(&self) -> usize {
        self.depths.len()
    }
}
