//! References: `$ref`s through `$id` and `$anchor` rewritten into JSON pointers from the root
//! (RFC 3986 resolution), and JSON pointers looked up in the document.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::schema::{invalid, unsupported};
use crate::Error;

/// The base URI of a schema without `$id`: a name no reference outside the document can mean.
const DEFAULT_BASE: &str = "https://nextok.invalid/schema.json";

/// Keywords whose values are data, not schemas: identifiers inside them mean nothing.
const DATA_KEYWORDS: &[&str] = &["const", "enum", "default", "examples"];

/// Keywords whose values map names to schemas.
const NAME_MAPS: &[&str] = &[
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
];

/// Resolves `$ref`s that go through `$id` and `$anchor` (embedded schema resources, base URI
/// changes, anchors, absolute URIs naming the document itself) into plain JSON pointers from
/// the root, and drops the identifiers they needed. `None` when the document has no embedded
/// identifier to resolve (the schema is then compiled as it is).
///
/// A `$ref` that names nothing in the document is left as it is, so that compiling it reports
/// it as unsupported. `$dynamicAnchor` counts as an anchor for `$ref`; when the document has a
/// `$dynamicRef`, nothing is rewritten (the compiler refuses it).
pub(super) fn resolve_identifiers(root: &Value) -> Option<Value> {
    /// Every schema position of the document, with its JSON pointer and base URI. Keywords
    /// whose values map names to schemas are told apart from those whose values are schemas
    /// (or arrays of them), so that a property named `$id` or `const` is read as a name.
    fn visit<'v>(
        v: &'v Value,
        pointer: &str,
        base: &str,
        out: &mut Vec<(String, String, &'v Map<String, Value>)>,
    ) {
        let Value::Object(m) = v else {
            return;
        };
        let base = match m.get("$id") {
            Some(Value::String(id)) => strip_fragment(&resolve_uri(base, id)).to_string(),
            _ => base.to_string(),
        };
        out.push((pointer.to_string(), base.clone(), m));
        let token = |k: &str| escape_pointer(k).replace('%', "%25");
        for (k, sub) in m {
            if DATA_KEYWORDS.contains(&k.as_str()) {
                continue;
            }
            let p = format!("{pointer}/{}", token(k));
            match sub {
                Value::Object(named) if NAME_MAPS.contains(&k.as_str()) => {
                    for (name, s) in named {
                        visit(s, &format!("{p}/{}", token(name)), &base, out);
                    }
                }
                Value::Array(a) => {
                    for (i, s) in a.iter().enumerate() {
                        visit(s, &format!("{p}/{i}"), &base, out);
                    }
                }
                _ => visit(sub, &p, &base, out),
            }
        }
    }
    let mut nodes = Vec::new();
    visit(root, "", DEFAULT_BASE, &mut nodes);
    let is_str = |m: &Map<String, Value>, k: &str| matches!(m.get(k), Some(Value::String(_)));
    let needed = nodes.iter().skip(1).any(|(_, _, m)| is_str(m, "$id"))
        || nodes
            .iter()
            .any(|(_, _, m)| is_str(m, "$anchor") || is_str(m, "$dynamicAnchor"))
        || nodes.iter().any(
            |(_, _, m)| matches!(m.get("$ref"), Some(Value::String(r)) if !r.starts_with('#')),
        );
    if !needed || nodes.iter().any(|(_, _, m)| m.contains_key("$dynamicRef")) {
        return None;
    }
    // Resources (documents) and anchors, by absolute URI, to JSON pointers from the root.
    let mut resources: HashMap<String, String> = HashMap::new();
    let mut anchors: HashMap<String, String> = HashMap::new();
    for (pointer, base, m) in &nodes {
        if pointer.is_empty() || is_str(m, "$id") {
            resources
                .entry(base.clone())
                .or_insert_with(|| pointer.clone());
        }
        for k in ["$anchor", "$dynamicAnchor"] {
            if let Some(Value::String(a)) = m.get(k) {
                anchors
                    .entry(format!("{base}#{a}"))
                    .or_insert_with(|| pointer.clone());
            }
        }
    }
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
    let mut rewrites: Vec<(String, Option<String>)> = Vec::new();
    for (pointer, base, m) in &nodes {
        let new_ref = match m.get("$ref") {
            Some(Value::String(r)) => target(base, r),
            _ => None,
        };
        rewrites.push((pointer.clone(), new_ref));
    }
    let mut out = root.clone();
    for (pointer, new_ref) in rewrites {
        let Some(Value::Object(m)) = out.pointer_mut(&pointer_path(&pointer)) else {
            continue;
        };
        if !pointer.is_empty() {
            m.remove("$id");
        }
        m.remove("$anchor");
        m.remove("$dynamicAnchor");
        if let Some(r) = new_ref {
            m.insert("$ref".into(), Value::String(r));
        }
    }
    Some(out)
}

/// A pointer built by `resolve_identifiers` (tokens percent-encoded for [`lookup`]) as
/// serde_json's `pointer_mut` wants it.
fn pointer_path(pointer: &str) -> String {
    pointer.replace("%25", "%")
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
        return Err(unsupported(format!("$ref {reference}"), path));
    };
    let mut cur = root;
    if pointer.is_empty() {
        return Ok(cur);
    }
    let Some(pointer) = pointer.strip_prefix('/') else {
        return Err(unsupported(format!("$ref {reference}"), path));
    };
    for raw in pointer.split('/') {
        let tok = percent_decode(raw).replace("~1", "/").replace("~0", "~");
        cur = match cur {
            Value::Object(m) => m.get(&tok),
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
}
