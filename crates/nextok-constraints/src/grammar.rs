//! Context-free grammars over bytes whose terminals are automata, and their Earley parser.
//!
//! Every front end (JSON, JSON Schema, GBNF, Lark) compiles to a [`Grammar`]. Terminals are whole
//! automata ([`Dfa`]) rather than single bytes, so that a JSON string or a regex terminal is one
//! Earley item that follows its automaton byte by byte; the parser only does real work where a
//! terminal ends. The Earley algorithm handles any context-free grammar, left recursion and
//! empty rules included (empty rules follow Aycock and Horspool's prediction fix).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::dfa::{Dfa, DEAD};
use crate::limits::{check, Limit, Limits};
use crate::vocab::{
    category_sets, children, has_byte, text_ascii, TokenVocab, CATEGORIES, MULTIBYTE, NOT_TEXT,
};
use crate::Error;

mod members;
mod unique;
mod unique_objects;
pub(crate) use members::{ObjectSpec, ADDITIONAL};
pub(crate) use unique::{
    canonical_array_head, canonical_value, finite_states, ordered_completions, push_string,
    FiniteSet, Guard,
};
pub(crate) use unique_objects::{total_objects, ItemCheck, ItemKey, ItemObject};

/// A grammar symbol while building.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Sym {
    /// A nonterminal.
    Nt(u32),
    /// A terminal automaton.
    T(u32),
    /// A token reference: one whole token whose id is (or, negated, is not) in a set.
    Tok(u32),
}

/// The ids a token reference matches: one token whose id is in `ids`, or with `negated`, one
/// token whose id is not (llama.cpp's `<[id]>` and `!<[id]>`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct TokenSet {
    /// Sorted, without repeats.
    pub(crate) ids: Vec<u32>,
    pub(crate) negated: bool,
}

impl TokenSet {
    /// Whether token `t` matches.
    pub(crate) fn matches(&self, t: u32) -> bool {
        self.ids.binary_search(&t).is_ok() != self.negated
    }
}

/// Rules while building, every right-hand side in one array: a schema of tens of thousands
/// of rules allocated, and freed, a vector per rule otherwise. The arrays of the last list
/// dropped on a thread are kept for the next one made there (up to [`SPARE_SYMS`] symbols):
/// grown again from nothing for each schema, by doubling into fresh memory, they were a
/// twentieth of the first compile of a schema of thirty thousand rule symbols
/// (chrome-manifest's).
struct RuleList {
    /// Per rule, its left-hand side.
    lhs: Vec<u32>,
    /// Per rule, where its right-hand side ends in `syms` (it starts where the one before
    /// ends).
    ends: Vec<u32>,
    syms: Vec<Sym>,
}

/// The most symbols whose arrays a thread keeps for its next [`RuleList`] (4 MB of them).
const SPARE_SYMS: usize = 1 << 19;

/// A [`RuleList`]'s arrays, emptied: left-hand sides, ends, symbols.
type RuleArrays = (Vec<u32>, Vec<u32>, Vec<Sym>);

thread_local! {
    static SPARE_RULES: std::cell::Cell<Option<RuleArrays>> = const { std::cell::Cell::new(None) };
}

impl Default for RuleList {
    fn default() -> RuleList {
        // Nothing kept while the thread's storage is being torn down.
        let spare = SPARE_RULES.try_with(|s| s.take()).ok().flatten();
        let (lhs, ends, syms) = spare.unwrap_or_default();
        RuleList { lhs, ends, syms }
    }
}

impl Drop for RuleList {
    fn drop(&mut self) {
        if self.syms.capacity() > SPARE_SYMS || self.lhs.capacity() > SPARE_SYMS {
            return;
        }
        let (mut lhs, mut ends, mut syms) = (
            std::mem::take(&mut self.lhs),
            std::mem::take(&mut self.ends),
            std::mem::take(&mut self.syms),
        );
        lhs.clear();
        ends.clear();
        syms.clear();
        // Kept where larger than what the thread keeps already (nothing while the thread's
        // storage is being torn down).
        let _ = SPARE_RULES.try_with(|s| {
            let kept = s.take();
            let larger = kept
                .as_ref()
                .is_none_or(|(_, _, k)| k.capacity() < syms.capacity());
            s.set(if larger {
                Some((lhs, ends, syms))
            } else {
                kept
            });
        });
    }
}

impl RuleList {
    fn len(&self) -> usize {
        self.lhs.len()
    }

    /// Adds `lhs ->` the symbols of `parts`, one after another.
    fn push(&mut self, lhs: u32, parts: &[&[Sym]]) {
        for p in parts {
            self.syms.extend_from_slice(p);
        }
        self.lhs.push(lhs);
        self.ends.push(self.syms.len() as u32);
    }

    /// Rule `r`: its left-hand side and right-hand side.
    fn get(&self, r: usize) -> (u32, &[Sym]) {
        let start = if r == 0 { 0 } else { self.ends[r - 1] as usize };
        (self.lhs[r], &self.syms[start..self.ends[r] as usize])
    }

    fn iter(&self) -> impl Iterator<Item = (u32, &[Sym])> + '_ {
        (0..self.len()).map(|r| self.get(r))
    }

    /// Keeps the rules for which `keep` holds, in their order.
    fn retain(&mut self, mut keep: impl FnMut(u32, &[Sym]) -> bool) {
        let (mut kept, mut at, mut start) = (0, 0, 0);
        for r in 0..self.len() {
            let (lhs, end) = (self.lhs[r], self.ends[r] as usize);
            if keep(lhs, &self.syms[start..end]) {
                self.syms.copy_within(start..end, at);
                at += end - start;
                self.lhs[kept] = lhs;
                self.ends[kept] = at as u32;
                kept += 1;
            }
            start = end;
        }
        self.lhs.truncate(kept);
        self.ends.truncate(kept);
        self.syms.truncate(at);
    }
}

/// Builds a [`Grammar`]: nonterminals, rules and terminal automata.
#[derive(Default)]
pub(crate) struct GrammarBuilder {
    /// Number of nonterminals made so far.
    nts: u32,
    rules: RuleList,
    terminals: Vec<Arc<Dfa>>,
    terminal_ids: FxMap<Arc<Dfa>, u32>,
    regex_cache: HashMap<String, Sym>,
    /// Literals made so far (a schema names the same property in many objects).
    literal_cache: FxMap<Vec<u8>, Sym>,
    token_sets: Vec<TokenSet>,
    /// Nonterminals whose completions are checked at run time (`unique`), with their check.
    guards: Vec<(u32, Guard)>,
    /// What the objects whose members are checked at run time allow (`members`).
    objects: Vec<ObjectSpec>,
    /// The finite item domains of `uniqueItems` arrays checked at prediction (`unique`).
    finite_sets: Vec<FiniteSet>,
    /// The closed-object items of `uniqueItems` arrays checked at prediction
    /// (`unique_objects`).
    item_objects: Vec<ItemObject>,
    /// Terminals of any string content but a few names, by terminal (`MinusNames`).
    minus_names: Vec<(u32, Arc<MinusNames>)>,
    /// The terminals whose automata are built when a parse first reaches them, by terminal
    /// (their place in `terminals` holds the empty automaton until then).
    deferred: Vec<(u32, Deferred)>,
    /// Per terminal, its states with finitely many completions where the compile found them
    /// already ([`finite_states`]), so that the build need not find them again.
    finite: FxMap<u32, Option<Arc<Vec<bool>>>>,
}

/// How to build a terminal's automaton when a parse first reaches it
/// ([`GrammarBuilder::deferred_terminal`]): a JSON string of a large pattern, which most outputs
/// never write, need not be determinized before the first mask. Its language must be known
/// not to be empty, nor to hold the empty string, when it is deferred: the grammar is pruned
/// before it is built.
pub(crate) struct Deferred {
    /// What it reads, for `Debug`.
    pub(crate) what: String,
    pub(crate) build: Box<dyn Fn() -> Result<Arc<Dfa>, Error> + Send + Sync>,
}

impl std::fmt::Debug for Deferred {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Deferred({})", self.what)
    }
}

/// A deferred terminal of a grammar: how to build it, and the error of a build that failed
/// (kept, and given again at every later use). The lock also keeps two threads from building it
/// at once.
#[derive(Debug)]
struct Later {
    build: Deferred,
    failed: Mutex<Option<Error>>,
}

/// `terminal_starts`' entry for a terminal not built yet.
const UNBUILT: u32 = u32::MAX;

/// Terminal `slot`'s automaton, built now by `later` if it is deferred and not built yet;
/// `built` counts the states of the grammar's automata, within `max`
/// ([`Limits::max_terminal_states`], checked again here for each deferred one). A failed build
/// gives its error again.
#[cold]
fn build_later<'a>(
    slot: &'a OnceLock<Arc<Dfa>>,
    later: Option<&Later>,
    built: &AtomicUsize,
    max: usize,
) -> Result<&'a Arc<Dfa>, Error> {
    if let Some(d) = slot.get() {
        return Ok(d);
    }
    let Some(later) = later else {
        return Ok(unbuilt());
    };
    // A poisoned lock only means another thread panicked mid-build; nothing was kept.
    let mut failed = later.failed.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(d) = slot.get() {
        return Ok(d);
    }
    if let Some(e) = &*failed {
        return Err(e.clone());
    }
    let dfa = (later.build.build)().and_then(|d| {
        let n = d.num_states();
        let total = built.fetch_add(n, Ordering::Relaxed) + n;
        if let Err(e) = check(Limit::TerminalStates, total, max) {
            built.fetch_sub(n, Ordering::Relaxed);
            return Err(e);
        }
        Ok(d)
    });
    match dfa {
        Ok(d) => Ok(slot.get_or_init(|| d)),
        Err(e) => {
            *failed = Some(e.clone());
            Err(e)
        }
    }
}

/// The empty automaton, which stands in for a terminal not built yet where nothing reads it.
fn unbuilt() -> &'static Arc<Dfa> {
    static EMPTY: OnceLock<Arc<Dfa>> = OnceLock::new();
    EMPTY.get_or_init(|| Arc::new(Dfa::empty()))
}

/// A terminal that reads a JSON string of any content but a few names (an object's additional
/// keys beside its named ones): from a state reached by content without escapes, its mask is
/// the mask of the terminal of any content (`base`) less the few tokens that would close the
/// string on a name, which costs a lookup where walking the trie through the names' states
/// cost hundreds of microseconds at the first key of every object.
#[derive(Debug)]
pub(crate) struct MinusNames {
    /// The terminal of any content.
    base: u32,
    /// The names, as raw content, sorted.
    names: Vec<Vec<u8>>,
}

impl GrammarBuilder {
    /// A fresh nonterminal with no rules yet. Its name says what it is where it is made; it
    /// is not kept: nothing reads it, and copying and freeing a name per nonterminal was a
    /// fair part of compiling a schema of tens of thousands of rules.
    pub(crate) fn nt(&mut self, _name: impl std::fmt::Display) -> u32 {
        self.nts += 1;
        self.nts - 1
    }

    /// The number of rules added so far (what [`GrammarBuilder::build_with`] checks against
    /// `max_rules`, which only grows).
    pub(crate) fn rule_count(&self) -> usize {
        self.rules.len()
    }

    /// Adds the rule `lhs -> rhs`.
    pub(crate) fn rule(&mut self, lhs: u32, rhs: Vec<Sym>) {
        self.rules.push(lhs, &[&rhs]);
    }

    /// Adds the rule `lhs ->` the symbols of `parts`, one after another (no vector made for
    /// it).
    pub(crate) fn rule_of(&mut self, lhs: u32, parts: &[&[Sym]]) {
        self.rules.push(lhs, parts);
    }

    /// A nonterminal deriving exactly the given alternatives.
    pub(crate) fn alts(&mut self, name: impl std::fmt::Display, alts: Vec<Vec<Sym>>) -> Sym {
        let n = self.nt(name);
        for a in alts {
            self.rule(n, a);
        }
        Sym::Nt(n)
    }

    /// A symbol for the language of `dfa`. Terminals never match the empty string: when the
    /// language holds it, the result is a nonterminal `T | ε`.
    pub(crate) fn terminal(&mut self, dfa: Dfa) -> Result<Sym, Error> {
        self.shared_terminal(Arc::new(dfa))
    }

    /// [`GrammarBuilder::terminal`] for an automaton kept elsewhere too (built once per
    /// process): the grammar shares it rather than copying its table.
    pub(crate) fn shared_terminal(&mut self, dfa: Arc<Dfa>) -> Result<Sym, Error> {
        if dfa.is_empty_language() {
            // A nonterminal without rules is unproductive; the builder prunes what uses it.
            return Ok(Sym::Nt(self.nt("<empty>")));
        }
        if dfa.accepts_empty() {
            let ne = dfa.without_empty()?;
            let n = self.nt("<optional terminal>");
            self.rule(n, vec![]);
            if !ne.is_empty_language() {
                let t = self.raw_terminal(Arc::new(ne));
                self.rule(n, vec![t]);
            }
            return Ok(Sym::Nt(n));
        }
        Ok(self.raw_terminal(dfa))
    }

    /// Records terminal `t`'s states with finitely many completions ([`finite_states`] of its
    /// automaton), found by the caller.
    pub(crate) fn known_finite(&mut self, t: Sym, finite: Option<Vec<bool>>) {
        if let Sym::T(t) = t {
            self.finite.insert(t, finite.map(Arc::new));
        }
    }

    /// A terminal whose automaton `d` builds when a parse first reaches it. The caller vouches
    /// that its language is not empty and does not hold the empty string.
    pub(crate) fn deferred_terminal(&mut self, d: Deferred) -> Sym {
        let id = self.terminals.len() as u32;
        self.terminals.push(Arc::clone(unbuilt()));
        self.deferred.push((id, d));
        Sym::T(id)
    }

    fn raw_terminal(&mut self, dfa: Arc<Dfa>) -> Sym {
        if let Some(&id) = self.terminal_ids.get(&dfa) {
            return Sym::T(id);
        }
        let id = self.terminals.len() as u32;
        self.terminal_ids.insert(Arc::clone(&dfa), id);
        self.terminals.push(dfa);
        Sym::T(id)
    }

    /// Records that terminal `t` reads exactly the strings of terminal `base` (a JSON string
    /// of any content) but those whose content is one of `names` ([`MinusNames`]).
    pub(crate) fn minus_names(&mut self, t: Sym, base: Arc<Dfa>, names: &[String]) {
        let (Sym::T(t), Sym::T(base)) = (t, self.raw_terminal(base)) else {
            return;
        };
        let mut names: Vec<Vec<u8>> = names.iter().map(|n| n.as_bytes().to_vec()).collect();
        names.sort_unstable();
        names.dedup();
        self.minus_names
            .push((t, Arc::new(MinusNames { base, names })));
    }

    /// A token reference: one whole token whose id is in `ids` (or, `negated`, is not).
    pub(crate) fn token(&mut self, mut ids: Vec<u32>, negated: bool) -> Sym {
        ids.sort_unstable();
        ids.dedup();
        let set = TokenSet { ids, negated };
        if let Some(j) = self.token_sets.iter().position(|s| *s == set) {
            return Sym::Tok(j as u32);
        }
        self.token_sets.push(set);
        Sym::Tok(self.token_sets.len() as u32 - 1)
    }

    /// A nonterminal deriving exactly the symbol `t`, whose completions are checked at run
    /// time by `guard` against the text before it (see `unique`). [`Guard::UniqueStrings`]
    /// needs a terminal (anything else gives an unproductive nonterminal);
    /// [`Guard::UniqueValues`] takes a terminal or a nonterminal.
    pub(crate) fn guarded(&mut self, name: &str, t: Sym, guard: Guard) -> Sym {
        let n = self.nt(name);
        let ok = matches!(
            (guard, t),
            (_, Sym::T(_)) | (Guard::UniqueValues, Sym::Nt(_))
        );
        if ok {
            self.rule(n, vec![t]);
            self.guards.push((n, guard));
        }
        Sym::Nt(n)
    }

    /// Adds `spec` and returns its number, for [`Guard::Member`], [`Guard::More`] and
    /// [`Guard::End`].
    pub(crate) fn object_spec(&mut self, spec: ObjectSpec) -> u32 {
        self.objects.push(spec);
        self.objects.len() as u32 - 1
    }

    /// Adds `set` and returns its number, for [`Guard::Fresh`], [`Guard::Next`] and
    /// [`Guard::Close`].
    pub(crate) fn finite_set(&mut self, set: FiniteSet) -> u32 {
        self.finite_sets.push(set);
        self.finite_sets.len() as u32 - 1
    }

    /// The number of finite sets added so far.
    pub(crate) fn finite_set_count(&self) -> u32 {
        self.finite_sets.len() as u32
    }

    /// Sets the outer item nonterminal of finite set `id` ([`FiniteSet::outer`]), made after
    /// the array's rules.
    pub(crate) fn set_finite_outer(&mut self, id: u32, outer: u32) {
        if let Some(set) = self.finite_sets.get_mut(id as usize) {
            set.outer = Some(outer);
        }
    }

    /// Adds `spec` and returns its number, for [`Guard::Item`].
    pub(crate) fn item_object(&mut self, spec: ItemObject) -> u32 {
        self.item_objects.push(spec);
        self.item_objects.len() as u32 - 1
    }

    /// Sets the guarded item nonterminal of item object `id` (made after its members).
    pub(crate) fn set_item_object_item(&mut self, id: u32, item: u32) {
        if let Some(spec) = self.item_objects.get_mut(id as usize) {
            spec.item = item;
        }
    }

    /// Guards nonterminal `nt` with a check made when it is predicted (see `members`).
    pub(crate) fn guard_prediction(&mut self, nt: u32, guard: Guard) {
        debug_assert!(guard.at_prediction());
        self.guards.push((nt, guard));
    }

    /// The literal bytes (a nullable nonterminal for the empty literal).
    pub(crate) fn literal(&mut self, bytes: &[u8]) -> Sym {
        if bytes.is_empty() {
            return self.alts("<empty literal>", vec![vec![]]);
        }
        if let Some(&s) = self.literal_cache.get(bytes) {
            return s;
        }
        let s = self.raw_terminal(Arc::new(Dfa::literal(bytes)));
        self.literal_cache.insert(bytes.to_vec(), s);
        s
    }

    /// A terminal for the whole-match language of a regular expression.
    pub(crate) fn regex(&mut self, pattern: &str) -> Result<Sym, Error> {
        if let Some(&s) = self.regex_cache.get(pattern) {
            return Ok(s);
        }
        let s = self.terminal(Dfa::from_regex(pattern)?)?;
        self.regex_cache.insert(pattern.to_string(), s);
        Ok(s)
    }

    /// Finishes the grammar with start symbol `start`: checks its size against `limits`,
    /// prunes unproductive rules and flattens. Linear in the size of the grammar.
    pub(crate) fn build_with(self, start: Sym, limits: &Limits) -> Result<Grammar, Error> {
        check(Limit::Rules, self.rules.len() + 1, limits.max_rules)?;
        let items: usize = self.rules.syms.len() + self.rules.len() + 2;
        check(Limit::Items, items, limits.max_items)?;
        check(Limit::Terminals, self.terminals.len(), limits.max_terminals)?;
        let states: usize = self.terminals.iter().map(|d| d.num_states()).sum();
        check(Limit::TerminalStates, states, limits.max_terminal_states)?;
        let built_states = AtomicUsize::new(states);
        let GrammarBuilder {
            nts,
            mut rules,
            terminals,
            token_sets,
            guards: guard_list,
            mut objects,
            finite_sets,
            item_objects,
            minus_names: minus_list,
            deferred,
            finite,
            ..
        } = self;
        // Per terminal, how to build it when it is deferred (empty when none is).
        let mut later: Vec<Option<Later>> = Vec::new();
        if !deferred.is_empty() {
            later.resize_with(terminals.len(), || None);
            for (t, build) in deferred {
                later[t as usize] = Some(Later {
                    build,
                    failed: Mutex::new(None),
                });
            }
        }
        let is_later = |t: usize| later.get(t).is_some_and(Option::is_some);
        let terminals: Vec<OnceLock<Arc<Dfa>>> = (terminals.into_iter().enumerate())
            .map(|(t, d)| match is_later(t) {
                true => OnceLock::new(),
                false => OnceLock::from(d),
            })
            .collect();
        // Augmented start rule S' -> start, so that completion is one item.
        let top = nts;
        rules.push(top, &[&[start]]);
        let n = nts as usize + 1;
        // Productive nonterminals: rules whose symbols are all productive. An object whose
        // members are checked at run time and that cannot be written at all (a required member
        // that cannot, counts out of reach) loses its rules, which may make an enclosing one
        // impossible in turn: repeated until nothing changes.
        let mut productive = derives(n, &rules, |_| true);
        let mut dead = vec![false; objects.len()];
        loop {
            let mut changed = false;
            for (j, spec) in objects.iter_mut().enumerate() {
                if !spec.settle(&productive) && !dead[j] {
                    dead[j] = true;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
            let gone: FxSet<u32> = objects
                .iter()
                .zip(&dead)
                .filter(|(_, &d)| d)
                .map(|(s, _)| s.object)
                .collect();
            rules.retain(|lhs, _| !gone.contains(&lhs));
            productive = derives(n, &rules, |_| true);
        }
        if !productive[top as usize] {
            return Err(Error::EmptyLanguage);
        }
        rules.retain(|lhs, rhs| {
            productive[lhs as usize]
                && rhs.iter().all(|s| {
                    matches!(s, Sym::T(_) | Sym::Tok(_))
                        || matches!(s, Sym::Nt(m) if productive[*m as usize])
                })
        });
        // Nullable nonterminals: rules of nullable nonterminals only.
        let nullable = derives(n, &rules, |s| matches!(s, Sym::Nt(_)));
        let mut syms = Vec::with_capacity(rules.syms.len() + rules.len());
        // Per nonterminal, its rules' first positions, in one array cut by nonterminal
        // (`nt_first`), in the rules' order.
        let mut nt_first = vec![0u32; n + 1];
        for &lhs in &rules.lhs {
            nt_first[lhs as usize + 1] += 1;
        }
        for x in 1..=n {
            nt_first[x] += nt_first[x - 1];
        }
        let mut nt_rules = vec![0u32; rules.len()];
        let mut fill = nt_first.clone();
        let mut start_pos = 0;
        let mut accept_pos = 0;
        for (lhs, rhs) in rules.iter() {
            let p = syms.len() as u32;
            nt_rules[fill[lhs as usize] as usize] = p;
            fill[lhs as usize] += 1;
            syms.extend(rhs.iter().map(|s| match *s {
                Sym::Nt(m) => GSym::Nt(m),
                Sym::T(t) => GSym::T(t),
                Sym::Tok(j) => GSym::Tok(j),
            }));
            syms.push(GSym::End(lhs));
            if lhs == top {
                start_pos = p;
                accept_pos = syms.len() as u32 - 1;
            }
        }
        drop(rules);
        // Per nonterminal its guard, and per position whether it is the terminal of a guarded
        // rule (both empty when the grammar has no guard, as every grammar but a JSON Schema
        // with `uniqueItems` over an unbounded domain).
        let mut guards = Vec::new();
        let mut guarded_pos = Vec::new();
        if !guard_list.is_empty() {
            guards = vec![None; n];
            for &(nt, guard) in &guard_list {
                guards[nt as usize] = Some(guard);
            }
            guarded_pos = vec![false; syms.len()];
            for (p, s) in syms.iter().enumerate() {
                if let (GSym::T(_), Some(GSym::End(a))) = (s, syms.get(p + 1)) {
                    let first = p == 0 || matches!(syms[p - 1], GSym::End(_));
                    guarded_pos[p] = first && guards[*a as usize] == Some(Guard::UniqueStrings);
                }
            }
        }
        // Per position, the (item object, key) whose string value of finitely many completions
        // at some state the terminal there is: the terminal right before its `AfterString`.
        let mut item_string: Vec<Option<(u32, u32)>> = Vec::new();
        if !guards.is_empty() {
            for (p, s) in syms.iter().enumerate() {
                if let (GSym::T(_), Some(GSym::Nt(a))) = (s, syms.get(p + 1)) {
                    if let Some(Guard::Item {
                        spec,
                        check: ItemCheck::AfterString(i),
                    }) = guards[*a as usize]
                    {
                        if item_string.is_empty() {
                            item_string = vec![None; syms.len()];
                        }
                        item_string[p] = Some((spec, i));
                    }
                }
            }
        }
        // Per terminal of a guarded string item, its states with finitely many completions,
        // where `unique` checks that some completion is still a new value.
        let mut string_finite: Vec<Option<Arc<Vec<bool>>>> = Vec::new();
        for (p, &is) in guarded_pos.iter().enumerate() {
            let is = is || item_string.get(p).is_some_and(Option::is_some);
            if let (true, GSym::T(t)) = (is, syms[p]) {
                let t = t as usize;
                if string_finite.len() <= t {
                    string_finite.resize(t + 1, None);
                }
                if string_finite[t].is_none() {
                    string_finite[t] = match finite.get(&(t as u32)) {
                        Some(f) => f.clone(),
                        None => {
                            // A guarded terminal's states are looked at now: a deferred one
                            // is built.
                            let d = build_later(
                                &terminals[t],
                                later.get(t).and_then(Option::as_ref),
                                &built_states,
                                limits.max_terminal_states,
                            )?;
                            finite_states(d).map(Arc::new)
                        }
                    };
                }
            }
        }
        // Built now: every terminal but the deferred ones not built for a guard above.
        let terminal_starts = (terminals.iter())
            .map(|slot| slot.get().map_or(UNBUILT, |d| d.start()))
            .collect();
        let mut minus_names: Vec<Option<Arc<MinusNames>>> = Vec::new();
        for (t, m) in minus_list {
            if minus_names.len() <= t as usize {
                minus_names.resize(t as usize + 1, None);
            }
            minus_names[t as usize] = Some(m);
        }
        let unnumbered = vec![u64::MAX; terminals.len()];
        Ok(Grammar {
            syms,
            nt_first,
            nt_rules,
            nullable,
            terminals,
            later,
            terminal_starts,
            built_states,
            max_terminal_states: limits.max_terminal_states,
            start_pos,
            accept_pos,
            max_work: limits.max_mask_work,
            cache: Mutex::new((0, unnumbered)),
            token_sets,
            guards,
            guarded_pos,
            item_string,
            objects,
            finite_sets,
            item_objects,
            string_finite,
            minus_names,
        })
    }
}

/// The nonterminals that derive something through rules whose every symbol passes `usable`
/// and whose nonterminals all derive something: the least fixpoint, computed with a worklist
/// and a count of unsettled nonterminals per rule, so that each rule is looked at once per
/// symbol (a chain of rules listed in the worst order costs no more than any other).
fn derives(n: usize, rules: &RuleList, usable: impl Fn(&Sym) -> bool) -> Vec<bool> {
    let mut done = vec![false; n];
    let mut waiting = vec![0u32; rules.len()];
    // Per nonterminal, the rules that use it (once per use), in one array cut by nonterminal:
    // a large grammar has tens of thousands of nonterminals, and a vector each cost more to
    // allocate and free than the fixpoint itself.
    let mut first = vec![0u32; n + 1];
    for (r, (_, rhs)) in rules.iter().enumerate() {
        if !rhs.iter().all(&usable) {
            waiting[r] = u32::MAX;
            continue;
        }
        for s in rhs {
            if let Sym::Nt(m) = s {
                first[*m as usize + 1] += 1;
            }
        }
    }
    for x in 1..=n {
        first[x] += first[x - 1];
    }
    let mut uses = vec![0u32; first[n] as usize];
    let mut fill = first.clone();
    let mut queue: Vec<u32> = Vec::new();
    for (r, (lhs, rhs)) in rules.iter().enumerate() {
        if waiting[r] == u32::MAX {
            continue;
        }
        for s in rhs {
            if let Sym::Nt(m) = s {
                waiting[r] += 1;
                uses[fill[*m as usize] as usize] = r as u32;
                fill[*m as usize] += 1;
            }
        }
        if waiting[r] == 0 && !done[lhs as usize] {
            done[lhs as usize] = true;
            queue.push(lhs);
        }
    }
    while let Some(m) = queue.pop() {
        let m = m as usize;
        for &r in &uses[first[m] as usize..first[m + 1] as usize] {
            let w = &mut waiting[r as usize];
            *w -= 1;
            let lhs = rules.lhs[r as usize] as usize;
            if *w == 0 && !done[lhs] {
                done[lhs] = true;
                queue.push(lhs as u32);
            }
        }
    }
    done
}

/// A symbol after a dot in a flattened rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GSym {
    Nt(u32),
    T(u32),
    Tok(u32),
    End(u32),
}

/// A compiled grammar: rules flattened so that an Earley item's dot is one index.
#[derive(Debug)]
pub struct Grammar {
    syms: Vec<GSym>,
    /// Per nonterminal `a`, its rules' first positions are
    /// `nt_rules[nt_first[a]..nt_first[a + 1]]`.
    nt_first: Vec<u32>,
    nt_rules: Vec<u32>,
    nullable: Vec<bool>,
    /// Per terminal, its automaton once built (at once, or when a parse first reaches a
    /// deferred one).
    terminals: Vec<OnceLock<Arc<Dfa>>>,
    /// Per terminal, how to build it when it is deferred; empty when none is.
    later: Vec<Option<Later>>,
    /// Per terminal, its automaton's start state ([`UNBUILT`] for one not built yet).
    terminal_starts: Vec<u32>,
    /// The states of the terminals' automata built so far, within `max_terminal_states`
    /// ([`Limits::max_terminal_states`]).
    built_states: AtomicUsize,
    max_terminal_states: usize,
    start_pos: u32,
    accept_pos: u32,
    /// [`Limits::max_mask_work`].
    max_work: u64,
    /// Per terminal, its number in the vocabulary's shared mask cache (the vocabulary is
    /// identified by its serial number).
    cache: Mutex<TerminalCache>,
    /// The sets of the token references (`GSym::Tok`); empty when the grammar has none, as
    /// every grammar but GBNF's.
    token_sets: Vec<TokenSet>,
    /// Per nonterminal, the run-time check of its completions (`unique`); empty when the
    /// grammar has none.
    guards: Vec<Option<Guard>>,
    /// Per position, whether it is the terminal of a guarded rule; empty without guards.
    guarded_pos: Vec<bool>,
    /// Per position, the closed-object item and key whose string value (finitely many
    /// completions at some state) the terminal there reads (`unique_objects`); empty when
    /// there is none.
    item_string: Vec<Option<(u32, u32)>>,
    /// What the objects whose members are checked at run time allow (`members`).
    objects: Vec<ObjectSpec>,
    /// The finite item domains of `uniqueItems` arrays checked at prediction (`unique`).
    finite_sets: Vec<FiniteSet>,
    /// The closed-object items of `uniqueItems` arrays checked at prediction
    /// (`unique_objects`).
    item_objects: Vec<ItemObject>,
    /// Per terminal of a guarded string item with states of finitely many completions, which
    /// states those are (`unique`); shorter than the terminals, or `None`, for the others.
    string_finite: Vec<Option<Arc<Vec<bool>>>>,
    /// Per terminal of any string content but some names, its [`MinusNames`]; shorter than the
    /// terminals, or `None`, for the others.
    minus_names: Vec<Option<Arc<MinusNames>>>,
}

/// The vocabulary's serial number and, per terminal, its automaton's number in that vocabulary's
/// shared mask cache (`u32::MAX` until asked for; serial 0, which no vocabulary has, before
/// the first).
type TerminalCache = (u64, Vec<u64>);

/// A set of tokens: the nonzero words of its bitset, with their indices, when they are few (a
/// key's or an enum's tokens fill a few words of hundreds), else the whole bitset. Masks are
/// unions of these, so a sparse one costs a few words to add and a few to keep.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum TokenBits {
    Dense(Vec<u64>),
    Sparse(Vec<(u32, u64)>),
}

impl TokenBits {
    /// The set of the bitset `words`, sparse when at most a quarter of its words are nonzero
    /// (half its room or less).
    pub(crate) fn from_dense(words: Vec<u64>) -> TokenBits {
        let nonzero = words.iter().filter(|&&w| w != 0).count();
        if nonzero * 4 <= words.len() {
            let sparse = (0u32..)
                .zip(&words)
                .filter(|&(_, &w)| w != 0)
                .map(|(i, &w)| (i, w))
                .collect();
            TokenBits::Sparse(sparse)
        } else {
            TokenBits::Dense(words)
        }
    }

    /// Adds the set to the bitset `mask` (of the vocabulary's length).
    #[inline]
    pub(crate) fn or_into(&self, mask: &mut [u64]) {
        match self {
            TokenBits::Dense(words) => {
                for (m, w) in mask.iter_mut().zip(words) {
                    *m |= w;
                }
            }
            TokenBits::Sparse(words) => {
                for &(i, w) in words {
                    mask[i as usize] |= w;
                }
            }
        }
    }

    /// Overwrites the bitset `out` (of the vocabulary's length) with the set.
    pub(crate) fn copy_into(&self, out: &mut [u64]) {
        match self {
            TokenBits::Dense(words) => out.copy_from_slice(words),
            TokenBits::Sparse(_) => {
                out.fill(0);
                self.or_into(out);
            }
        }
    }

    /// The room it takes, in u64 words.
    pub(crate) fn words(&self) -> usize {
        match self {
            TokenBits::Dense(words) => words.len(),
            TokenBits::Sparse(words) => 2 * words.len(),
        }
    }

    /// The bitset of `len` words.
    pub(crate) fn into_dense(self, len: usize) -> Vec<u64> {
        match self {
            TokenBits::Dense(words) => words,
            TokenBits::Sparse(_) => {
                let mut out = vec![0; len];
                self.or_into(&mut out);
                out
            }
        }
    }
}

/// What a terminal in one automaton state allows, independent of the parser around it.
#[derive(Clone, Debug)]
pub(crate) struct TerminalMask {
    /// Tokens whose bytes the automaton reads without dying: always allowed by this item.
    pub(crate) inside: TokenBits,
    /// Trie nodes whose path the automaton accepts: the terminal may end there, and the rest of
    /// the token must then be read by the parser.
    pub(crate) exits: Vec<u32>,
    /// Trie nodes without children whose path the automaton accepts and cannot read on from:
    /// their tokens end the terminal, so a guard on its end decides them (`fill_mask_guarded`).
    pub(crate) ends: Vec<u32>,
    /// The children of all of `exits`, sorted by byte (then node): how `Chart::walk_exits`
    /// walks them as one, sorted once per mask rather than at each walk.
    kids: OnceLock<Vec<(u8, u32)>>,
}

impl TerminalMask {
    /// The mask of `inside`, `exits` and `ends`.
    pub(crate) fn new(inside: TokenBits, exits: Vec<u32>, ends: Vec<u32>) -> TerminalMask {
        TerminalMask {
            inside,
            exits,
            ends,
            kids: OnceLock::new(),
        }
    }

    /// The children of all of `exits`, sorted by byte then node (see the field).
    pub(crate) fn exit_kids(&self, vocab: &TokenVocab) -> &[(u8, u32)] {
        self.kids.get_or_init(|| merged_kids(vocab, &self.exits))
    }

    /// Walks the token trie with `dfa` from state `start`.
    ///
    /// A subtree whose bytes all lie in one of the vocabulary's byte categories, below a node
    /// where the automaton can read more bytes of that category than the subtree is high
    /// without dying or accepting (`radii`), or whose bytes are all ones the automaton loops on
    /// there (a non-accepting state), holds only tokens that stay inside the terminal and no
    /// place where it may end: its tokens are taken at once, without visiting it.
    pub(crate) fn compute(
        vocab: &TokenVocab,
        dfa: &Dfa,
        radii: &Radii,
        start: u32,
        with_exits: bool,
    ) -> TerminalMask {
        Self::walk(vocab, dfa, Some(radii), start, with_exits, usize::MAX).0
    }

    /// [`TerminalMask::compute`] (with exits) without radii, visiting every node where the
    /// automaton lives: `None` when that is more than `budget` nodes. For automata that die
    /// on most paths (keys, enums) this is cheaper than their radii.
    pub(crate) fn compute_unskipped(
        vocab: &TokenVocab,
        dfa: &Dfa,
        start: u32,
        budget: usize,
    ) -> Option<TerminalMask> {
        let (m, whole) = Self::walk(vocab, dfa, None, start, true, budget);
        whole.then_some(m)
    }

    /// [`TerminalMask::compute_unskipped`] for a state from which the automaton reads one
    /// byte at a time (a key's name, a literal): the walk would visit only the trie nodes along
    /// that one path, so they are looked up byte by byte instead of walking the root's and
    /// each node's other children. `None` where some state on the way reads two bytes or more.
    pub(crate) fn along_one_path(
        vocab: &TokenVocab,
        dfa: &Dfa,
        start: u32,
    ) -> Option<TerminalMask> {
        let (mut s, mut node) = (start, 0usize);
        let mut tokens: Vec<u32> = Vec::new();
        let (mut exits, mut ends) = (Vec::new(), Vec::new());
        loop {
            let live = dfa.live_bytes(s);
            let b = match live.iter().map(|w| w.count_ones()).sum::<u32>() {
                0 => break,
                1 => live
                    .iter()
                    .enumerate()
                    .find(|(_, w)| **w != 0)
                    .map(|(i, w)| (i * 64) as u8 + w.trailing_zeros() as u8)?,
                _ => return None,
            };
            let Some(c) = vocab.trie_child(node, b) else {
                break;
            };
            s = dfa.next(s, b);
            let n = &vocab.trie[c];
            tokens.extend_from_slice(&vocab.trie_tokens[n.tok_start as usize..n.tok_end as usize]);
            if dfa.is_accept(s) {
                if n.end as usize > c + 1 {
                    exits.push(c as u32);
                } else if !dfa.can_continue(s) {
                    ends.push(c as u32);
                }
            }
            node = c;
        }
        tokens.sort_unstable();
        let mut words: Vec<(u32, u64)> = Vec::new();
        for t in tokens {
            match words.last_mut() {
                Some((w, bits)) if *w == t >> 6 => *bits |= 1 << (t & 63),
                _ => words.push((t >> 6, 1 << (t & 63))),
            }
        }
        Some(TerminalMask::new(TokenBits::Sparse(words), exits, ends))
    }

    /// The walk, skipping subtrees when `radii` are given; stops after `budget` live nodes,
    /// returning whether it went through.
    ///
    /// With radii, the walk of each large subtree of the root is kept in the radii's memo by
    /// the state it enters and the subtree, and read from there next time: the walk below a
    /// node depends on nothing else. States that differ only in bytes a subtree never starts
    /// with (an object's keys, each a state of the names' trie, all read a space, a quote or a
    /// multi-byte character into one shared state) then share those subtrees' walks.
    fn walk(
        vocab: &TokenVocab,
        dfa: &Dfa,
        radii: Option<&Radii>,
        start: u32,
        with_exits: bool,
        budget: usize,
    ) -> (TerminalMask, bool) {
        let mut out = Marks {
            inside: vocab.empty_mask(),
            exits: Vec::new(),
            ends: Vec::new(),
        };
        let trie = &vocab.trie;
        // When every plain path (bytes of the first category) from the start stays alive and
        // not accepting for the same number of bytes and then dies, or never dies, the plain
        // tokens allowed are exactly the shorter ones: they are marked at once, and subtrees
        // whose path and bytes are all plain are not visited.
        let plain_limit = radii.and_then(|radii| match radii.plain_depth(start) {
            Some(d) => Some(d),
            None if radii.exceeds(start, 1, u8::MAX - 1) => Some(usize::MAX),
            None => None,
        });
        if let Some(limit) = plain_limit {
            vocab.plain.mark_shorter_than(limit, &mut out.inside);
        }
        let mut memo = radii.and_then(|radii| radii.memo.try_lock().ok());
        let text = memo.as_mut().map_or(0, |m| m.text_reach(dfa, start));
        if text > 0 {
            vocab.text.mark_upto(text as usize, &mut out.inside);
        }
        let mut walker = SubtreeWalk {
            vocab,
            dfa,
            radii,
            with_exits,
            plain_bytes: &category_sets()[0],
            stack: Vec::new(),
            visited: 0,
            text,
        };
        // The root's subtrees one by one, only those whose byte the start state reads (any
        // other is dead there, or plain all the way down and marked above): following the
        // root's sibling links touched a node per byte value, most of a walk from a state
        // that reads few bytes (a key's name, a literal).
        let starts = dfa.live_bytes(start);
        let root_plain = plain_limit.is_some();
        for &(b, c) in vocab
            .root_kids
            .iter()
            .filter(|&&(b, _)| has_byte(starts, b))
        {
            let c = c as usize;
            // Only a subtree that is walked node by node is worth a look in the memo; one
            // taken at once or not at all at its first node is left to the walk.
            let memo = memo
                .as_mut()
                .filter(|m| trie[c].end as usize - c >= MEMO_NODES && m.room > 0)
                .filter(|_| walker.walks_into(c, start, root_plain));
            let Some(memo) = memo else {
                if !walker.subtree(c, start, root_plain, &mut out, budget) {
                    break;
                }
                continue;
            };
            // What a walk skips as text depends on the start's reach.
            let key = (dfa.next(start, b), c as u32, root_plain, with_exits, text);
            match memo.walks.get(&key) {
                Some(Some(walked)) => {
                    walked.replay(vocab, &mut out);
                    memo.hits += 1;
                }
                // Walked once before: kept from now on.
                Some(None) => {
                    let mut walked = Walked::default();
                    walker.subtree(c, start, root_plain, &mut walked, usize::MAX);
                    walked.replay(vocab, &mut out);
                    memo.room = memo.room.saturating_sub(walked.size());
                    memo.walks.insert(key, Some(walked));
                }
                // The first walk of this subtree from this state is not kept (most are the
                // only one, and keeping one costs about a walk more), only noted.
                None => {
                    walker.subtree(c, start, root_plain, &mut out, usize::MAX);
                    memo.room = memo.room.saturating_sub(MEMO_ENTRY);
                    memo.walks.insert(key, None);
                }
            }
        }
        let mask = TerminalMask::new(TokenBits::from_dense(out.inside), out.exits, out.ends);
        (mask, walker.visited <= budget)
    }
}

/// The children of all the trie nodes `nodes`, as (byte, node), sorted by byte then node.
fn merged_kids(vocab: &TokenVocab, nodes: &[u32]) -> Vec<(u8, u32)> {
    let trie = &vocab.trie;
    let mut kids: Vec<(u8, u32)> = nodes
        .iter()
        .flat_map(|&n| children(trie, n as usize))
        .map(|c| (trie[c].byte, c as u32))
        .collect();
    kids.sort_unstable();
    kids
}

/// Root subtrees of fewer trie nodes than this are walked each time, not kept in the memo
/// (looking one up costs about as much as walking a few nodes).
const MEMO_NODES: usize = 24;

/// Most memory an automaton's memo of walks holds, in 8-byte words (a megabyte).
const MEMO_ROOM: usize = 1 << 17;

/// Words a memo entry takes besides its walk's ranges, exits and ends (the key, the walk's
/// vectors, the table's slot).
const MEMO_ENTRY: usize = 12;

/// What a walk finds: tokens by ranges of `TokenVocab::trie_tokens`, exits, ends.
trait Found {
    fn tokens(&mut self, vocab: &TokenVocab, from: usize, to: usize);
    fn exit(&mut self, node: u32);
    fn end(&mut self, node: u32);
}

/// The mask being built.
struct Marks {
    inside: Vec<u64>,
    exits: Vec<u32>,
    ends: Vec<u32>,
}

impl Found for Marks {
    #[inline(always)]
    fn tokens(&mut self, vocab: &TokenVocab, from: usize, to: usize) {
        for &t in &vocab.trie_tokens[from..to] {
            self.inside[(t >> 6) as usize] |= 1 << (t & 63);
        }
    }
    fn exit(&mut self, node: u32) {
        self.exits.push(node);
    }
    fn end(&mut self, node: u32) {
        self.ends.push(node);
    }
}

/// One subtree's walk, as the memo keeps it; token ranges that meet are merged.
#[derive(Debug, Default)]
struct Walked {
    ranges: Vec<(u32, u32)>,
    exits: Vec<u32>,
    ends: Vec<u32>,
}

impl Walked {
    fn replay(&self, vocab: &TokenVocab, out: &mut Marks) {
        for &(from, to) in &self.ranges {
            out.tokens(vocab, from as usize, to as usize);
        }
        out.exits.extend_from_slice(&self.exits);
        out.ends.extend_from_slice(&self.ends);
    }

    /// The words it takes in the memo.
    fn size(&self) -> usize {
        MEMO_ENTRY + self.ranges.len() + (self.exits.len() + self.ends.len()).div_ceil(2)
    }
}

impl Found for Walked {
    #[inline(always)]
    fn tokens(&mut self, _: &TokenVocab, from: usize, to: usize) {
        if from == to {
            return;
        }
        match self.ranges.last_mut() {
            Some((_, end)) if *end as usize == from => *end = to as u32,
            _ => self.ranges.push((from as u32, to as u32)),
        }
    }
    fn exit(&mut self, node: u32) {
        self.exits.push(node);
    }
    fn end(&mut self, node: u32) {
        self.ends.push(node);
    }
}

/// An automaton's memo of root subtrees' walks, keyed by the state the subtree's first byte
/// leads to, the subtree's node, whether the path is plain so far, and whether exits are kept.
#[derive(Debug)]
pub(crate) struct WalkMemo {
    /// `None` for a subtree walked once, not kept.
    walks: FxMap<(u32, u32, bool, bool, u8), Option<Walked>>,
    /// Words it may still take.
    room: usize,
    /// Walks read from it.
    hits: usize,
    /// [`text_reach`] of the states asked so far.
    reach: FxMap<u32, u8>,
    /// The automaton's bytes of text by class, once asked.
    reps: Option<TextReps>,
}

impl Default for WalkMemo {
    fn default() -> WalkMemo {
        WalkMemo {
            walks: FxMap::default(),
            room: MEMO_ROOM,
            hits: 0,
            reach: FxMap::default(),
            reps: None,
        }
    }
}

impl WalkMemo {
    /// [`text_reach`] of state `s`, kept for the automaton.
    fn text_reach(&mut self, dfa: &Dfa, s: u32) -> u8 {
        if let Some(&r) = self.reach.get(&s) {
            return r;
        }
        let reps = self.reps.get_or_insert_with(|| TextReps::of(dfa));
        let known = self.reach.len();
        let r = text_reach(dfa, reps, s, &mut self.reach, 0);
        // A word per state answered.
        self.room = self.room.saturating_sub(self.reach.len() - known);
        r
    }
}

/// Bytes of each byte class of an automaton among the bytes of one character of text: the
/// ASCII ones, and per kind of multi-byte character ([`MULTIBYTE`]) the bytes of each of its
/// positions.
#[derive(Debug)]
struct TextReps {
    ascii: Vec<u8>,
    multi: Vec<Vec<Vec<u8>>>,
}

impl TextReps {
    fn of(dfa: &Dfa) -> TextReps {
        TextReps {
            ascii: dfa.class_reps(text_ascii),
            multi: MULTIBYTE
                .iter()
                .map(|ranges| {
                    ranges
                        .iter()
                        .map(|&(lo, hi)| dfa.class_reps(|b| (lo..=hi).contains(&b)))
                        .collect()
                })
                .collect(),
        }
    }
}

/// The states one character of text leads to from state `s`, when every such character
/// (and every byte of it) leads through live states that do not accept; `None` otherwise.
fn text_successors(dfa: &Dfa, reps: &TextReps, s: u32) -> Option<Vec<u32>> {
    let ok = |t: u32| t != DEAD && !dfa.is_accept(t);
    let add = |set: &mut Vec<u32>, t: u32| {
        if !set.contains(&t) {
            set.push(t);
        }
    };
    let mut out = Vec::new();
    for &b in &reps.ascii {
        let t = dfa.next(s, b);
        if !ok(t) {
            return None;
        }
        add(&mut out, t);
    }
    for positions in &reps.multi {
        let mut cur: Vec<u32> = vec![s];
        for bytes in positions {
            let mut next = Vec::new();
            for &q in &cur {
                for &c in bytes {
                    let t = dfa.next(q, c);
                    if !ok(t) {
                        return None;
                    }
                    add(&mut next, t);
                }
            }
            cur = next;
        }
        for t in cur {
            add(&mut out, t);
        }
    }
    Some(out)
}

/// The most characters of any text (UTF-8 characters that a JSON string holds unescaped) that
/// state `s` reads without dying or accepting: every text of at most that many characters
/// begun (the last one possibly cut short) leads from `s`, byte by byte, through live states
/// that do not accept. 254 stands for 254 or more. The answers are kept in `known`; a state
/// met again while its own answer is being found reads as 0 there (a loop of a state on
/// itself is not such a meeting), which only makes answers smaller: a walk takes less at once.
fn text_reach(dfa: &Dfa, reps: &TextReps, s: u32, known: &mut FxMap<u32, u8>, depth: usize) -> u8 {
    if let Some(&r) = known.get(&s) {
        return r;
    }
    if depth > TEXT_DEPTH {
        return 0;
    }
    known.insert(s, 0);
    let r = match text_successors(dfa, reps, s) {
        None => 0,
        Some(next) => {
            let mut least = 253u8;
            for t in next.into_iter().filter(|&t| t != s) {
                least = least.min(text_reach(dfa, reps, t, known, depth + 1));
            }
            least + 1
        }
    };
    known.insert(s, r);
    r
}

/// Deepest chain of states [`text_reach`] follows (a string of at most this many characters
/// is counted through; longer ones read as 0 past it).
const TEXT_DEPTH: usize = 300;

/// The walk of subtrees of the token trie from given states.
struct SubtreeWalk<'a> {
    vocab: &'a TokenVocab,
    dfa: &'a Dfa,
    radii: Option<&'a Radii>,
    with_exits: bool,
    /// The bytes of the first category (`vocab::CATEGORIES`), those of plain paths.
    plain_bytes: &'static [u64; 4],
    /// (end of the node's subtree, automaton state, whether the path so far is plain).
    stack: Vec<(u32, u32, bool)>,
    /// Live nodes visited so far.
    visited: usize,
    /// How many characters of any text the walk's start state reads without dying or
    /// accepting ([`text_reach`]): a subtree whose every path is text of at most that many
    /// characters ([`TrieNode::text`](crate::vocab::TrieNode)) is skipped, its tokens marked
    /// at once (`TokenVocab::text`, a [`TokensBy`](crate::vocab::TokensBy)).
    text: u8,
}

/// What the walk does at a trie node ([`SubtreeWalk::enter`]).
enum Entry {
    /// Nothing below it is taken here: dead, or plain all the way down (marked with the plain
    /// tokens).
    Skip,
    /// Every token at it and below is taken at once.
    Whole,
    /// It is visited in this state, along a plain path or not.
    Visit(u32, bool),
}

impl SubtreeWalk<'_> {
    /// What the walk does at node `i`, entered from state `from` along a path that is plain
    /// (`plain`) or not.
    #[inline(always)]
    fn enter(&self, i: usize, from: u32, plain: bool) -> Entry {
        let (vocab, node) = (self.vocab, self.vocab.trie[i]);
        let plain = plain && has_byte(self.plain_bytes, node.byte);
        if plain && node.cats & 1 == 1 {
            return Entry::Skip;
        }
        // Text of at most the start's reach, its tokens marked at once (`TokenVocab::text`).
        if node.text != NOT_TEXT && node.text <= self.text {
            return Entry::Skip;
        }
        let s = self.dfa.next(from, node.byte);
        if s == DEAD {
            return Entry::Skip;
        }
        let whole = node.height > 0
            && self.radii.is_some_and(|radii| {
                radii.loops_over(s, &vocab.byte_sets[vocab.below_set[i] as usize])
                    || radii.exceeds(s, node.cats, node.height)
            });
        match whole {
            true => Entry::Whole,
            false => Entry::Visit(s, plain),
        }
    }

    /// Whether the walk of the subtree of node `c` from state `from` (see [`Self::subtree`])
    /// goes below its first node.
    fn walks_into(&self, c: usize, from: u32, plain: bool) -> bool {
        self.vocab.trie[c].height > 0 && matches!(self.enter(c, from, plain), Entry::Visit(..))
    }

    /// Walks the subtree of node `c`, entered from state `from` along a path that is plain
    /// (`plain`) or not; returns false, having stopped, once more than `budget` live nodes
    /// are visited in all.
    fn subtree(
        &mut self,
        c: usize,
        from: u32,
        plain: bool,
        found: &mut impl Found,
        budget: usize,
    ) -> bool {
        let (vocab, dfa, trie) = (self.vocab, self.dfa, &self.vocab.trie);
        self.stack.clear();
        let mut i = c;
        let stop = trie[i].end as usize;
        while i < stop {
            while self.stack.last().is_some_and(|&(e, _, _)| e as usize <= i) {
                self.stack.pop();
            }
            let (cur, plain_path) = self.stack.last().map_or((from, plain), |&(_, s, p)| (s, p));
            let node = trie[i];
            let (s2, plain) = match self.enter(i, cur, plain_path) {
                Entry::Skip => {
                    i = node.end as usize;
                    continue;
                }
                Entry::Whole => {
                    found.tokens(vocab, node.tok_start as usize, vocab.subtree_tokens_end(i));
                    i = node.end as usize;
                    continue;
                }
                Entry::Visit(s2, plain) => (s2, plain),
            };
            self.visited += 1;
            if self.visited > budget {
                return false;
            }
            found.tokens(vocab, node.tok_start as usize, node.tok_end as usize);
            if self.with_exits && dfa.is_accept(s2) {
                if node.end as usize > i + 1 {
                    found.exit(i as u32);
                } else if !dfa.can_continue(s2) {
                    found.end(i as u32);
                }
            }
            self.stack.push((node.end, s2, plain));
            i += 1;
        }
        true
    }
}

/// What the walk of the token trie needs to know of an automaton to take subtrees at once: per
/// state and byte category (`vocab::CATEGORIES`), the fewest bytes of that category after which
/// the automaton is dead or accepting (0 for dead and accepting states, 255 when no such bytes
/// exist; distances of 255 and more are stored as 254, which only makes the walk skip less);
/// the plain depths; and the bytes on which each state loops.
#[derive(Debug)]
pub(crate) struct Radii {
    /// Per state, the radius in each category, then their maximum (a quick first test).
    radius: Vec<[u8; CATEGORIES.len() + 1]>,
    /// Per state, `d` when every path of `d` bytes of the first category leads to the dead
    /// state and no shorter one to the dead state or an accepting one; 0 when there is no such
    /// `d` (or it is 255 or more).
    plain_depth: Vec<u8>,
    /// Per state, the bytes on which it stays where it is, for states that do not accept
    /// (accepting states get none: a subtree read there holds places where the terminal ends).
    loops: Vec<[u64; 4]>,
    /// The walks of large subtrees of the token trie so far ([`TerminalMask`]'s walk).
    memo: Mutex<WalkMemo>,
}

impl Radii {
    /// Breadth-first search backwards from the dead and accepting states, one category at a
    /// time, over the edges of the category's byte classes only.
    ///
    /// The transition table is read once: each state's row gives, in one pass, its distinct
    /// targets with the categories of the bytes that lead there, the categories on which it
    /// dies, and the bytes on which it loops. (Reading it once per category, as the searches
    /// go, cost most of a large automaton's first mask: the table is megabytes and every
    /// row a cache miss.)
    pub(crate) fn compute(dfa: &Dfa) -> Radii {
        const K: usize = CATEGORIES.len();
        let n = dfa.num_states();
        let class_sets = dfa.class_sets();
        // Per byte class, the categories it meets (bit k for `CATEGORIES[k]`).
        let class_cats: Vec<u8> = class_sets
            .iter()
            .map(|set| {
                category_sets()
                    .iter()
                    .enumerate()
                    .filter(|(_, cat)| (0..4).any(|w| set[w] & cat[w] != 0))
                    .fold(0u8, |a, (k, _)| a | 1 << k)
            })
            .collect();
        // Forward edges `(target, categories)`, each state's distinct live targets once, in
        // the order of `fwd_start`; per state, the categories on which it dies; per state, its
        // self-loop bytes.
        let mut fwd: Vec<(u32, u8)> = Vec::new();
        let mut fwd_start = vec![0u32; n + 1];
        let mut dies = vec![0u8; n];
        let mut loops = vec![[0u64; 4]; n];
        // `slot[t]`: where state `t` sits among the current state's edges, valid when
        // `stamp[t]` is that state.
        let mut stamp = vec![u32::MAX; n];
        let mut slot = vec![0u32; n];
        for s in 1..n {
            fwd_start[s] = fwd.len() as u32;
            let row = dfa.row(s as u32);
            for (c, &t) in row.iter().enumerate() {
                if t as usize == s {
                    for (w, x) in loops[s].iter_mut().zip(class_sets[c]) {
                        *w |= x;
                    }
                }
                let cats = class_cats[c];
                if cats == 0 {
                    continue;
                }
                if t == DEAD {
                    dies[s] |= cats;
                } else if stamp[t as usize] == s as u32 {
                    fwd[slot[t as usize] as usize].1 |= cats;
                } else {
                    stamp[t as usize] = s as u32;
                    slot[t as usize] = fwd.len() as u32;
                    fwd.push((t, cats));
                }
            }
        }
        fwd_start[n] = fwd.len() as u32;
        // The last entry of each row is the row's maximum, a quick first test.
        let mut out = vec![[u8::MAX; K + 1]; n];
        let mut start = vec![0u32; n + 1];
        let mut preds: Vec<u32> = Vec::new();
        let mut queue: Vec<u32> = Vec::new();
        for (k, bit) in (0..K).map(|k| (k, 1u8 << k)) {
            // Reverse edges of the category, those into the dead state apart (they are most
            // of them, and counting them into one slot would serialise on it).
            let to_dead: Vec<u32> = (1..n as u32)
                .filter(|&s| dies[s as usize] & bit != 0)
                .collect();
            start.fill(0);
            for &(t, cats) in &fwd {
                if cats & bit != 0 {
                    start[t as usize + 1] += 1;
                }
            }
            for x in 1..=n {
                start[x] += start[x - 1];
            }
            let mut fill = start.clone();
            preds.clear();
            preds.resize(start[n] as usize, 0);
            for s in 1..n {
                for &(t, cats) in &fwd[fwd_start[s] as usize..fwd_start[s + 1] as usize] {
                    if cats & bit != 0 {
                        preds[fill[t as usize] as usize] = s as u32;
                        fill[t as usize] += 1;
                    }
                }
            }
            queue.clear();
            queue.extend((0..n as u32).filter(|&s| s == DEAD || dfa.is_accept(s)));
            for &s in &queue {
                out[s as usize][k] = 0;
            }
            let mut head = 0;
            while head < queue.len() {
                let t = queue[head] as usize;
                head += 1;
                let d = out[t][k].saturating_add(1).min(254);
                let from = if t == DEAD as usize {
                    &to_dead[..]
                } else {
                    &preds[start[t] as usize..start[t + 1] as usize]
                };
                for &p in from {
                    if out[p as usize][k] == u8::MAX {
                        out[p as usize][k] = d;
                        queue.push(p);
                    }
                }
            }
        }
        for r in &mut out {
            r[K] = r[..K].iter().copied().max().unwrap_or(0);
        }
        // Plain depths in order of increasing radius: a state has depth d when every plain
        // byte leads to a state of depth d - 1 (the dead state has depth 0 and accepting states
        // none); its successors were settled first because their radius is at least d - 1 and
        // a depth of d - 1 needs a radius of d - 1.
        let some_plain_class = class_cats.iter().any(|&c| c & 1 != 0);
        let mut by_radius: Vec<u32> = (1..n as u32)
            .filter(|&s| (1..u8::MAX - 1).contains(&out[s as usize][0]))
            .collect();
        by_radius.sort_by_key(|&s| out[s as usize][0]);
        // `depth[s]`: `Some(d)` when settled with depth d; the dead state has depth 0.
        let mut depth: Vec<Option<u8>> = vec![None; n];
        depth[DEAD as usize] = Some(0);
        for s in by_radius {
            let d = out[s as usize][0];
            let su = s as usize;
            let all = some_plain_class
                && (dies[su] & 1 == 0 || d == 1)
                && fwd[fwd_start[su] as usize..fwd_start[su + 1] as usize]
                    .iter()
                    .filter(|&&(_, cats)| cats & 1 != 0)
                    .all(|&(t, _)| depth[t as usize] == Some(d - 1));
            if all {
                depth[su] = Some(d);
            }
        }
        let plain_depth = (0..n)
            .map(|s| {
                if s == DEAD as usize {
                    0
                } else {
                    depth[s].unwrap_or(0)
                }
            })
            .collect();
        // The dead state loops on every byte; accepting states get no loops.
        for (s, l) in loops.iter_mut().enumerate() {
            if s == DEAD as usize || dfa.is_accept(s as u32) {
                *l = [0; 4];
            }
        }
        Radii {
            radius: out,
            plain_depth,
            loops,
            memo: Mutex::default(),
        }
    }

    /// Whether state `s` stays where it is on every byte of `bytes` (so it reads any string
    /// of them without dying or accepting).
    #[inline]
    pub(crate) fn loops_over(&self, s: u32, bytes: &[u64; 4]) -> bool {
        let l = &self.loops[s as usize];
        (0..4).all(|w| bytes[w] & !l[w] == 0)
    }

    /// The plain depth of state `s` (see the field), if it has one.
    #[inline]
    pub(crate) fn plain_depth(&self, s: u32) -> Option<usize> {
        match self.plain_depth[s as usize] {
            0 => None,
            d => Some(d as usize),
        }
    }

    /// Whether, for some category in `cats`, state `s` reads more than `height` bytes of it
    /// without dying or accepting.
    #[inline]
    pub(crate) fn exceeds(&self, s: u32, cats: u8, height: u8) -> bool {
        let r = &self.radius[s as usize];
        r[CATEGORIES.len()] > height
            && (0..CATEGORIES.len()).any(|k| cats >> k & 1 == 1 && r[k] > height)
    }
}

impl Grammar {
    /// Terminal `t`'s automaton. Every terminal that an item is in flight in is built
    /// ([`Chart::close`] builds a deferred one when it first enters it), so the empty automaton
    /// stands in only where nothing reads it.
    #[inline]
    pub(crate) fn dfa(&self, t: u32) -> &Arc<Dfa> {
        self.terminals[t as usize]
            .get()
            .unwrap_or_else(|| unbuilt())
    }

    /// Terminal `t`'s start state, building its automaton if it was deferred.
    #[inline]
    fn start_of(&self, t: u32) -> Result<u32, Error> {
        match self.terminal_starts[t as usize] {
            UNBUILT => Ok(build_later(
                &self.terminals[t as usize],
                self.later.get(t as usize).and_then(Option::as_ref),
                &self.built_states,
                self.max_terminal_states,
            )?
            .start()),
            s => Ok(s),
        }
    }

    fn terminal_mask(&self, vocab: &TokenVocab, t: u32, state: u32) -> Arc<TerminalMask> {
        vocab.terminal_mask(self.vocab_id(vocab, t), self.dfa(t), state, false)
    }

    /// [`Grammar::terminal_mask`] for the item in flight at position `pos`, terminal `t`,
    /// that has read `read` since its rule began: for a terminal of any string content but
    /// some names, the mask of the terminal of any content less the tokens that close the
    /// string on a name ([`MinusNames`]), where `read` allows it and is the terminal's own
    /// text (the terminal begins its rule). With `walk`, every mask is walked from the trie,
    /// without this or [`TerminalMask::along_one_path`].
    pub(crate) fn terminal_mask_after(
        &self,
        vocab: &TokenVocab,
        (pos, t): (u32, u32),
        state: u32,
        read: &[u8],
        walk: bool,
    ) -> Arc<TerminalMask> {
        let id = self.vocab_id(vocab, t);
        let first = pos == 0 || matches!(self.syms[pos as usize - 1], GSym::End(_));
        if let (false, true, Some(Some(m))) = (walk, first, self.minus_names.get(t as usize)) {
            if let Some(tm) = vocab.cached_terminal_mask(id, state) {
                return tm;
            }
            if let Some(tm) = self.less_names(vocab, m, read) {
                return vocab.insert_terminal_mask(id, state, tm);
            }
        }
        vocab.terminal_mask(id, self.dfa(t), state, walk)
    }

    /// The mask of a [`MinusNames`] terminal after `read` (its opening quote and content so
    /// far): the base terminal's mask there less the trie nodes of each name's rest with the
    /// closing quote (their tokens, and the places where the string would end there). `None`
    /// where `read` holds an escape or ends inside a character, or a name's rest has a byte
    /// that may be written two ways or only escaped (`/`, `"`, `\\`, control bytes): the trie
    /// is walked there instead.
    ///
    /// Where no name is left to take away, the mask is the base terminal's own (shared, not
    /// copied).
    fn less_names(
        &self,
        vocab: &TokenVocab,
        m: &MinusNames,
        read: &[u8],
    ) -> Option<Arc<TerminalMask>> {
        let content = read.strip_prefix(b"\"")?;
        if content.iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\')
            || std::str::from_utf8(content).is_err()
        {
            return None;
        }
        let base = self.dfa(m.base);
        let mut s = base.start();
        for &b in read {
            s = base.next(s, b);
            if s == DEAD {
                return None;
            }
        }
        let first = m.names.partition_point(|n| n.as_slice() < content);
        let mut nodes: Vec<u32> = Vec::new();
        // The names are sorted: each one's walk down the trie starts where its rest parts from
        // the previous one's (`path[d]` is the node after `d` bytes of the previous rest).
        let mut path: Vec<usize> = vec![0];
        let mut prev: &[u8] = &[];
        for name in m.names[first..]
            .iter()
            .take_while(|n| n.starts_with(content))
        {
            let rest = &name[content.len()..];
            if rest.iter().any(|&b| crate::dfa::has_json_escape(b)) {
                return None;
            }
            let common = rest.iter().zip(prev).take_while(|(a, b)| a == b).count();
            path.truncate(common.min(path.len() - 1) + 1);
            prev = rest;
            for &b in &rest[path.len() - 1..] {
                match vocab.trie_child(path[path.len() - 1], b) {
                    Some(c) => path.push(c),
                    None => break,
                }
            }
            if path.len() == rest.len() + 1 {
                nodes.extend(vocab.trie_child(path[rest.len()], b'"').map(|c| c as u32));
            }
        }
        let tm = self.terminal_mask(vocab, m.base, s);
        if nodes.is_empty() {
            return Some(tm);
        }
        let mut inside = tm.inside.clone().into_dense(vocab.mask_words());
        for &p in &nodes {
            let node = &vocab.trie[p as usize];
            for &t in &vocab.trie_tokens[node.tok_start as usize..node.tok_end as usize] {
                inside[(t >> 6) as usize] &= !(1 << (t & 63));
            }
        }
        let kept = |places: &[u32]| -> Vec<u32> {
            places
                .iter()
                .copied()
                .filter(|p| !nodes.contains(p))
                .collect()
        };
        Some(Arc::new(TerminalMask::new(
            TokenBits::from_dense(inside),
            kept(&tm.exits),
            kept(&tm.ends),
        )))
    }

    /// Terminal `t`'s automaton's number in `vocab`'s shared mask cache.
    fn vocab_id(&self, vocab: &TokenVocab, t: u32) -> u64 {
        let key = vocab.serial();
        // A poisoned lock only means another thread panicked mid-insert; the map is valid.
        let mut guard = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if guard.0 != key {
            guard.0 = key;
            guard.1.fill(u64::MAX);
        }
        let id = &mut guard.1[t as usize];
        if *id == u64::MAX {
            *id = vocab.dfa_id(self.dfa(t));
        }
        *id
    }

    /// Number of flattened rule positions and terminals, for diagnostics.
    pub fn size(&self) -> (usize, usize) {
        (self.syms.len(), self.terminals.len())
    }

    /// The first positions of nonterminal `a`'s rules.
    fn rules_of(&self, a: u32) -> &[u32] {
        let a = a as usize;
        &self.nt_rules[self.nt_first[a] as usize..self.nt_first[a + 1] as usize]
    }

    /// About how many bytes the grammar holds on the heap: its rules and its terminals'
    /// automata built so far (an automaton shared with other grammars, or kept process-wide,
    /// is counted in full), for a cache of grammars to bound its memory by. The masks that
    /// the vocabulary keeps per terminal are the vocabulary's, not counted here.
    pub fn heap_bytes(&self) -> usize {
        let rules = self.syms.len() * std::mem::size_of::<GSym>()
            + (self.nt_first.len() + self.nt_rules.len()) * 4
            + self.nullable.len();
        let automata: usize = (self.terminals.iter())
            .filter_map(OnceLock::get)
            .map(|d| d.heap_bytes())
            .sum();
        rules + automata
    }

    /// Whether the grammar refers to tokens by id (GBNF's `<[id]>`, `!<[id]>` and special-token
    /// literals): its sentences are then sequences of tokens, not only bytes.
    pub fn uses_tokens(&self) -> bool {
        !self.token_sets.is_empty()
    }

    /// Number of automaton states over all terminals built so far (a terminal of a large
    /// pattern is built when a parse first reaches it).
    pub fn terminal_states(&self) -> usize {
        self.terminals
            .iter()
            .filter_map(OnceLock::get)
            .map(|d| d.num_states())
            .sum()
    }

    /// Whether the whole of `bytes` is a sentence of the grammar (false also when reading a
    /// byte goes past [`Limits::max_mask_work`]).
    pub fn recognizes(&self, bytes: &[u8]) -> bool {
        let mut chart = Chart::new(self);
        bytes.iter().all(|&b| {
            chart.start_work();
            chart.push_byte(self, b)
        }) && !chart.broken
            && chart.is_complete(self)
    }
}

/// The chart's deduplication keys and the automata maps are integers or integer tables:
/// rustc-hash's Fx hasher is fast on those (and needs no protection against chosen keys).
pub(crate) type FxSet<K> = rustc_hash::FxHashSet<K>;
pub(crate) type FxMap<K, V> = rustc_hash::FxHashMap<K, V>;

/// The deduplication of the set under construction: a hash set of its items, and per
/// nonterminal the set (by a generation number) in which it was last predicted. A rule's first
/// position is added only by the prediction of its nonterminal (every other item is a position
/// after a symbol, and the augmented start rule is never predicted), so predicting a
/// nonterminal adds its rules without hashing them, once per set.
#[derive(Clone, Debug)]
struct Seen {
    set: FxSet<u128>,
    /// Numbers the sets: bumped by every [`Seen::clear`], never 0.
    generation: u32,
    /// Per nonterminal, the generation in which it was last predicted (0: never).
    predicted: Vec<u32>,
}

impl Seen {
    fn new() -> Seen {
        Seen {
            set: FxSet::default(),
            generation: 1,
            predicted: Vec::new(),
        }
    }

    /// Starts a new set.
    fn clear(&mut self) {
        self.set.clear();
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            self.predicted.fill(0);
            self.generation = 1;
        }
    }

    #[inline]
    fn insert(&mut self, key: u128) -> bool {
        self.set.insert(key)
    }

    /// Whether nonterminal `a` (of `n`) is predicted for the first time in this set; marks it.
    #[inline]
    fn first_prediction(&mut self, a: u32, n: usize) -> bool {
        if self.predicted.len() < n {
            self.predicted.resize(n, 0);
        }
        let p = &mut self.predicted[a as usize];
        let first = *p != self.generation;
        *p = self.generation;
        first
    }
}

/// Sets of more items than this get an index of the items waiting on each nonterminal.
const INDEX_ABOVE: usize = 32;

/// The Earley chart: one set per byte read, kept as a stack so that a mask computation can push
/// trial bytes and pop them again, and a rollback is a truncation.
#[derive(Clone, Debug)]
pub(crate) struct Chart {
    /// Completed or predicted items `(position, origin set)`.
    items: Vec<(u32, u32)>,
    item_starts: Vec<u32>,
    /// Items inside a terminal: `(position of the terminal, origin set, automaton state)`.
    infl: Vec<(u32, u32, u32)>,
    infl_starts: Vec<u32>,
    /// Per set, the union of the bytes any in-flight terminal can read next.
    bytes: Vec<[u64; 4]>,
    /// Per sealed set of more than [`INDEX_ABOVE`] items, its items whose dot is before a
    /// nonterminal, as `(nonterminal, item index)` sorted: a completion finds the items
    /// waiting for its nonterminal by binary search instead of scanning the whole origin set
    /// (which made rule chains quadratic). Smaller sets are scanned.
    waits: Vec<(u32, u32)>,
    wait_starts: Vec<u32>,
    /// Per sealed set, whether `waits` indexes it.
    indexed: Vec<bool>,
    seen: Seen,
    /// Work units since the last [`Chart::start_work`].
    work: u64,
    /// Whether `work` went past the grammar's `max_work`: the sets built since then are
    /// incomplete and must be discarded.
    over: bool,
    /// Whether the initial set itself went past the limit (the chart is unusable).
    broken: bool,
    /// Why the work stopped when it was a deferred terminal's build that failed, not the work
    /// limit (`over` is then set too).
    failed: Option<Error>,
    /// The byte read into each set after the first: `input[j]` leads from set `j` to set
    /// `j + 1` (0 where no byte was read: a whole token through a token reference, or the set
    /// a mask computation assumes after a terminal ends). Guards read the text from it.
    input: Vec<u8>,
    /// The run-time checks' state (`unique`).
    guard: unique::GuardState,
    /// Whether masks are computed without their shortcuts: the places where a terminal ends
    /// walked one at a time, never as one ([`Chart::walk_exits`]), and every terminal's mask
    /// walked from the trie ([`MinusNames`], [`TerminalMask::along_one_path`]); for tests that
    /// compare the two.
    pub(crate) plain_masks: bool,
}

impl Chart {
    /// The chart holding only the initial set.
    pub(crate) fn new(g: &Grammar) -> Chart {
        let mut c = Chart {
            items: Vec::new(),
            item_starts: vec![0],
            infl: Vec::new(),
            infl_starts: vec![0],
            bytes: Vec::new(),
            waits: Vec::new(),
            wait_starts: vec![0],
            indexed: Vec::new(),
            seen: Seen::new(),
            work: 0,
            over: false,
            broken: false,
            failed: None,
            input: Vec::new(),
            guard: unique::GuardState::default(),
            plain_masks: false,
        };
        c.seen.clear();
        c.add_item(g.start_pos, 0);
        c.close(g, 0);
        c.broken = c.over;
        c
    }

    /// Starts counting work for one mask or one token.
    pub(crate) fn start_work(&mut self) {
        self.work = 0;
        self.over = false;
        if !self.broken {
            self.failed = None;
        }
    }

    /// Work units since [`Chart::start_work`].
    pub(crate) fn work(&self) -> u64 {
        self.work
    }

    /// `Err(LimitExceeded)` when the work went past the grammar's limit since
    /// [`Chart::start_work`] (or when the initial set did).
    pub(crate) fn check_work(&self, g: &Grammar) -> Result<(), Error> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if self.over || self.broken {
            return Err(Error::LimitExceeded {
                limit: Limit::MaskWork,
                value: self.work,
                max: g.max_work,
            });
        }
        Ok(())
    }

    /// Number of sets.
    #[inline]
    pub(crate) fn depth(&self) -> usize {
        self.bytes.len()
    }

    #[inline]
    fn add_item(&mut self, pos: u32, origin: u32) {
        if self.seen.insert((pos as u128) << 32 | origin as u128) {
            self.items.push((pos, origin));
        }
    }

    #[inline]
    fn add_infl(&mut self, pos: u32, origin: u32, state: u32) {
        if self
            .seen
            .insert(1 << 96 | (pos as u128) << 64 | (origin as u128) << 32 | state as u128)
        {
            self.infl.push((pos, origin, state));
        }
    }

    /// Completes the set under construction (index `k`, items from `item_starts[k]`), then seals
    /// it.
    fn close(&mut self, g: &Grammar, k: u32) {
        let mut i = self.item_starts[k as usize] as usize;
        while i < self.items.len() {
            self.work += 1;
            if self.work > g.max_work {
                self.over = true;
                break;
            }
            let (pos, origin) = self.items[i];
            i += 1;
            match g.syms[pos as usize] {
                GSym::Nt(a) => {
                    if let Some(Some(guard)) = g.guards.get(a as usize) {
                        if guard.at_prediction() && !self.predicts(g, *guard, origin, k) {
                            continue;
                        }
                    }
                    // A rule's first position is only ever added here, so a nonterminal
                    // predicted once in this set has all its rules in it already.
                    if self.seen.first_prediction(a, g.nt_first.len() - 1) {
                        self.items.extend(g.rules_of(a).iter().map(|&r| (r, k)));
                    }
                    if g.nullable[a as usize] {
                        self.add_item(pos + 1, origin);
                    }
                }
                GSym::T(t) => match g.start_of(t) {
                    Ok(s) => self.add_infl(pos, origin, s),
                    Err(e) => {
                        // A deferred terminal that cannot be built: the set is incomplete.
                        self.failed = Some(e);
                        self.over = true;
                        break;
                    }
                },
                // Waits in the set for a whole token (`push_token`, `fill_mask`).
                GSym::Tok(_) => {}
                GSym::End(a) => {
                    if origin != k && self.indexed[origin as usize] {
                        let (s, e) = (
                            self.wait_starts[origin as usize] as usize,
                            self.wait_starts[origin as usize + 1] as usize,
                        );
                        let mut j = s + self.waits[s..e].partition_point(|&(n, _)| n < a);
                        while j < e && self.waits[j].0 == a {
                            let (p2, o2) = self.items[self.waits[j].1 as usize];
                            if self.completes(g, a, o2, origin, k) {
                                self.add_item(p2 + 1, o2);
                            }
                            self.work += 1;
                            j += 1;
                        }
                    } else if origin != k {
                        let (s, e) = (
                            self.item_starts[origin as usize],
                            self.item_starts[origin as usize + 1],
                        );
                        self.work += (e - s) as u64;
                        for j in s..e {
                            let (p2, o2) = self.items[j as usize];
                            if g.syms[p2 as usize] == GSym::Nt(a)
                                && self.completes(g, a, o2, origin, k)
                            {
                                self.add_item(p2 + 1, o2);
                            }
                        }
                    }
                }
            }
        }
        let mut bytes = [0u64; 4];
        for &(pos, _, st) in &self.infl[self.infl_starts[k as usize] as usize..] {
            if let GSym::T(t) = g.syms[pos as usize] {
                let lb = g.dfa(t).live_bytes(st);
                for w in 0..4 {
                    bytes[w] |= lb[w];
                }
            }
        }
        let first = self.item_starts[k as usize] as usize;
        let big = self.items.len() - first > INDEX_ABOVE;
        if big {
            let ws = self.waits.len();
            for j in first..self.items.len() {
                if let GSym::Nt(a) = g.syms[self.items[j].0 as usize] {
                    self.waits.push((a, j as u32));
                }
            }
            self.waits[ws..].sort_unstable();
        }
        self.indexed.push(big);
        self.wait_starts.push(self.waits.len() as u32);
        self.item_starts.push(self.items.len() as u32);
        self.infl_starts.push(self.infl.len() as u32);
        self.bytes.push(bytes);
    }

    /// Whether byte `b` can be read next (a quick test before `push_byte`).
    #[inline(always)]
    pub(crate) fn may_read(&self, b: u8) -> bool {
        let top = &self.bytes[self.bytes.len() - 1];
        top[(b >> 6) as usize] >> (b & 63) & 1 == 1
    }

    /// Reads byte `b` into a new set. Returns false, leaving the chart unchanged, if no item
    /// can read it.
    pub(crate) fn push_byte(&mut self, g: &Grammar, b: u8) -> bool {
        if self.over || self.broken || !self.may_read(b) {
            return false;
        }
        self.step(g, Some(b), &[]);
        // Only a guard can leave the new set empty (every item read `b` otherwise).
        if !g.guards.is_empty() && !self.over && self.top_is_empty(g) {
            self.pop();
            return false;
        }
        true
    }

    /// Whether the top set leads nowhere: no terminal in flight, no item waiting for a whole
    /// token, and not the accepting item (what a guard that refuses the only completion
    /// leaves, or prediction guards that refuse every way on: items waiting for a nonterminal
    /// whose guard refused it read nothing).
    fn top_is_empty(&self, g: &Grammar) -> bool {
        let k = self.depth() - 1;
        self.infl_starts[k] == self.infl_starts[k + 1]
            && self.items[self.item_starts[k] as usize..self.item_starts[k + 1] as usize]
                .iter()
                .all(|&(p, o)| {
                    let waits = matches!(g.syms[p as usize], GSym::Tok(_));
                    let accepts = p == g.accept_pos && o == 0;
                    !waits && !accepts
                })
    }

    /// Builds the next set from the in-flight terminals of the top set that read `b` (when
    /// given) and the items `extra` (already past their symbol), then closes it.
    fn step(&mut self, g: &Grammar, b: Option<u8>, extra: &[(u32, u32)]) {
        let k = self.depth() as u32 - 1;
        self.seen.clear();
        self.input.push(b.unwrap_or(0));
        if let Some(b) = b {
            let (s, e) = (
                self.infl_starts[k as usize] as usize,
                self.infl_starts[k as usize + 1] as usize,
            );
            self.work += (e - s) as u64;
            for i in s..e {
                let (pos, origin, st) = self.infl[i];
                let GSym::T(t) = g.syms[pos as usize] else {
                    continue;
                };
                let d = g.dfa(t);
                let st2 = d.next(st, b);
                if st2 == DEAD {
                    continue;
                }
                if d.can_continue(st2)
                    && (g.string_finite.is_empty()
                        || self.string_item_alive(g, pos, t, origin, st2))
                {
                    self.add_infl(pos, origin, st2);
                }
                if d.is_accept(st2) {
                    self.add_item(pos + 1, origin);
                }
            }
        }
        for &(pos, origin) in extra {
            self.add_item(pos, origin);
        }
        // `may_read` or a matching token reference guarantees an item, so the new set is not
        // empty.
        self.close(g, k + 1);
    }

    /// The items of the top set past a token reference that token `t` matches. An end token
    /// (`eos`) is matched only by a reference that names it, never by a negated one (as
    /// `fill_mask` allows it).
    fn token_scans(&self, g: &Grammar, t: u32, eos: bool) -> Vec<(u32, u32)> {
        if g.token_sets.is_empty() {
            return Vec::new();
        }
        let k = self.depth() - 1;
        self.items[self.item_starts[k] as usize..self.item_starts[k + 1] as usize]
            .iter()
            .filter(|&&(p, _)| match g.syms[p as usize] {
                GSym::Tok(j) => {
                    let set = &g.token_sets[j as usize];
                    set.matches(t) && !(eos && set.negated)
                }
                _ => false,
            })
            .map(|&(p, o)| (p + 1, o))
            .collect()
    }

    /// Whether a token reference of the top set names token `t` (an end token when `eos`).
    pub(crate) fn expects_token(&self, g: &Grammar, t: u32, eos: bool) -> bool {
        !self.token_scans(g, t, eos).is_empty()
    }

    /// Reads token `t` with bytes `bytes` (an end token when `eos`): byte by byte through the
    /// terminals, and as a whole through the token references that match it; both ways end in
    /// one set. Returns false, leaving the chart unchanged, when neither way reads it.
    pub(crate) fn push_token(&mut self, g: &Grammar, t: u32, bytes: &[u8], eos: bool) -> bool {
        if self.over || self.broken {
            return false;
        }
        let base = self.depth();
        let scans = self.token_scans(g, t, eos);
        self.work += scans.len() as u64;
        let Some((&last, init)) = bytes.split_last() else {
            if scans.is_empty() {
                return false;
            }
            self.step(g, None, &scans);
            return true;
        };
        let through_bytes =
            init.iter().all(|&b| self.push_byte(g, b)) && !self.over && self.may_read(last);
        if through_bytes {
            self.step(g, Some(last), &scans);
            if g.guards.is_empty() || self.over || !self.top_is_empty(g) {
                return true;
            }
        }
        self.truncate(base);
        if scans.is_empty() || self.over {
            return false;
        }
        // Only the token references read it: one set for the whole token.
        self.step(g, None, &scans);
        true
    }

    /// Removes the top set.
    pub(crate) fn pop(&mut self) {
        self.input.truncate(self.depth().saturating_sub(2));
        self.item_starts.pop();
        self.infl_starts.pop();
        self.wait_starts.pop();
        self.indexed.pop();
        self.bytes.pop();
        self.waits
            .truncate(*self.wait_starts.last().unwrap_or(&0) as usize);
        self.items
            .truncate(*self.item_starts.last().unwrap_or(&0) as usize);
        self.infl
            .truncate(*self.infl_starts.last().unwrap_or(&0) as usize);
        self.guard.forget_above(self.depth());
    }

    /// Pops sets until `depth` remain.
    pub(crate) fn truncate(&mut self, depth: usize) {
        while self.depth() > depth.max(1) {
            self.pop();
        }
    }

    /// Whether the bytes read so far are a whole sentence.
    pub(crate) fn is_complete(&self, g: &Grammar) -> bool {
        let k = self.depth() - 1;
        self.items[self.item_starts[k] as usize..self.item_starts[k + 1] as usize]
            .iter()
            .any(|&(p, o)| p == g.accept_pos && o == 0)
    }

    /// Adds to `mask` every token whose bytes can be read from the current state.
    ///
    /// Every byte is read by some in-flight terminal, so the mask is the union over the top
    /// set's in-flight items of: the tokens that stay inside that terminal (cached per terminal
    /// and state), and, for each trie node where the terminal may end, the tokens below it that
    /// the parser accepts after the terminal. Earley sets are unions of independent items, so
    /// the parts can be computed one item at a time.
    ///
    /// Stops with `Err(LimitExceeded)` when the work passes the grammar's limit (the chart is
    /// left as it was; the mask is then partial and must not be used).
    pub(crate) fn fill_mask(
        &mut self,
        g: &Grammar,
        vocab: &TokenVocab,
        mask: &mut [u64],
    ) -> Result<(), Error> {
        self.check_work(g)?;
        if !g.guards.is_empty() {
            return self.fill_mask_guarded(g, vocab, mask);
        }
        let k = self.depth() - 1;
        let (s, e) = (
            self.infl_starts[k] as usize,
            self.infl_starts[k + 1] as usize,
        );
        for i in s..e {
            self.work += 1;
            let (pos, origin, st) = self.infl[i];
            let GSym::T(t) = g.syms[pos as usize] else {
                continue;
            };
            let read = &self.input[origin as usize..k];
            let tm = g.terminal_mask_after(vocab, (pos, t), st, read, self.plain_masks);
            tm.inside.or_into(mask);
            if tm.exits.is_empty() {
                continue;
            }
            // The set after the terminal ends. Positions inside the terminal are never an
            // origin of anything, so this set can sit directly above the current one.
            self.seen.clear();
            self.add_item(pos + 1, origin);
            self.input.push(0);
            self.close(g, k as u32 + 1);
            self.walk_exits(g, vocab, &tm, mask);
            self.pop();
            self.check_work(g)?;
        }
        if !g.token_sets.is_empty() {
            self.mask_token_refs(g, vocab, mask);
        }
        Ok(())
    }

    /// Adds to `mask` the tokens that the token references waiting in the top set match: the
    /// ids of a reference, or for a negated one every token but its ids and the end tokens
    /// (those are allowed only where the output is complete, as llama.cpp does).
    fn mask_token_refs(&mut self, g: &Grammar, vocab: &TokenVocab, mask: &mut [u64]) {
        let k = self.depth() - 1;
        let (s, e) = (
            self.item_starts[k] as usize,
            self.item_starts[k + 1] as usize,
        );
        let mut negated: Vec<&TokenSet> = Vec::new();
        for i in s..e {
            self.work += 1;
            let GSym::Tok(j) = g.syms[self.items[i].0 as usize] else {
                continue;
            };
            let set = &g.token_sets[j as usize];
            if set.negated {
                if !negated.contains(&set) {
                    negated.push(set);
                }
            } else {
                for &t in set.ids.iter().filter(|&&t| (t as usize) < vocab.len()) {
                    mask[(t >> 6) as usize] |= 1 << (t & 63);
                }
            }
        }
        for set in negated {
            self.work += mask.len() as u64;
            let mut all = vec![!0u64; mask.len()];
            if !vocab.len().is_multiple_of(64) {
                if let Some(w) = all.last_mut() {
                    *w = (1u64 << (vocab.len() % 64)) - 1;
                }
            }
            for &t in set.ids.iter().chain(vocab.eos_tokens()) {
                if (t as usize) < vocab.len() {
                    all[(t >> 6) as usize] &= !(1 << (t & 63));
                }
            }
            for (m, a) in mask.iter_mut().zip(&all) {
                *m |= a;
            }
        }
    }

    /// Adds the tokens below the trie nodes `exits` (not the nodes themselves) whose remaining
    /// bytes can be read from the top set.
    ///
    /// The top set is the same for every node, so what decides a token is only the bytes below
    /// its node: the subtrees are walked as one, by the bytes read below the nodes, and each
    /// run of bytes is read into the chart once however many nodes lead to it. Where a
    /// terminal ends at the closing quote of a string, hundreds of tokens end in `"` and go on
    /// with the same few bytes (`",`, `"}`, `",\"`), and reading `,` closes a set that
    /// predicts every member of the object: that closure is then made once, not once per token.
    pub(crate) fn walk_exits(
        &mut self,
        g: &Grammar,
        vocab: &TokenVocab,
        tm: &TerminalMask,
        mask: &mut [u64],
    ) {
        match &tm.exits[..] {
            [] => {}
            exits if self.plain_masks => {
                for &p in exits {
                    if self.over {
                        break;
                    }
                    self.walk_subtrie(g, vocab, p as usize, mask);
                }
            }
            [p] => self.walk_subtrie(g, vocab, *p as usize, mask),
            _ => {
                let base = self.depth();
                self.walk_kids(g, vocab, tm.exit_kids(vocab), mask);
                self.truncate(base);
            }
        }
    }

    /// [`Chart::walk_exits`] below the nodes `nodes`, which all lead to the top set by the
    /// same bytes below the exits.
    fn walk_merged(&mut self, g: &Grammar, vocab: &TokenVocab, nodes: &[u32], mask: &mut [u64]) {
        self.walk_kids(g, vocab, &merged_kids(vocab, nodes), mask);
    }

    /// [`Chart::walk_merged`] of the nodes whose children are `kids` ([`merged_kids`]).
    fn walk_kids(&mut self, g: &Grammar, vocab: &TokenVocab, kids: &[(u8, u32)], mask: &mut [u64]) {
        let mut group: Vec<u32> = Vec::new();
        for run in kids.chunk_by(|a, b| a.0 == b.0) {
            if self.over {
                break;
            }
            if !self.push_byte(g, run[0].0) {
                continue;
            }
            group.clear();
            group.extend(run.iter().map(|&(_, c)| c));
            for &c in &group {
                vocab.mark_node(c as usize, mask);
            }
            if let [c] = group[..] {
                self.walk_subtrie(g, vocab, c as usize, mask);
            } else {
                self.walk_merged(g, vocab, &group, mask);
            }
            self.pop();
        }
    }

    /// Adds the tokens below trie node `p` (not `p` itself) whose remaining bytes can be read
    /// from the top set.
    fn walk_subtrie(&mut self, g: &Grammar, vocab: &TokenVocab, p: usize, mask: &mut [u64]) {
        let base = self.depth();
        let trie = &vocab.trie;
        let mut ends: Vec<u32> = Vec::new();
        let end = trie[p].end as usize;
        let mut i = p + 1;
        while i < end {
            while let Some(&e) = ends.last() {
                if e as usize <= i {
                    ends.pop();
                    self.pop();
                } else {
                    break;
                }
            }
            let node = trie[i];
            if self.push_byte(g, node.byte) {
                vocab.mark_node(i, mask);
                ends.push(node.end);
                i += 1;
            } else {
                i = node.end as usize;
            }
        }
        self.truncate(base);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A vocabulary in which whole subtrees are words, numbers and runs of spaces (so that the
    /// walk takes them at once) mixed with quotes, escapes and multi-byte characters.
    fn vocab() -> TokenVocab {
        let mut seed = 7u64;
        let mut next = move || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as usize
        };
        let pieces: [&[u8]; 12] = [
            b"a",
            b"b",
            b"z",
            b"Q",
            b"0",
            b"7",
            b" ",
            b"\n",
            b"\"",
            b"\\",
            b"\xc3\xa9",
            b"-",
        ];
        let mut tokens: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        for _ in 0..3000 {
            let len = 1 + next() % 9;
            // Mostly one kind of piece per token, as in real vocabularies.
            let kind = next() % pieces.len();
            let tok: Vec<u8> = (0..len)
                .flat_map(|_| {
                    let p = if next() % 5 == 0 {
                        next() % pieces.len()
                    } else {
                        kind
                    };
                    pieces[p].to_vec()
                })
                .collect();
            tokens.push(tok);
        }
        tokens.push(Vec::new());
        let eos = tokens.len() as u32 - 1;
        TokenVocab::new(tokens, &[eos]).unwrap()
    }

    #[test]
    fn subtree_summaries() {
        let v = vocab();
        for (i, node) in v.trie.iter().enumerate() {
            // Visit the subtree node by node and compare with its summary.
            let (mut height, mut cats, mut tokens) = (0u8, (1u8 << CATEGORIES.len()) - 1, vec![]);
            let mut bytes = [0u64; 4];
            let depth_of = |j: usize| {
                let mut d = 0;
                let mut k = 0;
                while k != j {
                    let mut c = k + 1;
                    while v.trie[c].end as usize <= j {
                        c = v.trie[c].end as usize;
                    }
                    k = c;
                    d += 1;
                }
                d
            };
            let base = depth_of(i);
            for j in i..node.end as usize {
                let t = &v.trie[j];
                tokens.extend_from_slice(&v.trie_tokens[t.tok_start as usize..t.tok_end as usize]);
                if j > i {
                    bytes[(t.byte >> 6) as usize] |= 1 << (t.byte & 63);
                    height = height.max((depth_of(j) - base) as u8);
                    for (k, f) in CATEGORIES.iter().enumerate() {
                        if !f(t.byte) {
                            cats &= !(1 << k);
                        }
                    }
                }
            }
            assert_eq!(node.height, height, "node {i}");
            assert_eq!(node.cats, cats, "node {i}");
            assert_eq!(v.byte_sets[v.below_set[i] as usize], bytes, "node {i}");
            assert_eq!(
                &v.trie_tokens[node.tok_start as usize..v.subtree_tokens_end(i)],
                &tokens[..],
                "node {i}"
            );
            if i > 300 {
                // The root's first children cover the interesting shapes; the depth search
                // is quadratic, so stop early.
                break;
            }
        }
    }

    /// The radii as they were first computed: each category's search reading the transition
    /// table on its own, and the self loops in a pass of their own. The one-pass
    /// [`Radii::compute`] must give the very same numbers.
    impl Radii {
        /// The reference: one search per category, each reading the table.
        fn compute_per_category(dfa: &Dfa) -> Radii {
            let n = dfa.num_states();
            // The last entry of each row is the row's maximum, a quick first test.
            let mut out = vec![[u8::MAX; CATEGORIES.len() + 1]; n];
            let class_sets = dfa.class_sets();
            for (k, &bytes) in category_sets().iter().enumerate() {
                let reps = Dfa::class_reps_in(&class_sets, &bytes);
                // States with no live byte in the category (in the middle of a multi-byte
                // character, say) only die on it.
                let reads = |s: u32| {
                    let live = dfa.live_bytes(s);
                    (0..4).any(|w| live[w] & bytes[w] != 0)
                };
                // Reverse edges, those into the dead state apart (they are most of them, and
                // counting them into one slot would serialise on it), and a state's repeated edges
                // to one target once (most bytes of a category usually go to the same state).
                let mut start = vec![0u32; n + 1];
                let mut to_dead: Vec<u32> = Vec::new();
                let mut edges: Vec<(u32, u32)> = Vec::new();
                for s in 1..n as u32 {
                    if !reads(s) {
                        to_dead.push(s);
                        continue;
                    }
                    let (mut dies, first) = (false, edges.len());
                    for &r in &reps {
                        let t = dfa.next(s, r);
                        if t == DEAD {
                            dies = true;
                        } else if !edges[first..].contains(&(t, s)) {
                            start[t as usize + 1] += 1;
                            edges.push((t, s));
                        }
                    }
                    if dies {
                        to_dead.push(s);
                    }
                }
                for x in 1..=n {
                    start[x] += start[x - 1];
                }
                let mut fill = start.clone();
                let mut preds = vec![0u32; edges.len()];
                for &(t, s) in &edges {
                    preds[fill[t as usize] as usize] = s;
                    fill[t as usize] += 1;
                }
                let mut queue: Vec<u32> = (0..n as u32)
                    .filter(|&s| s == DEAD || dfa.is_accept(s))
                    .collect();
                for &s in &queue {
                    out[s as usize][k] = 0;
                }
                let mut head = 0;
                while head < queue.len() {
                    let t = queue[head] as usize;
                    head += 1;
                    let d = out[t][k].saturating_add(1).min(254);
                    let from = if t == DEAD as usize {
                        &to_dead[..]
                    } else {
                        &preds[start[t] as usize..start[t + 1] as usize]
                    };
                    for &p in from {
                        if out[p as usize][k] == u8::MAX {
                            out[p as usize][k] = d;
                            queue.push(p);
                        }
                    }
                }
            }
            for r in &mut out {
                r[CATEGORIES.len()] = r[..CATEGORIES.len()].iter().copied().max().unwrap_or(0);
            }
            // Plain depths in order of increasing radius: a state has depth d when every plain
            // byte leads to a state of depth d - 1 (the dead state has depth 0 and accepting states
            // none); its successors were settled first because their radius is at least d - 1 and
            // a depth of d - 1 needs a radius of d - 1.
            let reps = Dfa::class_reps_in(&class_sets, &category_sets()[0]);
            let mut by_radius: Vec<u32> = (1..n as u32)
                .filter(|&s| (1..u8::MAX - 1).contains(&out[s as usize][0]))
                .collect();
            by_radius.sort_by_key(|&s| out[s as usize][0]);
            // `depth[s]`: `Some(d)` when settled with depth d; the dead state has depth 0.
            let mut depth: Vec<Option<u8>> = vec![None; n];
            depth[DEAD as usize] = Some(0);
            for s in by_radius {
                let d = out[s as usize][0];
                let all = !reps.is_empty()
                    && reps
                        .iter()
                        .all(|&b| depth[dfa.next(s, b) as usize] == Some(d - 1));
                if all {
                    depth[s as usize] = Some(d);
                }
            }
            let plain_depth = (0..n)
                .map(|s| {
                    if s == DEAD as usize {
                        0
                    } else {
                        depth[s].unwrap_or(0)
                    }
                })
                .collect();
            let mut loops = dfa.self_loops();
            for (s, l) in loops.iter_mut().enumerate() {
                if s == DEAD as usize || dfa.is_accept(s as u32) {
                    *l = [0; 4];
                }
            }
            Radii {
                radius: out,
                plain_depth,
                loops,
                memo: Mutex::default(),
            }
        }
    }

    #[test]
    fn token_bits_keep_the_set_sparse_or_dense() {
        // 12 words: a set in 3 of them (a quarter) is sparse, one in 4 of them dense.
        for (nonzero, sparse) in [(0, true), (1, true), (3, true), (4, false), (12, false)] {
            let mut words = vec![0u64; 12];
            for i in 0..nonzero {
                words[(i * 5) % 12] = 0x8000_0000_0000_0001 | (i as u64) << 7;
            }
            let bits = TokenBits::from_dense(words.clone());
            assert_eq!(matches!(bits, TokenBits::Sparse(_)), sparse, "{nonzero}");
            // Added to a mask with other bits, and copied over one.
            let base: Vec<u64> = (0..12).map(|i| 1u64 << (i * 3)).collect();
            let mut or = base.clone();
            bits.or_into(&mut or);
            let expected: Vec<u64> = base.iter().zip(&words).map(|(a, b)| a | b).collect();
            assert_eq!(or, expected);
            let mut copy = base.clone();
            bits.copy_into(&mut copy);
            assert_eq!(copy, words);
            assert!(bits.words() <= words.len());
            assert_eq!(bits.into_dense(12), words);
        }
    }

    #[test]
    fn one_pass_radii_equal_the_per_category_searches() {
        let dfas = [
            Dfa::any_string().json_string().unwrap(),
            Dfa::any_string()
                .minus(&Dfa::from_regex("(?s:.)*a(?s:.)*z(?s:.)*").unwrap())
                .unwrap()
                .json_string()
                .unwrap(),
            Dfa::char_count(0, Some(12)).unwrap().json_string().unwrap(),
            Dfa::char_count(3, Some(300))
                .unwrap()
                .json_string()
                .unwrap(),
            Dfa::from_regex("[a-z]{0,6}").unwrap(),
            Dfa::from_regex("[0-9]+( +[a-z]+)?").unwrap(),
            Dfa::from_regex("(?s:.){3,20}").unwrap(),
            Dfa::from_regex("[A-Z][a-z0-9_]*(\\.[a-z]+)*|\\d{4}-\\d{2}-\\d{2}|\\s+x").unwrap(),
            Dfa::literals(&[b"name", b"names", b"version", b"\"q\"", b"a b"], 1000).unwrap(),
            Dfa::literal(b"\"only\""),
        ];
        let mut plain = 0;
        for d in &dfas {
            let (a, b) = (Radii::compute(d), Radii::compute_per_category(d));
            assert_eq!(a.radius, b.radius);
            assert_eq!(a.plain_depth, b.plain_depth);
            assert_eq!(a.loops, b.loops);
            plain += a.plain_depth.iter().filter(|&&x| x > 0).count();
        }
        // The plain depths are compared on states that have one, not only zeros.
        assert!(plain > 10, "{plain}");
    }

    /// From a state that reads one byte at a time, the mask looked up along that path is the
    /// walk's, for literals (JSON-encoded keys: `/` may be escaped, so their states read two
    /// bytes there) and paths ending in a loop or a choice; elsewhere it declines.
    #[test]
    fn masks_along_one_path_equal_the_walks() {
        let v = vocab();
        let dfas = [
            Dfa::literal(b"\"aab\"z"),
            Dfa::literal(b"bbbbbbbbbbbbbbbbbbbb"),
            Dfa::literal(b"\xc3\xa9a"),
            Dfa::literal(b"a/b").json_string().unwrap(),
            Dfa::literal(b"QQ\n7").json_string().unwrap(),
            Dfa::from_regex("ab(c|d)").unwrap(),
            Dfa::from_regex("za*").unwrap(),
            Dfa::from_regex("7|7-|7-b").unwrap(),
        ];
        let (mut along, mut declined) = (0, 0);
        for d in &dfas {
            for s in 1..d.num_states() as u32 {
                let walked = TerminalMask::compute_unskipped(&v, d, s, v.trie.len()).unwrap();
                match TerminalMask::along_one_path(&v, d, s) {
                    Some(m) => {
                        along += 1;
                        let mask = |b: &TokenBits| b.clone().into_dense(v.mask_words());
                        assert_eq!(mask(&m.inside), mask(&walked.inside), "state {s}");
                        assert_eq!((&m.exits, &m.ends), (&walked.exits, &walked.ends));
                    }
                    None => declined += 1,
                }
            }
        }
        assert!(
            along > 30 && declined > 3,
            "{along} along one path, {declined} declined"
        );
    }

    #[test]
    fn walks_that_skip_subtrees_are_exact() {
        let v = vocab();
        let dfas = [
            Dfa::any_string().json_string().unwrap(),
            // Keys that must not contain an `a` followed later by a `z`: states loop on most
            // bytes but not on all of a category.
            Dfa::any_string()
                .minus(&Dfa::from_regex("(?s:.)*a(?s:.)*z(?s:.)*").unwrap())
                .unwrap()
                .json_string()
                .unwrap(),
            Dfa::char_count(0, Some(12)).unwrap().json_string().unwrap(),
            Dfa::from_regex("[a-z]{0,6}").unwrap(),
            Dfa::from_regex("[0-9]+( +[a-z]+)?").unwrap(),
            Dfa::from_regex("(?s:.){3,20}").unwrap(),
            // A long string's chunk (exactly 9 characters) and its last piece (at most 9, then
            // the quote): text is read without dying or accepting for fewer characters at
            // each count, so the walks skip less and less of it.
            Dfa::char_count(9, Some(9)).unwrap().json_content().unwrap(),
            // ASCII only, then a quote: any text of ASCII is read, but not `é`, so no text is.
            Dfa::from_regex("[ -~]{0,12}\"").unwrap(),
            // A pattern's `.` (no line terminators, U+2028 and U+2029 among them), then a
            // quote.
            Dfa::from_regex("[^\\n\\r\\x{2028}\\x{2029}]{2,9}\"").unwrap(),
            Dfa::char_count(0, Some(9))
                .unwrap()
                .json_content()
                .unwrap()
                .then(&Dfa::literal(b"\""))
                .unwrap()
                .unwrap(),
        ];
        let (mut skipping_states, mut plain_states, mut over_budget) = (0, 0, 0);
        let mut text_states = 0;
        let (mut shared_hits, mut repeat_hits, mut memo_walks) = (0, 0, 0);
        for d in &dfas {
            let radii = Radii::compute(d);
            for s in 1..d.num_states() as u32 {
                let hits = radii.memo.lock().unwrap().hits;
                let tm = TerminalMask::compute(&v, d, &radii, s, true);
                if radii
                    .memo
                    .lock()
                    .unwrap()
                    .reach
                    .get(&s)
                    .is_some_and(|&r| r > 0)
                {
                    text_states += 1;
                }
                // Subtrees that an earlier state walked, read from the memo.
                let after = radii.memo.lock().unwrap().hits;
                shared_hits += after - hits;
                // Walked again (large subtrees walked before are now kept, or read back from
                // the memo): the same mask.
                let again = TerminalMask::compute(&v, d, &radii, s, true);
                assert_eq!(again.inside, tm.inside, "state {s}");
                assert_eq!((&again.exits, &again.ends), (&tm.exits, &tm.ends));
                repeat_hits += radii.memo.lock().unwrap().hits - after;
                // Without exits, the same tokens.
                let no_exits = TerminalMask::compute(&v, d, &radii, s, false);
                assert_eq!(no_exits.inside, tm.inside, "state {s}");
                assert!(no_exits.exits.is_empty() && no_exits.ends.is_empty());
                // The walk without radii, which visits every live node, finds the same.
                let Some(unskipped) = TerminalMask::compute_unskipped(&v, d, s, v.trie.len())
                else {
                    panic!("a walk of every node is within a budget of every node");
                };
                assert_eq!(unskipped.inside, tm.inside, "state {s}");
                assert_eq!((&unskipped.exits, &unskipped.ends), (&tm.exits, &tm.ends));
                let inside = tm.inside.into_dense(v.mask_words());
                let mut exits = Vec::new();
                for t in 0..v.len() as u32 {
                    let bytes = v.token_bytes(t).unwrap();
                    let mut q = s;
                    let alive = !bytes.is_empty()
                        && bytes.iter().all(|&b| {
                            q = d.next(q, b);
                            q != DEAD
                        });
                    assert_eq!(
                        inside[t as usize / 64] >> (t % 64) & 1 == 1,
                        alive,
                        "state {s}, token {bytes:?}"
                    );
                }
                // Exits: nodes with children whose path the automaton accepts.
                let mut stack = vec![(v.trie[0].end, s)];
                let mut live_nodes = 0;
                for i in 1..v.trie.len() {
                    while stack.last().is_some_and(|&(e, _)| e as usize <= i) {
                        stack.pop();
                    }
                    let q = stack.last().map_or(DEAD, |&(_, q)| q);
                    let q2 = d.next(q, v.trie[i].byte);
                    if q2 != DEAD && d.is_accept(q2) && v.trie[i].end as usize > i + 1 {
                        exits.push(i as u32);
                    }
                    live_nodes += (q2 != DEAD) as usize;
                    stack.push((v.trie[i].end, q2));
                }
                assert_eq!(tm.exits, exits, "state {s}");
                // With a budget below the live nodes, the walk without radii gives up; with
                // one of exactly as many, it goes through.
                if live_nodes > 0 {
                    let under = TerminalMask::compute_unskipped(&v, d, s, live_nodes - 1);
                    assert!(under.is_none(), "state {s}");
                    assert!(TerminalMask::compute_unskipped(&v, d, s, live_nodes).is_some());
                    over_budget += 1;
                }
                // States of the length-bounded string where the plain tokens are marked by
                // length (beyond the opening quote, which every plain byte kills).
                plain_states += (radii.plain_depth(s).unwrap_or(0) > 1) as usize;
                skipping_states += (0..v.trie.len()).any(|i| {
                    v.trie[i].height > 0 && radii.exceeds(s, v.trie[i].cats, v.trie[i].height)
                }) as usize;
            }
            memo_walks += radii.memo.lock().unwrap().walks.values().flatten().count();
        }
        // Large subtrees were walked into the memo, and some read back from it by states other
        // than the one that walked them.
        assert!(memo_walks > 50, "{memo_walks}");
        assert!(shared_hits > 150, "{shared_hits} hits, {memo_walks} walks");
        assert!(repeat_hits > 150, "{repeat_hits}");
        // Some states must be able to take subtrees at once, or this test checks nothing new.
        assert!(skipping_states > 10, "{skipping_states}");
        assert!(plain_states >= 12, "{plain_states}");
        // States that read any text for a while skip its subtrees ([`text_reach`]).
        assert!(text_states > 30, "{text_states}");
        assert!(over_budget > 10, "{over_budget}");
    }

    /// The vocabulary's shared cache keeps at most its bound of automata alive (without one, a
    /// server that compiled many schemas kept every terminal automaton it had masked), and
    /// forgetting them changes no mask: a grammar that numbered its terminals before the cache
    /// was dropped keeps numbers that no other automaton is given.
    #[test]
    fn a_bounded_shared_cache_forgets_automata_and_changes_no_mask() {
        use crate::constraint::{Constraint, GrammarConstraint};
        let (bounded, plain) = (Arc::new(vocab()), Arc::new(vocab()));
        // Every automaton met drops those kept before it.
        bounded.bound_shared_automata(1);
        let grammars = [
            (
                r#"root ::= "ab" [a-z]* "\u00e9" | [0-9]+ "-" "b""#,
                "abzz\u{e9}",
            ),
            (r#"root ::= ("q" | "zz")+ [0-9]{2,4} "-" "#, "qzzq123-"),
            (
                r#"root ::= "\"" [^"]* "\"" [ \t]* "ab""#,
                "\"a-b \u{e9}7\" ab",
            ),
        ]
        .map(|(g, text)| (crate::gbnf::compile_gbnf(g).unwrap(), text));
        let (mut masks, mut allowed) = (0, 0);
        // Each grammar twice, the others between: its second constraints meet a cache that
        // forgot its automata (and numbered others since).
        for round in 0..2 {
            for (g, text) in &grammars {
                let mut a = GrammarConstraint::new(Arc::clone(g), &bounded);
                let mut b = GrammarConstraint::new(Arc::clone(g), &plain);
                let mut rest = text.as_bytes();
                let (mut ma, mut mb) = (bounded.empty_mask(), plain.empty_mask());
                while !rest.is_empty() {
                    a.fill_mask(&mut ma).unwrap();
                    b.fill_mask(&mut mb).unwrap();
                    assert_eq!(ma, mb, "round {round}, {text:?} before {rest:?}");
                    masks += 1;
                    allowed += ma.iter().map(|w| w.count_ones()).sum::<u32>();
                    // The longest allowed token that the text goes on with.
                    let t = (0..bounded.len() as u32)
                        .filter(|&t| ma[(t >> 6) as usize] >> (t & 63) & 1 == 1)
                        .filter(|&t| {
                            let bytes = bounded.token_bytes(t).unwrap_or_default();
                            !bytes.is_empty() && rest.starts_with(bytes)
                        })
                        .max_by_key(|&t| bounded.token_bytes(t).map_or(0, <[u8]>::len))
                        .unwrap_or_else(|| panic!("{text:?}: no token for {rest:?}"));
                    rest = &rest[bounded.token_bytes(t).map_or(0, <[u8]>::len)..];
                    a.advance(t).unwrap();
                    b.advance(t).unwrap();
                }
            }
        }
        assert!(
            masks > 30 && allowed > 1000,
            "{masks} masks, {allowed} allowed"
        );
        assert_eq!(bounded.bound_shared_automata(1), 1);
        assert!(plain.bound_shared_automata(usize::MAX) > 6);
    }
}
