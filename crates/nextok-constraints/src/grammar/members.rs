//! Run-time checks on predictions: object members in any order, however many named
//! properties, without a rule per set of names.
//!
//! A JSON Schema object whose named properties are too many for bit masks of the names seen
//! (`containers::object`) is compiled as one loop, left-recursive so that every member's
//! waiting item starts where the object's `{` was read:
//!
//! ```text
//! members  -> "{" M_i | members, M_i        (every named member i, and the additional one)
//! members, -> members More ","
//! object   -> "{" End "}" | members End "}"
//! M_i      -> key_i ":" value_i
//! ```
//!
//! `M_i`, `More` and `End` are guarded at prediction: the chart predicts them (and, for the
//! empty `More` and `End`, steps over them) only when their [`Guard`] passes against the
//! object's text so far, and completes `M_i` only into a waiting item whose object passes
//! too. The text is read back from the chart's input (`{`, then `key: value` pairs), giving
//! the named keys seen (decoded, so `"\u0061"` is `"a"`) and the number of members. A named
//! key passes when it was not seen, its value can be written, and the object can still end
//! afterwards (required keys and `minProperties`/`maxProperties` within reach); the
//! additional member passes on counts alone (its keys are outside the names, and a repeated
//! additional key is left as the bit-mask path leaves it); `More` passes when some member
//! does; `End` when every required key is there, the count is within bounds and
//! `dependentRequired` holds.
//!
//! Masks stay exact and never lead into a dead end. A guard reads only text before the place
//! where it is predicted, which is always right after a `{`, a `,`, a value or whitespace; a
//! mask computation's assumed terminal end (`GuardState::synthetic`) is such a place, and
//! its unknown byte is the last byte of that separator or value, which changes neither the
//! keys nor the count, so the guard is evaluated there exactly (the reader ignores the
//! unknown byte and what it cut short). A guard further on reads across the unknown byte:
//! the walk below one place where the terminal ends knows the bytes it stands for (the
//! place's path in the token trie, `GuardState::exit`), and the reader reads those instead,
//! so the guard is as exact as with real bytes. (Outside such a walk it marks the place
//! uncertain, and the place is read again with real bytes, as for `uniqueItems`.) Because `More` passes only when a member can follow, and every member that
//! passes leaves an object that can still end, every prefix the chart accepts has a valid
//! completion; objects that cannot end at all (a required key whose value is impossible,
//! counts out of reach) are pruned when the grammar is built (`ObjectSpec::settle`).

use super::unique::decode_string;
use super::{Chart, FxMap, Grammar, Guard};

/// The key index of an object's additional member (keys outside its names).
pub(crate) const ADDITIONAL: u32 = u32::MAX;

/// Most (object, place) states kept at once.
const CACHE_ENTRIES: usize = 64;

/// What an object allows, for its guards.
#[derive(Clone, Debug)]
pub(crate) struct ObjectSpec {
    /// Decoded name to index.
    pub(crate) names: FxMap<Vec<u8>, u32>,
    /// Per name, whether it is required.
    pub(crate) required: Vec<bool>,
    /// `dependentRequired`: a name's index and the indices it needs.
    pub(crate) deps: Vec<(u32, Vec<u32>)>,
    /// `minProperties` (0 when absent).
    pub(crate) min: usize,
    /// `maxProperties`.
    pub(crate) max: Option<usize>,
    /// Per name, its member's nonterminal.
    pub(crate) members: Vec<u32>,
    /// The additional member's nonterminal, if the object has one.
    pub(crate) additional: Option<u32>,
    /// The object's nonterminal (its rules go when the object cannot be written at all).
    pub(crate) object: u32,
    /// Filled by `settle`: per name, whether its member can be written (its value, and with
    /// `dependentRequired` the members it needs, can).
    usable: Vec<bool>,
    /// Filled by `settle`: whether an additional member can be written.
    open: bool,
    /// Number of required names.
    n_required: usize,
    /// Number of usable names that are not required.
    optional_usable: usize,
}

impl ObjectSpec {
    /// A spec; `settle` completes it when the grammar is built.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        names: &[String],
        required: Vec<bool>,
        deps: Vec<(u32, Vec<u32>)>,
        min: usize,
        max: Option<usize>,
        members: Vec<u32>,
        additional: Option<u32>,
        object: u32,
    ) -> ObjectSpec {
        let names = names
            .iter()
            .enumerate()
            .map(|(i, x)| (x.as_bytes().to_vec(), i as u32))
            .collect();
        let n_required = required.iter().filter(|&&r| r).count();
        ObjectSpec {
            names,
            required,
            deps,
            min,
            max,
            members,
            additional,
            object,
            usable: Vec::new(),
            open: false,
            n_required,
            optional_usable: 0,
        }
    }

    /// Records which members can be written (`productive`, per nonterminal) and returns whether
    /// the object can be written at all: every required member usable, and the counts within
    /// reach from the empty object.
    pub(crate) fn settle(&mut self, productive: &[bool]) -> bool {
        let avail: Vec<bool> = self
            .members
            .iter()
            .map(|&m| productive[m as usize])
            .collect();
        self.usable = avail.clone();
        if !self.deps.is_empty() {
            // A member is usable when every member its presence requires, transitively, is.
            let mut needs: Vec<Vec<u32>> = vec![Vec::new(); avail.len()];
            for (k, v) in &self.deps {
                needs[*k as usize].extend(v);
            }
            for i in 0..avail.len() {
                let mut seen = vec![false; avail.len()];
                let mut todo = vec![i];
                seen[i] = true;
                while let Some(j) = todo.pop() {
                    if !avail[j] {
                        self.usable[i] = false;
                        break;
                    }
                    for &d in &needs[j] {
                        if !seen[d as usize] {
                            seen[d as usize] = true;
                            todo.push(d as usize);
                        }
                    }
                }
            }
        }
        self.open = self.additional.is_some_and(|a| productive[a as usize]);
        self.optional_usable = (0..self.usable.len())
            .filter(|&i| self.usable[i] && !self.required[i])
            .count();
        let required_ok = (0..self.usable.len()).all(|i| !self.required[i] || self.usable[i]);
        let empty = ObjState::default();
        required_ok
            && self.max.is_none_or(|m| self.min <= m)
            && self.feasible(0, self.n_required, self.extra(&empty))
    }

    /// How many more usable optional named members could still be added (`None`: without
    /// bound, through additional members).
    fn extra(&self, st: &ObjState) -> Option<usize> {
        if self.open {
            return None;
        }
        Some(
            self.optional_usable
                .saturating_sub(st.named.saturating_sub(st.required)),
        )
    }

    /// Whether an object with `count` members, `missing` required ones still to write and
    /// `extra` optional ones available can end within `minProperties`/`maxProperties`.
    fn feasible(&self, count: usize, missing: usize, extra: Option<usize>) -> bool {
        self.max.is_none_or(|m| count + missing <= m)
            && extra.is_none_or(|e| count + missing + e >= self.min)
    }

    fn seen(&self, st: &ObjState, i: usize) -> bool {
        st.seen.get(i / 64).is_some_and(|w| w >> (i % 64) & 1 == 1)
    }

    /// Whether member `key` (a name's index, or [`ADDITIONAL`]) may come next.
    fn member_ok(&self, st: &ObjState, key: u32) -> bool {
        let missing = self.n_required.saturating_sub(st.required);
        let extra = self.extra(st);
        if key == ADDITIONAL {
            return self.open && self.feasible(st.count + 1, missing, extra);
        }
        let i = key as usize;
        if i >= self.usable.len() || self.seen(st, i) || !self.usable[i] {
            return false;
        }
        if self.required[i] {
            self.feasible(st.count + 1, missing.saturating_sub(1), extra)
        } else {
            self.feasible(st.count + 1, missing, extra.map(|e| e.saturating_sub(1)))
        }
    }

    /// Whether some member may come next.
    fn more_ok(&self, st: &ObjState) -> bool {
        self.member_ok(st, ADDITIONAL)
            || (0..self.usable.len() as u32).any(|i| self.member_ok(st, i))
    }

    /// Whether the object may end here.
    fn end_ok(&self, st: &ObjState) -> bool {
        st.required == self.n_required
            && st.count >= self.min
            && self.max.is_none_or(|m| st.count <= m)
            && self.deps.iter().all(|(k, v)| {
                !self.seen(st, *k as usize) || v.iter().all(|&d| self.seen(st, d as usize))
            })
    }
}

/// The members of an object read so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct ObjState {
    /// Bit set of the named keys seen.
    seen: Vec<u64>,
    /// Members written.
    count: usize,
    /// Named keys seen.
    named: usize,
    /// Required keys seen.
    required: usize,
    /// Where the reader is.
    mode: Mode,
}

/// One cached state: object `spec` whose `{` was read at set `object`, as read up to set `at`.
#[derive(Clone, Debug)]
pub(super) struct ObjEntry {
    spec: u32,
    object: u32,
    at: u32,
    state: ObjState,
}

impl ObjEntry {
    /// The set up to which the entry was read.
    pub(super) fn at(&self) -> u32 {
        self.at
    }
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// Where the reader of an object's text is: a small automaton over bytes, so that reading
/// can resume at any byte from a cached state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
enum Mode {
    /// Between members: whitespace, the object's `{`, separators.
    #[default]
    Between,
    /// Inside a key: its bytes so far (quotes included), and whether a backslash is pending.
    Key(Vec<u8>, bool),
    /// After a key, before its colon.
    AfterKey,
    /// Inside a value: nesting depth, inside a string, a backslash pending.
    Value(usize, bool, bool),
}

/// Reads `text` into `st` (the object's text from its `{`, or its continuation from where
/// `st` was read). Returns false when the text is not the start of an object (which the
/// grammar never lets happen).
fn scan(spec: &ObjectSpec, text: &[u8], st: &mut ObjState) -> bool {
    for &b in text {
        let mode = std::mem::take(&mut st.mode);
        st.mode = match mode {
            Mode::Between => match b {
                b'{' | b',' => Mode::Between,
                b'"' => Mode::Key(vec![b], false),
                b if is_ws(b) => Mode::Between,
                _ => return false,
            },
            Mode::Key(mut key, escaped) => {
                key.push(b);
                match (escaped, b) {
                    (true, _) => Mode::Key(key, false),
                    (false, b'\\') => Mode::Key(key, true),
                    (false, b'"') => {
                        let Some(name) = decode_string(&key) else {
                            return false;
                        };
                        st.count += 1;
                        if let Some(&k) = spec.names.get(&name) {
                            let k = k as usize;
                            if st.seen.len() <= k / 64 {
                                st.seen.resize(k / 64 + 1, 0);
                            }
                            if st.seen[k / 64] >> (k % 64) & 1 == 0 {
                                st.seen[k / 64] |= 1 << (k % 64);
                                st.named += 1;
                                st.required += spec.required[k] as usize;
                            }
                        }
                        Mode::AfterKey
                    }
                    _ => Mode::Key(key, false),
                }
            }
            Mode::AfterKey => match b {
                b':' => Mode::Value(0, false, false),
                b if is_ws(b) => Mode::AfterKey,
                _ => return false,
            },
            Mode::Value(depth, true, escaped) => match (escaped, b) {
                (true, _) => Mode::Value(depth, true, false),
                (false, b'\\') => Mode::Value(depth, true, true),
                (false, b'"') => Mode::Value(depth, false, false),
                _ => Mode::Value(depth, true, false),
            },
            Mode::Value(depth, false, _) => match b {
                b'"' => Mode::Value(depth, true, false),
                b'{' | b'[' => Mode::Value(depth + 1, false, false),
                b'}' | b']' if depth == 0 => return false,
                b'}' | b']' => Mode::Value(depth - 1, false, false),
                b',' if depth == 0 => Mode::Between,
                _ => Mode::Value(depth, false, false),
            },
        };
    }
    true
}

impl Guard {
    /// Whether the guard is checked when its nonterminal is predicted (the object guards)
    /// rather than when its item completes (`UniqueStrings`, `UniqueValues`).
    pub(crate) fn at_prediction(&self) -> bool {
        matches!(
            self,
            Guard::Member { .. }
                | Guard::More { .. }
                | Guard::End { .. }
                | Guard::Fresh { .. }
                | Guard::Next { .. }
                | Guard::MoreStrings { .. }
                | Guard::Close { .. }
                | Guard::Item { .. }
        )
    }
}

impl Chart {
    /// Whether prediction guard `guard` passes for the object whose `{` was read at set
    /// `object`, at set `at`.
    pub(super) fn predicts(&mut self, g: &Grammar, guard: Guard, object: u32, at: u32) -> bool {
        if let Guard::Item { spec, check } = guard {
            return self.item_object_passes(g, spec, check, object, at);
        }
        let members = matches!(
            guard,
            Guard::Member { .. } | Guard::More { .. } | Guard::End { .. }
        );
        if let Some(s) = self.guard.synthetic {
            // The byte into set `s` is unknown. Right at `s` it is the end of a separator or a
            // value, which the reader may ignore; further on, the members reader reads the
            // bytes it stands for when they are known, and otherwise the place is read again.
            if object < s && s < at && !(members && self.guard.exit_paths().is_some()) {
                self.guard.uncertain = true;
                return true;
            }
        }
        let (spec_id, check) = match guard {
            Guard::Member { object: o, key } => (o, Check::Member(key)),
            Guard::More { object: o } => (o, Check::More),
            Guard::End { object: o } => (o, Check::End),
            Guard::Fresh { .. }
            | Guard::Next { .. }
            | Guard::MoreStrings { .. }
            | Guard::Close { .. } => return self.finite_passes(g, guard, object, at),
            Guard::UniqueStrings | Guard::UniqueValues | Guard::Item { .. } => return true,
        };
        let Some(spec) = g.objects.get(spec_id as usize) else {
            return false;
        };
        let Some(j) = self.object_state(spec, spec_id, object, at) else {
            return false;
        };
        let st = &self.guard.objects[j].state;
        match check {
            Check::Member(key) => spec.member_ok(st, key),
            Check::More => spec.more_ok(st),
            Check::End => spec.end_ok(st),
        }
    }

    /// The members of the object `spec` whose `{` was read at set `object`, read up to set
    /// `at` (from the latest cached place of the same object before `at`, one work unit per
    /// byte read), as an index into the cache.
    fn object_state(
        &mut self,
        spec: &ObjectSpec,
        spec_id: u32,
        object: u32,
        at: u32,
    ) -> Option<usize> {
        let cache = &self.guard.objects;
        // The members of one place are asked for many times in a row (once per member).
        if let Some(j) = self.guard.last_object {
            if cache
                .get(j)
                .is_some_and(|e| e.spec == spec_id && e.object == object && e.at == at)
            {
                return Some(j);
            }
        }
        let mut base: Option<usize> = None;
        for (j, e) in cache.iter().enumerate() {
            if e.spec == spec_id && e.object == object && e.at <= at {
                if e.at == at {
                    self.guard.last_object = Some(j);
                    return Some(j);
                }
                if base.is_none_or(|b| cache[b].at < e.at) {
                    base = Some(j);
                }
            }
        }
        let (from, mut st) = match base {
            Some(j) => (cache[j].at, cache[j].state.clone()),
            None => (object, ObjState::default()),
        };
        let read = match (self.guard.synthetic, self.guard.exit_paths()) {
            (Some(s), Some(paths)) if object < s && s < at => {
                // Across the unknown byte into set `s`, which stands for a path: an entry at
                // `s` itself was read without that byte, and entries past `s` with the path.
                // Several paths (places walked as one) must all leave the reader in one
                // state; where they do not, the walk is `split` and made again place by place.
                let before = match from < s {
                    true => self.input.get(from as usize..s as usize - 1)?,
                    false => &[],
                };
                let after = self.input.get(from.max(s) as usize..at as usize)?;
                let mut work = (before.len() + after.len()) as u64;
                let mut read = scan(spec, before, &mut st);
                if read && from <= s {
                    let mut first: Option<(bool, ObjState)> = None;
                    for path in paths {
                        let mut next = st.clone();
                        let ok = scan(spec, path, &mut next);
                        work += path.len() as u64;
                        match &first {
                            None => first = Some((ok, next)),
                            Some(f) if *f != (ok, next) => {
                                self.guard.split = true;
                                break;
                            }
                            Some(_) => {}
                        }
                    }
                    if let Some((ok, next)) = first {
                        read = ok;
                        st = next;
                    }
                }
                self.work += work;
                read && scan(spec, after, &mut st)
            }
            _ => {
                let mut text = self.input.get(from as usize..at as usize)?;
                if self.guard.synthetic == Some(at) {
                    // The unknown last byte (see `predicts`).
                    text = &text[..text.len().saturating_sub(1)];
                }
                self.work += text.len() as u64;
                scan(spec, text, &mut st)
            }
        };
        if !read {
            debug_assert!(false, "object text that is not an object's inside");
            return None;
        }
        if self.guard.objects.len() == CACHE_ENTRIES {
            self.guard.objects.remove(0);
        }
        self.guard.objects.push(ObjEntry {
            spec: spec_id,
            object,
            at,
            state: st,
        });
        self.guard.max_object_at = self.guard.max_object_at.max(at);
        let j = self.guard.objects.len() - 1;
        self.guard.last_object = Some(j);
        Some(j)
    }
}

/// What a prediction guard checks.
enum Check {
    Member(u32),
    More,
    End,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(names: &[&str], required: &[&str]) -> ObjectSpec {
        let names: Vec<String> = names.iter().map(|x| x.to_string()).collect();
        let req = names
            .iter()
            .map(|x| required.contains(&x.as_str()))
            .collect();
        let n = names.len() as u32;
        let mut s = ObjectSpec::new(&names, req, Vec::new(), 0, None, (0..n).collect(), None, n);
        assert!(s.settle(&vec![true; n as usize + 1]));
        s
    }

    fn read(s: &ObjectSpec, text: &str) -> ObjState {
        let mut st = ObjState::default();
        assert!(scan(s, text.as_bytes(), &mut st), "{text}");
        st
    }

    #[test]
    fn members_are_read_with_decoded_keys_past_nested_values() {
        let s = spec(&["a", "ab", "b"], &["b"]);
        let st = read(
            &s,
            r#"{"x":{"a":1,"b":[1,{"ab":"}"}]},"\u0061" : "a,\"}", "ab":2,"#,
        );
        assert_eq!(st.count, 3);
        assert_eq!(st.named, 2);
        assert_eq!(st.required, 0);
        assert!(s.seen(&st, 0) && s.seen(&st, 1) && !s.seen(&st, 2));
        // Cut short inside a value (an unknown last byte removed): the member counts.
        let st = read(&s, r#"{"b":{"c":1"#);
        assert_eq!((st.count, st.required), (1, 1));
        // Resumed after a counted place.
        let mut st = read(&s, r#"{"a":1"#);
        assert!(scan(&s, br#" , "b" :2"#, &mut st));
        assert_eq!((st.count, st.named, st.required), (2, 2, 1));
        // Resumed inside a number and inside a key: as if read at once.
        let mut st = read(&s, r#"{"x":1"#);
        assert!(scan(&s, br#"2,"a"#, &mut st));
        assert!(scan(&s, br#"b":1"#, &mut st));
        assert_eq!(st, read(&s, r#"{"x":12,"ab":1"#));
        assert!(s.seen(&st, 1) && !s.seen(&st, 0));
        assert!(!scan(&s, br#"{"a"}"#, &mut ObjState::default()));
    }

    #[test]
    fn guards_follow_seen_keys_required_and_counts() {
        let s = spec(&["a", "ab", "b"], &["b"]);
        let st = read(&s, r#"{"a":1,"#);
        assert!(!s.member_ok(&st, 0) && s.member_ok(&st, 1) && s.member_ok(&st, 2));
        assert!(!s.member_ok(&st, ADDITIONAL) && !s.end_ok(&st) && s.more_ok(&st));
        let st = read(&s, r#"{"a":1,"b":2,"ab":3"#);
        assert!(s.end_ok(&st) && !s.more_ok(&st));
        // maxProperties 2 with one required key: once one optional key is in, only the
        // required one may follow.
        let names: Vec<String> = ["a", "b", "c"].iter().map(|x| x.to_string()).collect();
        let mut s = ObjectSpec::new(
            &names,
            vec![false, false, true],
            Vec::new(),
            0,
            Some(2),
            vec![0, 1, 2],
            Some(3),
            4,
        );
        assert!(s.settle(&[true; 5]));
        let st = read(&s, r#"{"a":1"#);
        assert!(!s.member_ok(&st, 1) && !s.member_ok(&st, ADDITIONAL) && s.member_ok(&st, 2));
        // A required member whose value cannot be written makes the object impossible.
        assert!(!s.settle(&[true, true, false, true, true]));
    }

    /// Places where a terminal ends are walked as one only where the members reader reads one
    /// state from every place's bytes. Here one key terminal writes the named key `a` or the
    /// other key `b` (the compiler gives named keys terminals of their own, so this grammar is
    /// built by hand): after `"a"` no member may follow, after `"b"` `a` may. Walked as one,
    /// the two places would share the state read from the first; the reader sees that they
    /// differ (`split`) and the places are walked one at a time.
    #[test]
    fn places_that_read_different_members_are_walked_one_at_a_time() {
        use crate::grammar::{GrammarBuilder, Sym};
        use crate::{Limits, TokenVocab};
        let mut b = GrammarBuilder::default();
        let obj = b.nt("object");
        let m = b.nt("member a");
        let key = b.regex(r#""(a|b)""#).expect("pattern");
        let (open, close, comma, colon, one) = (
            b.literal(b"{"),
            b.literal(b"}"),
            b.literal(b","),
            b.literal(b":"),
            b.literal(b"1"),
        );
        b.rule(m, vec![key, colon, one]);
        let names = vec!["a".to_string()];
        let spec = ObjectSpec::new(&names, vec![false], Vec::new(), 0, None, vec![m], None, obj);
        let object = b.object_spec(spec);
        b.guard_prediction(m, Guard::Member { object, key: 0 });
        let (more, end) = (b.nt("more"), b.nt("end"));
        b.rule(more, vec![]);
        b.rule(end, vec![]);
        b.guard_prediction(more, Guard::More { object });
        b.guard_prediction(end, Guard::End { object });
        let (ms, ms_comma) = (b.nt("members"), b.nt("members and a comma"));
        b.rule(ms, vec![open, Sym::Nt(m)]);
        b.rule(ms, vec![Sym::Nt(ms_comma), Sym::Nt(m)]);
        b.rule(ms_comma, vec![Sym::Nt(ms), Sym::Nt(more), comma]);
        b.rule(obj, vec![open, Sym::Nt(end), close]);
        b.rule(obj, vec![Sym::Nt(ms), Sym::Nt(end), close]);
        let g = b
            .build_with(Sym::Nt(obj), &Limits::default())
            .expect("grammar");
        assert!(g.recognizes(br#"{"b":1,"a":1}"#) && !g.recognizes(br#"{"a":1,"a":1}"#));
        let mut tokens: Vec<Vec<u8>> = (0..=255u8).map(|x| vec![x]).collect();
        let (after_a, after_b) = (tokens.len() as u32, tokens.len() as u32 + 1);
        tokens.push(br#"a":1,"a"#.to_vec());
        tokens.push(br#"b":1,"a"#.to_vec());
        tokens.push(br#"b"}"#.to_vec());
        tokens.push(Vec::new());
        let eos = tokens.len() as u32 - 1;
        let vocab = TokenVocab::new(tokens, &[eos]).expect("vocabulary");
        let mut masks = Vec::new();
        for plain in [false, true] {
            let mut c = Chart::new(&g);
            c.plain_masks = plain;
            assert!(c.push_byte(&g, b'{') && c.push_byte(&g, b'"'));
            let mut mask = vocab.empty_mask();
            c.start_work();
            c.fill_mask(&g, &vocab, &mut mask).expect("mask");
            let has = |t: u32| mask[t as usize / 64] >> (t % 64) & 1 == 1;
            assert!(!has(after_a) && has(after_b), "plain masks: {plain}");
            masks.push(mask);
        }
        assert_eq!(masks[0], masks[1]);
    }
}
