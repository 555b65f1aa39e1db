//! The grammars (and automata) of the constraints met lately, compiled once and shared.
//!
//! A request's constraint is built more than once on its way through: the server checks it
//! when the request arrives (to refuse a bad schema with a 400), the engine checks it again
//! when the request is submitted, and the scheduler builds one constraint per completion when
//! it admits the request, on its own thread, while every running request waits for its next
//! step. Compiling a large JSON Schema takes milliseconds (tens for the largest of JSON Schema
//! Store's), so each of those compiles was paid in full, the last ones by every other user of
//! the server. And applications send the same schema with request after request. Here a
//! grammar is compiled once per (kind, text, limits, options) and kept among the most recently
//! used; every constraint built from it shares the grammar (and so its terminals' numbers in
//! the vocabulary's mask cache, and its deferred terminals once built), which is exactly what a
//! fresh compile would have made: the compile is deterministic, so answers are the same, bit
//! for bit, cached or not. The automata of patterns and choices are kept the same way, as fresh
//! constraints that each use clones.
//!
//! Refusals are not kept: a schema that does not compile is compiled again when it is sent
//! again, and refused again.

use nextok_constraints::Limits;
use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// How many grammars an engine keeps unless told otherwise
/// ([`Engine::set_grammar_cache_capacity`](crate::Engine::set_grammar_cache_capacity)).
pub const DEFAULT_GRAMMAR_CACHE_CAPACITY: usize = 64;

/// How many bytes of grammars (and as many of automata) an engine keeps unless told otherwise
/// ([`Engine::set_grammar_cache_bytes`](crate::Engine::set_grammar_cache_bytes)): 128 MiB. The
/// largest grammar of the real-world corpus (web-types.json's) holds a few megabytes, most hold
/// tens of kilobytes; a grammar at the default [`Limits`] could hold far more, and is not
/// kept past this.
pub const DEFAULT_GRAMMAR_CACHE_BYTES: usize = 128 << 20;

/// What a kept value costs in memory.
pub(crate) trait HeapBytes {
    fn heap_bytes(&self) -> usize;
}

impl HeapBytes for nextok_constraints::CompiledSchema {
    fn heap_bytes(&self) -> usize {
        self.grammar.heap_bytes()
    }
}

impl HeapBytes for nextok_constraints::RegexConstraint {
    fn heap_bytes(&self) -> usize {
        nextok_constraints::RegexConstraint::heap_bytes(self)
    }
}

/// What the grammar cache has done since the engine was made: a constraint built from a kept
/// grammar is a hit, one compiled is a miss.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GrammarCacheStats {
    /// Grammars taken from the cache.
    pub hits: u64,
    /// Grammars compiled (and kept, where they compiled and the cache has room).
    pub misses: u64,
    /// Grammars kept now.
    pub entries: usize,
    /// The most grammars kept (0: none is).
    pub capacity: usize,
    /// About how many bytes the grammars kept now hold.
    pub bytes: usize,
    /// The most bytes of grammars kept.
    pub max_bytes: usize,
}

/// The kinds of constraint whose grammars are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    /// A JSON Schema, by its JSON text (so that the document order of its properties, which
    /// the compile may keep, is part of it).
    JsonSchema,
    /// A GBNF grammar, compiled with the engine's vocabulary.
    Gbnf,
    /// A Lark grammar.
    Lark,
    /// A regular expression's automaton.
    Regex,
    /// Choices' automaton, by their JSON text.
    Choice,
}

/// One kept grammar and what it was compiled from.
#[derive(Debug)]
struct Entry<V> {
    kind: Kind,
    /// A hash of `text`, compared first.
    hash: u64,
    text: String,
    limits: Limits,
    /// What `compiled` held when it was kept ([`HeapBytes`]).
    bytes: usize,
    /// A JSON Schema's grammar and what it left unenforced; a grammar's, with nothing
    /// unenforced and no draft; or a fresh constraint of an automaton, cloned for each use.
    compiled: V,
}

/// The most recently used grammars (or automata: `V` is what is kept), most recent first.
#[derive(Debug)]
pub(crate) struct GrammarCache<V> {
    kept: Mutex<Kept<V>>,
    hits: AtomicU64,
    misses: AtomicU64,
}

#[derive(Debug)]
struct Kept<V> {
    capacity: usize,
    max_bytes: usize,
    /// The entries' bytes, in all.
    bytes: usize,
    entries: VecDeque<Entry<V>>,
}

impl<V> Kept<V> {
    /// Drops the least recently used entries until the bounds hold.
    fn shrink(&mut self) {
        while self.entries.len() > self.capacity || self.bytes > self.max_bytes {
            match self.entries.pop_back() {
                Some(old) => self.bytes -= old.bytes,
                None => break,
            }
        }
    }
}

impl<V: Clone + HeapBytes> GrammarCache<V> {
    pub(crate) fn new(capacity: usize, max_bytes: usize) -> GrammarCache<V> {
        GrammarCache {
            kept: Mutex::new(Kept {
                capacity,
                max_bytes,
                bytes: 0,
                entries: VecDeque::new(),
            }),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// The kept list; a panic elsewhere while it was held left it whole (no change to it
    /// panics midway), so it is used as it is.
    fn kept(&self) -> std::sync::MutexGuard<'_, Kept<V>> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The grammar of (`kind`, `text`, `limits`): the kept one, or `compile`'s, kept when it
    /// compiles. The lock is not held while compiling, so that other requests' constraints
    /// are served meanwhile; two threads that compile the same text at once both compile it,
    /// and both get the same grammar (one of the two is kept).
    pub(crate) fn get_or_compile<E>(
        &self,
        kind: Kind,
        text: &str,
        limits: &Limits,
        compile: impl FnOnce() -> Result<V, E>,
    ) -> Result<V, E> {
        let hash = {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            text.hash(&mut h);
            h.finish()
        };
        let same = |e: &Entry<V>| {
            e.kind == kind && e.hash == hash && e.limits == *limits && e.text == text
        };
        {
            let mut kept = self.kept();
            let found = kept.entries.iter().position(same);
            if let Some(entry) = found.and_then(|i| kept.entries.remove(i)) {
                let compiled = entry.compiled.clone();
                kept.entries.push_front(entry);
                self.hits.fetch_add(1, Ordering::Relaxed);
                return Ok(compiled);
            }
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        let compiled = compile()?;
        let bytes = compiled.heap_bytes();
        let mut kept = self.kept();
        let fits = kept.capacity > 0 && bytes <= kept.max_bytes;
        if fits && !kept.entries.iter().any(same) {
            kept.entries.push_front(Entry {
                kind,
                hash,
                text: text.to_string(),
                limits: *limits,
                bytes,
                compiled: compiled.clone(),
            });
            kept.bytes += bytes;
            kept.shrink();
        }
        Ok(compiled)
    }

    /// Forgets every kept grammar (the options they were compiled under changed).
    pub(crate) fn clear(&self) {
        let mut kept = self.kept();
        kept.entries.clear();
        kept.bytes = 0;
    }

    /// Keeps at most `capacity` grammars from now on (0: none), the most recent.
    pub(crate) fn set_capacity(&self, capacity: usize) {
        let mut kept = self.kept();
        kept.capacity = capacity;
        kept.shrink();
    }

    /// Keeps at most `max_bytes` of grammars from now on, the most recent.
    pub(crate) fn set_max_bytes(&self, max_bytes: usize) {
        let mut kept = self.kept();
        kept.max_bytes = max_bytes;
        kept.shrink();
    }

    pub(crate) fn stats(&self) -> GrammarCacheStats {
        let kept = self.kept();
        GrammarCacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            entries: kept.entries.len(),
            capacity: kept.capacity,
            bytes: kept.bytes,
            max_bytes: kept.max_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nextok_constraints::CompiledSchema;
    use std::sync::Arc;

    fn grammar(text: &str) -> CompiledSchema {
        CompiledSchema {
            grammar: nextok_constraints::compile_gbnf(text).unwrap(),
            draft: None,
            ignored: Vec::new(),
        }
    }

    #[test]
    fn kept_grammars_are_found_by_kind_text_and_limits_and_the_oldest_goes_first() {
        let cache = GrammarCache::new(2, usize::MAX);
        let limits = Limits::DEFAULT;
        let a = r#"root ::= "a""#;
        let b = r#"root ::= "b""#;
        let c = r#"root ::= "c""#;
        let first = cache
            .get_or_compile(Kind::Gbnf, a, &limits, || Ok::<_, ()>(grammar(a)))
            .unwrap();
        // The same text again: the same grammar, not compiled.
        let again = cache
            .get_or_compile(Kind::Gbnf, a, &limits, || -> Result<CompiledSchema, ()> {
                panic!("compiled again")
            })
            .unwrap();
        assert!(Arc::ptr_eq(&first.grammar, &again.grammar));
        // Another kind, or other limits, is another grammar.
        let lark = cache
            .get_or_compile(Kind::Lark, a, &limits, || Ok::<_, ()>(grammar(a)))
            .unwrap();
        assert!(!Arc::ptr_eq(&first.grammar, &lark.grammar));
        let tight = Limits::DEFAULT.with_max_rules(10);
        cache
            .get_or_compile(Kind::Gbnf, a, &tight, || Ok::<_, ()>(grammar(a)))
            .unwrap();
        let stats = cache.stats();
        assert_eq!((stats.hits, stats.misses, stats.entries), (1, 3, 2));
        // Two kept: `a` under the default limits was the least recently used, and went.
        let mut compiled = 0;
        for text in [b, c, a] {
            cache
                .get_or_compile(Kind::Gbnf, text, &limits, || {
                    compiled += 1;
                    Ok::<_, ()>(grammar(text))
                })
                .unwrap();
        }
        assert_eq!(compiled, 3);
        // Used last: `c` then `a` are kept; `c` used again is a hit.
        cache
            .get_or_compile(Kind::Gbnf, c, &limits, || -> Result<CompiledSchema, ()> {
                panic!("c was kept")
            })
            .unwrap();
    }

    #[test]
    fn the_bytes_kept_are_bounded_and_a_grammar_larger_than_the_bound_is_not_kept() {
        let limits = Limits::DEFAULT;
        let small = r#"root ::= "a""#;
        let large = r#"root ::= [a-z]{0,40} "@" [a-z]{0,40}"#;
        let (s, l) = (grammar(small), grammar(large));
        let (sb, lb) = (s.heap_bytes(), l.heap_bytes());
        assert!(sb > 0 && lb > 2 * sb, "{sb} {lb}");
        // Room for the large one alone: keeping the small one beside it drops the older.
        let cache = GrammarCache::new(8, lb);
        let keep = |text: &str, g: &CompiledSchema| {
            cache
                .get_or_compile(Kind::Gbnf, text, &limits, || Ok::<_, ()>(g.clone()))
                .unwrap();
        };
        keep(large, &l);
        assert_eq!((cache.stats().entries, cache.stats().bytes), (1, lb));
        keep(small, &s);
        assert_eq!((cache.stats().entries, cache.stats().bytes), (1, sb));
        // Larger than the bound: used, not kept, and nothing else dropped for it.
        cache.set_max_bytes(lb - 1);
        keep(large, &l);
        assert_eq!((cache.stats().entries, cache.stats().bytes), (1, sb));
        // A lower bound drops what no longer fits.
        cache.set_max_bytes(sb - 1);
        assert_eq!((cache.stats().entries, cache.stats().bytes), (0, 0));
    }

    #[test]
    fn refusals_are_not_kept_and_a_cache_of_no_room_keeps_nothing() {
        let cache = GrammarCache::new(4, usize::MAX);
        let limits = Limits::DEFAULT;
        for _ in 0..2 {
            let r = cache.get_or_compile(Kind::Gbnf, "bad", &limits, || {
                Err::<CompiledSchema, _>("no")
            });
            assert_eq!(r.unwrap_err(), "no");
        }
        assert_eq!(cache.stats().misses, 2);
        assert_eq!(cache.stats().entries, 0);
        cache.set_capacity(0);
        let a = r#"root ::= "a""#;
        for _ in 0..2 {
            cache
                .get_or_compile(Kind::Gbnf, a, &limits, || Ok::<_, ()>(grammar(a)))
                .unwrap();
        }
        let stats = cache.stats();
        assert_eq!((stats.hits, stats.misses, stats.entries), (0, 4, 0));
    }
}
