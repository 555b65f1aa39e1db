//! `uniqueItems` over closed objects: run-time checks that keep every prefix of an item
//! completable to an object that no earlier item of its array equals.
//!
//! An item object closed by `additionalProperties: false` may have a prefix with only
//! finitely many completions (`{"value": "x", "algorithm": ` with an `enum` left to write),
//! and earlier items may use all of them; the mask must then refuse that prefix. The compiler
//! (`json::unique_objects`) takes such items when every property's value is either of
//! finitely many values (an `enum`, booleans, `null`, a few arrays of those: an [`ItemKey`]
//! with `values`), of a domain where every proper prefix has infinitely many completions into
//! distinct values (strings without bounds, numbers, open objects, ...: `values` is `None`),
//! or a nested closed object of such keys ([`ItemKey::object`]). The item's members, and those
//! of its nested objects, are its own rules, left-recursive so that every member starts from
//! the item's `{` (set `origin` of every guard below but [`ItemCheck::Start`]):
//!
//! ```text
//! list   -> "{" K_i key_i ":" V_i | list More "," K_i key_i ":" V_i     (every key i)
//! item   -> "{" End "}" | list End "}"
//! V_i    -> value After            (infinitely many values)
//! V_i    -> F_ij                   (finitely many: one rule per value j, F_ij -> value j;
//!                                   also the values an integer key sets apart, `pinned`,
//!                                   and zero of a number key, whose `0e` has one value)
//! V_i    -> string AfterString_i   (a string with finitely many completions at some state)
//! open_k -> "{" K_k key_k ":" [Open_k] "{" | list More "," K_k key_k ":" [Open_k] "{"
//! list   -> open_k End "}" | list_k End "}"   (a nested object of key k, its members
//!                                              list_k as list's, after open_k)
//! ```
//!
//! The item as read so far is a [`Partial`]: the complete members of the item, and of the
//! nested object being written (if any) its own complete members and nested object, and so
//! on. Its completions, as JSON values, are every choice, for every key not yet written in any
//! of those objects, of one of its values or none (when it is not required): the objects are
//! closed and their keys independent, so they form a product, `Π (values + optional)`, with a
//! nested object counted as the product of its own keys ([`completions`]); a key of
//! infinitely many values makes it infinite. The earlier items that agree with the prefix
//! (every complete member equal, the nested object being written agreeing the same way,
//! [`tree_agrees`]) are exactly the completions in use, each a distinct one, so a prefix is
//! alive when fewer earlier items agree with it than it has completions ([`ItemObject::
//! alive`]). Every guarded place asks that of the prefix it would make: `K_i` of the innermost
//! object with key `i` added (some value of it alive; for a nested object, the item with it
//! begun), `F_ij` of it with value `j`, `After` of the item with the value just read (a
//! string's closing quote, or an array's `]`, may fix the last free member), `More` whether
//! some `K_i` passes, `End` whether every required key of the innermost object is there and
//! the item with that object closed is alive (for the item itself: no earlier item equals
//! it), `Open_k` (when the key also takes unbounded values of other types, so that `K_k`
//! passes for those) whether the item with the nested object begun is alive, and `Start`
//! (before the `,` of another item, reading from the array's `[`) whether the empty object
//! is alive. A member whose value is a `uniqueItems` array of at most `maxItems` items has
//! one more place, `Closing`, in that array's own rules right before the `]` of a full
//! array: the item with the array closed is alive (the item's `{` is found through the
//! items waiting for the member's value at the array's `[`). A value of infinitely many values is never checked inside: each of its proper
//! prefixes has infinitely many completions, and so has the item. Since `alive(o)` is exactly
//! "`End` passes or some `K_i` does" for the innermost object of `o` (a completion either
//! closes it now or writes one more key of it), every place the chart reaches has a passing
//! way on, and every completion of the item differs from every earlier one: the mask means
//! what `advance` does.
//!
//! A string key of `words` (finitely many completions at some state of its automaton, such
//! as a GUID's pattern) counts its values in the product, and is checked while it is read:
//! in a state of finitely many completions, the terminal (`Grammar::item_string`) is kept
//! only while one of them is not among the values of the key that agreeing earlier items
//! use up (each has as many agreeing items as the other unwritten keys give completions,
//! [`ItemObject::full_values`]): `Chart::item_string_alive`, the search of guarded string
//! items. The mask reads again with real bytes the trie nodes where that fails, found along
//! those values' spellings (`Chart::item_string_q_nodes`), and `AfterString_i` asks `alive`
//! of the object with the value read, as `After` does.
//!
//! The items may be a union where these objects are the one object type (`json::unique_split`):
//! earlier items of other types never equal an object, and the guards read past them.
//!
//! Equality is JSON equality ([`canonical`]): keys in any order and decoded, numbers by value,
//! strings decoded. A guard reads the text from its places; at a mask computation's assumed
//! terminal end (whose last byte is unknown) anything it would read across that byte marks the
//! place uncertain, to be read again with real bytes.

use std::sync::Arc;

use super::unique::{canonical, skip_ws, string_at, Decoder, Mode};
use super::{Chart, Grammar, Guard};
use crate::vocab::TokenVocab;

/// One property of a closed-object item.
#[derive(Clone, Debug)]
pub(crate) struct ItemKey {
    /// The decoded name.
    pub(crate) name: Vec<u8>,
    /// Whether `required` names it.
    pub(crate) required: bool,
    /// Its values in canonical form (distinct) when finitely many; `None` when every proper
    /// prefix of a value has infinitely many completions into distinct values, or for a
    /// string of `words`.
    pub(crate) values: Option<Vec<Vec<u8>>>,
    /// For a string whose automaton has finitely many completions at some state (checked
    /// while it is read: [`ItemCheck::AfterString`]), the number of its values (decoded
    /// strings; `u64::MAX` when infinitely many or more); `None` for the others.
    pub(crate) words: Option<u64>,
    /// For a closed object (`additionalProperties: false`) of such keys: its keys. Its
    /// members are rules of the item's own (starting at the item's `{`), guarded as the
    /// item's are, and the object is counted as the product of its keys' choices.
    pub(crate) object: Option<Vec<ItemKey>>,
    /// With `object`: whether the key also takes infinitely many values of other types than
    /// objects (an `anyOf` of the closed object and such), every proper prefix of which has
    /// infinitely many completions. Its nested object's `{` is then checked on its own
    /// ([`ItemCheck::Open`]).
    pub(crate) more: bool,
    /// For a key of infinitely many values (`values` `None`) all of whose proper prefixes
    /// have infinitely many completions but for these values (canonical; an integer's `-1`
    /// under `minimum: -1`, whose `-` has one completion): each is its own rule, checked
    /// before it is begun as a finite key's values are ([`ItemCheck::Value`]).
    pub(crate) pinned: Vec<Vec<u8>>,
    /// With `object`: the nested object's `anyOf` of `required` alone, as lists of its key
    /// indices (empty: none); its `}` needs one list all written ([`ItemObject::any_required`]).
    pub(crate) object_any: Vec<Vec<u32>>,
    /// With `object`: the nested object's `dependentRequired`, as (trigger, keys) indices;
    /// its `}` needs every key of a written trigger's list ([`ItemObject::dependent`]).
    pub(crate) object_dependent: Vec<(u32, Vec<u32>)>,
}

/// A closed-object item domain of a `uniqueItems` array (see the module's documentation).
#[derive(Clone, Debug, Default)]
pub(crate) struct ItemObject {
    /// Every property that may be written; no other key may.
    pub(crate) keys: Vec<ItemKey>,
    /// The guarded item nonterminal ([`Guard::UniqueValues`]) of the array, whose waiting
    /// items start at the array's `[`.
    pub(crate) item: u32,
    /// For one branch of a union of object types: the required key that tells its objects
    /// from every other branch's (its value among this key's `values` when it has them; its
    /// presence alone otherwise, no other branch having the key). Earlier items without it
    /// are of another branch: never a completion of this one, they are read past.
    pub(crate) member: Option<u32>,
    /// The item's `anyOf` of `required` alone, as lists of key indices (empty: none): its `}`
    /// needs every key of one list written. The keys named are all of infinitely many values,
    /// so while none holds some key named is unwritten and the item has infinitely many
    /// completions that satisfy it, as the product counts: only `End` asks.
    pub(crate) any_required: Vec<Vec<u32>>,
    /// The item's `dependentRequired`, as (trigger, keys) indices: its `}` needs every key of
    /// the list of each trigger written. The keys listed are all of infinitely many values,
    /// so while a written trigger misses one the item has infinitely many completions that
    /// satisfy it (and one whose trigger is not written satisfies it whatever follows), as
    /// the product counts: only `End` asks, as for `any_required`.
    pub(crate) dependent: Vec<(u32, Vec<u32>)>,
}

/// The place a [`Guard::Item`] guards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ItemCheck {
    /// Before the `,` of another item (origin: the array's `[`): an empty object is alive.
    Start,
    /// Before key `i`: not written yet, and the object with it is alive.
    Key(u32),
    /// Before the `{` of the nested object of key `i` (whose key and `:` are read): the item
    /// with that object begun is alive.
    Open(u32),
    /// Before value `j` of key `i` (of finitely many values): the object with it is alive.
    Value(u32, u32),
    /// After a value of infinitely many: the object so far is alive.
    After,
    /// After the string value of key `i` (of `words`: the terminal right before it is
    /// checked while it is read, `Chart::item_string_alive`): the object so far is alive.
    AfterString(u32),
    /// Before the `]` of a full array (of at most `maxItems` items, a member's value whose
    /// nonterminal is `w`; origin: the array's `[`): the item with that array closed is
    /// alive. The item's `{` is the origin of the items waiting for `w` at the `[`.
    Closing(u32),
    /// Before the `,` of another member: some key may follow.
    More,
    /// Before the `}`: every required key is written and no earlier item equals the object.
    End,
}

/// Members read from an object's text: (decoded key, canonical value).
type Members = Vec<(Vec<u8>, Vec<u8>)>;

/// Where an object's text stops, for [`scan_members`].
enum Stop {
    /// Right after `{`, a member, a `,` or a key.
    Between,
    /// After the `:` of the member with this key: its value is to come at `usize`.
    BeforeValue(Vec<u8>, usize),
    /// Inside the string value of the member with this key, whose opening quote is at `usize`.
    InString(Vec<u8>, usize),
}

/// The complete members of the object text `text` (its `{`, then `key: value` pairs separated
/// by commas, whitespace anywhere JSON allows it) as (decoded key, canonical value), and where
/// the text stops. `None` when the text is something else (which the grammar never lets
/// happen), or stops inside a value that is not a string.
fn scan_members(text: &[u8]) -> Option<(Members, Stop)> {
    if text.first() != Some(&b'{') {
        return None;
    }
    let mut members = Vec::new();
    let mut i = skip_ws(text, 1);
    while i < text.len() {
        let (key, end) = string_at(text, i)?;
        i = skip_ws(text, end);
        if i == text.len() {
            break;
        }
        if text[i] != b':' {
            return None;
        }
        i = skip_ws(text, i + 1);
        if i == text.len() {
            return Some((members, Stop::BeforeValue(key, i)));
        }
        let mut v = Vec::new();
        let end = match canonical(text, i, &mut v, 1) {
            Some(end) => end,
            None if text[i] == b'"' => return Some((members, Stop::InString(key, i))),
            None => return None,
        };
        members.push((key, v));
        i = skip_ws(text, end);
        if i == text.len() {
            break;
        }
        if text[i] != b',' {
            return None;
        }
        i = skip_ws(text, i + 1);
    }
    Some((members, Stop::Between))
}

/// The members of the object text `text` that ends inside the string value of its last
/// member (or right before it): the complete members (as [`scan_members`] gives them), the
/// last member's decoded key and where its value's opening quote is (or is to come). `None`
/// when the text is something else.
fn read_partial(text: &[u8]) -> Option<(Members, Vec<u8>, usize)> {
    match scan_members(text)? {
        (members, Stop::BeforeValue(key, at) | Stop::InString(key, at)) => Some((members, key, at)),
        (_, Stop::Between) => None,
    }
}

/// Where the canonical form starting at `c[i]` ends.
fn canonical_end(c: &[u8], i: usize) -> Option<usize> {
    let count = |at: usize| -> Option<u64> {
        let b: [u8; 8] = c.get(at..at + 8)?.try_into().ok()?;
        Some(u64::from_be_bytes(b))
    };
    match *c.get(i)? {
        b'n' | b't' | b'f' => Some(i + 1),
        b's' => {
            let n = usize::try_from(count(i + 1)?).ok()?;
            let end = (i + 9).checked_add(n)?;
            (end <= c.len()).then_some(end)
        }
        b'd' if c.get(i + 1) == Some(&b'0') => Some(i + 3),
        b'd' => {
            // Sign and 16 bytes of exponent, then ASCII digits up to `;`.
            let from = i + 18;
            let k = c.get(from..)?.iter().position(|&b| b == b';')?;
            Some(from + k + 1)
        }
        b'a' => {
            let mut j = i + 9;
            for _ in 0..count(i + 1)? {
                j = canonical_end(c, j)?;
            }
            Some(j)
        }
        b'o' => {
            let mut j = i + 9;
            for _ in 0..count(i + 1)? {
                j = canonical_end(c, j)?;
                j = canonical_end(c, j)?;
            }
            Some(j)
        }
        _ => None,
    }
}

/// The members of the canonical object `c` as (decoded key, canonical value); `None` when `c`
/// is not an object's canonical form.
fn canonical_members(c: &[u8]) -> Option<Vec<(&[u8], &[u8])>> {
    let parts = canonical_parts(c, b'o')?;
    parts
        .chunks(2)
        .map(|kv| Some((kv[0].get(9..)?, *kv.get(1)?)))
        .collect()
}

/// The canonical forms inside the canonical container `c` of tag `tag` (`a`: its items;
/// `o`: its keys and values, alternately), in order; `None` when `c` is not such a form.
pub(super) fn canonical_parts(c: &[u8], tag: u8) -> Option<Vec<&[u8]>> {
    if c.first() != Some(&tag) {
        return None;
    }
    let n: [u8; 8] = c.get(1..9)?.try_into().ok()?;
    let per = if tag == b'o' { 2 } else { 1 };
    let mut out = Vec::new();
    let mut j = 9;
    for _ in 0..u64::from_be_bytes(n).checked_mul(per)? {
        let k = canonical_end(c, j)?;
        out.push(&c[j..k]);
        j = k;
    }
    (j == c.len()).then_some(out)
}

/// An object of an item as read so far: its complete members, and the member being written
/// whose value is a nested closed object ([`ItemKey::object`]), read so far. Guards are only
/// asked between members (or right after a value), so nothing else can be half-written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Partial {
    /// Complete members: key index (among the object's keys) and canonical value.
    fixed: Vec<(u32, Vec<u8>)>,
    /// The nested object being written: its key index and what of it is read.
    open: Option<(u32, Box<Partial>)>,
}

impl Partial {
    /// Whether key `i` is written or being written.
    fn has(&self, i: u32) -> bool {
        self.fixed.iter().any(|&(j, _)| j == i) || self.open.as_ref().is_some_and(|o| o.0 == i)
    }

    /// The innermost object being written, with its keys (`keys` those of `self`).
    fn innermost<'a, 'k>(&'a self, keys: &'k [ItemKey]) -> Option<(&'a Partial, &'k [ItemKey])> {
        match &self.open {
            Some((c, sub)) => sub.innermost(keys.get(*c as usize)?.object.as_deref()?),
            None => Some((self, keys)),
        }
    }

    /// The innermost object being written, mutably, with its keys.
    fn innermost_mut<'a, 'k>(
        &'a mut self,
        keys: &'k [ItemKey],
    ) -> Option<(&'a mut Partial, &'k [ItemKey])> {
        if self.open.is_some() {
            let (c, sub) = self.open.as_mut()?;
            let sub_keys = keys.get(*c as usize)?.object.as_deref()?;
            return sub.innermost_mut(sub_keys);
        }
        Some((self, keys))
    }

    /// Closes the innermost nested object (its members as they are), which becomes a complete
    /// member of the object around it; `false` when no nested object is being written.
    fn close_innermost(&mut self, keys: &[ItemKey]) -> bool {
        let Some((c, sub)) = self.open.as_mut() else {
            return false;
        };
        let Some(sub_keys) = keys.get(*c as usize).and_then(|k| k.object.as_deref()) else {
            return false;
        };
        if sub.open.is_some() {
            return sub.close_innermost(sub_keys);
        }
        let value = canonical_object(sub_keys, &sub.fixed);
        let c = *c;
        self.open = None;
        self.fixed.push((c, value));
        true
    }
}

/// The canonical form ([`canonical`]) of the object whose members are `fixed` (key indices
/// into `keys`, distinct, and canonical values): `o`, the count, then the members sorted by
/// decoded key, each key as a canonical string.
fn canonical_object(keys: &[ItemKey], fixed: &[(u32, Vec<u8>)]) -> Vec<u8> {
    let mut members: Vec<(&[u8], &[u8])> = fixed
        .iter()
        .filter_map(|(i, v)| Some((keys.get(*i as usize)?.name.as_slice(), v.as_slice())))
        .collect();
    members.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let mut out = vec![b'o'];
    out.extend_from_slice(&(members.len() as u64).to_be_bytes());
    for (k, v) in members {
        out.push(b's');
        out.extend_from_slice(&(k.len() as u64).to_be_bytes());
        out.extend_from_slice(k);
        out.extend_from_slice(v);
    }
    out
}

/// The number of ways to fill key `k` when it is not written yet (leaving it out counts when
/// it is optional); `u64::MAX` when infinitely many or at least that many.
fn choices(k: &ItemKey) -> u64 {
    let n = match (&k.values, k.words, &k.object) {
        (Some(vs), _, _) => vs.len() as u64,
        (None, Some(n), _) => n,
        (None, None, Some(_)) if k.more => u64::MAX,
        (None, None, Some(keys)) => total_objects(keys),
        (None, None, None) => u64::MAX,
    };
    n.saturating_add(u64::from(!k.required))
}

/// The number of objects of the keys `keys` (closed objects: every choice of every key);
/// `u64::MAX` when infinitely many or at least that many.
pub(crate) fn total_objects(keys: &[ItemKey]) -> u64 {
    keys.iter()
        .fold(1u64, |acc, k| acc.saturating_mul(choices(k)))
}

/// The number of completions of the object `p` of keys `keys` into distinct values: the
/// completions of the nested object being written times the choices of every key not
/// written (`u64::MAX`: infinitely many or at least that many).
fn completions(keys: &[ItemKey], p: &Partial) -> u64 {
    completions_edited(keys, p, None)
}

/// How [`completions_edited`] changes the innermost object of an item before counting.
#[derive(Clone, Copy)]
enum Edit {
    /// Key `i` written with a complete value (which value does not change the count).
    Value(u32),
    /// Key `i`'s nested object begun, with no member yet.
    Open(u32),
}

/// [`completions`] of `p` with its innermost object changed by `edit`, without building the
/// changed object: the count only asks which keys are written.
fn completions_edited(keys: &[ItemKey], p: &Partial, edit: Option<Edit>) -> u64 {
    // The edit applies to the innermost object: here when nothing is open.
    let here = edit.filter(|_| p.open.is_none());
    let mut n: u64 = 1;
    for (i, k) in keys.iter().enumerate() {
        let i = i as u32;
        let factor = match (&p.open, here) {
            (Some((c, sub)), _) if *c == i => match &k.object {
                Some(sub_keys) => completions_edited(sub_keys, sub, edit),
                None => 0,
            },
            _ if p.fixed.iter().any(|&(j, _)| j == i) => 1,
            (None, Some(Edit::Value(e))) if e == i => 1,
            (None, Some(Edit::Open(e))) if e == i => match &k.object {
                Some(sub_keys) => total_objects(sub_keys),
                None => 0,
            },
            _ => choices(k),
        };
        n = n.saturating_mul(factor);
    }
    n
}

/// Whether the object `u` (members: decoded key and canonical value) is a completion of the
/// object `p` of keys `keys`: it has every complete member of `p`, and for the nested object
/// being written, a value that is a completion of it.
fn tree_agrees<M: Member>(keys: &[ItemKey], u: &[M], p: &Partial) -> bool {
    let value = |i: u32| {
        let name = keys.get(i as usize).map(|k| k.name.as_slice());
        u.iter().find(|m| Some(m.key()) == name).map(|m| m.value())
    };
    if !p.fixed.iter().all(|(i, v)| value(*i) == Some(v.as_slice())) {
        return false;
    }
    match &p.open {
        None => true,
        Some((c, sub)) => {
            let Some(sub_keys) = keys.get(*c as usize).and_then(|k| k.object.as_deref()) else {
                return false;
            };
            value(*c)
                .and_then(canonical_members)
                .is_some_and(|m| tree_agrees(sub_keys, &m, sub))
        }
    }
}

/// Reads the object text that starts at `text[from]` (its `{`) of keys `keys`, up to the
/// end of `text`: its complete members and the nested object being written ([`Partial`]).
/// `None` when the text is something else, or stops inside a value that is not a nested
/// object of `keys` (a guard is never asked there).
fn scan_tree(text: &[u8], from: usize, keys: &[ItemKey], depth: usize) -> Option<Partial> {
    if depth > 32 || text.get(from) != Some(&b'{') {
        return None;
    }
    let start = skip_ws(text, from + 1);
    scan_tree_from(text, start, Partial::default(), keys, depth, None).map(|(p, _)| p)
}

/// [`scan_tree`] of a text cut short inside a value (of an innermost object's key, nested
/// objects being read as such): the object so far and the key whose value the text stops
/// in (`None` when it stops elsewhere). A value that the cut may have ended early (a number,
/// a word) counts as stopped in.
fn scan_tree_cut(
    text: &[u8],
    from: usize,
    keys: &[ItemKey],
    depth: usize,
    pending: &mut Option<u32>,
) -> Option<Partial> {
    if depth > 32 || text.get(from) != Some(&b'{') {
        return None;
    }
    let start = skip_ws(text, from + 1);
    scan_tree_from(text, start, Partial::default(), keys, depth, Some(pending)).map(|(p, _)| p)
}

/// [`scan_tree`] from `text[i]`, a place between two members of the object (right after its
/// `{` or a `,` and the white space after it) whose members before it are `p`. Also returns
/// the last such place read (an index of `text` and the number of complete members before
/// it, a prefix of the result's), from which a later read of a longer text may go on. With
/// `pending`, the text is cut short as [`scan_tree_cut`] reads it.
fn scan_tree_from(
    text: &[u8],
    mut i: usize,
    mut p: Partial,
    keys: &[ItemKey],
    depth: usize,
    mut pending: Option<&mut Option<u32>>,
) -> Option<(Partial, (usize, usize))> {
    let mut between = (i, p.fixed.len());
    while i < text.len() {
        between = (i, p.fixed.len());
        let (key, end) = string_at(text, i)?;
        let idx = keys.iter().position(|k| k.name == key)? as u32;
        if p.has(idx) {
            return None;
        }
        i = skip_ws(text, end);
        if i == text.len() {
            break;
        }
        if text[i] != b':' {
            return None;
        }
        i = skip_ws(text, i + 1);
        if i == text.len() {
            break;
        }
        let mut v = Vec::new();
        let read = canonical(text, i, &mut v, 1);
        let sub = keys[idx as usize].object.as_deref();
        match (read, pending.as_deref_mut()) {
            (Some(end), cut) if cut.is_none() || end < text.len() => {
                p.fixed.push((idx, v));
                i = skip_ws(text, end);
            }
            (_, Some(cut)) if sub.is_some() && text[i] == b'{' => {
                let inner = scan_tree_cut(text, i, sub?, depth + 1, cut)?;
                p.open = Some((idx, Box::new(inner)));
                return Some((p, between));
            }
            (_, Some(cut)) => {
                *cut = Some(idx);
                return Some((p, between));
            }
            (_, None) => {
                let inner = scan_tree(text, i, sub?, depth + 1)?;
                p.open = Some((idx, Box::new(inner)));
                return Some((p, between));
            }
        }
        if i == text.len() {
            break;
        }
        if text[i] != b',' {
            return None;
        }
        i = skip_ws(text, i + 1);
        if i == text.len() {
            between = (i, p.fixed.len());
        }
    }
    Some((p, between))
}

/// A place between two members of an item object's text (after its `{` or a `,`, and the
/// white space after it) with the complete members before it: a guard reads the item from
/// the last such place the chart still holds, instead of from its `{` (a mask asks the same
/// item at thousands of places, every token that ends a value of it).
#[derive(Clone, Debug)]
pub(crate) struct ScanPoint {
    spec: u32,
    origin: u32,
    /// The set at the place: the item's text before it is `input[origin..at]`.
    pub(super) at: u32,
    fixed: Vec<(u32, Vec<u8>)>,
}

/// An item object read up to the unknown byte of a mask computation's assumed terminal end
/// (into set `s`), for the places after it ([`Chart::item_passes_across`]): valid while the
/// chart is deeper than `s`.
#[derive(Debug)]
pub(crate) struct Across {
    spec: u32,
    origin: u32,
    pub(super) s: u32,
    /// Where the read began (an index of the item's text, a place between members; `None`
    /// when the byte is the item's `{`) and the members before it.
    from: Option<usize>,
    at_from: Partial,
    /// The item before the byte, and the key whose value it stops in (`scan_tree_cut`).
    before: Option<Partial>,
    pending: Option<u32>,
}

/// At most this many places are kept ([`ScanPoint`]); an item has about one per member.
const SCAN_POINTS: usize = 64;

impl ItemObject {
    /// Whether the earlier item `u` (its members) is an object of this branch of the union
    /// (every earlier object when the items are this one object type).
    fn holds<M: Member>(&self, u: &[M]) -> bool {
        let Some(d) = self.member else {
            return true;
        };
        let Some(k) = self.keys.get(d as usize) else {
            return false;
        };
        u.iter()
            .find(|m| m.key() == k.name.as_slice())
            .is_some_and(|m| {
                k.values
                    .as_ref()
                    .is_none_or(|vs| vs.iter().any(|v| v.as_slice() == m.value()))
            })
    }

    /// The index of the key named `name` (decoded).
    fn index(&self, name: &[u8]) -> Option<u32> {
        self.keys
            .iter()
            .position(|k| k.name == name)
            .map(|i| i as u32)
    }

    /// Whether an earlier item `u` (its members) has every member of `fixed`.
    fn agrees<M: Member>(&self, u: &[M], fixed: &[(u32, &[u8])]) -> bool {
        fixed.iter().all(|&(i, v)| {
            let name = self.keys[i as usize].name.as_slice();
            u.iter().any(|m| m.key() == name && m.value() == v)
        })
    }

    /// Whether the item `p` has a completion that no item of `used` equals: its completions
    /// outnumber the earlier items that are completions of it (each of those is one of them,
    /// the items being distinct values of the same closed domain).
    fn alive<M: Member>(&self, p: &Partial, used: &[Vec<M>]) -> bool {
        let n = completions(&self.keys, p);
        if n == 0 {
            return false;
        }
        if n > used.len() as u64 {
            return true;
        }
        let agreeing = used
            .iter()
            .filter(|u| tree_agrees(&self.keys, u, p))
            .count() as u64;
        agreeing < n
    }

    /// `p` with its innermost object changed by `f` (given that object's keys).
    fn edited(
        &self,
        p: &Partial,
        f: impl FnOnce(&mut Partial, &[ItemKey]) -> bool,
    ) -> Option<Partial> {
        let mut q = p.clone();
        let (inner, keys) = q.innermost_mut(&self.keys)?;
        f(inner, keys).then_some(q)
    }

    /// Whether key `i` of the innermost object may be written next in item `p`.
    fn key_ok<M: Member>(&self, i: u32, p: &Partial, used: &[Vec<M>]) -> bool {
        let Some((inner, keys)) = p.innermost(&self.keys) else {
            return false;
        };
        let Some(k) = keys.get(i as usize) else {
            return false;
        };
        if inner.has(i) {
            return false;
        }
        match (&k.values, k.words, &k.object) {
            (Some(vs), _, _) => vs.iter().any(|v| self.value_ok(i, v, p, used)),
            // Some value of the string is unused with the members so far: the values of key
            // `i` that every completion uses up are fewer than all of them (strings of
            // `words` are keys of the item itself, never of a nested object).
            (None, Some(n), _) => {
                if p.open.is_some() {
                    return false;
                }
                let fixed: Vec<(u32, &[u8])> =
                    p.fixed.iter().map(|(j, v)| (*j, v.as_slice())).collect();
                match self.full_values(i, &fixed, used) {
                    None => true,
                    Some(full) => (full.len() as u64) < n,
                }
            }
            // Values of other types too: infinitely many completions while one is written
            // (the nested object's `{` is checked on its own).
            (None, None, Some(_)) if k.more => true,
            // A nested object: the item with it begun (`{` read) is alive.
            (None, None, Some(_)) => self.open_ok(i, p, used),
            // Infinitely many completions while the value is written.
            (None, None, None) => true,
        }
    }

    /// The decoded string values `c` of key `i` such that every completion of the object
    /// `fixed` with `i: c` is an item of `used` (sorted, distinct); `None` when there are
    /// none because those completions outnumber the earlier items (or are infinitely many).
    /// Each earlier item that agrees with `fixed` is one such completion, and there are as
    /// many completions for each `c` as the other unwritten keys give (`Π (values +
    /// optional)`), so `c` is used up when that many agreeing items have it.
    fn full_values<M: Member>(
        &self,
        i: u32,
        fixed: &[(u32, &[u8])],
        used: &[Vec<M>],
    ) -> Option<Vec<Vec<u8>>> {
        let mut per: u64 = 1;
        for (j, k) in self.keys.iter().enumerate() {
            if j as u32 == i || fixed.iter().any(|&(f, _)| f as usize == j) {
                continue;
            }
            per = per.saturating_mul(choices(k));
        }
        if per == 0 || per > used.len() as u64 {
            return None;
        }
        let name = self.keys.get(i as usize)?.name.as_slice();
        let mut values: Vec<&[u8]> = used
            .iter()
            .filter(|u| self.agrees(u, fixed))
            .filter_map(|u| u.iter().find(|m| m.key() == name).map(|m| m.value()))
            .filter_map(|w| (w.first() == Some(&b's')).then(|| w.get(9..)).flatten())
            .collect();
        values.sort_unstable();
        let mut full = Vec::new();
        let mut at = 0;
        while at < values.len() {
            let run = values[at..]
                .iter()
                .take_while(|&&v| v == values[at])
                .count();
            if run as u64 >= per {
                full.push(values[at].to_vec());
            }
            at += run;
        }
        Some(full)
    }

    /// [`ItemObject::alive`] of item `p` changed by `edit` (of key `i` of its innermost
    /// object) when the count of completions alone decides it: `false` when key `i` is
    /// written already or the changed item has no completion, `true` when it has more than
    /// there are earlier items; `None` when the earlier items must be compared.
    fn edit_decided<M: Member>(
        &self,
        i: u32,
        edit: Edit,
        p: &Partial,
        used: &[Vec<M>],
    ) -> Option<bool> {
        let Some((inner, _)) = p.innermost(&self.keys) else {
            return Some(false);
        };
        if inner.has(i) {
            return Some(false);
        }
        match completions_edited(&self.keys, p, Some(edit)) {
            0 => Some(false),
            n if n > used.len() as u64 => Some(true),
            _ => None,
        }
    }

    /// Whether the nested object of key `i` of the innermost object of item `p` may begin:
    /// the item with it begun (`{` read) is alive.
    fn open_ok<M: Member>(&self, i: u32, p: &Partial, used: &[Vec<M>]) -> bool {
        if let Some(pass) = self.edit_decided(i, Edit::Open(i), p, used) {
            return pass;
        }
        self.edited(p, |o, _| {
            let free = !o.has(i);
            o.open = Some((i, Box::default()));
            free
        })
        .is_some_and(|q| self.alive(&q, used))
    }

    /// Whether key `i` of the innermost object of item `p` may take value `v` next.
    fn value_ok<M: Member>(&self, i: u32, v: &[u8], p: &Partial, used: &[Vec<M>]) -> bool {
        if let Some(pass) = self.edit_decided(i, Edit::Value(i), p, used) {
            return pass;
        }
        self.edited(p, |o, _| {
            let free = !o.has(i);
            o.fixed.push((i, v.to_vec()));
            free
        })
        .is_some_and(|q| self.alive(&q, used))
    }

    /// The `anyOf` of `required` lists and the `dependentRequired` of the innermost object of
    /// item `p`.
    #[allow(clippy::type_complexity)]
    fn innermost_ends<'a>(
        &'a self,
        p: &Partial,
    ) -> Option<(&'a [Vec<u32>], &'a [(u32, Vec<u32>)])> {
        let (mut keys, mut any, mut q) = (&self.keys[..], &self.any_required[..], p);
        let mut dependent = &self.dependent[..];
        while let Some((c, sub)) = &q.open {
            let k = keys.get(*c as usize)?;
            any = &k.object_any;
            dependent = &k.object_dependent;
            keys = k.object.as_deref()?;
            q = sub;
        }
        Some((any, dependent))
    }

    /// Whether the innermost object of item `p` may end here: every required key of it is
    /// written, so is every key of one of its `anyOf` of `required` lists (when it has
    /// them), and the item is then alive (for the item itself: no earlier item equals it).
    fn end_ok<M: Member>(&self, p: &Partial, used: &[Vec<M>]) -> bool {
        let Some((inner, keys)) = p.innermost(&self.keys) else {
            return false;
        };
        let complete = keys
            .iter()
            .enumerate()
            .all(|(i, k)| !k.required || inner.has(i as u32));
        let Some((any, dependent)) = self.innermost_ends(p) else {
            return false;
        };
        let some_list = any.is_empty() || any.iter().any(|l| l.iter().all(|&i| inner.has(i)));
        let dependencies = dependent
            .iter()
            .all(|(t, l)| !inner.has(*t) || l.iter().all(|&i| inner.has(i)));
        if !complete || !some_list || !dependencies {
            return false;
        }
        if p.open.is_none() {
            let fixed: Vec<(u32, &[u8])> =
                p.fixed.iter().map(|(j, v)| (*j, v.as_slice())).collect();
            return !used
                .iter()
                .any(|u| u.len() == fixed.len() && self.agrees(u, &fixed));
        }
        let mut q = p.clone();
        q.close_innermost(&self.keys) && self.alive(&q, used)
    }

    /// The answer of `check` for the item `p` against the earlier items `used`.
    fn passes<M: Member>(&self, check: ItemCheck, p: &Partial, used: &[Vec<M>]) -> bool {
        match check {
            ItemCheck::Start
            | ItemCheck::After
            | ItemCheck::AfterString(_)
            | ItemCheck::Closing(_) => self.alive(p, used),
            ItemCheck::Key(i) => self.key_ok(i, p, used),
            ItemCheck::Open(i) => self.open_ok(i, p, used),
            ItemCheck::Value(i, j) => {
                let Some(v) = p
                    .innermost(&self.keys)
                    .and_then(|(_, keys)| keys.get(i as usize))
                    .and_then(|k| k.values.as_ref().unwrap_or(&k.pinned).get(j as usize))
                else {
                    return false;
                };
                self.value_ok(i, v, p, used)
            }
            ItemCheck::More => {
                let n = p.innermost(&self.keys).map_or(0, |(_, keys)| keys.len());
                (0..n as u32).any(|i| self.key_ok(i, p, used))
            }
            ItemCheck::End => self.end_ok(p, used),
        }
    }
}

/// The members of one item and the earlier items of its array, as read at one place: the
/// guards of a place ask for them once per key, and a mask reads the same places again.
#[derive(Clone, Debug)]
pub(crate) struct ItemMemo {
    spec: u32,
    origin: u32,
    pub(super) at: u32,
    start: bool,
    /// The item as read so far.
    item: Partial,
    /// The earlier items' members: decoded key and canonical value.
    used: Arc<Used>,
}

/// Earlier items' members: decoded key and canonical value.
type Used = Vec<Vec<(Vec<u8>, Vec<u8>)>>;

impl ItemMemo {
    fn passes(&self, spec: &ItemObject, check: ItemCheck) -> bool {
        spec.passes(check, &self.item, &self.used)
    }
}

/// A member of an earlier item: its decoded key and canonical value, borrowed from the
/// item's canonical text or kept.
trait Member {
    fn key(&self) -> &[u8];
    fn value(&self) -> &[u8];
}

impl Member for (&[u8], &[u8]) {
    fn key(&self) -> &[u8] {
        self.0
    }
    fn value(&self) -> &[u8] {
        self.1
    }
}

impl Member for (Vec<u8>, Vec<u8>) {
    fn key(&self) -> &[u8] {
        &self.0
    }
    fn value(&self) -> &[u8] {
        &self.1
    }
}

/// The arrays of the item object whose `{` was read at set `origin`, and what their earlier
/// items are: they depend on the sets up to `origin` only, so every place of the item reads
/// them from here (valid while the chart is deeper than `origin`).
#[derive(Clone, Debug)]
pub(crate) struct ItemArrays {
    spec: u32,
    pub(super) origin: u32,
    /// Per array the item belongs to (the set of its `[`), its earlier items.
    arrays: Vec<(u32, EarlierItems)>,
}

/// The earlier items of one array, for [`ItemArrays`].
#[derive(Clone, Debug)]
enum EarlierItems {
    /// Not readable: the array is read past.
    Unread,
    /// Some earlier item is not an object's text (which the grammar never lets happen).
    Bad,
    /// The earlier objects of the item's own branch.
    Objects(Arc<Used>),
}

impl Chart {
    /// Whether [`Guard::Item`] (`spec`, `check`) passes at set `at`, for the item object whose
    /// `{` was read at set `origin` (for [`ItemCheck::Start`], the array whose `[` was).
    pub(super) fn item_object_passes(
        &mut self,
        g: &Grammar,
        spec_id: u32,
        check: ItemCheck,
        origin: u32,
        at: u32,
    ) -> bool {
        if let ItemCheck::Closing(w) = check {
            // The items whose `{` waits for the member's value at the array's `[`.
            return self
                .waiting_origins(g, origin, w)
                .into_iter()
                .any(|o| self.item_passes_at(g, spec_id, check, o, at));
        }
        self.item_passes_at(g, spec_id, check, origin, at)
    }

    /// The members of the earlier items `values` (canonical) that are objects of `spec`'s
    /// branch; `None` when one is not an object's text (which the grammar never lets happen).
    fn earlier_objects(&mut self, spec: &ItemObject, values: &[Vec<u8>]) -> Option<Used> {
        let mut used = Vec::with_capacity(values.len());
        // Earlier items of other types (an item union's strings, numbers, ...) never equal an
        // object: they are read past.
        for v in values.iter().filter(|v| v.first() == Some(&b'o')) {
            self.work += v.len() as u64;
            let m = canonical_members(v)?;
            // An object of another branch of a union never equals one of these.
            if spec.holds(&m) {
                used.push(
                    m.into_iter()
                        .map(|(k, w)| (k.to_vec(), w.to_vec()))
                        .collect(),
                );
            }
        }
        Some(used)
    }

    /// The arrays of item object `spec_id` whose `{` was read at set `origin`, with their
    /// earlier items ([`ItemArrays`]), read once per item, for a place at set `at`. `None`,
    /// having read nothing, where the byte into the synthetic set (unknown at a mask
    /// computation's assumed terminal end) lies after an array's `[` and by `at`: a text
    /// across it is read again, so the place is marked uncertain.
    fn item_arrays_read(
        &mut self,
        g: &Grammar,
        spec_id: u32,
        origin: u32,
        at: u32,
        upto: u32,
    ) -> Option<Arc<ItemArrays>> {
        let synthetic = self.guard.synthetic;
        let across = |array: u32| synthetic.is_some_and(|s| array < s && s <= upto);
        if let Some(a) = self
            .guard
            .item_arrays
            .as_ref()
            .filter(|a| (a.spec, a.origin) == (spec_id, origin))
        {
            if a.arrays.iter().any(|&(array, _)| across(array)) {
                self.guard.uncertain = true;
                return None;
            }
            return Some(Arc::clone(a));
        }
        let spec = &g.item_objects[spec_id as usize];
        let arrays = self.item_arrays(g, spec, origin);
        if arrays.iter().any(|&a| across(a)) {
            self.guard.uncertain = true;
            return None;
        }
        let mut read = Vec::with_capacity(arrays.len());
        for array in arrays {
            let earlier = match self.earlier(Guard::UniqueValues, array, origin) {
                None => EarlierItems::Unread,
                Some(values) => match self.earlier_objects(spec, &values) {
                    Some(used) => EarlierItems::Objects(Arc::new(used)),
                    None => EarlierItems::Bad,
                },
            };
            read.push((array, earlier));
        }
        let a = Arc::new(ItemArrays {
            spec: spec_id,
            origin,
            arrays: read,
        });
        // Kept once set `origin` is complete (it is from the item's first place on).
        if at > origin {
            self.guard.item_arrays = Some(Arc::clone(&a));
        }
        Some(a)
    }

    /// [`Chart::item_object_passes`] for the item object whose `{` was read at set `origin`
    /// (for [`ItemCheck::Start`], the array whose `[` was); for [`ItemCheck::Closing`], its
    /// text read with the `]` to come.
    fn item_passes_at(
        &mut self,
        g: &Grammar,
        spec_id: u32,
        check: ItemCheck,
        origin: u32,
        at: u32,
    ) -> bool {
        let Some(spec) = g.item_objects.get(spec_id as usize) else {
            return false;
        };
        let closing = matches!(check, ItemCheck::Closing(_));
        if check == ItemCheck::Start {
            return self.empty_item_passes(spec_id, spec, check, origin, at);
        }
        // The earlier items end at the item's `{`: they are read if the unknown byte is not
        // among them.
        let Some(read) = self.item_arrays_read(g, spec_id, origin, at, origin) else {
            // Read again with real bytes.
            return true;
        };
        if let Some(s) = self.guard.synthetic.filter(|&s| origin < s && s <= at) {
            return self.item_passes_across(spec_id, spec, check, origin, at, s, &read);
        }
        let single = read.arrays.len() == 1 && !closing;
        if let Some(m) = &self.guard.item_memo {
            if single && (m.spec, m.origin, m.at, m.start) == (spec_id, origin, at, false) {
                return m.passes(spec, check);
            }
        }
        let Some(item) = self.scan_item(spec_id, &spec.keys, origin, at, closing) else {
            return false;
        };
        for (_, earlier) in &read.arrays {
            let used = match earlier {
                EarlierItems::Unread => continue,
                EarlierItems::Bad => return false,
                EarlierItems::Objects(used) => used,
            };
            // Each earlier item is read once per item; its text is charged once per place.
            self.work += used.len() as u64;
            if single {
                let memo = ItemMemo {
                    spec: spec_id,
                    origin,
                    at,
                    start: false,
                    item,
                    used: Arc::clone(used),
                };
                let pass = memo.passes(spec, check);
                self.guard.item_memo = Some(memo);
                return pass;
            }
            if spec.passes(check, &item, used) {
                return true;
            }
        }
        false
    }

    /// Where a read of the item object `spec_id` whose `{` was read at set `origin` may
    /// begin, for a text up to set `upto`: the last place between its members kept by an
    /// earlier read ([`ScanPoint`]) by then, as an index of the item's text with the members
    /// before it, or right after its `{`.
    fn item_resume(&self, spec_id: u32, origin: u32, upto: u32) -> Option<(usize, Partial)> {
        let kept = self
            .guard
            .item_points
            .iter()
            .rev()
            .find(|q| (q.spec, q.origin) == (spec_id, origin) && q.at <= upto);
        match kept {
            Some(q) => Some((
                (q.at - origin) as usize,
                Partial {
                    fixed: q.fixed.clone(),
                    open: None,
                },
            )),
            None => {
                let text = self.input.get(origin as usize..upto as usize)?;
                (text.first() == Some(&b'{')).then(|| (skip_ws(text, 1), Partial::default()))
            }
        }
    }

    /// The item object of `keys` whose `{` was read at set `origin`, as read up to set `at`
    /// (with the `]` to come when `closing`, [`ItemCheck::Closing`]): [`scan_tree`], from the
    /// last place between its members that an earlier read kept ([`ScanPoint`]) and keeping
    /// the last one this read passes.
    fn scan_item(
        &mut self,
        spec_id: u32,
        keys: &[ItemKey],
        origin: u32,
        at: u32,
        closing: bool,
    ) -> Option<Partial> {
        let text = self.input.get(origin as usize..at as usize)?;
        let (from, p) = self.item_resume(spec_id, origin, at)?;
        self.work += (text.len() - from) as u64;
        let (item, (place, members)) = match closing {
            true => scan_tree_from(&[text, b"]"].concat(), from, p, keys, 0, None)?,
            false => scan_tree_from(text, from, p, keys, 0, None)?,
        };
        // A place after the `]` to come is not in the chart's text.
        if place > from && place <= text.len() {
            // Kept in order of place, so that the chart forgets them from the end.
            let point = ScanPoint {
                spec: spec_id,
                origin,
                at: origin + place as u32,
                fixed: item.fixed[..members].to_vec(),
            };
            let points = &mut self.guard.item_points;
            let k = points.partition_point(|q| q.at <= point.at);
            let known = points[..k]
                .iter()
                .rev()
                .take_while(|q| q.at == point.at)
                .any(|q| (q.spec, q.origin) == (spec_id, origin));
            if !known {
                points.insert(k, point);
                if points.len() > SCAN_POINTS {
                    points.remove(0);
                }
            }
        }
        Some(item)
    }

    /// [`Chart::item_passes_at`] where the item's own text holds the unknown byte into the
    /// synthetic set `s` (the last byte of the terminal a mask computation assumes ends there;
    /// the earlier items, before the item's `{`, are known). The place is exact, without
    /// reading it again with real bytes, where what the byte stands for cannot change the
    /// answer:
    /// - right after the terminal (`at == s`) when it ends a value (`After`) and the count of
    ///   completions alone decides whether the item with that value is alive
    ///   ([`ItemObject::edit_decided`]): which value it is does not matter;
    /// - below the places where the terminal ends (`GuardState::exit`, their trie paths
    ///   known), reading the text with a place's path for the byte: with one place, or with
    ///   several when the text before the byte stops inside a value (so the places' paths
    ///   differ only in that value) and no earlier item is there to compare values with.
    ///
    /// Elsewhere the place is marked uncertain (read again with real bytes) and passes.
    #[allow(clippy::too_many_arguments)]
    fn item_passes_across(
        &mut self,
        spec_id: u32,
        spec: &ItemObject,
        check: ItemCheck,
        origin: u32,
        at: u32,
        s: u32,
        read: &ItemArrays,
    ) -> bool {
        let mut compared = false;
        for (_, earlier) in &read.arrays {
            match earlier {
                EarlierItems::Unread => {}
                EarlierItems::Bad => return false,
                EarlierItems::Objects(used) => compared |= !used.is_empty(),
            }
        }
        let objects = || {
            read.arrays.iter().filter_map(|(_, e)| match e {
                EarlierItems::Objects(used) => Some(&used[..]),
                _ => None,
            })
        };
        // The item before the unknown byte, read once per place where the terminal is
        // assumed to end: from the last place between members, what it stops in.
        let kept = self
            .guard
            .across
            .as_ref()
            .filter(|a| (a.spec, a.origin, a.s) == (spec_id, origin, s))
            .map(Arc::clone);
        let across = match kept {
            Some(a) => a,
            None => {
                let Some(known) = self.input.get(origin as usize..s as usize - 1) else {
                    return false;
                };
                let mut pending = None;
                // With no `{` before the byte (the byte is the `{`), the text is read from
                // its start.
                let (from, at_from, before) = match self.item_resume(spec_id, origin, s - 1) {
                    Some((from, p)) => {
                        let before = scan_tree_from(
                            known,
                            from,
                            p.clone(),
                            &spec.keys,
                            0,
                            Some(&mut pending),
                        )
                        .map(|(q, _)| q);
                        (Some(from), p, before)
                    }
                    None => (None, Partial::default(), None),
                };
                self.work += (known.len() - from.unwrap_or(0)) as u64;
                let a = Arc::new(Across {
                    spec: spec_id,
                    origin,
                    s,
                    from,
                    at_from,
                    before,
                    pending,
                });
                self.guard.across = Some(Arc::clone(&a));
                a
            }
        };
        let (before, pending) = (&across.before, across.pending);
        let paths = self.guard.exit_paths();
        if let (Some(paths), Some(after)) = (paths, self.input.get(s as usize..at as usize)) {
            let one = match paths {
                [path] => Some(path),
                [path, ..] if pending.is_some() && !compared => Some(path),
                _ => None,
            };
            if let Some(path) = one {
                // The text from the last place between members before the byte, with the
                // place's path for it.
                let from = origin as usize + across.from.unwrap_or(0);
                let known = &self.input[from..s as usize - 1];
                let mut text = [known, path, after].concat();
                if matches!(check, ItemCheck::Closing(_)) {
                    text.push(b']');
                }
                self.work += text.len() as u64;
                let item = match across.from {
                    Some(_) => {
                        scan_tree_from(&text, 0, across.at_from.clone(), &spec.keys, 0, None)
                            .map(|(q, _)| q)
                    }
                    None => scan_tree(&text, 0, &spec.keys, 0),
                };
                let Some(item) = item else {
                    return false;
                };
                return objects().any(|used| spec.passes(check, &item, used));
            }
        } else if let (true, Some(p), Some(i)) = (at == s, before, pending) {
            if !compared {
                // The value of key `i` ends with the byte; no earlier item compares values.
                let Some(q) = spec.edited(p, |o, _| {
                    let free = !o.has(i);
                    o.fixed.push((i, Vec::new()));
                    free
                }) else {
                    return false;
                };
                let none: &[Vec<(Vec<u8>, Vec<u8>)>] = &[];
                return objects().next().is_some() && spec.passes(check, &q, none);
            }
            if matches!(check, ItemCheck::After | ItemCheck::AfterString(_)) {
                let mut undecided = false;
                for used in objects() {
                    match spec.edit_decided(i, Edit::Value(i), p, used) {
                        Some(true) => return true,
                        Some(false) => {}
                        None => undecided = true,
                    }
                }
                if !undecided {
                    return false;
                }
            }
        }
        self.guard.uncertain = true;
        true
    }

    /// [`Chart::item_passes_at`] for [`ItemCheck::Start`] of the array whose `[` was read at
    /// set `array`: whether the empty object is alive against the values before set `at`.
    fn empty_item_passes(
        &mut self,
        spec_id: u32,
        spec: &ItemObject,
        check: ItemCheck,
        array: u32,
        at: u32,
    ) -> bool {
        if let Some(s) = self.guard.synthetic {
            // The byte into set `s` is unknown: a text across it is read again.
            if array < s && s <= at {
                self.guard.uncertain = true;
                return true;
            }
        }
        if let Some(m) = &self.guard.item_memo {
            if (m.spec, m.origin, m.at, m.start) == (spec_id, array, at, true) {
                return m.passes(spec, check);
            }
        }
        let Some(values) = self.finite_used(array, at, false) else {
            return false;
        };
        let Some(used) = self.earlier_objects(spec, &values) else {
            return false;
        };
        let memo = ItemMemo {
            spec: spec_id,
            origin: array,
            at,
            start: true,
            item: Partial::default(),
            used: Arc::new(used),
        };
        let pass = memo.passes(spec, check);
        self.guard.item_memo = Some(memo);
        pass
    }
}

/// What a string value of an item object in flight is checked against: per array the item
/// belongs to, the decoded values of the key that earlier items use up ([`ItemObject::
/// full_values`]) and the string read so far.
struct InFlight {
    /// Per array, the used-up values (sorted); an array where none is used up is left out.
    full: Vec<Vec<Vec<u8>>>,
    /// The decoder after the string's text so far, and the decoded text.
    dec: Decoder,
    decoded: Vec<u8>,
}

impl Chart {
    /// The arrays (sets of their `[`) that item object `spec` whose `{` was read at set
    /// `origin` belongs to: the origins of the items waiting for it.
    fn item_arrays(&self, g: &Grammar, spec: &ItemObject, origin: u32) -> Vec<u32> {
        self.waiting_origins(g, origin, spec.item)
    }

    /// Reads the item object whose `{` was read at set `origin`, up to `end` (inside the
    /// string value of key `key`), and the earlier items of each of its `arrays`. `None`
    /// when the text is not such an object (which the grammar never lets happen).
    fn in_flight(
        &mut self,
        spec: &ItemObject,
        key: u32,
        origin: u32,
        end: usize,
        arrays: &ItemArrays,
    ) -> Option<InFlight> {
        self.work += (end - origin as usize) as u64;
        let (members, name, at) = read_partial(self.input.get(origin as usize..end)?)?;
        if spec.index(&name) != Some(key) {
            return None;
        }
        let mut fixed: Vec<(u32, Vec<u8>)> = Vec::with_capacity(members.len());
        for (k, v) in members {
            match spec.index(&k) {
                Some(i) if i != key && !fixed.iter().any(|&(j, _)| j == i) => fixed.push((i, v)),
                _ => return None,
            }
        }
        let fixed: Vec<(u32, &[u8])> = fixed.iter().map(|(i, v)| (*i, v.as_slice())).collect();
        let mut full = Vec::new();
        for (_, earlier) in &arrays.arrays {
            let used = match earlier {
                EarlierItems::Unread => continue,
                EarlierItems::Bad => return None,
                EarlierItems::Objects(used) => used,
            };
            self.work += used.len() as u64;
            if let Some(f) = spec.full_values(key, &fixed, used) {
                if !f.is_empty() {
                    full.push(f);
                }
            }
        }
        let mut dec = Decoder::new();
        let mut decoded = Vec::new();
        for &b in &self.input[origin as usize + at..end] {
            dec.feed(b, &mut decoded);
        }
        Some(InFlight { full, dec, decoded })
    }

    /// Whether the string value of key `key` of item object `spec_id` (terminal `t`, in
    /// state `st` with finitely many completions after the byte just read), in the object
    /// whose `{` was read at set `origin`, can still end with a value that leaves the object
    /// completable to one no earlier item of its array equals. At a mask computation's
    /// assumed terminal end, an array whose earlier items would be read across its unknown
    /// byte marks the place uncertain (read again with real bytes) and passes.
    pub(super) fn item_string_alive(
        &mut self,
        g: &Grammar,
        spec_id: u32,
        key: u32,
        t: u32,
        origin: u32,
        st: u32,
    ) -> bool {
        let Some(spec) = g.item_objects.get(spec_id as usize) else {
            return false;
        };
        let end = self.input.len();
        let Some(arrays) = self.item_arrays_read(g, spec_id, origin, end as u32, end as u32) else {
            // Read again with real bytes.
            return true;
        };
        let Some(f) = self.in_flight(spec, key, origin, end, &arrays) else {
            return false;
        };
        if f.full.len() < arrays.arrays.len() {
            // Some array uses up no value of the key.
            return true;
        }
        let d = Arc::clone(g.dfa(t));
        f.full.iter().any(|used| {
            let mut decoded = f.decoded.clone();
            self.some_unused(&d, st, f.dec, &mut decoded, used, g.max_work)
        })
    }

    /// The trie nodes (with their bytes) where the string value of key `key` of item object
    /// `spec_id` in flight (terminal `t` in state `st`, its object's `{` read at set
    /// `origin`) would reach a state where [`Chart::item_string_alive`] fails, or end with a
    /// used-up value: read again with real bytes.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn item_string_q_nodes(
        &mut self,
        g: &Grammar,
        vocab: &TokenVocab,
        spec_id: u32,
        key: u32,
        t: u32,
        origin: u32,
        st: u32,
    ) -> Vec<(usize, Vec<u8>)> {
        let Some(spec) = g.item_objects.get(spec_id as usize) else {
            return Vec::new();
        };
        let Some(fin) = g.string_finite.get(t as usize).and_then(Option::as_ref) else {
            return Vec::new();
        };
        let end = self.input.len();
        // Asked with real bytes only (no synthetic set): the arrays are read.
        let Some(arrays) = self.item_arrays_read(g, spec_id, origin, end as u32, end as u32) else {
            return Vec::new();
        };
        let Some(f) = self.in_flight(spec, key, origin, end, &arrays) else {
            return Vec::new();
        };
        if f.full.len() < arrays.arrays.len()
            || f.dec.mode == Mode::Closed
            || f.dec.mode == Mode::Bad
        {
            return Vec::new();
        }
        let mut out = Vec::new();
        for used in &f.full {
            let finite = Some((Arc::clone(g.dfa(t)), Arc::clone(fin), g.max_work));
            self.spelling_walk(vocab, used, f.dec, f.decoded.clone(), finite, st, &mut out);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::unique::canonical_value;
    use super::*;

    fn canon(text: &str) -> Vec<u8> {
        canonical_value(text.as_bytes()).unwrap()
    }

    /// `{"a": boolean, "s": string}`, `a` required.
    fn spec() -> ItemObject {
        ItemObject {
            keys: vec![
                ItemKey {
                    name: b"a".to_vec(),
                    required: true,
                    values: Some(vec![canon("true"), canon("false")]),
                    words: None,
                    object: None,
                    more: false,
                    pinned: Vec::new(),
                    object_any: Vec::new(),
                    object_dependent: Vec::new(),
                },
                ItemKey {
                    name: b"s".to_vec(),
                    required: false,
                    values: None,
                    words: None,
                    object: None,
                    more: false,
                    pinned: Vec::new(),
                    object_any: Vec::new(),
                    object_dependent: Vec::new(),
                },
            ],
            item: 0,
            member: None,
            any_required: Vec::new(),
            dependent: Vec::new(),
        }
    }

    #[test]
    fn canonical_members_read_back_every_kind_of_value() {
        let c = canon(r#"{"b": [1, "x", null], "a": {"k": 2.50}, "c": -0, "d": true}"#);
        let m = canonical_members(&c).unwrap();
        let keys: Vec<&[u8]> = m.iter().map(|&(k, _)| k).collect();
        assert_eq!(keys, [&b"a"[..], b"b", b"c", b"d"]);
        assert_eq!(m[0].1, canon(r#"{"k": 2.5}"#).as_slice());
        assert_eq!(m[1].1, canon(r#"[1, "x", null]"#).as_slice());
        assert_eq!(m[2].1, canon("0").as_slice());
        assert_eq!(m[3].1, canon("true").as_slice());
        assert_eq!(canonical_members(&canon("[1]")), None);
    }

    #[test]
    fn scan_members_stops_inside_a_member() {
        let (m, stop) = scan_members(br#"{ "a" : true , "\u0073": "x" , "a"  :  "#).unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!(m[1].0, b"s");
        assert_eq!(m[1].1, canon(r#""x""#));
        assert!(matches!(stop, Stop::BeforeValue(k, _) if k == b"a"));
        assert!(scan_members(b"[").is_none());
    }

    /// An item of members `fixed` (no nested object being written).
    fn flat(fixed: &[(u32, &[u8])]) -> Partial {
        Partial {
            fixed: fixed.iter().map(|&(i, v)| (i, v.to_vec())).collect(),
            open: None,
        }
    }

    #[test]
    fn a_prefix_is_alive_while_some_completion_is_unused() {
        let s = spec();
        let t = canon("true");
        let f = canon("false");
        let x = canon(r#""x""#);
        let objs = [
            canon(r#"{"a": true, "s": "x"}"#),
            canon(r#"{"a": false, "s": "x"}"#),
            canon(r#"{"a": true}"#),
        ];
        let used: Vec<_> = objs.iter().map(|c| canonical_members(c).unwrap()).collect();
        // `s` unwritten: infinitely many completions.
        assert!(s.alive(&flat(&[(0, &t)]), &used));
        // `s` fixed to "x": both values of `a` used with it.
        assert!(!s.alive(&flat(&[(1, &x)]), &used));
        assert!(!s.key_ok(0, &flat(&[(1, &x)]), &used));
        assert!(!s.passes(ItemCheck::More, &flat(&[(1, &x)]), &used));
        // `{"a": true}` is used, `{"a": false}` is not.
        assert!(!s.end_ok(&flat(&[(0, &t)]), &used));
        assert!(s.end_ok(&flat(&[(0, &f)]), &used));
        // `{"s": "x"}` lacks the required `a`.
        assert!(!s.end_ok(&flat(&[(1, &x)]), &used));
        assert!(s.passes(ItemCheck::Value(0, 1), &flat(&[]), &used));
    }

    /// `{"s": string, "m": {"t": string, "b": boolean}}`, `s` and `m` required, `t` required.
    fn nested_spec() -> ItemObject {
        let mut s = spec();
        s.keys[0].required = true;
        s.keys[0].name = b"s".to_vec();
        s.keys[0].values = None;
        s.keys[1] = ItemKey {
            name: b"m".to_vec(),
            required: true,
            values: None,
            words: None,
            more: false,
            pinned: Vec::new(),
            object_any: Vec::new(),
            object_dependent: Vec::new(),
            object: Some(vec![
                ItemKey {
                    name: b"t".to_vec(),
                    required: true,
                    values: None,
                    words: None,
                    object: None,
                    more: false,
                    pinned: Vec::new(),
                    object_any: Vec::new(),
                    object_dependent: Vec::new(),
                },
                ItemKey {
                    name: b"b".to_vec(),
                    required: false,
                    values: Some(vec![canon("true"), canon("false")]),
                    words: None,
                    object: None,
                    more: false,
                    pinned: Vec::new(),
                    object_any: Vec::new(),
                    object_dependent: Vec::new(),
                },
            ]),
        };
        s
    }

    /// Counting an edited item without building it gives the count of the item built.
    #[test]
    fn edited_counts_equal_the_counts_of_the_edited_items() {
        let s = nested_spec();
        for text in [
            &br#"{"#[..],
            br#"{"s": "x", "#,
            br#"{"m": {"#,
            br#"{"s": "x", "m": {"t": "y", "#,
            br#"{"m": { "b": true, "#,
        ] {
            let p = scan_tree(text, 0, &s.keys, 0).unwrap();
            let (inner, keys) = p.innermost(&s.keys).unwrap();
            for i in (0..keys.len() as u32).filter(|&i| !inner.has(i)) {
                let open = keys[i as usize].object.is_some();
                for edit in [Edit::Value(i), Edit::Open(i)] {
                    if matches!(edit, Edit::Open(_)) && !open {
                        continue;
                    }
                    let q = s
                        .edited(&p, |o, _| {
                            match edit {
                                Edit::Value(i) => o.fixed.push((i, canon("true"))),
                                Edit::Open(i) => o.open = Some((i, Box::default())),
                            }
                            true
                        })
                        .unwrap();
                    let text = String::from_utf8_lossy(text);
                    assert_eq!(
                        completions_edited(&s.keys, &p, Some(edit)),
                        completions(&s.keys, &q),
                        "{text} key {i}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_nested_object_is_read_and_counted() {
        let s = nested_spec();
        let text = br#"{"s": "x", "m": { "b": true, "t": "y" "#;
        let p = scan_tree(text, 0, &s.keys, 0).unwrap();
        assert_eq!(p.fixed, vec![(0, canon(r#""x""#))]);
        let (inner, keys) = p.innermost(&s.keys).unwrap();
        assert_eq!(keys.len(), 2);
        assert_eq!(inner.fixed, vec![(1, canon("true")), (0, canon(r#""y""#))]);
        // Every key of the item written or being written, the nested one full: one
        // completion, `{"s": "x", "m": {"b": true, "t": "y"}}`.
        assert_eq!(completions(&s.keys, &p), 1);
        let objs = [
            canon(r#"{"m": {"t": "y", "b": true}, "s": "x"}"#),
            canon(r#"{"s": "x", "m": {"t": "y", "b": false}}"#),
        ];
        let used: Vec<_> = objs.iter().map(|c| canonical_members(c).unwrap()).collect();
        assert!(!s.alive(&p, &used));
        assert!(!s.end_ok(&p, &used));
        assert!(s.alive(&p, &used[1..]));
        assert!(s.end_ok(&p, &used[1..]));
        // Before `"b"`: `{"t": "y"}` is free, and `b: false` is used, `b: true` not (of the
        // first item alone).
        let p = scan_tree(br#"{"s": "x", "m": {"t": "y", "#, 0, &s.keys, 0).unwrap();
        assert_eq!(completions(&s.keys, &p), 3);
        assert!(s.passes(ItemCheck::More, &p, &used[..1]));
        assert!(s.passes(ItemCheck::Key(1), &p, &used[..1]));
        assert!(!s.passes(ItemCheck::Value(1, 0), &p, &used[..1]));
        assert!(s.passes(ItemCheck::Value(1, 1), &p, &used[..1]));
        // With both used, only `{"t": "y"}` is left: the end, not `b`.
        assert!(!s.passes(ItemCheck::Key(1), &p, &used));
        assert!(!s.passes(ItemCheck::More, &p, &used));
        assert!(s.passes(ItemCheck::End, &p, &used));
        // Before the nested object, `s` written: infinitely many `t`.
        let p = scan_tree(br#"{"s": "x", "#, 0, &s.keys, 0).unwrap();
        assert!(s.passes(ItemCheck::Key(1), &p, &used));
        // A key of the item inside the nested object: not a member of it.
        assert!(scan_tree(br#"{"m": {"s": "x", "#, 0, &s.keys, 0).is_none());
    }
}
