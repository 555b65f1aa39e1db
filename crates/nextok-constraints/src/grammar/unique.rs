//! Run-time checks on completions: what a context-free grammar cannot say, such as JSON
//! Schema's `uniqueItems` over an unbounded item domain. (Checks made when a nonterminal is
//! predicted, for object members, are in `members`; they share [`Guard`] and the chart's
//! `GuardState`.)
//!
//! A guarded nonterminal `G -> T` (one symbol) is completed into a waiting item only when its
//! [`Guard`] accepts the text: for [`Guard::UniqueStrings`], the string terminal `T` read must
//! differ, as a decoded JSON string, from every item written before it in the same array; for
//! [`Guard::UniqueValues`], the value `T` (a terminal or a nonterminal) read must differ from
//! every earlier item as a JSON value, compared in a canonical form (`canonical`). The waiting
//! item's origin is where the array's `[` was read (the compiler writes the array's rules
//! left-recursively, `A -> A "," G`, so that it is), and the chart keeps the bytes it read, so
//! the earlier items are the strings of `input[origin..start of G]`; their decoded values are
//! kept per (array, item) position until the chart is truncated below them. Reading them back
//! costs one work unit per byte of the array, so [`Limits::max_mask_work`](crate::Limits)
//! bounds it (a million by default: arrays up to about a megabyte of text).
//!
//! Masks stay exact. The mask computation reads a token through a terminal and, where the
//! terminal may end, continues from one set computed once for all the places it ends: that set
//! does not depend on the terminal's text, which a guard does. So for a guarded terminal the
//! places where it ends with a value that some guard refuses (`q_nodes`: found by walking the
//! token trie along the spellings of the earlier values) are read again with their real bytes,
//! and a set past an assumed terminal end (`GuardState::synthetic`) that a guard would read is
//! marked uncertain (but for the object members' guards, which read the bytes of the place's
//! path in the token trie instead: `members`), and the place is read again with real bytes
//! once per mask, whichever items in flight ask for it (with the tokens that end
//! exactly there when the set right after the terminal is itself uncertain: a value item
//! completed by its closing `}` or `]`, or by the last byte of a number or string). Reading
//! real bytes is
//! exactly what `advance` does, so the mask agrees with it.
//!
//! No prefix is left without a valid completion. A string item's automaton state with
//! finitely many completions (`Grammar::string_finite`) is kept only while one of them decodes
//! to a value no earlier item has (`Chart::string_item_alive`, a search that follows the used
//! values' spellings and stops at the first string that leaves them); the mask's walk along
//! those spellings (`spelling_walk`) finds the trie nodes where that fails, and they are read
//! again with real bytes. A string domain finite as a whole guards the `,` before an item
//! ([`Guard::MoreStrings`]). A finite enum too large to unroll is checked at prediction
//! ([`Guard::Fresh`] per value, [`Guard::Next`] and [`Guard::Close`] on the count), so a value
//! in use is never begun; where such an array is itself an item of a `uniqueItems` array
//! ([`FiniteSet::outer`]), the same guards keep its prefix one that some completion unused by
//! the outer array's earlier items extends (`Chart::outer_alive`). Other guarded values are
//! compiled only where every prefix can still reach infinitely many values.

use std::sync::Arc;

use super::{Chart, GSym, Grammar, TerminalMask};
use crate::dfa::DEAD;
use crate::vocab::TokenVocab;
use crate::Error;

/// A check on the completions of a guarded nonterminal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Guard {
    /// A JSON string item of an array: its decoded value must differ from every earlier
    /// string item's (earlier items of other types never equal it).
    UniqueStrings,
    /// Checked at prediction (`members`): member `key` (a name's index, or
    /// `members::ADDITIONAL`) of object spec `object` may come next.
    Member { object: u32, key: u32 },
    /// Checked at prediction: some member of object spec `object` may come next.
    More { object: u32 },
    /// Checked at prediction: the object of spec `object` may end here.
    End { object: u32 },
    /// A JSON value item of any type: it must differ, as a JSON value, from every earlier
    /// item (object keys in any order, numbers by value, strings decoded: [`canonical`]).
    UniqueValues,
    /// Checked at prediction: value `value` of the finite item domain `set` (a
    /// [`FiniteSet`]) may be the next item of its array, not being among the earlier ones.
    Fresh { set: u32, value: u32 },
    /// Checked at prediction: another item of finite domain `set` may follow (fewer items
    /// than `maxItems` and than the domain has values, so some value is still unused).
    Next { set: u32 },
    /// Checked at prediction: the array of string items of terminal `terminal` (whose
    /// domain is finite as a whole) may take another item: some value is not yet used.
    MoreStrings { terminal: u32 },
    /// Checked at prediction: the array of finite domain `set` may end (`minItems` items).
    Close { set: u32 },
    /// Checked at prediction: the part `check` of a closed-object item of a `uniqueItems`
    /// array, [`ItemObject`](super::unique_objects::ItemObject) `spec`, keeps the item
    /// completable to an object no earlier item equals (`unique_objects`).
    Item {
        spec: u32,
        check: super::unique_objects::ItemCheck,
    },
}

/// The finite item domain of a `uniqueItems` array whose items are checked at prediction:
/// each value is its own nonterminal, predicted only while unused, so every prefix the chart
/// accepts can still be completed with a value not yet used.
#[derive(Clone, Debug)]
pub(crate) struct FiniteSet {
    /// Per value, its canonical form ([`canonical_value`]); no two equal.
    pub(crate) values: Vec<Vec<u8>>,
    /// `minItems` (0 when absent).
    pub(crate) min: usize,
    /// `maxItems`, at most the number of values.
    pub(crate) max: usize,
    /// For an array of this domain that is itself an item of a `uniqueItems` array (one part
    /// of a union of item types, `json::unique_split`): that item's guarded nonterminal
    /// ([`Guard::UniqueValues`]). Its values, and its `,` and `]`, are then checked against the
    /// outer array's earlier items too ([`Chart::outer_alive`]).
    pub(crate) outer: Option<u32>,
}

/// The arrays of distinct values of a set of `values` that extend a prefix of `written` of
/// them, as many values in all as `min` and `max` allow: `Σ m!/(m−j)!` over the numbers `j`
/// of values still to come, `m` the values unused (saturating).
pub(crate) fn ordered_completions(values: usize, written: usize, min: usize, max: usize) -> u64 {
    let m = values.saturating_sub(written);
    let (lo, hi) = (
        min.saturating_sub(written),
        max.saturating_sub(written).min(m),
    );
    let (mut total, mut ways) = (0u64, 1u64);
    for j in 0..=hi {
        if j > 0 {
            ways = ways.saturating_mul((m - j + 1) as u64);
        }
        if j >= lo {
            total = total.saturating_add(ways);
        }
    }
    total
}

/// The key under which `finite_used` caches the earlier values of a finite domain's array.
const FINITE_KEY: Guard = Guard::Fresh {
    set: u32::MAX,
    value: u32::MAX,
};

/// Most (array, item) positions whose earlier values are kept.
const CACHE_ENTRIES: usize = 32;

/// The earlier items of one array, for one item position.
#[derive(Clone, Debug)]
struct Earlier {
    /// Set where the array's `[` was read.
    array: u32,
    /// Set where the item starts.
    item: u32,
    /// The guard the values were read for (strings decoded, or values in canonical form).
    guard: Guard,
    /// Whether the text's last byte was left out (the unknown byte of a mask computation's
    /// assumed terminal end, for [`Guard::Fresh`]).
    cut: bool,
    /// Decoded values, sorted, without repeats; `None` when the text is not a list of strings
    /// (which the grammar never lets happen).
    values: Option<Arc<Vec<Vec<u8>>>>,
}

/// The chart's state for guards.
#[derive(Clone, Debug, Default)]
pub(super) struct GuardState {
    /// The set that a mask computation assumes after a terminal ends (its byte is unknown).
    pub(super) synthetic: Option<u32>,
    /// Whether the terminal assumed to end there is guarded: its own completion is taken as
    /// passing, and the places where it would not are read again (`q_nodes`).
    own: bool,
    /// Set when a guard read text across the synthetic set's unknown byte (it then passes):
    /// the place being walked must be read again with real bytes.
    pub(super) uncertain: bool,
    /// While the tokens below places where the assumed terminal ends are walked (`in_exit`),
    /// the bytes of those places' paths in the token trie (what the unknown byte stands for
    /// there; the first `exits` buffers): the members reader reads them instead (`members`).
    /// When several places are walked as one (`Chart::walk_exits`), the reader reads each
    /// and sets `split` where they do not leave it in one state.
    exit: Vec<Vec<u8>>,
    exits: usize,
    in_exit: bool,
    pub(super) split: bool,
    /// A second mask buffer, for the tokens of places walked as one.
    merged: Vec<u64>,
    /// Earlier values per (array, item) position, valid while the chart is deeper than the
    /// item's set.
    cache: Vec<Earlier>,
    /// Highest item set in `cache`.
    max_item: u32,
    /// A mask buffer, kept to avoid an allocation per mask.
    scratch: Vec<u64>,
    /// The members of objects read so far (`members`), valid while the chart is deeper than
    /// their place.
    pub(super) objects: Vec<super::members::ObjEntry>,
    /// Highest place in `objects`.
    pub(super) max_object_at: u32,
    /// The entry of `objects` found last.
    pub(super) last_object: Option<usize>,
    /// What the closed-object item guards read last (`unique_objects`), valid while the chart
    /// is deeper than its place.
    pub(super) item_memo: Option<super::unique_objects::ItemMemo>,
    /// The arrays of the closed-object item read last and their earlier items, valid while
    /// the chart is deeper than the item's `{`.
    pub(super) item_arrays: Option<Arc<super::unique_objects::ItemArrays>>,
    /// Places between the members of closed-object items read so far, valid while the chart
    /// is deeper than their place.
    pub(super) item_points: Vec<super::unique_objects::ScanPoint>,
    /// The item object read up to the synthetic set's unknown byte last, valid while the
    /// chart is deeper than that set.
    pub(super) across: Option<Arc<super::unique_objects::Across>>,
}

impl GuardState {
    /// The bytes the synthetic set's unknown byte stands for, in a walk below one place where
    /// the assumed terminal ends.
    pub(super) fn exit_paths(&self) -> Option<&[Vec<u8>]> {
        self.in_exit.then_some(&self.exit[..self.exits])
    }

    /// Sets the paths of trie nodes `nodes` as those the unknown byte stands for.
    fn set_exits(&mut self, vocab: &TokenVocab, nodes: &[u32]) {
        if self.exit.len() < nodes.len() {
            self.exit.resize_with(nodes.len(), Vec::new);
        }
        for (path, &p) in self.exit.iter_mut().zip(nodes) {
            vocab.trie_path(p as usize, path);
        }
        self.exits = nodes.len();
        self.in_exit = true;
    }

    /// Forgets what was read from sets that are gone (`depth` sets remain).
    #[inline]
    pub(super) fn forget_above(&mut self, depth: usize) {
        if !self.cache.is_empty() && self.max_item as usize >= depth {
            self.cache.retain(|e| (e.item as usize) < depth);
            self.max_item = self.cache.iter().map(|e| e.item).max().unwrap_or(0);
        }
        if !self.objects.is_empty() && self.max_object_at as usize >= depth {
            self.objects.retain(|e| (e.at() as usize) < depth);
            self.last_object = None;
            self.max_object_at = self.objects.iter().map(|e| e.at()).max().unwrap_or(0);
        }
        if self
            .item_memo
            .as_ref()
            .is_some_and(|m| m.at as usize >= depth)
        {
            self.item_memo = None;
        }
        if self
            .item_points
            .last()
            .is_some_and(|q| q.at as usize >= depth)
        {
            self.item_points.retain(|q| (q.at as usize) < depth);
        }
        if self.across.as_ref().is_some_and(|a| a.s as usize >= depth) {
            self.across = None;
        }
        if self
            .item_arrays
            .as_ref()
            .is_some_and(|a| a.origin as usize >= depth)
        {
            self.item_arrays = None;
        }
    }
}

/// An incremental decoder of one JSON string literal (its opening quote first), byte by byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    /// Before the opening quote.
    Start,
    /// Inside the string, between characters.
    Content,
    /// After a backslash.
    Escape,
    /// After `\u` and `n` hex digits of value `v`.
    Hex(u8, u16),
    /// After the closing quote.
    Closed,
    /// Not a JSON string.
    Bad,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Decoder {
    pub(super) mode: Mode,
    /// A high surrogate waiting for its low half.
    high: Option<u16>,
}

impl Decoder {
    pub(super) fn new() -> Decoder {
        Decoder {
            mode: Mode::Start,
            high: None,
        }
    }

    /// Whether the decoded text so far is final (no surrogate half pending).
    fn settled(&self) -> bool {
        self.high.is_none() && matches!(self.mode, Mode::Content | Mode::Closed)
    }

    fn push_char(&mut self, c: char, out: &mut Vec<u8>) {
        if self.high.take().is_some() {
            // A high surrogate not followed by a low one: a lone surrogate.
            out.extend_from_slice("\u{fffd}".as_bytes());
        }
        let mut buf = [0u8; 4];
        out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
    }

    /// Reads byte `b`, appending decoded bytes to `out`.
    pub(super) fn feed(&mut self, b: u8, out: &mut Vec<u8>) {
        self.mode = match (self.mode, b) {
            (Mode::Start, b'"') => Mode::Content,
            (Mode::Content, b'"') => {
                if self.high.take().is_some() {
                    out.extend_from_slice("\u{fffd}".as_bytes());
                }
                Mode::Closed
            }
            (Mode::Content, b'\\') => Mode::Escape,
            (Mode::Content, b) if b >= 0x20 => {
                if self.high.take().is_some() {
                    out.extend_from_slice("\u{fffd}".as_bytes());
                }
                out.push(b);
                Mode::Content
            }
            (Mode::Escape, b'u') => Mode::Hex(0, 0),
            (Mode::Escape, b) => {
                let c = match b {
                    b'"' => '"',
                    b'\\' => '\\',
                    b'/' => '/',
                    b'b' => '\u{8}',
                    b'f' => '\u{c}',
                    b'n' => '\n',
                    b'r' => '\r',
                    b't' => '\t',
                    _ => {
                        self.mode = Mode::Bad;
                        return;
                    }
                };
                self.push_char(c, out);
                Mode::Content
            }
            (Mode::Hex(n, v), b) => {
                let Some(d) = (b as char).to_digit(16) else {
                    self.mode = Mode::Bad;
                    return;
                };
                let v = v << 4 | d as u16;
                if n < 3 {
                    Mode::Hex(n + 1, v)
                } else {
                    match v {
                        0xd800..=0xdbff => {
                            if self.high.take().is_some() {
                                out.extend_from_slice("\u{fffd}".as_bytes());
                            }
                            self.high = Some(v);
                        }
                        0xdc00..=0xdfff => {
                            let c = match self.high.take() {
                                Some(h) => char::from_u32(
                                    0x10000 + ((h as u32 - 0xd800) << 10) + (v as u32 - 0xdc00),
                                ),
                                None => None,
                            };
                            self.push_char(c.unwrap_or('\u{fffd}'), out);
                        }
                        _ => {
                            let c = char::from_u32(v as u32).unwrap_or('\u{fffd}');
                            self.push_char(c, out);
                        }
                    }
                    Mode::Content
                }
            }
            _ => Mode::Bad,
        };
    }
}

/// The decoded value of the JSON string literal `text` (quotes included), or `None` when
/// `text` is not exactly one.
pub(crate) fn decode_string(text: &[u8]) -> Option<Vec<u8>> {
    let mut d = Decoder::new();
    let mut out = Vec::with_capacity(text.len());
    for &b in text {
        if d.mode == Mode::Closed {
            return None;
        }
        d.feed(b, &mut out);
        if d.mode == Mode::Bad {
            return None;
        }
    }
    (d.mode == Mode::Closed).then_some(out)
}

/// The decoded string items of the array text `text` (its `[`, then items each followed by a
/// comma, with JSON whitespace around them), sorted and without repeats. Items that are not
/// strings (`null` or a number beside string items, `unique_split`) are read past: they never
/// equal a string.
fn earlier_strings(text: &[u8]) -> Option<Vec<Vec<u8>>> {
    let ws = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    let mut i = 1;
    if text.first() != Some(&b'[') {
        return None;
    }
    let mut values = Vec::new();
    loop {
        while i < text.len() && ws(text[i]) {
            i += 1;
        }
        if i == text.len() {
            break;
        }
        if text[i] != b'"' {
            i = canonical(text, i, &mut Vec::new(), 0)?;
            while i < text.len() && ws(text[i]) {
                i += 1;
            }
            if text.get(i) != Some(&b',') {
                return None;
            }
            i += 1;
            continue;
        }
        let mut d = Decoder::new();
        let mut v = Vec::new();
        while i < text.len() && d.mode != Mode::Closed {
            d.feed(text[i], &mut v);
            if d.mode == Mode::Bad {
                return None;
            }
            i += 1;
        }
        if d.mode != Mode::Closed {
            return None;
        }
        values.push(v);
        while i < text.len() && ws(text[i]) {
            i += 1;
        }
        if text.get(i) != Some(&b',') {
            return None;
        }
        i += 1;
    }
    values.sort_unstable();
    values.dedup();
    Some(values)
}

/// The canonical form ([`canonical`]) of the JSON text `text` of one value, as the run-time
/// guards compare items; `None` when `text` is not one JSON value.
pub(crate) fn canonical_value(text: &[u8]) -> Option<Vec<u8>> {
    canonical_item(text)
}

/// The canonical forms of the items of the array text `text` (its `[`, then items separated by
/// commas, with JSON whitespace around them, and optionally a trailing comma), sorted and
/// without repeats; an empty text has none. `None` when the text is something else.
fn listed_values(text: &[u8]) -> Option<Vec<Vec<u8>>> {
    if text.is_empty() {
        return Some(Vec::new());
    }
    let mut values = values_in_order(text)?;
    values.sort_unstable();
    values.dedup();
    Some(values)
}

/// The canonical forms of the items of the array text `text` (as [`listed_values`] reads
/// them), in order; `None` when the text is something else.
fn values_in_order(text: &[u8]) -> Option<Vec<Vec<u8>>> {
    if text.first() != Some(&b'[') {
        return None;
    }
    let mut values = Vec::new();
    let mut i = skip_ws(text, 1);
    while i < text.len() {
        let mut v = Vec::new();
        i = skip_ws(text, canonical(text, i, &mut v, 0)?);
        values.push(v);
        if i == text.len() {
            break;
        }
        if text[i] != b',' {
            return None;
        }
        i = skip_ws(text, i + 1);
    }
    Some(values)
}

/// The number of items of the array text `text` (its `[` and at least one item, the last
/// possibly cut short before its last byte): its commas outside strings and nested values, plus
/// one.
fn count_items(text: &[u8]) -> usize {
    let (mut depth, mut in_string, mut escaped, mut commas) = (0usize, false, false, 0usize);
    for &b in text.iter().skip(1) {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => depth += 1,
            b']' | b'}' => depth = depth.saturating_sub(1),
            b',' if depth == 0 => commas += 1,
            _ => {}
        }
    }
    commas + 1
}

/// Per state of the string automaton `d`, whether it can still read on and has only
/// finitely many completions ([`Dfa::finite_completions`](crate::dfa::Dfa::finite_completions)).
/// `None` when no such state is reachable, so that the automaton needs no check.
pub(crate) fn finite_states(d: &crate::dfa::Dfa) -> Option<Vec<bool>> {
    let mut finite = d.finite_completions();
    for (s, f) in finite.iter_mut().enumerate() {
        *f = *f && s != DEAD as usize && d.can_continue(s as u32);
    }
    finite.iter().any(|&f| f).then_some(finite)
}

/// Deepest nesting [`canonical`] reads (deeper items are not read: the guard refuses them).
const MAX_CANONICAL_DEPTH: usize = 512;

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// The canonical form of the one JSON value `text` holds (whitespace around it allowed), or
/// `None` if it holds something else.
fn canonical_item(text: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let end = canonical(text, skip_ws(text, 0), &mut out, 0)?;
    (skip_ws(text, end) == text.len()).then_some(out)
}

pub(super) fn skip_ws(text: &[u8], mut i: usize) -> usize {
    while i < text.len() && is_ws(text[i]) {
        i += 1;
    }
    i
}

/// Appends to `out` what the canonical form ([`canonical`]) of an array of `len` items has
/// before its items' forms, which follow it one after another.
pub(crate) fn canonical_array_head(len: usize, out: &mut Vec<u8>) {
    out.push(b'a');
    out.extend_from_slice(&(len as u64).to_be_bytes());
}

/// Appends to `out` the canonical form ([`canonical`]) of the array of the items whose
/// canonical forms are `items`, in order.
fn canonical_array(items: &[Vec<u8>], out: &mut Vec<u8>) {
    canonical_array_head(items.len(), out);
    for v in items {
        out.extend_from_slice(v);
    }
}

/// Appends to `out` the canonical form of the JSON value starting at `text[i]` and returns
/// where it ends. Two values have the same form exactly when JSON Schema calls them equal:
/// strings compare decoded, numbers by value (`1`, `1.0`, `10e-1` alike; `-0` is `0`), arrays
/// item by item, objects as sets of members (keys in any order; of a repeated key the last
/// member counts, as JSON parsers keep it). The form is self-delimiting: a tag byte, then for
/// a string its length and bytes, for a number its sign, decimal exponent and significant
/// digits, for an array or object its length and its items (members sorted by key).
pub(super) fn canonical(text: &[u8], i: usize, out: &mut Vec<u8>, depth: usize) -> Option<usize> {
    if depth > MAX_CANONICAL_DEPTH {
        return None;
    }
    let lit = |word: &[u8], tag: u8, out: &mut Vec<u8>| {
        text.get(i..i + word.len()).filter(|w| *w == word).map(|_| {
            out.push(tag);
            i + word.len()
        })
    };
    match *text.get(i)? {
        b'n' => lit(b"null", b'n', out),
        b't' => lit(b"true", b't', out),
        b'f' => lit(b"false", b'f', out),
        b'"' => {
            let (value, end) = string_at(text, i)?;
            push_string(&value, out);
            Some(end)
        }
        b'[' => {
            let mut items: Vec<Vec<u8>> = Vec::new();
            let mut j = skip_ws(text, i + 1);
            if text.get(j) == Some(&b']') {
                j += 1;
            } else {
                loop {
                    let mut v = Vec::new();
                    j = skip_ws(text, canonical(text, j, &mut v, depth + 1)?);
                    items.push(v);
                    match *text.get(j)? {
                        b',' => j = skip_ws(text, j + 1),
                        b']' => {
                            j += 1;
                            break;
                        }
                        _ => return None,
                    }
                }
            }
            canonical_array(&items, out);
            Some(j)
        }
        b'{' => {
            let mut members: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
            let mut j = skip_ws(text, i + 1);
            if text.get(j) == Some(&b'}') {
                j += 1;
            } else {
                loop {
                    if text.get(j) != Some(&b'"') {
                        return None;
                    }
                    let (key, end) = string_at(text, j)?;
                    j = skip_ws(text, end);
                    if text.get(j) != Some(&b':') {
                        return None;
                    }
                    let mut v = Vec::new();
                    j = skip_ws(
                        text,
                        canonical(text, skip_ws(text, j + 1), &mut v, depth + 1)?,
                    );
                    // A repeated key: the last member counts.
                    members.retain(|(k, _)| *k != key);
                    members.push((key, v));
                    match *text.get(j)? {
                        b',' => j = skip_ws(text, j + 1),
                        b'}' => {
                            j += 1;
                            break;
                        }
                        _ => return None,
                    }
                }
            }
            members.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            out.push(b'o');
            out.extend_from_slice(&(members.len() as u64).to_be_bytes());
            for (k, v) in members {
                push_string(&k, out);
                out.extend_from_slice(&v);
            }
            Some(j)
        }
        b'-' | b'0'..=b'9' => number_at(text, i, out),
        _ => None,
    }
}

/// Appends to `out` the canonical form ([`canonical`]) of the string whose decoded bytes are
/// `value`.
pub(crate) fn push_string(value: &[u8], out: &mut Vec<u8>) {
    out.push(b's');
    out.extend_from_slice(&(value.len() as u64).to_be_bytes());
    out.extend_from_slice(value);
}

/// The decoded JSON string starting at `text[i]` (its opening quote) and where it ends.
pub(super) fn string_at(text: &[u8], i: usize) -> Option<(Vec<u8>, usize)> {
    let mut d = Decoder::new();
    let mut value = Vec::new();
    let mut j = i;
    while d.mode != Mode::Closed {
        d.feed(*text.get(j)?, &mut value);
        if d.mode == Mode::Bad {
            return None;
        }
        j += 1;
    }
    Some((value, j))
}

/// The canonical form of the JSON number at `text[i]`: `d`, then `-` or `+`, the exponent of
/// the last significant digit (16 bytes, order-preserving), the significant digits (no leading
/// or trailing zeros) and `;`; zero, of either sign, is `d0;`. Exponents beyond ±10^18 are
/// clamped there (no item the grammar's limits let through comes near).
fn number_at(text: &[u8], i: usize, out: &mut Vec<u8>) -> Option<usize> {
    let mut j = i;
    let neg = text.get(j) == Some(&b'-');
    if neg {
        j += 1;
    }
    let digits_from = |j: &mut usize| {
        let s = *j;
        while text.get(*j).is_some_and(u8::is_ascii_digit) {
            *j += 1;
        }
        s..*j
    };
    let int = digits_from(&mut j);
    if int.is_empty() || (text[int.start] == b'0' && int.len() > 1) {
        return None;
    }
    let mut frac = j..j;
    if text.get(j) == Some(&b'.') {
        j += 1;
        frac = digits_from(&mut j);
        if frac.is_empty() {
            return None;
        }
    }
    let mut exp: i128 = 0;
    if matches!(text.get(j), Some(b'e' | b'E')) {
        j += 1;
        let eneg = match text.get(j) {
            Some(b'-') => {
                j += 1;
                true
            }
            Some(b'+') => {
                j += 1;
                false
            }
            _ => false,
        };
        let e = digits_from(&mut j);
        if e.is_empty() {
            return None;
        }
        for &b in &text[e] {
            exp = (exp * 10 + i128::from(b - b'0')).min(1_000_000_000_000_000_000);
        }
        if eneg {
            exp = -exp;
        }
    }
    let mut digits: Vec<u8> = text[int]
        .iter()
        .chain(&text[frac.clone()])
        .copied()
        .collect();
    exp -= frac.len() as i128;
    let lead = digits.iter().take_while(|&&b| b == b'0').count();
    digits.drain(..lead);
    while digits.last() == Some(&b'0') {
        digits.pop();
        exp += 1;
    }
    if digits.is_empty() {
        out.extend_from_slice(b"d0;");
        return Some(j);
    }
    out.push(b'd');
    out.push(if neg { b'-' } else { b'+' });
    // Shifted to be unsigned, so that the bytes order as the exponents do.
    out.extend_from_slice(&((exp as u128) ^ (1 << 127)).to_be_bytes());
    out.extend_from_slice(&digits);
    out.push(b';');
    Some(j)
}

/// The canonical forms ([`canonical`]) of the items of the array text `text` (its `[`, then
/// items each followed by a comma, with JSON whitespace around them), sorted and without
/// repeats.
fn earlier_values(text: &[u8]) -> Option<Vec<Vec<u8>>> {
    if text.first() != Some(&b'[') {
        return None;
    }
    let mut values = Vec::new();
    let mut i = skip_ws(text, 1);
    while i < text.len() {
        let mut v = Vec::new();
        i = skip_ws(text, canonical(text, i, &mut v, 0)?);
        values.push(v);
        if text.get(i) != Some(&b',') {
            return None;
        }
        i = skip_ws(text, i + 1);
    }
    values.sort_unstable();
    values.dedup();
    Some(values)
}

/// Whether some value of the sorted `values` starts with `prefix`.
fn has_prefix(values: &[Vec<u8>], prefix: &[u8]) -> bool {
    let i = values.partition_point(|v| v.as_slice() < prefix);
    values.get(i).is_some_and(|v| v.starts_with(prefix))
}

impl Chart {
    /// Whether completing nonterminal `a` (started at set `o`, ending at set `k`) into an item
    /// whose origin is `parent` is allowed: always for unguarded nonterminals.
    #[inline]
    pub(super) fn completes(&mut self, g: &Grammar, a: u32, parent: u32, o: u32, k: u32) -> bool {
        match g.guards.get(a as usize) {
            Some(Some(guard @ (Guard::UniqueStrings | Guard::UniqueValues))) => {
                self.guard_passes(*guard, parent, o, k)
            }
            // A prediction guard, checked again for each waiting item (a set may hold several
            // objects' items waiting for the same member).
            Some(Some(guard)) => self.predicts(g, *guard, parent, o),
            _ => true,
        }
    }

    fn guard_passes(&mut self, guard: Guard, array: u32, o: u32, k: u32) -> bool {
        if let Some(s) = self.guard.synthetic {
            // The byte into set `s` is unknown: a text across it cannot be read.
            if array < s && s <= k {
                if !(k == s && self.guard.own && guard == Guard::UniqueStrings) {
                    self.guard.uncertain = true;
                }
                return true;
            }
        }
        match guard {
            Guard::UniqueStrings => {
                let Some(value) = self
                    .input
                    .get(o as usize..k as usize)
                    .and_then(decode_string)
                else {
                    debug_assert!(false, "a guarded item that is not a JSON string");
                    return false;
                };
                match self.earlier(guard, array, o) {
                    Some(values) => values.binary_search(&value).is_err(),
                    None => false,
                }
            }
            Guard::UniqueValues => {
                self.work += u64::from(k.saturating_sub(o));
                let Some(value) = self
                    .input
                    .get(o as usize..k as usize)
                    .and_then(canonical_item)
                else {
                    debug_assert!(false, "a guarded item that is not a JSON value");
                    return false;
                };
                match self.earlier(guard, array, o) {
                    Some(values) => values.binary_search(&value).is_err(),
                    None => false,
                }
            }
            _ => true,
        }
    }

    /// The origins of the items of set `at` that wait for nonterminal `a` there: for a guarded
    /// item, the `[` of each array it may be an item of; for a member's value, the `{` of
    /// each object it may be a member of.
    pub(super) fn waiting_origins(&self, g: &Grammar, at: u32, a: u32) -> Vec<u32> {
        let (s, e) = (
            self.item_starts[at as usize] as usize,
            self.item_starts[at as usize + 1] as usize,
        );
        self.items[s..e]
            .iter()
            .filter(|&&(p, _)| g.syms[p as usize] == GSym::Nt(a))
            .map(|&(_, o)| o)
            .collect()
    }

    /// The decoded values of the items of the array started at set `array`, before the item
    /// that starts at set `item` (cached until the chart is truncated below `item`).
    pub(super) fn earlier(
        &mut self,
        guard: Guard,
        array: u32,
        item: u32,
    ) -> Option<Arc<Vec<Vec<u8>>>> {
        let read = match guard {
            Guard::UniqueStrings => earlier_strings,
            Guard::UniqueValues => earlier_values,
            // Prediction guards read their own way (`members`, `finite_used`).
            Guard::Member { .. }
            | Guard::More { .. }
            | Guard::End { .. }
            | Guard::Fresh { .. }
            | Guard::Next { .. }
            | Guard::MoreStrings { .. }
            | Guard::Close { .. }
            | Guard::Item { .. } => return None,
        };
        self.cached_values(array, item, guard, false, item as usize, read)
    }

    /// What `read` makes of the input from set `array` to byte `end`, cached under (`array`,
    /// `item`, `guard`, `cut`) until the chart is truncated below `item`.
    fn cached_values(
        &mut self,
        array: u32,
        item: u32,
        guard: Guard,
        cut: bool,
        end: usize,
        read: fn(&[u8]) -> Option<Vec<Vec<u8>>>,
    ) -> Option<Arc<Vec<Vec<u8>>>> {
        if let Some(e) = self
            .guard
            .cache
            .iter()
            .find(|e| e.array == array && e.item == item && e.guard == guard && e.cut == cut)
        {
            return e.values.clone();
        }
        // One work unit per byte read, so that `Limits::max_mask_work` bounds this too.
        self.work += (end as u64).saturating_sub(u64::from(array));
        let values = self
            .input
            .get(array as usize..end)
            .and_then(read)
            .map(Arc::new);
        // Only a cache: the oldest entry goes when it is full, so that a long array's
        // positions do not each keep a copy of the values before them.
        if self.guard.cache.len() == CACHE_ENTRIES {
            self.guard.cache.remove(0);
        }
        self.guard.cache.push(Earlier {
            array,
            item,
            guard,
            cut,
            values: values.clone(),
        });
        self.guard.max_item = self.guard.max_item.max(item);
        values
    }

    /// Whether some JSON string that the string automaton `d` reads from state `st` to its
    /// end, after the text decoded so far (`dec`, `decoded`), decodes to a value outside the
    /// sorted `used`. A depth-first search (an explicit stack, as deep as the longest used
    /// value) along the spellings of `used`: a string that leaves them can end as a new value
    /// (every live state reaches an end); `st` has finitely many completions, so the search
    /// ends. One work unit per byte tried; past `budget` it answers yes and the chart reports
    /// the limit. `decoded` is left changed.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn some_unused(
        &mut self,
        d: &crate::dfa::Dfa,
        st: u32,
        dec: Decoder,
        decoded: &mut Vec<u8>,
        used: &[Vec<u8>],
        budget: u64,
    ) -> bool {
        /// The answer at a place, when it is known without reading on.
        fn settled(
            d: &crate::dfa::Dfa,
            st: u32,
            dec: &Decoder,
            decoded: &[u8],
            used: &[Vec<u8>],
        ) -> Option<bool> {
            match dec.mode {
                Mode::Closed => Some(
                    d.is_accept(st)
                        && used
                            .binary_search_by(|v| v.as_slice().cmp(decoded))
                            .is_err(),
                ),
                Mode::Bad => Some(false),
                Mode::Content if dec.high.is_none() && !has_prefix(used, decoded) => Some(true),
                _ => None,
            }
        }
        if let Some(answer) = settled(d, st, &dec, decoded, used) {
            return answer;
        }
        // (state, decoder, decoded length, next byte to try).
        let mut stack: Vec<(u32, Decoder, usize, u16)> = vec![(st, dec, decoded.len(), 0)];
        while let Some(top) = stack.last_mut() {
            let (s, dc, len, b) = *top;
            if b == 256 {
                stack.pop();
                continue;
            }
            top.3 += 1;
            let b = b as u8;
            if d.live_bytes(s)[(b >> 6) as usize] >> (b & 63) & 1 == 0 {
                continue;
            }
            self.work += 1;
            if self.work > budget {
                self.over = true;
                return true;
            }
            let s2 = d.next(s, b);
            if s2 == DEAD {
                continue;
            }
            decoded.truncate(len);
            let mut dec2 = dc;
            dec2.feed(b, decoded);
            match settled(d, s2, &dec2, decoded, used) {
                Some(true) => return true,
                Some(false) => {}
                None => stack.push((s2, dec2, decoded.len(), 0)),
            }
        }
        false
    }

    /// Whether the guarded string item in flight at position `pos` (terminal `t`), started at
    /// set `origin` and in state `st` after the byte just read, can still end with a value
    /// that no earlier item of an array waiting for it has: checked only in states with
    /// finitely many completions. At a mask computation's assumed terminal end, an array whose
    /// earlier items would be read across its unknown byte marks the place uncertain (it is
    /// read again with real bytes) and passes.
    pub(super) fn string_item_alive(
        &mut self,
        g: &Grammar,
        pos: u32,
        t: u32,
        origin: u32,
        st: u32,
    ) -> bool {
        let Some(fin) = g.string_finite.get(t as usize).and_then(Option::as_ref) else {
            return true;
        };
        if !fin.get(st as usize).copied().unwrap_or(false) {
            return true;
        }
        if let Some(&Some((spec, key))) = g.item_string.get(pos as usize) {
            return self.item_string_alive(g, spec, key, t, origin, st);
        }
        if !g.guarded_pos.get(pos as usize).copied().unwrap_or(false) {
            return true;
        }
        let Some(&GSym::End(a)) = g.syms.get(pos as usize + 1) else {
            return true;
        };
        let arrays = self.waiting_origins(g, origin, a);
        let end = self.input.len();
        let d = Arc::clone(g.dfa(t));
        for array in arrays {
            if let Some(syn) = self.guard.synthetic {
                // The unknown byte is the one before set `syn`.
                if (array < syn && syn <= origin) || (origin < syn && syn as usize <= end) {
                    self.guard.uncertain = true;
                    return true;
                }
            }
            let Some(values) = self.earlier(Guard::UniqueStrings, array, origin) else {
                continue;
            };
            let mut dec = Decoder::new();
            let mut decoded = Vec::new();
            for &b in &self.input[origin as usize..end] {
                dec.feed(b, &mut decoded);
            }
            self.work += (end - origin as usize) as u64;
            if self.some_unused(&d, st, dec, &mut decoded, &values, g.max_work) {
                return true;
            }
        }
        false
    }

    /// Whether prediction guard `guard` ([`Guard::Fresh`], [`Guard::Next`] or
    /// [`Guard::Close`]) passes for the array whose `[` was read at set `array`, at set `at`.
    /// At a mask computation's assumed terminal end (`at` the synthetic set) the unknown last
    /// byte is the `[`, a `,` or whitespace before a `Fresh` item, and the last byte of the
    /// last item before `Next` and `Close`; neither the earlier values before the one nor the
    /// count of items before the other depends on it, so it is left out and the guard is exact
    /// there. (Places further on that would read across it are read again, as `predicts`
    /// arranges.)
    pub(super) fn finite_passes(&mut self, g: &Grammar, guard: Guard, array: u32, at: u32) -> bool {
        let cut = self.guard.synthetic == Some(at);
        if let Guard::MoreStrings { terminal } = guard {
            if cut {
                // The last item's closing quote is unknown: read again with real bytes.
                self.guard.uncertain = true;
                return true;
            }
            let Some(text) = self.input.get(array as usize..at as usize) else {
                return false;
            };
            self.work += text.len() as u64;
            let mut listed = text.to_vec();
            listed.push(b',');
            let Some(used) = earlier_strings(&listed) else {
                return false;
            };
            let d = Arc::clone(g.dfa(terminal));
            return self.some_unused(
                &d,
                d.start(),
                Decoder::new(),
                &mut Vec::new(),
                &used,
                g.max_work,
            );
        }
        let end = at as usize - usize::from(cut);
        let Some(text) = self.input.get(array as usize..end) else {
            return false;
        };
        let passes = match guard {
            Guard::Fresh { set, value } => {
                let Some(wanted) = g
                    .finite_sets
                    .get(set as usize)
                    .and_then(|s| s.values.get(value as usize))
                else {
                    return false;
                };
                let wanted = wanted.clone();
                match self.finite_used(array, at, cut) {
                    Some(used) => used.binary_search(&wanted).is_err(),
                    None => false,
                }
            }
            Guard::Next { set } | Guard::Close { set } => {
                let Some(spec) = g.finite_sets.get(set as usize) else {
                    return false;
                };
                self.work += text.len() as u64;
                let n = count_items(text);
                if matches!(guard, Guard::Next { .. }) {
                    n < spec.max
                } else {
                    n >= spec.min
                }
            }
            _ => true,
        };
        let set = match guard {
            Guard::Fresh { set, .. } | Guard::Next { set } | Guard::Close { set } => set,
            _ => return passes,
        };
        match g.finite_sets.get(set as usize).and_then(|s| s.outer) {
            None => passes,
            // Past a mask computation's assumed terminal end the outer array's items and this
            // array's values are read across the unknown byte (the last value's end, or the
            // `[` whose set the outer items are found from): read again with real bytes.
            Some(_) if passes && self.guard.synthetic.is_some_and(|s| s >= array) => {
                self.guard.uncertain = true;
                true
            }
            Some(outer) => passes && self.outer_alive(g, guard, set, outer, array, end),
        }
    }

    /// For an array of finite set `set` whose `[` was read at set `array`, itself an item of
    /// the `uniqueItems` arrays whose items wait for nonterminal `outer` there, and read up to
    /// byte `end`: whether guard `guard` keeps it completable to an array that no earlier item
    /// of such an outer array equals (for some of them, when the parse is ambiguous). The
    /// values written so far, in order, are a prefix `P`; an earlier item agrees with a prefix
    /// `Q` when it is an array of the set's values (distinct, as many as `minItems` and
    /// `maxItems` allow) that starts with `Q`; `Q` is alive when fewer earlier items agree with
    /// it than it has completions ([`ordered_completions`]). `Fresh` asks that of `P` and its
    /// value, `Next` whether some unused value passes, and `Close` that no earlier item is `P`
    /// itself.
    fn outer_alive(
        &mut self,
        g: &Grammar,
        guard: Guard,
        set: u32,
        outer: u32,
        array: u32,
        end: usize,
    ) -> bool {
        let Some(spec) = g.finite_sets.get(set as usize) else {
            return false;
        };
        let Some(text) = self.input.get(array as usize..end) else {
            return false;
        };
        self.work += text.len() as u64;
        let Some(written) = values_in_order(text) else {
            return false;
        };
        let mut alive = false;
        for o in self.waiting_origins(g, array, outer) {
            let Some(earlier) = self.earlier(Guard::UniqueValues, o, array) else {
                continue;
            };
            // The earlier items that are arrays of the set, as their values in order.
            let arrays: Vec<Vec<&[u8]>> = earlier
                .iter()
                .filter_map(|e| super::unique_objects::canonical_parts(e, b'a'))
                .filter(|vs| {
                    vs.len() >= spec.min
                        && vs.len() <= spec.max
                        && vs.iter().all(|v| spec.values.iter().any(|w| w == v))
                        && vs.iter().enumerate().all(|(i, v)| !vs[..i].contains(v))
                })
                .collect();
            let agree = |q: &[&[u8]]| {
                arrays
                    .iter()
                    .filter(|a| a.len() >= q.len() && a[..q.len()] == *q)
                    .count() as u64
            };
            let completions =
                |k: usize| ordered_completions(spec.values.len(), k, spec.min, spec.max);
            let mut q: Vec<&[u8]> = written.iter().map(Vec::as_slice).collect();
            let ok = match guard {
                Guard::Fresh { value, .. } => match spec.values.get(value as usize) {
                    Some(v) => {
                        q.push(v);
                        agree(&q) < completions(q.len())
                    }
                    None => false,
                },
                Guard::Next { .. } => spec.values.iter().any(|v| {
                    if q.contains(&v.as_slice()) {
                        return false;
                    }
                    let mut r = q.clone();
                    r.push(v);
                    agree(&r) < completions(r.len())
                }),
                _ => !arrays.iter().any(|a| a[..] == q[..]),
            };
            if ok {
                alive = true;
                break;
            }
        }
        alive
    }

    /// The canonical values of the items of the array started at set `array`, before set `at`
    /// (without its last byte when `cut`), cached until the chart is truncated below `at`.
    pub(super) fn finite_used(
        &mut self,
        array: u32,
        at: u32,
        cut: bool,
    ) -> Option<Arc<Vec<Vec<u8>>>> {
        let end = at as usize - usize::from(cut);
        self.cached_values(array, at, FINITE_KEY, cut, end, listed_values)
    }

    /// [`Chart::fill_mask`] for a grammar with guards (see the module's documentation).
    pub(super) fn fill_mask_guarded(
        &mut self,
        g: &Grammar,
        vocab: &TokenVocab,
        mask: &mut [u64],
    ) -> Result<(), Error> {
        let mut item = std::mem::take(&mut self.guard.scratch);
        // Each item's bits are copied in whole before they are read.
        item.resize(mask.len(), 0);
        let r = self.guarded_items(g, vocab, mask, &mut item);
        self.guard.scratch = item;
        r?;
        if !g.token_sets.is_empty() {
            self.mask_token_refs(g, vocab, mask);
        }
        Ok(())
    }

    /// Sizes the mask buffer of guarded grammars for masks of `words` words ahead of the first
    /// mask.
    pub(crate) fn reserve_mask(&mut self, g: &Grammar, words: usize) {
        if !g.guards.is_empty() {
            self.guard.scratch.resize(words, 0);
        }
    }

    fn guarded_items(
        &mut self,
        g: &Grammar,
        vocab: &TokenVocab,
        mask: &mut [u64],
        item: &mut [u64],
    ) -> Result<(), Error> {
        let k = self.depth() - 1;
        let (s, e) = (
            self.infl_starts[k] as usize,
            self.infl_starts[k + 1] as usize,
        );
        // The trie nodes read again with real bytes so far, with whether their own tokens
        // were. Such a reading starts from the top set, whichever item asked for it, so its
        // tokens are in `mask` already when another item asks for the same node.
        let mut read: Vec<(u32, bool)> = Vec::new();
        for i in s..e {
            self.work += 1;
            let (pos, origin, st) = self.infl[i];
            let GSym::T(t) = g.syms[pos as usize] else {
                continue;
            };
            let tm = g.terminal_mask_after(
                vocab,
                (pos, t),
                st,
                &self.input[origin as usize..k],
                self.plain_masks,
            );
            let guarded = g.guarded_pos.get(pos as usize).copied().unwrap_or(false);
            let item_string = g.item_string.get(pos as usize).copied().flatten();
            if !guarded && item_string.is_none() && tm.exits.is_empty() && tm.ends.is_empty() {
                // Tokens inside one terminal: no completion, so no guard, decides them.
                tm.inside.or_into(mask);
                continue;
            }
            tm.inside.copy_into(item);
            if !tm.exits.is_empty() || !tm.ends.is_empty() {
                // As in `fill_mask`: one set after the terminal ends, for every place it ends.
                self.seen.clear();
                self.add_item(pos + 1, origin);
                self.input.push(0);
                self.guard.synthetic = Some(k as u32 + 1);
                self.guard.own = guarded;
                self.guard.uncertain = false;
                self.close(g, k as u32 + 1);
                // Tokens that end exactly where the terminal does are read again when a guard
                // there read unknown text, or refused every way on (a value already used).
                let all = self.guard.uncertain || self.top_is_empty(g);
                let mut again: Vec<u32> = if all { tm.ends.clone() } else { Vec::new() };
                if all {
                    // Read again whatever the walk would find.
                    again.extend(&tm.exits);
                } else if !self.walk_exits_guarded(g, vocab, &tm, item) {
                    // One place at a time, to find those to read again.
                    for &p in &tm.exits {
                        if self.over {
                            break;
                        }
                        self.guard.uncertain = false;
                        if !g.objects.is_empty() || !g.item_objects.is_empty() {
                            self.guard.set_exits(vocab, &[p]);
                        }
                        self.walk_subtrie(g, vocab, p as usize, item);
                        self.guard.in_exit = false;
                        if self.guard.uncertain {
                            again.push(p);
                        }
                    }
                }
                self.guard.synthetic = None;
                self.guard.uncertain = false;
                self.pop();
                self.check_work(g)?;
                for p in again {
                    // When the set right after the terminal's end is itself uncertain (a guard
                    // completes there, such as a value item at its closing `}`), the tokens
                    // that end exactly there are read again too.
                    let node = &vocab.trie[p as usize];
                    let from = if all { node.tok_start } else { node.tok_end };
                    clear(
                        vocab,
                        from as usize,
                        vocab.subtree_tokens_end(p as usize),
                        item,
                    );
                    if !read_before(&mut read, p, all) {
                        let mut path = Vec::new();
                        vocab.trie_path(p as usize, &mut path);
                        self.exact_walk(g, vocab, p as usize, &path, all, item);
                    }
                }
            }
            let dead_ends = match item_string {
                Some((spec, key)) => self.item_string_q_nodes(g, vocab, spec, key, t, origin, st),
                None if guarded => self.q_nodes(g, vocab, pos, origin, st),
                None => Vec::new(),
            };
            {
                for (q, path) in dead_ends {
                    let node = &vocab.trie[q];
                    clear(
                        vocab,
                        node.tok_start as usize,
                        vocab.subtree_tokens_end(q),
                        item,
                    );
                    if !read_before(&mut read, q as u32, true) {
                        self.exact_walk(g, vocab, q, &path, true, item);
                    }
                }
            }
            self.check_work(g)?;
            for (m, w) in mask.iter_mut().zip(item.iter()) {
                *m |= w;
            }
        }
        Ok(())
    }

    /// Walks the places `tm.exits` where the assumed terminal ends as one (`Chart::walk_exits`)
    /// and adds their tokens to `item`, when that is exact: no guard read text across the
    /// unknown byte (`uncertain`), and the members reader read the same state from every
    /// place's path (`split`). Returns false, leaving `item` as it was, otherwise (and for a
    /// single place, which gains nothing by it).
    fn walk_exits_guarded(
        &mut self,
        g: &Grammar,
        vocab: &TokenVocab,
        tm: &TerminalMask,
        item: &mut [u64],
    ) -> bool {
        let exits = &tm.exits[..];
        if exits.len() < 2 || self.plain_masks {
            return false;
        }
        let mut merged = std::mem::take(&mut self.guard.merged);
        merged.clear();
        merged.resize(item.len(), 0);
        self.guard.uncertain = false;
        self.guard.split = false;
        if !g.objects.is_empty() || !g.item_objects.is_empty() {
            self.guard.set_exits(vocab, exits);
        }
        self.walk_exits(g, vocab, tm, &mut merged);
        self.guard.in_exit = false;
        let exact = !self.guard.uncertain && !self.guard.split;
        if exact {
            for (m, w) in item.iter_mut().zip(&merged) {
                *m |= w;
            }
        }
        self.guard.uncertain = false;
        self.guard.split = false;
        self.guard.merged = merged;
        exact
    }

    /// Reads `path` (the bytes of trie node `p`) with real bytes from the top set and adds the
    /// tokens below `p` (and at `p` itself with `with_node`) that the parser accepts.
    pub(super) fn exact_walk(
        &mut self,
        g: &Grammar,
        vocab: &TokenVocab,
        p: usize,
        path: &[u8],
        with_node: bool,
        mask: &mut [u64],
    ) {
        let base = self.depth();
        if path.iter().all(|&b| self.push_byte(g, b)) {
            if with_node {
                vocab.mark_node(p, mask);
            }
            self.walk_subtrie(g, vocab, p, mask);
        }
        self.truncate(base);
    }

    /// The trie nodes (with their bytes) where the guarded terminal in flight at `pos`, started
    /// at set `origin`, would end with a value that the guard of some array waiting for it
    /// refuses.
    fn q_nodes(
        &mut self,
        g: &Grammar,
        vocab: &TokenVocab,
        pos: u32,
        origin: u32,
        st: u32,
    ) -> Vec<(usize, Vec<u8>)> {
        let Some(&GSym::End(a)) = g.syms.get(pos as usize + 1) else {
            return Vec::new();
        };
        let arrays = self.waiting_origins(g, origin, a);
        let k = self.depth() - 1;
        let mut out: Vec<(usize, Vec<u8>)> = Vec::new();
        for array in arrays {
            let Some(values) = self.earlier(Guard::UniqueStrings, array, origin) else {
                continue;
            };
            if values.is_empty() {
                continue;
            }
            let mut dec = Decoder::new();
            let mut decoded = Vec::new();
            for &b in &self.input[origin as usize..k] {
                dec.feed(b, &mut decoded);
            }
            self.work += (k - origin as usize) as u64;
            if dec.mode == Mode::Bad
                || dec.mode == Mode::Closed
                || (dec.settled() && !has_prefix(&values, &decoded))
            {
                continue;
            }
            let finite = match g.syms[pos as usize] {
                GSym::T(t) => g
                    .string_finite
                    .get(t as usize)
                    .and_then(Option::as_ref)
                    .map(|f| (Arc::clone(g.dfa(t)), Arc::clone(f), g.max_work)),
                _ => None,
            };
            self.spelling_walk(vocab, &values, dec, decoded, finite, st, &mut out);
        }
        out
    }

    /// Walks the token trie along the spellings of `values` that continue the string decoded so
    /// far (`dec`, `decoded`), adding to `out` the nodes where one ends, and, with `finite`
    /// (the string's automaton, in state `st` now, and its states of finitely many
    /// completions), the nodes where every completion of the string is among `values`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn spelling_walk(
        &mut self,
        vocab: &TokenVocab,
        values: &[Vec<u8>],
        dec: Decoder,
        mut decoded: Vec<u8>,
        finite: Option<(Arc<crate::dfa::Dfa>, Arc<Vec<bool>>, u64)>,
        st: u32,
        out: &mut Vec<(usize, Vec<u8>)>,
    ) {
        let trie = &vocab.trie;
        // (subtree end, decoder, decoded length, bytes that may come next, automaton state) of
        // the nodes on the path: the children on no spelling are skipped with one bit test.
        let first = next_bytes(values, &dec, &decoded);
        let mut stack: Vec<(u32, Decoder, usize, [u64; 4], u32)> =
            vec![(trie[0].end, dec, decoded.len(), first, st)];
        let mut path: Vec<u8> = Vec::new();
        let mut i = 1usize;
        while i < trie.len() {
            while stack.last().is_some_and(|&(e, _, _, _, _)| e as usize <= i) {
                stack.pop();
                path.pop();
            }
            let Some(&(_, d0, len, next, s0)) = stack.last() else {
                break;
            };
            let node = trie[i];
            if next[(node.byte >> 6) as usize] >> (node.byte & 63) & 1 == 0 {
                i = node.end as usize;
                continue;
            }
            self.work += 1;
            decoded.truncate(len);
            let mut d = d0;
            d.feed(node.byte, &mut decoded);
            let mut s1 = s0;
            if let Some((dfa, fin, budget)) = &finite {
                s1 = dfa.next(s0, node.byte);
                if s1 == DEAD {
                    i = node.end as usize;
                    continue;
                }
                if d.mode != Mode::Closed
                    && fin.get(s1 as usize).copied().unwrap_or(false)
                    && !self.some_unused(dfa, s1, d, &mut decoded.clone(), values, *budget)
                {
                    // Every completion from here is a value already used: a dead end.
                    let mut p = path.clone();
                    p.push(node.byte);
                    if !out.iter().any(|(q, _)| *q == i) {
                        out.push((i, p));
                    }
                    i = node.end as usize;
                    continue;
                }
            }
            let alive = match d.mode {
                Mode::Bad | Mode::Start => false,
                Mode::Closed => {
                    if values.binary_search(&decoded).is_ok() {
                        let mut p = path.clone();
                        p.push(node.byte);
                        if !out.iter().any(|(q, _)| *q == i) {
                            out.push((i, p));
                        }
                    }
                    false
                }
                _ => !d.settled() || has_prefix(values, &decoded),
            };
            if alive {
                let next = next_bytes(values, &d, &decoded);
                stack.push((node.end, d, decoded.len(), next, s1));
                path.push(node.byte);
                i += 1;
            } else {
                i = node.end as usize;
            }
        }
    }
}

/// Whether trie node `p` was read again with real bytes in this mask, with its own tokens when
/// `with_node` (a reading with them covers one without); records it otherwise.
fn read_before(read: &mut Vec<(u32, bool)>, p: u32, with_node: bool) -> bool {
    if read.iter().any(|&(q, w)| q == p && (w || !with_node)) {
        return true;
    }
    read.push((p, with_node));
    false
}

/// The bytes that may follow the string read so far (decoder `d`, decoded `decoded`) on some
/// spelling of one of the sorted `values`: the opening quote first; then, between characters,
/// the next byte of each value that continues `decoded`, the closing quote if `decoded` is
/// one, and a backslash (any character may be escaped); every byte inside an escape.
fn next_bytes(values: &[Vec<u8>], d: &Decoder, decoded: &[u8]) -> [u64; 4] {
    let mut set = [0u64; 4];
    let mut add = |b: u8| set[(b >> 6) as usize] |= 1 << (b & 63);
    match d.mode {
        Mode::Start => add(b'"'),
        Mode::Content if d.high.is_none() => {
            add(b'\\');
            let lo = values.partition_point(|v| v.as_slice() < decoded);
            for v in values[lo..].iter().take_while(|v| v.starts_with(decoded)) {
                match v.get(decoded.len()) {
                    Some(&b) => add(b),
                    None => add(b'"'),
                }
            }
        }
        Mode::Closed | Mode::Bad => {}
        _ => set = [!0; 4],
    }
    set
}

/// Clears the bits of the tokens `trie_tokens[from..to]`.
fn clear(vocab: &TokenVocab, from: usize, to: usize, mask: &mut [u64]) {
    for &t in &vocab.trie_tokens[from..to] {
        mask[(t >> 6) as usize] &= !(1 << (t & 63));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_decode_by_json_rules() {
        let d = |s: &str| decode_string(s.as_bytes());
        assert_eq!(d(r#""a""#), d(r#""\u0061""#));
        assert_eq!(d(r#""/""#), d(r#""\/""#));
        assert_eq!(d(r#""😀""#), d(r#""\ud83d\ude00""#));
        assert_eq!(d(r#""\n\t""#), Some(b"\n\t".to_vec()));
        assert_ne!(d(r#""a""#), d(r#""A""#));
        assert_eq!(d(r#""a"#), None);
        assert_eq!(d(r#""a"b"#), None);
        assert_eq!(d(r#""\x""#), None);
    }

    #[test]
    fn values_compare_as_json_schema_says() {
        let c = |s: &str| canonical_item(s.as_bytes()).unwrap_or_else(|| panic!("{s}"));
        // Equal values.
        for (a, b) in [
            ("1", "1.0"),
            ("1", "10e-1"),
            ("100", "1e2"),
            ("1.5e1", "15"),
            ("0", "-0.0"),
            ("0", "0e5"),
            (r#""a""#, r#""\u0061""#),
            (
                r#"{"a":1,"b":[true]}"#,
                r#" { "b" : [ true ] , "a" : 1.00 } "#,
            ),
            (r#"{"a":1,"a":2}"#, r#"{"a":2}"#),
            ("[[],{}]", "[ [ ] , { } ]"),
        ] {
            assert_eq!(c(a), c(b), "{a} {b}");
        }
        // Different values.
        for (a, b) in [
            ("1", "-1"),
            ("1", "10"),
            ("0.1", "1"),
            ("1e400", "1e401"),
            ("1", r#""1""#),
            ("true", "false"),
            ("null", "false"),
            ("[1,2]", "[2,1]"),
            ("[1]", "[[1]]"),
            (r#"{"a":1}"#, r#"{"a":1,"b":1}"#),
            (r#"{"a":1}"#, r#"{"b":1}"#),
            (r#"{"ab":1}"#, r#"{"a":1}"#),
            (r#"["ab"]"#, r#"["a","b"]"#),
            ("[]", "{}"),
        ] {
            assert_ne!(c(a), c(b), "{a} {b}");
        }
        for bad in [
            "", "01", "1.", "-", "[1,]", r#"{"a"}"#, "tru", "[1", "1 2", "{1:2}",
        ] {
            assert_eq!(canonical_item(bad.as_bytes()), None, "{bad}");
        }
        let v = earlier_values(br#"[ {"a":1} ,1.0,{ "a" : 1 },1, "#).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(earlier_values(b"[").unwrap(), Vec::<Vec<u8>>::new());
        assert_eq!(earlier_values(b"[1"), None);
    }

    #[test]
    fn earlier_items_are_read_from_the_array_text() {
        let v = earlier_strings(br#"[ "b" ,"a","\u0062", "#).unwrap();
        assert_eq!(v, vec![b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(earlier_strings(b"[").unwrap(), Vec::<Vec<u8>>::new());
        assert_eq!(earlier_strings(br#"["a""#), None);
        // Items of other types are read past: they never equal a string.
        let v = earlier_strings(br#"[null, "a",{"x":"b"},["c"],-1.5e3 ,"#).unwrap();
        assert_eq!(v, vec![b"a".to_vec()]);
        assert_eq!(earlier_strings(br#"[1"#), None);
        assert_eq!(earlier_strings(br#"[nul,"#), None);
    }
}
