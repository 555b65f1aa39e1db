//! The typed schema: a JSON Schema document parsed once into [`Schema`] values, each keyword
//! nextok enforces in a typed field. A `$ref` is an index into the document's table of
//! reference targets, so a recursive schema is a cycle of indices, not of values.
//!
//! Parsing reads each draft's forms (draft-04's `id` and boolean exclusive bounds, `items` as an
//! array with `additionalItems`, `dependencies`) into the same typed fields, and refuses what
//! the compiler cannot enforce: a known keyword it cannot follow (the dynamic-scope keywords,
//! draft-03's) is an [`Error::UnsupportedKeyword`] naming the keyword and its path. Unknown
//! keywords are annotations, as JSON Schema says: dropped, and listed with their path (or
//! refused, in strict mode). Known annotations (`title`, `description`, `$defs`...) are dropped
//! silently.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::number::Decimal;
use super::resolve::{escape_pointer, identifier, lookup};
use super::string::{format_kind, FormatKind};
use super::{Draft, FormatMode, IgnoredKeyword, IgnoredReason, JsonOptions};
use crate::grammar::FxMap;
use crate::Error;

pub(super) fn unsupported(keyword: impl Into<String>, path: &str) -> Error {
    Error::UnsupportedKeyword {
        keyword: keyword.into(),
        path: path.to_string(),
    }
}

pub(super) fn invalid(path: &str, reason: &'static str) -> Error {
    Error::InvalidSchema {
        path: path.to_string(),
        reason,
    }
}

/// Keywords that only annotate and never change validity.
const ANNOTATIONS: &[&str] = &[
    "title",
    "description",
    "default",
    "examples",
    "$comment",
    "deprecated",
    "readOnly",
    "writeOnly",
    "$schema",
    "contentMediaType",
    "contentEncoding",
    "contentSchema",
    "$defs",
    "definitions",
    "$vocabulary",
];

/// Known keywords that change validity in ways nextok does not follow: refused by name, never
/// read as annotations (draft-03's `disallow`, `extends` and `divisibleBy` among them).
const UNENFORCED: &[&str] = &[
    "$anchor",
    "$dynamicRef",
    "$dynamicAnchor",
    "$recursiveRef",
    "$recursiveAnchor",
    "disallow",
    "extends",
    "divisibleBy",
];

/// A set of JSON Schema type names; `integer` (integer-valued numbers) is a member of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct TypeSet(u8);

impl TypeSet {
    pub(super) const NULL: TypeSet = TypeSet(1);
    pub(super) const BOOLEAN: TypeSet = TypeSet(2);
    pub(super) const INTEGER: TypeSet = TypeSet(4);
    pub(super) const NUMBER: TypeSet = TypeSet(8);
    pub(super) const STRING: TypeSet = TypeSet(16);
    pub(super) const ARRAY: TypeSet = TypeSet(32);
    pub(super) const OBJECT: TypeSet = TypeSet(64);
    pub(super) const EMPTY: TypeSet = TypeSet(0);
    /// The six JSON types (what a schema without `type` allows).
    pub(super) const ALL: TypeSet = TypeSet(1 | 2 | 8 | 16 | 32 | 64);

    pub(super) fn has(self, t: TypeSet) -> bool {
        self.0 & t.0 != 0
    }

    pub(super) fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub(super) fn union(self, t: TypeSet) -> TypeSet {
        TypeSet(self.0 | t.0)
    }

    /// The values of both: `number` and `integer` meet in `integer`.
    pub(super) fn intersect(self, o: TypeSet) -> TypeSet {
        let mut t = TypeSet(self.0 & o.0);
        if (self.has(Self::INTEGER) && o.has(Self::NUMBER))
            || (self.has(Self::NUMBER) && o.has(Self::INTEGER))
        {
            t = t.union(Self::INTEGER);
        }
        t
    }

    /// The JSON types outside the set (`integer` counts as inside only with `number`).
    pub(super) fn complement(self) -> TypeSet {
        TypeSet(Self::ALL.0 & !self.0)
    }

    /// The JSON types the set reaches, `integer` counted as `number`.
    pub(super) fn json_types(self) -> TypeSet {
        if self.has(Self::INTEGER) {
            TypeSet((self.0 & !Self::INTEGER.0) | Self::NUMBER.0)
        } else {
            self
        }
    }

    /// The JSON type of a value.
    pub(super) fn of(v: &Value) -> TypeSet {
        match v {
            Value::Null => Self::NULL,
            Value::Bool(_) => Self::BOOLEAN,
            Value::Number(_) => Self::NUMBER,
            Value::String(_) => Self::STRING,
            Value::Array(_) => Self::ARRAY,
            Value::Object(_) => Self::OBJECT,
        }
    }

    /// Whether a value of this set's types may be `v` (an integer-valued number for `integer`).
    pub(super) fn admits(self, v: &Value) -> bool {
        match v {
            Value::Number(x) => {
                self.has(TypeSet::NUMBER)
                    || (self.has(TypeSet::INTEGER) && x.as_f64().is_some_and(|f| f.fract() == 0.0))
            }
            _ => self.has(TypeSet::of(v)),
        }
    }

    fn parse(v: &Value, path: &str) -> Result<TypeSet, Error> {
        let name = |v: &Value| -> Result<TypeSet, Error> {
            match v.as_str() {
                Some("null") => Ok(Self::NULL),
                Some("boolean") => Ok(Self::BOOLEAN),
                Some("integer") => Ok(Self::INTEGER),
                Some("number") => Ok(Self::NUMBER),
                Some("string") => Ok(Self::STRING),
                Some("array") => Ok(Self::ARRAY),
                Some("object") => Ok(Self::OBJECT),
                Some(_) => Err(invalid(path, "unknown type")),
                None => Err(invalid(
                    path,
                    "type must be a string or an array of strings",
                )),
            }
        };
        match v {
            Value::Array(a) => a.iter().try_fold(Self::EMPTY, |t, x| Ok(t.union(name(x)?))),
            v => name(v),
        }
    }
}

/// A schema: `true`, `false`, or assertions.
#[derive(Clone, Debug)]
pub(super) enum Schema {
    /// Every value (`true`, or a schema with no assertion).
    Any,
    /// No value (`false`).
    Never,
    /// Assertions, at least one. Shared: a clone of a schema (the algebra clones subschemas
    /// often, and large ones) copies a pointer, and a change copies the node first
    /// ([`Arc::make_mut`]).
    Node(Arc<Node>),
}

/// Equal schemas: the same assertions. Two handles of one shared node are equal without a
/// look inside (the compiler compares each schema it meets with the schemas open around it
/// and with those compiled before, and the algebra compares subschemas; most equal pairs are
/// one node met twice, and comparing large nodes field by field was a third of the compile
/// of utam's page objects).
impl PartialEq for Schema {
    fn eq(&self, other: &Schema) -> bool {
        match (self, other) {
            (Schema::Any, Schema::Any) | (Schema::Never, Schema::Never) => true,
            (Schema::Node(a), Schema::Node(b)) => Arc::ptr_eq(a, b) || a == b,
            _ => false,
        }
    }
}

impl Schema {
    /// The schema of `node`: [`Schema::Any`] when it asserts nothing.
    pub(super) fn node(node: Node) -> Schema {
        if node.is_empty() {
            Schema::Any
        } else {
            Schema::Node(Arc::new(node))
        }
    }

    /// The schema of values valid under every one of `all`.
    pub(super) fn all_of(all: Vec<Schema>) -> Schema {
        Schema::node(Node {
            all_of: Some(all),
            ..Node::default()
        })
    }
}

impl Schema {
    /// A hash of the schema's shape to `depth` levels of subschemas: its keywords, type set,
    /// reference, string facets, value counts and member names. Equal schemas hash alike;
    /// different ones may too (a table keyed by it compares entries with `==`). Bounded in
    /// depth so that hashing a large schema at every level of its nesting stays cheap.
    pub(super) fn shape_hash(&self, depth: usize) -> u64 {
        use std::hash::Hasher;
        let mut h = rustc_hash::FxHasher::default();
        self.shape_into(&mut h, depth);
        h.finish()
    }

    fn shape_into(&self, h: &mut impl std::hash::Hasher, depth: usize) {
        use std::hash::Hash;
        let n = match self {
            Schema::Any => return 0u8.hash(h),
            Schema::Never => return 1u8.hash(h),
            Schema::Node(n) => n,
        };
        2u8.hash(h);
        n.keyword_bits().hash(h);
        n.types.map(|t| t.0).hash(h);
        // The scalar values themselves, not only how many: the branches of a discriminated
        // `oneOf` differ only in their `const`, and hashing them alike sent every lookup among
        // them to a comparison of the whole nodes.
        for list in [&n.values, &n.excluded] {
            list.as_ref().map(|l| l.len()).hash(h);
            for v in list.iter().flatten() {
                scalar_into(v, h);
            }
        }
        n.reference.as_ref().map(|r| r.target).hash(h);
        n.string.hash(h);
        let (a, o) = (&n.array, &n.object);
        (a.min_items, a.max_items, o.min_properties, o.max_properties).hash(h);
        let names = |l: &Option<Vec<(String, Schema)>>, h: &mut _| {
            for (k, _) in l.iter().flatten() {
                Hash::hash(k, h);
            }
        };
        names(&o.properties, h);
        names(&o.pattern_properties, h);
        o.required.hash(h);
        if depth == 0 {
            return;
        }
        let children = [&n.all_of, &n.any_of, &n.one_of, &a.prefix_items];
        for list in children {
            for c in list.iter().flatten() {
                c.shape_into(h, depth - 1);
            }
        }
        for c in [
            &n.not,
            &n.cond,
            &n.then,
            &n.otherwise,
            &a.items,
            &a.contains,
            &o.additional_properties,
            &o.property_names,
        ]
        .into_iter()
        .flatten()
        {
            c.shape_into(h, depth - 1);
        }
        for (_, c) in o.properties.iter().flatten() {
            c.shape_into(h, depth - 1);
        }
    }
}

/// Hashes what [`Value`]'s equality compares of a scalar (a number by its value, so that
/// equal numbers hash alike whatever their representation); of an array or an object, only
/// its kind.
fn scalar_into(v: &Value, h: &mut impl std::hash::Hasher) {
    use std::hash::Hash;
    match v {
        Value::Null => 0u8.hash(h),
        Value::Bool(b) => (1u8, b).hash(h),
        Value::Number(x) => (2u8, x.as_f64().map(f64::to_bits)).hash(h),
        Value::String(s) => (3u8, s).hash(h),
        Value::Array(_) => 4u8.hash(h),
        Value::Object(_) => 5u8.hash(h),
    }
}

/// A list of JSON values (`enum`, `const`, or what `not` of them excludes), shared by the
/// nodes that hold it: a node is cloned at every merge and normalization, and a copy of each
/// value was a fifth of the compile of cryproj's `enum` of 2,461 names.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Values(Arc<[Value]>);

impl Values {
    pub(super) fn as_slice(&self) -> &[Value] {
        &self.0
    }
}

impl std::ops::Deref for Values {
    type Target = [Value];
    fn deref(&self) -> &[Value] {
        &self.0
    }
}

impl From<Vec<Value>> for Values {
    fn from(v: Vec<Value>) -> Values {
        Values(v.into())
    }
}

impl FromIterator<Value> for Values {
    fn from_iter<I: IntoIterator<Item = Value>>(it: I) -> Values {
        Values(it.into_iter().collect())
    }
}

impl<'a> IntoIterator for &'a Values {
    type Item = &'a Value;
    type IntoIter = std::slice::Iter<'a, Value>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// A reference: the index of its target in [`Document::table`], and the reference as written
/// (for paths in errors and rule names).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Ref {
    pub target: usize,
    pub uri: String,
}

/// The assertions of one schema object. A keyword that is absent is `None` (absent and
/// `true` differ for some keywords: an explicit `items: true` evaluates every item).
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Node {
    pub types: Option<TypeSet>,
    /// `enum` and `const` together: the values allowed, in the `enum`'s order.
    pub values: Option<Values>,
    /// Values excluded (what `not` of `enum`/`const` leaves).
    pub excluded: Option<Values>,
    pub reference: Option<Ref>,
    pub all_of: Option<Vec<Schema>>,
    pub any_of: Option<Vec<Schema>>,
    pub one_of: Option<Vec<Schema>>,
    pub not: Option<Schema>,
    pub cond: Option<Schema>,
    pub then: Option<Schema>,
    pub otherwise: Option<Schema>,
    pub dependent_schemas: Option<Vec<(String, Schema)>>,
    pub unevaluated_properties: Option<Schema>,
    pub unevaluated_items: Option<Schema>,
    pub string: StringFacets,
    pub number: NumberFacets,
    pub array: ArrayFacets,
    pub object: ObjectFacets,
}

/// The keywords that apply to strings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(super) struct StringFacets {
    pub min_length: Option<usize>,
    pub max_length: Option<usize>,
    /// `pattern`, and the patterns of schemas merged into this one: all must match.
    pub patterns: Vec<String>,
    /// Patterns that must not match (what `not` of `pattern` leaves).
    pub not_patterns: Vec<String>,
    pub format: Option<String>,
    /// Formats that must not match (what `not` of `format` leaves).
    pub not_formats: Vec<String>,
}

/// The keywords that apply to numbers, as exact decimals.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(super) struct NumberFacets {
    pub minimum: Option<Decimal>,
    pub maximum: Option<Decimal>,
    pub exclusive_minimum: Option<Decimal>,
    pub exclusive_maximum: Option<Decimal>,
    pub multiple_of: Option<Decimal>,
    /// Numbers that are not integers (what `not` of `type: integer` leaves among numbers).
    pub not_integer: bool,
}

/// The keywords that apply to arrays.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct ArrayFacets {
    pub prefix_items: Option<Vec<Schema>>,
    pub items: Option<Schema>,
    pub min_items: Option<usize>,
    pub max_items: Option<usize>,
    pub contains: Option<Schema>,
    pub min_contains: Option<usize>,
    pub max_contains: Option<usize>,
    /// `uniqueItems: true`.
    pub unique_items: bool,
}

/// The keywords that apply to objects. Named schemas keep the document's order.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct ObjectFacets {
    pub properties: Option<Vec<(String, Schema)>>,
    pub pattern_properties: Option<Vec<(String, Schema)>>,
    pub additional_properties: Option<Schema>,
    pub required: Option<Vec<String>>,
    pub min_properties: Option<usize>,
    pub max_properties: Option<usize>,
    pub dependent_required: Option<Vec<(String, Vec<String>)>>,
    pub property_names: Option<Schema>,
    /// Some member breaks `additionalProperties` or a `patternProperties` entry (what `not`
    /// of those leaves).
    pub some_member: Option<Box<SomeMember>>,
}

/// "Some member whose key matches `pattern` (any key when `None`), is none of `not_names`
/// and matches none of `not_patterns`, and whose value matches `value`."
#[derive(Clone, Debug, PartialEq)]
pub(super) struct SomeMember {
    pub pattern: Option<String>,
    pub not_names: Vec<String>,
    pub not_patterns: Vec<String>,
    pub value: Schema,
}

/// The references of a document: which targets each target refers to, wherever inside it.
pub(super) struct RefGraph {
    edges: Vec<Vec<usize>>,
}

impl RefGraph {
    pub(super) fn new(table: &[Schema]) -> RefGraph {
        let edges = table
            .iter()
            .map(|s| {
                let mut out = Vec::new();
                let mut stack = vec![s];
                while let Some(s) = stack.pop() {
                    let Schema::Node(n) = s else { continue };
                    if let Some(r) = &n.reference {
                        out.push(r.target);
                    }
                    n.each_child(&mut |c| stack.push(c));
                }
                out.sort_unstable();
                out.dedup();
                out
            })
            .collect();
        RefGraph { edges }
    }

    /// Whether target `t` refers back to itself, directly or through other targets.
    pub(super) fn recursive(&self, t: usize) -> bool {
        let mut seen = vec![false; self.edges.len()];
        let mut stack: Vec<usize> = self.edges.get(t).cloned().unwrap_or_default();
        while let Some(u) = stack.pop() {
            if u == t {
                return true;
            }
            if let Some(next) = self.edges.get(u) {
                if !seen[u] {
                    seen[u] = true;
                    stack.extend_from_slice(next);
                }
            }
        }
        false
    }
}

/// The schema named `name` in a list of named schemas.
pub(super) fn named<'s>(list: &'s [(String, Schema)], name: &str) -> Option<&'s Schema> {
    list.iter().find(|(n, _)| n == name).map(|(_, s)| s)
}

impl Node {
    /// The keywords present, by their JSON Schema names (`enum` for `enum` and `const`,
    /// `pattern` for all patterns).
    pub(super) fn keywords(&self) -> Vec<&'static str> {
        self.keyword_table()
            .into_iter()
            .filter_map(|(present, k)| present.then_some(k))
            .collect()
    }

    /// The keywords present as bits, in [`Node::keyword_table`]'s order (what
    /// [`Schema::shape_hash`] hashes, without a list to allocate).
    pub(super) fn keyword_bits(&self) -> u64 {
        self.keyword_presence()
            .iter()
            .enumerate()
            .fold(0, |bits, (i, &present)| bits | (present as u64) << i)
    }

    /// Calls `f` on each schema this node holds directly (its subschemas, not those of its
    /// reference's target).
    pub(super) fn each_child<'a>(&'a self, f: &mut impl FnMut(&'a Schema)) {
        let (a, o) = (&self.array, &self.object);
        for s in [
            &self.not,
            &self.cond,
            &self.then,
            &self.otherwise,
            &self.unevaluated_properties,
            &self.unevaluated_items,
            &a.items,
            &a.contains,
            &o.additional_properties,
            &o.property_names,
        ]
        .into_iter()
        .flatten()
        {
            f(s);
        }
        for list in [&self.all_of, &self.any_of, &self.one_of, &a.prefix_items]
            .into_iter()
            .flatten()
        {
            list.iter().for_each(&mut *f);
        }
        for list in [
            &self.dependent_schemas,
            &o.properties,
            &o.pattern_properties,
        ]
        .into_iter()
        .flatten()
        {
            list.iter().for_each(|(_, s)| f(s));
        }
        if let Some(m) = &o.some_member {
            f(&m.value);
        }
    }

    /// Every keyword a node may hold, with whether it holds it.
    fn keyword_table(&self) -> [(bool, &'static str); 43] {
        let present = self.keyword_presence();
        std::array::from_fn(|i| (present[i], KEYWORD_NAMES[i]))
    }

    /// Per keyword of [`KEYWORD_NAMES`], whether the node holds it: what
    /// [`Node::keyword_bits`] reads for every schema it hashes or compares, without the
    /// names (43 bytes where the table with them is a kilobyte).
    fn keyword_presence(&self) -> [bool; 43] {
        let (s, n, a, o) = (&self.string, &self.number, &self.array, &self.object);
        [
            self.types.is_some(),
            self.values.is_some(),
            self.excluded.is_some(),
            self.reference.is_some(),
            self.all_of.is_some(),
            self.any_of.is_some(),
            self.one_of.is_some(),
            self.not.is_some(),
            self.cond.is_some(),
            self.then.is_some(),
            self.otherwise.is_some(),
            self.dependent_schemas.is_some(),
            self.unevaluated_properties.is_some(),
            self.unevaluated_items.is_some(),
            s.min_length.is_some(),
            s.max_length.is_some(),
            !s.patterns.is_empty(),
            !s.not_patterns.is_empty(),
            s.format.is_some(),
            !s.not_formats.is_empty(),
            n.minimum.is_some(),
            n.maximum.is_some(),
            n.exclusive_minimum.is_some(),
            n.exclusive_maximum.is_some(),
            n.multiple_of.is_some(),
            n.not_integer,
            a.prefix_items.is_some(),
            a.items.is_some(),
            a.min_items.is_some(),
            a.max_items.is_some(),
            a.contains.is_some(),
            a.min_contains.is_some(),
            a.max_contains.is_some(),
            a.unique_items,
            o.properties.is_some(),
            o.pattern_properties.is_some(),
            o.additional_properties.is_some(),
            o.required.is_some(),
            o.min_properties.is_some(),
            o.max_properties.is_some(),
            o.dependent_required.is_some(),
            o.property_names.is_some(),
            o.some_member.is_some(),
        ]
    }

    /// Whether the node is a bare `$ref` (that keyword alone): [`Node::only`]`(&["$ref"])`,
    /// answered without reading the other keywords for a node without a reference, which
    /// most are (the algebra asks it of every branch it reads through).
    pub(super) fn is_bare_ref(&self) -> bool {
        self.reference.is_some() && self.keyword_bits() == 1 << REF_BIT
    }

    /// Whether the node holds no keyword at all (what [`Schema::node`] makes `true`), the
    /// common keywords looked at first.
    fn is_empty(&self) -> bool {
        !(self.types.is_some() || self.reference.is_some() || self.values.is_some())
            && self.keyword_bits() == 0
    }

    /// Whether the node holds only the keywords in `allowed`.
    pub(super) fn only(&self, allowed: &[&str]) -> bool {
        // The keywords present, a few bits, rather than the table of all 43 with their names.
        let mut bits = self.keyword_bits();
        while bits != 0 {
            let i = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            if !allowed.contains(&KEYWORD_NAMES[i]) {
                return false;
            }
        }
        true
    }
}

/// The bit of `$ref` in [`Node::keyword_bits`].
const REF_BIT: u32 = 3;

/// The keywords a node may hold, in the order of [`Node::keyword_bits`]' bits.
const KEYWORD_NAMES: [&str; 43] = [
    "type",
    "enum",
    "not enum",
    "$ref",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "dependentSchemas",
    "unevaluatedProperties",
    "unevaluatedItems",
    "minLength",
    "maxLength",
    "pattern",
    "not pattern",
    "format",
    "not format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "not integer",
    "prefixItems",
    "items",
    "minItems",
    "maxItems",
    "contains",
    "minContains",
    "maxContains",
    "uniqueItems",
    "properties",
    "patternProperties",
    "additionalProperties",
    "required",
    "minProperties",
    "maxProperties",
    "dependentRequired",
    "propertyNames",
    "some member",
];

/// A parsed document: its root and the targets of its references.
#[derive(Debug)]
pub(super) struct Document {
    pub root: Schema,
    /// Reference targets, indexed by [`Ref::target`].
    pub table: Vec<Schema>,
    /// Keywords read as annotations, in the order met.
    pub ignored: Vec<IgnoredKeyword>,
}

impl Document {
    /// Parses `root` with the default options, every draft's forms.
    #[cfg(test)]
    pub(super) fn parse(root: &Value) -> Result<Document, Error> {
        Self::parse_with(root, None, &JsonOptions::default(), &[])
    }

    /// Parses `root` (whose references are same-document JSON pointers, see
    /// [`super::resolve::resolve_identifiers`]) as `draft` (`None`: every draft's forms), with
    /// the keywords of vocabularies its meta-schema leaves out (`off`) read as annotations.
    pub(super) fn parse_with(
        root: &Value,
        draft: Option<Draft>,
        opts: &JsonOptions,
        off: &[&'static str],
    ) -> Result<Document, Error> {
        let mut p = Parser {
            off: off.to_vec(),
            root,
            index: FxMap::default(),
            table: Vec::new(),
            depth: 0,
            draft,
            strict: opts.strict,
            format: opts.format,
            ignored: Vec::new(),
        };
        let s = p.schema(root, "#")?;
        Ok(Document {
            root: s,
            table: p.table,
            ignored: p.ignored,
        })
    }
}

struct Parser<'v> {
    root: &'v Value,
    /// Reference (as written) to its index in `table`.
    index: FxMap<String, usize>,
    table: Vec<Schema>,
    depth: usize,
    draft: Option<Draft>,
    /// Keywords of vocabularies the meta-schema leaves out: annotations.
    off: Vec<&'static str>,
    strict: bool,
    format: FormatMode,
    ignored: Vec<IgnoredKeyword>,
}

fn usize_of(v: &Value, path: &str) -> Result<usize, Error> {
    match v.as_f64() {
        Some(f) if f >= 0.0 && f.fract() == 0.0 => {
            Ok(if f > 1e9 { usize::MAX / 2 } else { f as usize })
        }
        _ => Err(invalid(path, "expected a non-negative integer")),
    }
}

fn nonempty_list<'v>(
    v: &'v Value,
    path: &str,
    not_array: &'static str,
    empty: &'static str,
) -> Result<&'v [Value], Error> {
    match v {
        Value::Array(a) if a.is_empty() => Err(invalid(path, empty)),
        Value::Array(a) => Ok(a),
        _ => Err(invalid(path, not_array)),
    }
}

fn name_map<'v>(
    v: &'v Value,
    path: &str,
    reason: &'static str,
) -> Result<&'v Map<String, Value>, Error> {
    v.as_object().ok_or_else(|| invalid(path, reason))
}

impl<'v> Parser<'v> {
    fn schema(&mut self, v: &'v Value, path: &str) -> Result<Schema, Error> {
        self.depth += 1;
        if self.depth > 200 {
            return Err(unsupported("nesting deeper than 200", path));
        }
        let r = self.schema_inner(v, path);
        self.depth -= 1;
        r
    }

    fn list(&mut self, items: &'v [Value], path: &str) -> Result<Vec<Schema>, Error> {
        items
            .iter()
            .enumerate()
            .map(|(i, x)| self.schema(x, &format!("{path}/{i}")))
            .collect()
    }

    fn names(
        &mut self,
        m: &'v Map<String, Value>,
        path: &str,
    ) -> Result<Vec<(String, Schema)>, Error> {
        m.iter()
            .map(|(k, x)| {
                Ok((
                    k.clone(),
                    self.schema(x, &format!("{path}/{}", escape_pointer(k)))?,
                ))
            })
            .collect()
    }

    /// The target of a same-document reference, parsed once.
    fn reference(&mut self, v: &Value, path: &str) -> Result<Ref, Error> {
        let Value::String(r) = v else {
            return Err(invalid(path, "$ref must be a string"));
        };
        if let Some(&target) = self.index.get(r) {
            return Ok(Ref {
                target,
                uri: r.clone(),
            });
        }
        let value = lookup(self.root, r, path)?;
        let target = self.table.len();
        // Reserved before parsing, so that a reference to itself finds it.
        self.table.push(Schema::Never);
        self.index.insert(r.clone(), target);
        self.table[target] = self.schema(value, r)?;
        Ok(Ref {
            target,
            uri: r.clone(),
        })
    }

    fn schema_inner(&mut self, v: &'v Value, path: &str) -> Result<Schema, Error> {
        let m = match v {
            Value::Bool(true) => return Ok(Schema::Any),
            Value::Bool(false) => return Ok(Schema::Never),
            Value::Object(m) => m,
            _ => return Err(invalid(path, "a schema must be an object or a boolean")),
        };
        let mut n = Node::default();
        let (mut enumerated, mut constant) = (None, None);
        // Read once every keyword is seen: their meaning depends on their neighbours.
        let (mut items, mut additional_items) = (None, None);
        let (mut exclusive_min_flag, mut exclusive_max_flag) = (false, false);
        let id_key = identifier(m, self.draft).map(|(k, _)| k);
        // Drafts 4 to 7: `$ref` overrides every keyword beside it.
        let ref_only = m.contains_key("$ref")
            && matches!(
                self.draft,
                Some(Draft::Draft4 | Draft::Draft6 | Draft::Draft7)
            );
        for (k, x) in m {
            let at = |sub: &str| format!("{path}/{sub}");
            if ref_only && k != "$ref" {
                let silent = ANNOTATIONS.contains(&k.as_str()) || Some(k.as_str()) == id_key;
                if !silent {
                    self.ignore(k, path, IgnoredReason::BesideRef);
                }
                continue;
            }
            if self.off.contains(&k.as_str()) {
                self.ignore(k, path, IgnoredReason::VocabularyOff);
                continue;
            }
            match k.as_str() {
                "$id" if self.draft == Some(Draft::Draft4) => {
                    self.unknown(k, path)?;
                }
                "$id" if std::ptr::eq(v, self.root) => {}
                "$id" => return Err(unsupported(format!("$id {x}"), path)),
                // Draft-04's identifier (resolved before parsing).
                "id" if id_key == Some("id") => {}
                k if UNENFORCED.contains(&k) => return Err(unsupported(k, path)),
                "type" => n.types = Some(TypeSet::parse(x, path)?),
                "enum" => match x {
                    Value::Array(e) => enumerated = Some(e.clone()),
                    _ => return Err(invalid(path, "enum must be an array")),
                },
                "const" => constant = Some(x.clone()),
                "$ref" => n.reference = Some(self.reference(x, path)?),
                "allOf" => {
                    let all = nonempty_list(
                        x,
                        path,
                        "allOf must be an array",
                        "allOf must not be empty",
                    )?;
                    n.all_of = Some(self.list(all, &at("allOf"))?);
                }
                "anyOf" | "oneOf" => {
                    let branches = nonempty_list(
                        x,
                        path,
                        "anyOf/oneOf must be an array",
                        "anyOf/oneOf must not be empty",
                    )?;
                    let branches = Some(self.list(branches, &at(k))?);
                    if k == "anyOf" {
                        n.any_of = branches;
                    } else {
                        n.one_of = branches;
                    }
                }
                "not" => n.not = Some(self.schema(x, &at("not"))?),
                "if" => n.cond = Some(self.schema(x, &at("if"))?),
                "then" => n.then = Some(self.schema(x, &at("then"))?),
                "else" => n.otherwise = Some(self.schema(x, &at("else"))?),
                "dependentSchemas" => {
                    let d = name_map(x, path, "dependentSchemas must be an object")?;
                    n.dependent_schemas = Some(self.names(d, &at("dependentSchemas"))?);
                }
                "unevaluatedProperties" => n.unevaluated_properties = Some(self.schema(x, &at(k))?),
                "unevaluatedItems" => n.unevaluated_items = Some(self.schema(x, &at(k))?),
                "minLength" => n.string.min_length = Some(usize_of(x, path)?),
                "maxLength" => n.string.max_length = Some(usize_of(x, path)?),
                "pattern" => match x {
                    Value::String(p) => n.string.patterns.push(p.clone()),
                    _ => return Err(invalid(path, "pattern must be a string")),
                },
                "format" => match x {
                    Value::String(f) if self.format == FormatMode::Annotation => self.ignore(
                        &format!("format {f:?}"),
                        path,
                        IgnoredReason::FormatAnnotation,
                    ),
                    Value::String(f) => match format_kind(f) {
                        FormatKind::Regular | FormatKind::ContextFree => {
                            n.string.format = Some(f.clone())
                        }
                        FormatKind::Unenforced => {
                            return Err(unsupported(format!("format {f:?}"), path))
                        }
                        FormatKind::Unknown => self.ignore(
                            &format!("format {f:?}"),
                            path,
                            IgnoredReason::UnknownFormat,
                        ),
                    },
                    _ => return Err(invalid(path, "format must be a string")),
                },
                "minimum" => n.number.minimum = Some(Decimal::parse(x, path)?),
                "maximum" => n.number.maximum = Some(Decimal::parse(x, path)?),
                // Draft-04: a boolean that makes `minimum`/`maximum` exclusive.
                "exclusiveMinimum" if x.is_boolean() => {
                    exclusive_min_flag = *x == Value::Bool(true)
                }
                "exclusiveMaximum" if x.is_boolean() => {
                    exclusive_max_flag = *x == Value::Bool(true)
                }
                "exclusiveMinimum" => n.number.exclusive_minimum = Some(Decimal::parse(x, path)?),
                "exclusiveMaximum" => n.number.exclusive_maximum = Some(Decimal::parse(x, path)?),
                "multipleOf" => {
                    let d = Decimal::parse(x, path)?;
                    if !d.is_positive() {
                        return Err(invalid(path, "multipleOf must be positive"));
                    }
                    n.number.multiple_of = Some(d);
                }
                "prefixItems" => match x {
                    Value::Array(p) => {
                        n.array.prefix_items = Some(self.list(p, &at("prefixItems"))?)
                    }
                    _ => return Err(invalid(path, "prefixItems must be an array")),
                },
                "items" => items = Some(x),
                "additionalItems" => additional_items = Some(x),
                "minItems" => n.array.min_items = Some(usize_of(x, path)?),
                "maxItems" => n.array.max_items = Some(usize_of(x, path)?),
                "contains" => n.array.contains = Some(self.schema(x, &at("contains"))?),
                "minContains" => n.array.min_contains = Some(usize_of(x, path)?),
                "maxContains" => n.array.max_contains = Some(usize_of(x, path)?),
                "uniqueItems" => match x {
                    Value::Bool(b) => n.array.unique_items = *b,
                    _ => return Err(invalid(path, "uniqueItems must be a boolean")),
                },
                "properties" => {
                    let p = name_map(x, path, "properties must be an object")?;
                    n.object.properties = Some(self.names(p, &at("properties"))?);
                }
                "patternProperties" => {
                    let p = name_map(x, path, "patternProperties must be an object")?;
                    n.object.pattern_properties = Some(self.names(p, &at(k))?);
                }
                "additionalProperties" => {
                    n.object.additional_properties = Some(self.schema(x, &at(k))?)
                }
                "propertyNames" => n.object.property_names = Some(self.schema(x, &at(k))?),
                "required" => {
                    let Value::Array(r) = x else {
                        return Err(invalid(path, "required must be an array"));
                    };
                    // Names once each, in order: a set keeps this linear in the list.
                    let mut required: Vec<String> = Vec::new();
                    let mut seen = std::collections::HashSet::new();
                    for v in r {
                        let Value::String(s) = v else {
                            return Err(invalid(path, "required must hold strings"));
                        };
                        if seen.insert(s.as_str()) {
                            required.push(s.clone());
                        }
                    }
                    n.object.required = Some(required);
                }
                "minProperties" => n.object.min_properties = Some(usize_of(x, path)?),
                "maxProperties" => n.object.max_properties = Some(usize_of(x, path)?),
                "dependentRequired" => {
                    let d = name_map(x, path, "dependentRequired must be an object")?;
                    let mut pairs = Vec::new();
                    for (k, v) in d {
                        let Value::Array(v) = v else {
                            return Err(invalid(path, "dependentRequired values must be arrays"));
                        };
                        pairs.push((k.clone(), names_of(v, path)?));
                    }
                    n.object
                        .dependent_required
                        .get_or_insert_with(Vec::new)
                        .extend(pairs);
                }
                // Drafts 4 to 7: each value is the names the property needs (like
                // `dependentRequired`) or a schema the object must match (`dependentSchemas`).
                "dependencies" if self.draft >= Some(Draft::Draft2019_09) => {
                    self.ignore(k, path, IgnoredReason::OtherDraft)
                }
                "dependencies" => {
                    let d = name_map(x, path, "dependencies must be an object")?;
                    for (name, v) in d {
                        if let Value::Array(v) = v {
                            let need = names_of(v, path)?;
                            n.object
                                .dependent_required
                                .get_or_insert_with(Vec::new)
                                .push((name.clone(), need));
                        } else {
                            let sp = format!("{path}/dependencies/{}", escape_pointer(name));
                            let sub = self.schema(v, &sp)?;
                            n.dependent_schemas
                                .get_or_insert_with(Vec::new)
                                .push((name.clone(), sub));
                        }
                    }
                }
                k if ANNOTATIONS.contains(&k) => {}
                _ => self.unknown(k, path)?,
            }
        }
        // `items` as an array is the tuple form (drafts 4 to 2019-09; not valid in 2020-12,
        // where `prefixItems` says it, so it can only mean that): `additionalItems` is then
        // the schema of the items after the tuple. Beside a single `items` schema, or alone,
        // `additionalItems` has no effect.
        match items {
            Some(Value::Array(tuple)) => {
                if n.array.prefix_items.is_some() {
                    return Err(invalid(path, "prefixItems beside an array of items"));
                }
                n.array.prefix_items = Some(self.list(tuple, &format!("{path}/items"))?);
                if let Some(x) = additional_items {
                    n.array.items = Some(self.schema(x, &format!("{path}/additionalItems"))?);
                }
            }
            Some(x) => n.array.items = Some(self.schema(x, &format!("{path}/items"))?),
            None => {}
        }
        if exclusive_min_flag {
            if let Some(d) = n.number.minimum.take() {
                n.number.exclusive_minimum = Some(match n.number.exclusive_minimum.take() {
                    Some(e) if e > d => e,
                    _ => d,
                });
            }
        }
        if exclusive_max_flag {
            if let Some(d) = n.number.maximum.take() {
                n.number.exclusive_maximum = Some(match n.number.exclusive_maximum.take() {
                    Some(e) if e < d => e,
                    _ => d,
                });
            }
        }
        n.values = match (enumerated, constant) {
            (None, None) => None,
            (Some(e), None) => Some(e.into()),
            (None, Some(c)) => Some(vec![c].into()),
            (Some(e), Some(c)) => Some(e.into_iter().filter(|v| json_eq(v, &c)).collect()),
        };
        Ok(Schema::node(n))
    }
}

impl Parser<'_> {
    fn ignore(&mut self, keyword: &str, path: &str, reason: IgnoredReason) {
        self.ignored.push(IgnoredKeyword {
            keyword: keyword.to_string(),
            path: path.to_string(),
            reason,
        });
    }

    /// A keyword JSON Schema does not define: an annotation, or refused in strict mode.
    fn unknown(&mut self, keyword: &str, path: &str) -> Result<(), Error> {
        if self.strict {
            return Err(Error::UnknownKeyword {
                keyword: keyword.to_string(),
                path: path.to_string(),
            });
        }
        self.ignore(keyword, path, IgnoredReason::Unknown);
        Ok(())
    }
}

/// The property names of a `dependentRequired` (or `dependencies`) entry.
fn names_of(v: &[Value], path: &str) -> Result<Vec<String>, Error> {
    v.iter()
        .map(|x| {
            x.as_str()
                .map(String::from)
                .ok_or_else(|| invalid(path, "dependentRequired values must hold strings"))
        })
        .collect()
}

/// Compact serialisation (serde_json's, which keeps key order with `preserve_order`).
pub(crate) fn compact(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// JSON Schema equality: numbers compare by value, objects ignore key order.
pub(super) fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_eq(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_quick_keyword_checks_agree_with_the_keyword_table() {
        assert_eq!(KEYWORD_NAMES[REF_BIT as usize], "$ref");
        let parse = |v: serde_json::Value| match Document::parse(&v) {
            Ok(d) => d.root,
            Err(e) => panic!("{v}: {e}"),
        };
        for (v, bare) in [
            (
                json!({"$ref": "#/definitions/a", "definitions": {"a": {}}}),
                true,
            ),
            (
                json!({"$ref": "#/definitions/a", "type": "string", "definitions": {"a": {}}}),
                false,
            ),
            (json!({"type": "string"}), false),
        ] {
            let Schema::Node(n) = parse(v.clone()) else {
                panic!("{v}: no node");
            };
            assert_eq!(n.is_bare_ref(), bare, "{v}");
            assert_eq!(n.is_bare_ref(), n.only(&["$ref"]), "{v}");
            assert!(!n.is_empty(), "{v}");
        }
        assert!(Node::default().is_empty());
        assert_eq!(Schema::node(Node::default()), Schema::Any);
        let not_only = Node {
            not: Some(Schema::Never),
            ..Node::default()
        };
        assert!(!not_only.is_empty());
    }

    #[test]
    fn a_node_stays_small_enough_to_copy() {
        // The algebra copies nodes whole to change a keyword or two; numbers' bounds and the
        // "some member" condition, absent from most nodes, are boxed so that an absent one is
        // a null pointer. A node of 1,072 bytes (before) spent a sixth more of the compile of
        // the algebra's heaviest schemas (template, utam) in copies and the allocator.
        assert!(std::mem::size_of::<Option<super::super::number::Decimal>>() <= 8);
        let size = std::mem::size_of::<Node>();
        assert!(size <= 800, "a schema node is {size} bytes");
    }

    #[test]
    fn unenforced_and_strict_unknown_keywords_are_refused_at_parse_time_with_their_path() {
        let e = Document::parse(&json!({"properties": {"a/b": {"disallow": "string"}}}));
        assert!(
            matches!(&e, Err(Error::UnsupportedKeyword { keyword, path })
                if keyword == "disallow" && path == "#/properties/a~1b"),
            "{e:?}"
        );
        // Definitions are annotations until something refers to them; an unknown keyword is
        // an annotation, listed, unless strict mode refuses it.
        let strict = JsonOptions::default().with_strict(true);
        let defs = json!({"$defs": {"x": {"bogus": 1}}, "type": "string"});
        assert!(Document::parse_with(&defs, None, &strict, &[]).is_ok());
        let referred = json!({"$defs": {"x": {"bogus": 1}}, "$ref": "#/$defs/x"});
        assert!(
            matches!(Document::parse_with(&referred, None, &strict, &[]), Err(Error::UnknownKeyword { keyword, path })
                if keyword == "bogus" && path == "#/$defs/x")
        );
        let doc = Document::parse(&referred).unwrap();
        assert_eq!(doc.ignored.len(), 1);
        assert_eq!(
            (
                doc.ignored[0].keyword.as_str(),
                doc.ignored[0].path.as_str()
            ),
            ("bogus", "#/$defs/x")
        );
        // Malformed values of known keywords are invalid, not unsupported.
        for bad in [
            json!({"type": "decimal"}),
            json!({"minLength": -1}),
            json!({"required": "a"}),
            json!({"multipleOf": 0}),
            json!({"allOf": []}),
            json!({"minimum": "1"}),
        ] {
            assert!(
                matches!(Document::parse(&bad), Err(Error::InvalidSchema { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn references_are_indices_and_recursion_is_a_cycle() {
        let s = json!({
            "$defs": {"node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}}},
            "$ref": "#/$defs/node"
        });
        let doc = Document::parse(&s).unwrap();
        // One target, parsed once, whose `next` property refers back to it.
        assert_eq!(doc.table.len(), 1);
        let Schema::Node(root) = &doc.root else {
            panic!("root is a node")
        };
        assert_eq!(root.reference.as_ref().map(|r| r.target), Some(0));
        let Schema::Node(target) = &doc.table[0] else {
            panic!("target is a node")
        };
        let next = named(target.object.properties.as_deref().unwrap(), "next");
        let Some(Schema::Node(next)) = next else {
            panic!("next is a node")
        };
        assert_eq!(next.reference.as_ref().map(|r| r.target), Some(0));
    }

    #[test]
    fn a_target_is_recursive_when_its_references_lead_back_to_it() {
        // `a` and `b` refer to each other (through `anyOf` and `items`), `c` to itself
        // through `not`; `leaf` refers to nothing, and `user` to `a`, which never leads back
        // to `user`.
        let s = json!({
            "$defs": {
                "a": {"anyOf": [{"type": "null"}, {"properties": {"b": {"$ref": "#/$defs/b"}}}]},
                "b": {"type": "array", "items": {"$ref": "#/$defs/a"}},
                "c": {"not": {"additionalProperties": {"$ref": "#/$defs/c"}}},
                "leaf": {"type": "string"},
                "user": {"properties": {"a": {"$ref": "#/$defs/a"}, "l": {"$ref": "#/$defs/leaf"}}}
            },
            "properties": {
                "u": {"$ref": "#/$defs/user"}, "c": {"$ref": "#/$defs/c"}, "b": {"$ref": "#/$defs/b"}
            }
        });
        let doc = Document::parse(&s).unwrap();
        let graph = RefGraph::new(&doc.table);
        let mut found: Vec<(String, bool)> = Vec::new();
        let mut stack = vec![&doc.root];
        let mut seen = std::collections::HashSet::new();
        while let Some(s) = stack.pop() {
            let Schema::Node(n) = s else { continue };
            if let Some(r) = &n.reference {
                if seen.insert(r.target) {
                    found.push((r.uri.clone(), graph.recursive(r.target)));
                    stack.push(&doc.table[r.target]);
                }
            }
            n.each_child(&mut |c| stack.push(c));
        }
        found.sort();
        let want = [
            ("#/$defs/a", true),
            ("#/$defs/b", true),
            ("#/$defs/c", true),
            ("#/$defs/leaf", false),
            ("#/$defs/user", false),
        ];
        let want: Vec<(String, bool)> = want.iter().map(|(u, r)| (u.to_string(), *r)).collect();
        assert_eq!(found, want);
    }

    #[test]
    fn enum_and_const_parse_to_their_common_values() {
        let doc = Document::parse(&json!({"enum": [1, 2.0, "2"], "const": 2})).unwrap();
        let Schema::Node(n) = doc.root else {
            panic!("a node")
        };
        assert_eq!(n.values, Some(vec![json!(2.0)].into()));
        // Annotations alone assert nothing.
        let doc = Document::parse(&json!({"title": "t", "$comment": "c"})).unwrap();
        assert_eq!(doc.root, Schema::Any);
    }

    #[test]
    fn type_sets_meet_like_the_specification_says() {
        let t = |v: Value| TypeSet::parse(&v, "#").unwrap();
        assert_eq!(
            t(json!("number")).intersect(t(json!("integer"))),
            t(json!("integer"))
        );
        assert_eq!(
            t(json!(["string", "number"])).intersect(t(json!(["integer", "null"]))),
            t(json!("integer"))
        );
        assert!(t(json!("string")).intersect(t(json!("object"))).is_empty());
        assert_eq!(
            t(json!(["null", "boolean", "number"])).complement(),
            t(json!(["string", "array", "object"]))
        );
        assert_eq!(
            t(json!(["integer", "null"])).json_types(),
            t(json!(["number", "null"]))
        );
    }
}
