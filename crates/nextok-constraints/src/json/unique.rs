//! `uniqueItems` over an unbounded domain of strings: the array's rules count its items
//! (left-recursively, so that every item's waiting item starts at the `[`), and each item is a
//! guarded string terminal ([`Guard::UniqueStrings`]) that the chart completes only when its
//! decoded value differs from every earlier item's. Small finite domains are unrolled into the
//! grammar instead (`containers::unique_array`).
//!
//! Exactness needs that no prefix of an item be left without a valid completion, whatever
//! the earlier items: the item's automaton must reach infinitely many strings from each of its
//! states inside the string (`unbounded`). Domains with a state of finitely many completions
//! (`maxLength`, `enum`, formats such as `date`, patterns with finite branches) are refused by
//! name, as are items of other types (numbers, whose equal spellings `1`, `1.0`, `1e0` make a
//! prefix's values differ from its spellings, and objects and arrays).

use serde_json::Value;

use super::algebra::normalize;
use super::compile::Compiler;
use super::schema::{unsupported, Node, Schema, TypeSet};
use super::string::{is_long, string_content};
use crate::dfa::{Dfa, DEAD};
use crate::grammar::{Guard, Sym};
use crate::Error;

impl Compiler<'_> {
    /// The arrays of `m` (with `uniqueItems`) whose items, `items` once normalised, are
    /// strings of an unbounded domain; anything else is refused, naming `uniqueItems`.
    pub(super) fn unique_unbounded(
        &mut self,
        m: &Node,
        items: &Schema,
        path: &str,
    ) -> Result<Sym, Error> {
        let ip = format!("{path}/items");
        let items = self.resolve_bare(items, &ip)?;
        let n = match &items {
            Schema::Node(n) => n,
            _ => return Err(unsupported("uniqueItems (items of any type)", path)),
        };
        let types = n.types.unwrap_or(TypeSet::ALL);
        if types != TypeSet::STRING || n.values.is_some() {
            let what = if n.values.is_some() {
                "uniqueItems (an enum of more than 12 values)"
            } else if types.has(TypeSet::OBJECT) || types.has(TypeSet::ARRAY) {
                "uniqueItems (items that may be objects or arrays)"
            } else if types.has(TypeSet::NUMBER) || types.has(TypeSet::INTEGER) {
                "uniqueItems (items that may be numbers)"
            } else {
                "uniqueItems (items of more than one type)"
            };
            return Err(unsupported(what, path));
        }
        let string_keywords = [
            "type",
            "minLength",
            "maxLength",
            "pattern",
            "not pattern",
            "format",
            "not enum",
        ];
        if let Some(k) = n
            .keywords()
            .into_iter()
            .find(|k| !string_keywords.contains(k))
        {
            return Err(unsupported(
                format!("uniqueItems (string items with {k})"),
                path,
            ));
        }
        let f = &n.string;
        if f.max_length.is_some() || is_long(f) {
            return Err(unsupported(
                "uniqueItems (strings of bounded length: a finite domain)",
                path,
            ));
        }
        let mut content = string_content(f, &ip)?;
        for v in n.excluded.iter().flatten() {
            if let Value::String(x) = v {
                content = content.minus(&Dfa::literal(x.as_bytes()))?;
            }
        }
        let encoded = content.json_string()?;
        if !unbounded(&encoded) {
            return Err(unsupported(
                "uniqueItems (a string domain with finitely many completions of some prefix)",
                path,
            ));
        }
        let a = &m.array;
        let min = a.min_items.unwrap_or(0);
        let max = a.max_items;
        if max.is_some_and(|x| x < min) {
            return Ok(Sym::Nt(self.b.nt("impossible array")));
        }
        let top = max.unwrap_or(min.max(1));
        if top > 4096 {
            return Err(unsupported("maxItems/minItems above 4096", path));
        }
        let t = self.b.terminal(encoded)?;
        let item = self
            .b
            .guarded(&format!("{path} unique item"), t, Guard::UniqueStrings);
        let (lb, rb, comma) = (self.lit("["), self.lit("]"), self.lit(","));
        // counted[i - 1]: `[` and i items, the last one checked against those before it. The
        // rules grow on the left, so every item's waiting item starts at the `[`.
        let counted: Vec<u32> = (1..=top)
            .map(|i| self.b.nt(format!("{path} unique {i} items")))
            .collect();
        let arr = self.b.nt(format!("{path} unique array"));
        let r = self.seq(&[lb, item]);
        self.b.rule(counted[0], r);
        for i in 1..top {
            let r = self.seq(&[Sym::Nt(counted[i - 1]), comma, item]);
            self.b.rule(counted[i], r);
        }
        if max.is_none() {
            let r = self.seq(&[Sym::Nt(counted[top - 1]), comma, item]);
            self.b.rule(counted[top - 1], r);
        }
        if min == 0 {
            let r = self.seq(&[lb, rb]);
            self.b.rule(arr, r);
        }
        for (i, &c) in counted.iter().enumerate() {
            if i + 1 >= min {
                let r = self.seq(&[Sym::Nt(c), rb]);
                self.b.rule(arr, r);
            }
        }
        Ok(Sym::Nt(arr))
    }

    /// `s` normalised, through bare references (at most 32).
    fn resolve_bare(&self, s: &Schema, path: &str) -> Result<Schema, Error> {
        let mut s = normalize(self.table, s, path, 0)?;
        for _ in 0..32 {
            let target = match &s {
                Schema::Node(n) if n.only(&["$ref"]) => n.reference.as_ref().map(|r| r.target),
                _ => return Ok(s),
            };
            let Some(t) = target.and_then(|t| self.table.get(t)) else {
                return Ok(s);
            };
            s = normalize(self.table, t, path, 0)?;
        }
        Err(unsupported(
            "uniqueItems (a chain of more than 32 references)",
            path,
        ))
    }
}

/// Whether every live state of `d` that can read on reaches infinitely many words: those that
/// cannot read on (after a string's closing quote) apart. Found by peeling: a state whose
/// successors are all dead or finite is finite; what is never peeled reaches a cycle.
pub(super) fn unbounded(d: &Dfa) -> bool {
    let n = d.num_states();
    let reps = d.class_reps(|_| true);
    // Reachable states, from the start.
    let mut reach = vec![false; n];
    let mut todo = vec![d.start()];
    while let Some(s) = todo.pop() {
        if s == DEAD || reach[s as usize] {
            continue;
        }
        reach[s as usize] = true;
        todo.extend(reps.iter().map(|&b| d.next(s, b)));
    }
    let succ: Vec<Vec<u32>> = (0..n as u32)
        .map(|s| {
            let mut v: Vec<u32> = reps
                .iter()
                .map(|&b| d.next(s, b))
                .filter(|&t| t != DEAD)
                .collect();
            v.sort_unstable();
            v.dedup();
            v
        })
        .collect();
    let mut finite = vec![false; n];
    loop {
        let mut changed = false;
        for s in 1..n {
            if !finite[s] && succ[s].iter().all(|&t| finite[t as usize]) {
                finite[s] = true;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    (1..n).all(|s| !reach[s] || !finite[s] || !d.can_continue(s as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unbounded_string_domains() {
        let enc = |re: &str| Dfa::from_regex(re).unwrap().json_string().unwrap();
        assert!(unbounded(&enc("(?s:.)*")));
        assert!(unbounded(&enc("[a-z]+")));
        assert!(unbounded(&enc("a(?s:.)*")));
        assert!(!unbounded(&enc("ab|ac")));
        assert!(!unbounded(&enc("(?s:.){0,3}")));
        // Infinitely many words, but after `x` only one.
        assert!(!unbounded(&enc("x|y[a-z]*")));
    }
}
