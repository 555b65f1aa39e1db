//! References: `$ref`s through `$id` and `$anchor` rewritten into JSON pointers from the root
//! (RFC 3986 resolution), and JSON pointers looked up in the document.

use std::collections::HashMap;
use std::rc::Rc;

use serde_json::{Map, Value};

use super::schema::{invalid, unsupported};
use super::Draft;
use crate::Error;

/// The base URI of a schema without `$id`: a name no reference outside the document can mean.
const DEFAULT_BASE: &str = "https://nextok.invalid/schema.json";

/// Keywords whose values are data, not schemas: identifiers inside them mean nothing.
const DATA_KEYWORDS: &[&str] = &["const", "enum", "default", "examples"];

/// Keywords that only drafts 2019-09 and later define.
const MODERN: &[&str] = &[
    "$defs",
    "$anchor",
    "$dynamicAnchor",
    "$recursiveAnchor",
    "prefixItems",
    "dependentRequired",
    "dependentSchemas",
    "unevaluatedProperties",
    "unevaluatedItems",
    "minContains",
    "maxContains",
];

/// `m.get(k)`, by a scan of its keys when it has few: a schema object holds a handful, and
/// hashing `k` (serde_json's maps hash with SipHash) cost more than comparing it with each;
/// resolving a bundle of large documents asks every object for five or six keywords.
pub(super) fn member<'m>(m: &'m Map<String, Value>, k: &str) -> Option<&'m Value> {
    if m.len() <= 8 {
        m.iter().find(|(key, _)| key.as_str() == k).map(|(_, v)| v)
    } else {
        m.get(k)
    }
}

/// Whether `m` holds one of `keys`: one pass over its own few keys, where looking each of
/// `keys` up hashed it (a dozen hashes per schema object of a large bundled document).
fn has_any_key(m: &Map<String, Value>, keys: &[&str]) -> bool {
    m.keys().any(|k| keys.contains(&k.as_str()))
}

/// Keywords whose values map names to schemas.
const NAME_MAPS: &[&str] = &[
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
];

/// The identifier keyword of a schema object and its value: `$id`, or draft-04's `id` (read
/// when the draft is 4, or unknown and the object has no `$id`).
pub(super) fn identifier(
    m: &Map<String, Value>,
    draft: Option<Draft>,
) -> Option<(&'static str, &str)> {
    let get = |k: &'static str| match member(m, k) {
        Some(Value::String(s)) => Some((k, s.as_str())),
        _ => None,
    };
    match draft {
        Some(Draft::Draft4) => get("id"),
        Some(_) => get("$id"),
        None => get("$id").or_else(|| match member(m, "$id") {
            Some(_) => None,
            None => get("id"),
        }),
    }
}

/// A schema object, its JSON pointer (kept only where an identifier or anchor may need it, and
/// at the root), its base URI and its parent's.
struct Visited<'v> {
    pointer: Option<String>,
    /// Shared with the parent's when no identifier changes it, as most schemas' is.
    base: Rc<str>,
    parent: Rc<str>,
    m: &'v Map<String, Value>,
}

/// Every schema position of the document, with its base URI, in document order (the root
/// first). Keywords whose values map names to schemas are told apart from those whose values
/// are schemas (or arrays of them), so that a property named `$id` or `const` is read as a
/// name.
fn visit<'v>(root: &'v Value, draft: Option<Draft>) -> Vec<Visited<'v>> {
    let mut out = Vec::new();
    let mut pointer = String::new();
    visit_from(root, &mut pointer, &DEFAULT_BASE.into(), draft, &mut out);
    out
}

/// [`visit`] below `v`, whose JSON pointer is `pointer` (a buffer each level extends and
/// cuts back: writing a pointer per schema object was most of the walk's allocations, and
/// only the few with an identifier or an anchor keep theirs).
fn visit_from<'v>(
    v: &'v Value,
    pointer: &mut String,
    base: &Rc<str>,
    draft: Option<Draft>,
    out: &mut Vec<Visited<'v>>,
) {
    let Value::Object(m) = v else {
        return;
    };
    let parent = base;
    let id = identifier(m, draft);
    let base: Rc<str> = match id {
        // Drafts 4 to 7: `$ref` overrides its siblings, the identifier included.
        Some(_) if member(m, "$ref").is_some() && is_draft_4_to_7(draft) => Rc::clone(parent),
        Some((_, id)) => strip_fragment(&resolve_uri(parent, id)).into(),
        _ => Rc::clone(parent),
    };
    let located = out.is_empty()
        || id.is_some()
        || member(m, "$anchor").is_some()
        || member(m, "$dynamicAnchor").is_some();
    out.push(Visited {
        pointer: located.then(|| pointer.clone()),
        base: Rc::clone(&base),
        parent: Rc::clone(parent),
        m,
    });
    // Appends a pointer token: most names need no escape, and are taken as they are.
    fn push_token(pointer: &mut String, k: &str) {
        pointer.push('/');
        if k.contains(['~', '/', '%']) {
            pointer.push_str(&escape_pointer(k).replace('%', "%25"));
        } else {
            pointer.push_str(k);
        }
    }
    let here = pointer.len();
    for (k, sub) in m {
        if DATA_KEYWORDS.contains(&k.as_str()) {
            continue;
        }
        push_token(pointer, k);
        let at_keyword = pointer.len();
        match sub {
            Value::Object(named) if NAME_MAPS.contains(&k.as_str()) => {
                for (name, s) in named {
                    push_token(pointer, name);
                    visit_from(s, pointer, &base, draft, out);
                    pointer.truncate(at_keyword);
                }
            }
            Value::Array(a) => {
                for (i, s) in a.iter().enumerate() {
                    use std::fmt::Write;
                    let _ = write!(pointer, "/{i}");
                    visit_from(s, pointer, &base, draft, out);
                    pointer.truncate(at_keyword);
                }
            }
            _ => visit_from(sub, pointer, &base, draft, out),
        }
        pointer.truncate(here);
    }
}

/// Whether nothing in the document asks for URI resolution: no identifier below the root
/// (`$id`, or `id` as draft-04 writes it), no `$anchor` or `$dynamicAnchor`, no
/// `$dynamicRef`, and every `$ref` a fragment of this document (`#...`). Then neither
/// [`resolve_identifiers`] nor bundling other documents has anything to do, and the walks
/// they make (a JSON pointer and a base URI per schema object, twice) are skipped, with the
/// copy of the document that writes its base URI in. Every member is looked at but data
/// keywords' (as [`visit`] does), whatever the keyword, so this can only say no where the
/// full walk would find nothing (a property named `id` is a schema, not a string).
pub(super) fn local_only(root: &Value) -> bool {
    fn walk(v: &Value, root: bool) -> bool {
        match v {
            Value::Object(m) => {
                let is_str = |k: &str| matches!(m.get(k), Some(Value::String(_)));
                if (!root && (is_str("$id") || is_str("id")))
                    || is_str("$anchor")
                    || is_str("$dynamicAnchor")
                    || m.contains_key("$dynamicRef")
                    || matches!(m.get("$ref"), Some(Value::String(r)) if !r.starts_with('#'))
                {
                    return false;
                }
                m.iter()
                    .filter(|(k, _)| !DATA_KEYWORDS.contains(&k.as_str()))
                    .all(|(_, sub)| walk(sub, false))
            }
            Value::Array(a) => a.iter().all(|sub| walk(sub, false)),
            _ => true,
        }
    }
    walk(root, true)
}

/// Resolves `$ref`s that go through `$id` and `$anchor` (embedded schema resources, base URI
/// changes, anchors, absolute URIs naming the document itself) into plain JSON pointers from
/// the root, and drops the identifiers they needed. `None` when the document has no embedded
/// identifier to resolve (the schema is then compiled as it is). The identifier keyword is
/// draft-04's `id` or later drafts' `$id` (see [`identifier`]); an identifier whose fragment
/// is a plain name (`"#foo"`, drafts 4 to 7) is an anchor.
///
/// A `$ref` that names nothing in the document is left as it is, so that compiling it reports
/// it as unsupported. `$dynamicAnchor` counts as an anchor for `$ref`; when the document has a
/// `$dynamicRef`, nothing is rewritten (the compiler refuses it).
pub(super) fn resolve_identifiers(root: &Value, draft: Option<Draft>) -> Option<Value> {
    let rewrites = identifier_rewrites(root, draft)?;
    let mut out = root.clone();
    apply_rewrites(&mut out, rewrites);
    Some(out)
}

/// [`resolve_identifiers`] of a document the caller owns (a bundle, made for this compile),
/// rewritten where it is rather than copied first: a bundle of nine large documents
/// (lsdlschema's versions) was copied whole and the copy dropped, a fifth of its compile.
pub(super) fn resolve_identifiers_in_place(root: &mut Value, draft: Option<Draft>) {
    if let Some(rewrites) = identifier_rewrites(root, draft) {
        apply_rewrites(root, rewrites);
    }
}

/// What [`resolve_identifiers`] changes, position by position in [`visit`]'s order; `None`
/// when it leaves the document as it is.
fn identifier_rewrites(root: &Value, draft: Option<Draft>) -> Option<Vec<Rewrite>> {
    let nodes = visit(root, draft);
    let is_str = |m: &Map<String, Value>, k: &str| matches!(member(m, k), Some(Value::String(_)));
    let needed = nodes
        .iter()
        .skip(1)
        .any(|n| identifier(n.m, draft).is_some())
        || nodes
            .iter()
            .any(|n| is_str(n.m, "$anchor") || is_str(n.m, "$dynamicAnchor"))
        || nodes
            .iter()
            .any(|n| matches!(member(n.m, "$ref"), Some(Value::String(r)) if !r.starts_with('#')));
    if !needed || nodes.iter().any(|n| member(n.m, "$dynamicRef").is_some()) {
        return None;
    }
    let (resources, anchors) = resources_and_anchors(&nodes, draft);
    let target = |base: &str, reference: &str| -> Option<String> {
        let uri = resolve_uri(base, reference);
        let (doc, fragment) = uri.split_once('#').unwrap_or((&uri, ""));
        let doc_pointer = resources.get(doc)?;
        if fragment.is_empty() || fragment.starts_with('/') {
            Some(format!("#{doc_pointer}{fragment}"))
        } else {
            anchors.get(&uri).map(|p| format!("#{p}"))
        }
    };
    // A document without `$schema` that uses a keyword of 2019-09 or later is read as such
    // where the drafts disagree.
    let modern = nodes.iter().any(|n| has_any_key(n.m, MODERN));
    // Per schema position, in `visit`'s order: its new `$ref`, and its identifier's keyword
    // to take out. Only the positions that change get an entry.
    let mut rewrites: Vec<Rewrite> = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let new_ref = match member(n.m, "$ref") {
            // Without a draft, an identifier beside `$ref` changes the base in 2019-09 and
            // later and not before: unless the document uses a later draft's keywords, a
            // reference is resolved only when both agree (otherwise it is refused).
            Some(Value::String(r)) if draft.is_none() && !modern && n.base != n.parent => {
                let (a, b) = (target(&n.base, r), target(&n.parent, r));
                if a == b {
                    a
                } else {
                    // Not a same-document pointer: the parser refuses it by name.
                    Some(format!("(base URI beside $ref differs across drafts) {r}"))
                }
            }
            Some(Value::String(r)) => target(&n.base, r),
            _ => None,
        };
        let id_key = identifier(n.m, draft).map(|(k, _)| k).filter(|_| i > 0);
        let anchored = member(n.m, "$anchor").is_some() || member(n.m, "$dynamicAnchor").is_some();
        if new_ref.is_some() || id_key.is_some() || anchored {
            rewrites.push((i, new_ref, id_key));
        }
    }
    Some(rewrites)
}

/// Applies `rewrites` to the document `out`: one walk in `visit`'s order (looking each
/// position up from the root by its pointer was most of the time of a large bundled
/// document).
fn apply_rewrites(out: &mut Value, rewrites: Vec<Rewrite>) {
    let mut pending = rewrites.into_iter().peekable();
    rewrite(out, &mut 0, &mut pending);
}

/// A change to one schema position: its index in [`visit`]'s order, its new `$ref`, and the
/// keyword of its identifier to take out.
type Rewrite = (usize, Option<String>, Option<&'static str>);

/// Applies the [`Rewrite`]s `pending` (in order) to the schema positions of `v`, walking them
/// in [`visit`]'s order; `next` counts the positions met. A position's own members change
/// only after its subschemas are walked, so taking a member out (which reorders the rest)
/// changes nothing of the walk.
fn rewrite(
    v: &mut Value,
    next: &mut usize,
    pending: &mut std::iter::Peekable<std::vec::IntoIter<Rewrite>>,
) {
    let Value::Object(m) = v else {
        return;
    };
    let here = *next;
    *next += 1;
    let own = pending.next_if(|(i, _, _)| *i == here);
    for (k, sub) in m.iter_mut() {
        if DATA_KEYWORDS.contains(&k.as_str()) {
            continue;
        }
        match sub {
            Value::Object(named) if NAME_MAPS.contains(&k.as_str()) => {
                for s in named.values_mut() {
                    rewrite(s, next, pending);
                }
            }
            Value::Array(a) => {
                for s in a {
                    rewrite(s, next, pending);
                }
            }
            _ => rewrite(sub, next, pending),
        }
    }
    if let Some((_, new_ref, id_key)) = own {
        if let Some(k) = id_key {
            m.remove(k);
        }
        m.remove("$anchor");
        m.remove("$dynamicAnchor");
        if let Some(r) = new_ref {
            m.insert("$ref".into(), Value::String(r));
        }
    }
}

/// Resources (documents) and anchors of the document, by absolute URI, to JSON pointers
/// from the root.
type Located = HashMap<String, String>;

fn resources_and_anchors(nodes: &[Visited<'_>], draft: Option<Draft>) -> (Located, Located) {
    let mut resources: Located = HashMap::new();
    let mut anchors: Located = HashMap::new();
    for (i, n) in nodes.iter().enumerate() {
        let (base, m) = (&n.base, n.m);
        // Kept for the root and for every schema with an identifier or an anchor.
        let Some(pointer) = &n.pointer else {
            continue;
        };
        let id =
            identifier(m, draft).filter(|_| !(m.contains_key("$ref") && is_draft_4_to_7(draft)));
        if let Some((_, id)) = id {
            // `"#foo"` or `"other.json#foo"`: a plain-name fragment names this schema.
            if let Some((_, frag)) = id.split_once('#') {
                if !frag.is_empty() && !frag.starts_with('/') {
                    anchors
                        .entry(format!("{base}#{frag}"))
                        .or_insert_with(|| pointer.clone());
                }
            }
        }
        let new_resource = id.is_some_and(|(_, id)| !id.starts_with('#'));
        if i == 0 || new_resource {
            resources
                .entry(base.to_string())
                .or_insert_with(|| pointer.clone());
        }
        for k in ["$anchor", "$dynamicAnchor"] {
            if let Some(Value::String(a)) = member(m, k) {
                anchors
                    .entry(format!("{base}#{a}"))
                    .or_insert_with(|| pointer.clone());
            }
        }
    }
    (resources, anchors)
}

/// The `$ref`s of `root` that name other documents than its own resources, resolved to
/// absolute URIs with their fragments, each once, in the document's order.
pub(super) fn external_references(root: &Value, draft: Option<Draft>) -> Vec<String> {
    let nodes = visit(root, draft);
    let (resources, _) = resources_and_anchors(&nodes, draft);
    let mut out: Vec<String> = Vec::new();
    for n in &nodes {
        if let Some(Value::String(r)) = member(n.m, "$ref") {
            let uri = resolve_uri(&n.base, r);
            if !resources.contains_key(strip_fragment(&uri)) && !out.contains(&uri) {
                out.push(uri);
            }
        }
    }
    out
}

/// Whether `doc` is self-contained: an object whose every `$ref` is a JSON pointer into
/// itself, with no identifier below its root, no anchor, and no keyword of 2019-09 or later
/// (which would change how a document without `$schema` reads identifiers beside `$ref`).
/// Then what references to it need is found from their fragments alone ([`needed_part`]).
pub(super) fn self_contained(doc: &Value) -> bool {
    doc.is_object() && local_only(doc) && !has_modern_keyword(doc)
}

/// The part of the self-contained ([`self_contained`]) `doc` that references to it with these
/// `fragments` need: at their places, the subschemas that the fragments point to and those
/// that their own `$ref`s point to in turn, and between the root and them only the members
/// on the way (an array on the way is kept whole); the rest of the document is left out.
/// `None` when a fragment or a pointer inside does not name a value (the whole document then
/// goes in, and compiling reports what is missing), or when one names the document's root:
/// the whole document is needed then.
pub(super) fn needed_part(doc: &Value, fragments: &[&str]) -> Option<Value> {
    // The pointers kept (as decoded tokens), and the fragments still to look at.
    let mut kept: Vec<Vec<String>> = Vec::new();
    let mut seen: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut todo: Vec<String> = fragments.iter().map(|f| f.to_string()).collect();
    while let Some(fragment) = todo.pop() {
        if !seen.insert(fragment.clone()) {
            continue;
        }
        let tokens: Vec<String> = fragment
            .strip_prefix('/')?
            .split('/')
            .map(|raw| percent_decode(raw).replace("~1", "/").replace("~0", "~"))
            .collect();
        let mut at = doc;
        for t in &tokens {
            at = match at {
                Value::Object(m) => m.get(t),
                Value::Array(a) => t.parse::<usize>().ok().and_then(|i| a.get(i)),
                _ => None,
            }?;
        }
        // Every `$ref` string below, data keywords' included: one that is not a reference
        // only keeps more.
        fn references<'v>(v: &'v Value, out: &mut Vec<&'v str>) {
            match v {
                Value::Object(m) => {
                    if let Some(Value::String(r)) = m.get("$ref") {
                        out.push(r);
                    }
                    m.values().for_each(|x| references(x, out));
                }
                Value::Array(a) => a.iter().for_each(|x| references(x, out)),
                _ => {}
            }
        }
        let mut found = Vec::new();
        references(at, &mut found);
        for r in found {
            // `local_only` holds: every reference is `#` and a fragment.
            todo.push(r.strip_prefix('#')?.to_string());
        }
        kept.push(tokens);
    }
    // Shorter pointers first, so that a kept subschema is copied before any inside it (which
    // it then holds already).
    kept.sort_by_key(Vec::len);
    let mut part = Value::Object(Map::new());
    'pointers: for tokens in &kept {
        let (mut from, mut to) = (doc, &mut part);
        for (i, t) in tokens.iter().enumerate() {
            let last = i + 1 == tokens.len();
            match (from, to) {
                (Value::Object(src), Value::Object(dst)) => {
                    let v = src.get(t)?;
                    if last || !v.is_object() {
                        // The pointed-to value, or an array on the way, whole.
                        dst.insert(t.clone(), v.clone());
                        continue 'pointers;
                    }
                    from = v;
                    to = dst
                        .entry(t.clone())
                        .or_insert_with(|| Value::Object(Map::new()));
                }
                // Inside a value copied whole already.
                _ => continue 'pointers,
            }
        }
    }
    Some(part)
}

/// Whether some schema object of `doc` (data keywords' values aside) has a keyword that only
/// drafts 2019-09 and later define.
fn has_modern_keyword(doc: &Value) -> bool {
    match doc {
        Value::Object(m) => {
            has_any_key(m, MODERN)
                || m.iter()
                    .filter(|(k, _)| !DATA_KEYWORDS.contains(&k.as_str()))
                    .any(|(_, v)| has_modern_keyword(v))
        }
        Value::Array(a) => a.iter().any(has_modern_keyword),
        _ => false,
    }
}

fn is_draft_4_to_7(draft: Option<Draft>) -> bool {
    matches!(draft, Some(Draft::Draft4 | Draft::Draft6 | Draft::Draft7))
}

/// The URI without its fragment.
fn strip_fragment(uri: &str) -> &str {
    uri.split_once('#').map_or(uri, |(u, _)| u)
}

/// Resolves `reference` against the absolute URI `base` (RFC 3986, section 5.2, without
/// percent-encoding normalisation).
fn resolve_uri(base: &str, reference: &str) -> String {
    let has_scheme = |u: &str| {
        u.split_once(':').is_some_and(|(s, _)| {
            !s.is_empty()
                && s.starts_with(|c: char| c.is_ascii_alphabetic())
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        })
    };
    if has_scheme(reference) {
        return remove_dot_segments_uri(reference);
    }
    let base = strip_fragment(base);
    let (scheme, rest) = base.split_once(':').unwrap_or(("", base));
    // `rest` is `//authority/path?query` or `path?query`.
    let (authority, path_query) = match rest.strip_prefix("//") {
        Some(r) => {
            let cut = r.find(['/', '?']).unwrap_or(r.len());
            (Some(&r[..cut]), &r[cut..])
        }
        None => (None, rest),
    };
    let (path, _query) = path_query.split_once('?').unwrap_or((path_query, ""));
    let prefix = match authority {
        Some(a) => format!("{scheme}://{a}"),
        None => format!("{scheme}:"),
    };
    if reference.is_empty() {
        return base.to_string();
    }
    if let Some(r) = reference.strip_prefix("//") {
        return remove_dot_segments_uri(&format!("{scheme}://{r}"));
    }
    if reference.starts_with('#') {
        return format!("{}{reference}", strip_fragment(base));
    }
    if reference.starts_with('?') {
        return format!("{prefix}{path}{reference}");
    }
    let merged = if reference.starts_with('/') {
        reference.to_string()
    } else if authority.is_some() && path.is_empty() {
        format!("/{reference}")
    } else {
        match path.rfind('/') {
            Some(i) => format!("{}{reference}", &path[..=i]),
            None => reference.to_string(),
        }
    };
    format!("{prefix}{}", remove_dot_segments(&merged))
}

/// `uri` with `.` and `..` segments of its path removed.
fn remove_dot_segments_uri(uri: &str) -> String {
    match uri.split_once("://") {
        Some((scheme, r)) => {
            let cut = r.find(['/', '?', '#']).unwrap_or(r.len());
            format!("{scheme}://{}{}", &r[..cut], remove_dot_segments(&r[cut..]))
        }
        None => uri.to_string(),
    }
}

/// RFC 3986's remove_dot_segments on a path (the query and fragment, if any, kept as they are).
fn remove_dot_segments(path: &str) -> String {
    let cut = path.find(['?', '#']).unwrap_or(path.len());
    let (p, tail) = path.split_at(cut);
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = p.split('/').collect();
    for (i, seg) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        match *seg {
            "." => {
                if last {
                    out.push("");
                }
            }
            ".." => {
                if out.len() > 1 {
                    out.pop();
                }
                if last {
                    out.push("");
                }
            }
            _ => out.push(seg),
        }
    }
    format!("{}{tail}", out.join("/"))
}

pub(super) fn escape_pointer(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() && s.is_char_boundary(i + 1) && s.is_char_boundary(i + 3)
        {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The value a same-document reference (`#` and a JSON pointer) names in `root`.
pub(super) fn lookup<'v>(root: &'v Value, reference: &str, path: &str) -> Result<&'v Value, Error> {
    let Some(pointer) = reference.strip_prefix('#') else {
        return Err(unsupported(
            format!("$ref {reference} (another document, not among the schema's resources)"),
            path,
        ));
    };
    let mut cur = root;
    if pointer.is_empty() {
        return Ok(cur);
    }
    let Some(pointer) = pointer.strip_prefix('/') else {
        return Err(unsupported(
            format!("$ref {reference} (an anchor the document does not define)"),
            path,
        ));
    };
    for raw in pointer.split('/') {
        // Most tokens are plain names, taken as they are (decoding each was a copy or three).
        let tok: std::borrow::Cow<str> = if raw.contains(['%', '~']) {
            percent_decode(raw)
                .replace("~1", "/")
                .replace("~0", "~")
                .into()
        } else {
            raw.into()
        };
        cur = match cur {
            Value::Object(m) => m.get(&*tok),
            Value::Array(a) => tok.parse::<usize>().ok().and_then(|i| a.get(i)),
            _ => None,
        }
        .ok_or_else(|| invalid(path, "$ref target not found"))?;
    }
    Ok(cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_found_as_a_map_finds_them() {
        // A scan of a few keys, a lookup of many: the same answers either way.
        use serde_json::json;
        for n in [0usize, 1, 5, 8, 9, 30] {
            let mut m = Map::new();
            for i in 0..n {
                m.insert(format!("k{i}"), json!(i));
            }
            for i in 0..n + 2 {
                let k = format!("k{i}");
                assert_eq!(member(&m, &k), m.get(&k), "{n} {k}");
            }
            assert_eq!(member(&m, "$ref"), None);
        }
    }

    #[test]
    fn uri_resolution_follows_rfc_3986() {
        // RFC 3986, section 5.4.1 ("Normal Examples"), base "http://a/b/c/d;p?q".
        let base = "http://a/b/c/d;p?q";
        for (r, want) in [
            ("g:h", "g:h"),
            ("g", "http://a/b/c/g"),
            ("./g", "http://a/b/c/g"),
            ("g/", "http://a/b/c/g/"),
            ("/g", "http://a/g"),
            ("//g", "http://g"),
            ("?y", "http://a/b/c/d;p?y"),
            ("g?y", "http://a/b/c/g?y"),
            ("#s", "http://a/b/c/d;p?q#s"),
            ("g#s", "http://a/b/c/g#s"),
            (";x", "http://a/b/c/;x"),
            ("", "http://a/b/c/d;p?q"),
            (".", "http://a/b/c/"),
            ("./", "http://a/b/c/"),
            ("..", "http://a/b/"),
            ("../", "http://a/b/"),
            ("../g", "http://a/b/g"),
            ("../..", "http://a/"),
            ("../../g", "http://a/g"),
        ] {
            assert_eq!(resolve_uri(base, r), want, "{r}");
        }
    }

    #[test]
    fn identifiers_and_anchors_become_pointers_at_every_depth() {
        // References by identifier and by anchor, from positions nested in ones that change
        // themselves (an identifier taken out, a `$ref` rewritten), under names that need
        // escaping in a pointer, in arrays and in name maps; data keywords are not schemas.
        use serde_json::json;
        let doc = json!({
            "$id": "https://x.test/root.json",
            "$defs": {
                "a/b": {
                    "$id": "a.json",
                    "$ref": "#inner",
                    "$defs": {"in~ner": {"$anchor": "inner", "type": "string",
                                         "items": [{"$ref": "a.json"}]}}
                },
                "c": {"$ref": "a.json#/$defs/in~0ner", "const": {"$ref": "a.json"}}
            },
            "anyOf": [{"$ref": "a.json"}, {"$ref": "a.json#inner"}]
        });
        let out = resolve_identifiers(&doc, Some(Draft::Draft2020_12)).unwrap();
        let a = "#/$defs/a~1b";
        let inner = "#/$defs/a~1b/$defs/in~0ner";
        let want = json!({
            "$id": "https://x.test/root.json",
            "$defs": {
                "a/b": {
                    "$ref": inner,
                    "$defs": {"in~ner": {"type": "string", "items": [{"$ref": a}]}}
                },
                "c": {"$ref": inner, "const": {"$ref": "a.json"}}
            },
            "anyOf": [{"$ref": a}, {"$ref": inner}]
        });
        assert_eq!(out, want);
        // A document the caller owns is rewritten where it is, to the same document; one
        // with nothing to resolve is left as it is.
        let mut owned = doc.clone();
        resolve_identifiers_in_place(&mut owned, Some(Draft::Draft2020_12));
        assert_eq!(owned, want);
        let plain = json!({"$defs": {"x": {"type": "string"}}, "$ref": "#/$defs/x"});
        let mut same = plain.clone();
        resolve_identifiers_in_place(&mut same, Some(Draft::Draft2020_12));
        assert_eq!(same, plain);
    }

    #[test]
    fn documents_of_plain_fragment_references_need_no_resolution() {
        // `local_only` says yes only where resolving and bundling have nothing to do: no
        // identifier below the root, no anchor, every `$ref` a `#` fragment.
        use serde_json::json;
        let plain = [
            json!({"$id": "https://x.test/root.json", "$ref": "#/definitions/a",
                   "definitions": {"a": {"type": "string"}}}),
            json!({"properties": {"id": {"type": "string"}, "$id": {"type": "integer"},
                   "$ref": {"$ref": "#/properties/id"}}}),
            json!({"enum": [{"$id": "x", "$anchor": "y"}], "default": {"id": "z"},
                   "items": [{"const": {"$ref": "other.json"}}]}),
            json!(true),
        ];
        for s in &plain {
            assert!(local_only(s), "{s}");
            for draft in [None, Some(Draft::Draft4), Some(Draft::Draft2020_12)] {
                assert!(resolve_identifiers(s, draft).is_none(), "{s}");
                assert!(
                    external_references(s, draft)
                        .iter()
                        .map(|r| strip_fragment(r))
                        .all(|d| d == DEFAULT_BASE || d == "https://x.test/root.json"),
                    "{s}"
                );
            }
        }
        let not_plain = [
            json!({"definitions": {"a": {"$id": "a.json"}}}),
            json!({"definitions": {"a": {"id": "#a"}}}),
            json!({"definitions": {"a": {"$anchor": "a"}}}),
            json!({"items": {"$dynamicAnchor": "a"}}),
            json!({"items": {"$dynamicRef": "#a"}}),
            json!({"$ref": "other.json#/a"}),
            json!({"anyOf": [{"$ref": "https://x.test/b.json"}]}),
        ];
        for s in &not_plain {
            assert!(!local_only(s), "{s}");
        }
    }
}
