//! A runner for schema test files: MaskBench's format (one file per schema, `{schema, tests:
//! [{data, valid}]}`) and the JSON-Schema-Test-Suite's (an array of `{description, schema,
//! tests}`). The CLI's `constrain-bench` formats its report.
//!
//! Each outcome keeps what a reader needs to find a problem in seconds: the file and the index
//! of the group in it, the refusal of a schema that did not compile ([`SchemaOutcome::refusal`]:
//! keyword, path, reason), and every instance handled wrongly with its index in the file's
//! `tests` ([`Failure`]). [`ConformanceReport::refusal_table`] counts the refused schemas by
//! keyword.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

use crate::constraint::Constraint;
use crate::json::{compact, compile_json_schema, JsonOptions};
use crate::vocab::TokenVocab;
use crate::{Error, GrammarConstraint};

/// Median, 99th and 99.9th percentile and maximum of a set of timings.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Percentiles {
    /// Median.
    pub median: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Maximum.
    pub max: f64,
}

impl Percentiles {
    /// Percentiles of `values` (nearest rank); all zero when empty.
    pub fn of(values: &mut [f64]) -> Percentiles {
        if values.is_empty() {
            return Percentiles::default();
        }
        values.sort_by(|a, b| a.total_cmp(b));
        let at =
            |q: f64| values[((values.len() as f64 * q).ceil() as usize).clamp(1, values.len()) - 1];
        Percentiles {
            median: at(0.5),
            p99: at(0.99),
            p999: at(0.999),
            max: values[values.len() - 1],
        }
    }
}

/// An instance that a compiled schema handled wrongly: a valid one refused or an invalid one
/// accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The instance's index in its group's `tests`.
    pub index: usize,
    /// Whether the file says the instance is valid (so it was refused) or invalid (so it was
    /// accepted).
    pub valid: bool,
    /// The test's `description`, empty when it has none.
    pub description: String,
    /// The instance as it was forced, compact JSON.
    pub data: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = if self.valid {
            "valid instance refused"
        } else {
            "INVALID INSTANCE ACCEPTED"
        };
        write!(
            f,
            "test {}: {what}: {}: {}",
            self.index, self.description, self.data
        )
    }
}

/// Why a schema was not compiled: the keyword that was refused, where, and the error's text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The keyword ([`Error::UnsupportedKeyword`]'s first word: `oneOf` for "oneOf (branches
    /// that may overlap)", `$ref` for "$ref https://..."), or for other errors a short name of
    /// the kind of refusal (`invalid schema`, `pattern`, a limit's name, ...).
    pub keyword: String,
    /// The JSON pointer of the schema that holds it, empty when the error names none.
    pub path: String,
    /// The error, as it displays.
    pub reason: String,
}

impl Refusal {
    /// The refusal that `error` describes.
    pub fn of(error: &Error) -> Refusal {
        let (keyword, path) = match error {
            Error::UnsupportedKeyword { keyword, path } => (
                keyword
                    .split_whitespace()
                    .next()
                    .unwrap_or(keyword)
                    .to_string(),
                path.clone(),
            ),
            Error::InvalidSchema { path, .. } => ("invalid schema".to_string(), path.clone()),
            Error::Regex { .. } | Error::RegexSyntax { .. } => {
                ("pattern".to_string(), String::new())
            }
            Error::TooLarge { .. } => ("automaton size".to_string(), String::new()),
            Error::LimitExceeded { limit, .. } => (limit.name().to_string(), String::new()),
            Error::EmptyChoice { .. } => ("empty enum".to_string(), String::new()),
            _ => ("other".to_string(), String::new()),
        };
        Refusal {
            keyword,
            path,
            reason: error.to_string(),
        }
    }
}

/// What happened to one schema.
#[derive(Clone, Debug)]
pub struct SchemaOutcome {
    /// File name and, for test-suite files, the group description.
    pub name: String,
    /// The file it came from, as given to [`ConformanceRun::run_file`] (empty for
    /// [`ConformanceRun::run_schema`]).
    pub file: String,
    /// The index of its group in a test-suite file (0 in a one-schema file).
    pub group: usize,
    /// `Ok` if it compiled (an empty language counts as compiled: it refuses everything), else
    /// the error (usually an unsupported keyword).
    pub compiled: Result<(), Error>,
    /// Compile time in milliseconds (to the first mask).
    pub compile_ms: f64,
    /// Valid instances.
    pub valid_total: usize,
    /// Valid instances accepted with the end token allowed at their end.
    pub valid_accepted: usize,
    /// Invalid instances.
    pub invalid_total: usize,
    /// Invalid instances refused.
    pub invalid_rejected: usize,
    /// Every instance handled wrongly, in file order.
    pub failures: Vec<Failure>,
    /// Tokens whose mask bit disagreed with `advance` (always a bug).
    pub mask_mismatches: usize,
}

impl SchemaOutcome {
    /// Why the schema was not compiled, or `None` when it was.
    pub fn refusal(&self) -> Option<Refusal> {
        self.compiled.as_ref().err().map(Refusal::of)
    }
}

/// Totals over a run.
#[derive(Clone, Debug, Default)]
pub struct ConformanceReport {
    /// Per schema.
    pub outcomes: Vec<SchemaOutcome>,
    /// Schemas seen.
    pub schemas: usize,
    /// Schemas compiled.
    pub compiled: usize,
    /// Schemas not compiled.
    pub unsupported: usize,
    /// Valid instances of compiled schemas.
    pub valid_total: usize,
    /// Of those, accepted.
    pub valid_accepted: usize,
    /// Invalid instances of compiled schemas.
    pub invalid_total: usize,
    /// Of those, refused.
    pub invalid_rejected: usize,
    /// Mask computation time per token, microseconds.
    pub mask_us: Percentiles,
    /// Compile time to the first mask, milliseconds.
    pub compile_ms: Percentiles,
    /// Every mask's time, microseconds, in the order the masks were computed: the same order
    /// in every run of the same files with the same tokenizer, so that runs in separate
    /// processes can be compared mask by mask ([`ConformanceReport::least_of`]).
    pub mask_us_each: Vec<f64>,
    /// Every compiled schema's time to its first mask, milliseconds, in the order compiled.
    pub compile_ms_each: Vec<f64>,
    /// Tokens whose mask bit disagreed with `advance`, over all schemas.
    pub mask_mismatches: usize,
    /// The most work units of any one mask or token
    /// ([`GrammarConstraint::last_work`], bounded by [`Limits::max_mask_work`]).
    ///
    /// [`Limits::max_mask_work`]: crate::Limits::max_mask_work
    pub max_work: u64,
}

impl ConformanceReport {
    /// The refused schemas counted by the keyword of their refusal (a compile stops at its
    /// first refusal, so each refused schema counts once), in keyword order.
    pub fn refusal_table(&self) -> BTreeMap<String, usize> {
        let mut table = BTreeMap::new();
        for r in self.outcomes.iter().filter_map(SchemaOutcome::refusal) {
            *table.entry(r.keyword).or_insert(0) += 1;
        }
        table
    }

    /// Invalid instances of compiled schemas that were accepted.
    pub fn invalid_accepted(&self) -> usize {
        self.invalid_total - self.invalid_rejected
    }

    /// Each mask's and each compile's least time over this run and `others` (runs of the same
    /// files, in other processes: [`ConformanceReport::mask_us_each`] and
    /// [`ConformanceReport::compile_ms_each`] of each), as (mask µs, compile ms) percentiles.
    /// On a shared machine one run's tail holds whatever else ran at that moment; the least of
    /// a few separate runs is what the work itself costs (first uses within a process
    /// included, since each run is a fresh process). An error when a run timed other masks
    /// or compiles than this one (another count: other files, or another tokenizer).
    pub fn least_of(
        &self,
        others: &[(Vec<f64>, Vec<f64>)],
    ) -> Result<(Percentiles, Percentiles), String> {
        let mut masks = self.mask_us_each.clone();
        let mut compiles = self.compile_ms_each.clone();
        for (i, (m, c)) in others.iter().enumerate() {
            if m.len() != masks.len() || c.len() != compiles.len() {
                return Err(format!(
                    "run {} timed {} masks and {} compiles where the first timed {} and {}",
                    i + 2,
                    m.len(),
                    c.len(),
                    masks.len(),
                    compiles.len()
                ));
            }
            for (x, y) in masks.iter_mut().zip(m).chain(compiles.iter_mut().zip(c)) {
                *x = x.min(*y);
            }
        }
        Ok((Percentiles::of(&mut masks), Percentiles::of(&mut compiles)))
    }
}

/// Runs schemas and their test instances through JSON Schema constraints.
pub struct ConformanceRun<'a> {
    vocab: Arc<TokenVocab>,
    options: JsonOptions,
    tokenize: &'a dyn Fn(&[u8]) -> Vec<u32>,
    mask_times: Vec<f64>,
    max_work: u64,
    compile_times: Vec<f64>,
}

impl<'a> ConformanceRun<'a> {
    /// A runner with the model's vocabulary and tokenizer (bytes to token ids).
    pub fn new(
        vocab: Arc<TokenVocab>,
        options: JsonOptions,
        tokenize: &'a dyn Fn(&[u8]) -> Vec<u32>,
    ) -> Self {
        ConformanceRun {
            vocab,
            options,
            tokenize,
            mask_times: Vec::new(),
            max_work: 0,
            compile_times: Vec::new(),
        }
    }

    /// Runs one schema against `(instance, valid, description)` cases.
    pub fn run_schema(
        &mut self,
        name: &str,
        schema: &Value,
        tests: &[(Value, bool, String)],
    ) -> SchemaOutcome {
        let t0 = Instant::now();
        let compiled = compile_json_schema(schema, &self.options);
        let mut out = SchemaOutcome {
            name: name.to_string(),
            file: String::new(),
            group: 0,
            compiled: Ok(()),
            compile_ms: 0.0,
            valid_total: 0,
            valid_accepted: 0,
            invalid_total: 0,
            invalid_rejected: 0,
            failures: Vec::new(),
            mask_mismatches: 0,
        };
        let grammar = match compiled {
            Ok(g) => Some(g),
            Err(Error::EmptyLanguage) => None,
            Err(e) => {
                out.compiled = Err(e);
                return out;
            }
        };
        let mut mask = self.vocab.empty_mask();
        if let Some(g) = &grammar {
            let mut c = GrammarConstraint::new(Arc::clone(g), &self.vocab);
            let _ = c.fill_mask(&mut mask);
        }
        out.compile_ms = t0.elapsed().as_secs_f64() * 1e3;
        self.compile_times.push(out.compile_ms);
        for (index, (data, valid, desc)) in tests.iter().enumerate() {
            let bytes = compact(data).into_bytes();
            let accepted = match &grammar {
                None => false,
                Some(g) => {
                    let mut c = GrammarConstraint::new(Arc::clone(g), &self.vocab);
                    self.force(&mut c, &bytes, &mut mask, &mut out.mask_mismatches)
                }
            };
            if *valid {
                out.valid_total += 1;
                out.valid_accepted += accepted as usize;
            } else {
                out.invalid_total += 1;
                out.invalid_rejected += !accepted as usize;
            }
            if accepted != *valid {
                out.failures.push(Failure {
                    index,
                    valid: *valid,
                    description: desc.clone(),
                    data: String::from_utf8_lossy(&bytes).into_owned(),
                });
            }
        }
        out
    }

    /// Runs one schema against `(instance, valid, description)` cases, recording the file and
    /// group it came from.
    fn run_group(
        &mut self,
        file: &str,
        group: usize,
        name: &str,
        schema: &Value,
        tests: &[(Value, bool, String)],
    ) -> SchemaOutcome {
        let mut out = self.run_schema(name, schema, tests);
        out.file = file.to_string();
        out.group = group;
        out
    }

    /// Forces `bytes` token by token; true when every token is allowed and the end is allowed
    /// at the end. Checks each token's mask bit against `advance`.
    fn force(
        &mut self,
        c: &mut GrammarConstraint,
        bytes: &[u8],
        mask: &mut [u64],
        mismatches: &mut usize,
    ) -> bool {
        let tokens = (self.tokenize)(bytes);
        for &t in &tokens {
            let t0 = Instant::now();
            if c.fill_mask(mask).is_err() {
                return false;
            }
            self.mask_times.push(t0.elapsed().as_secs_f64() * 1e6);
            self.max_work = self.max_work.max(c.last_work());
            let in_mask = mask
                .get(t as usize / 64)
                .is_some_and(|w| w >> (t % 64) & 1 == 1);
            let ok = c.advance(t).is_ok();
            self.max_work = self.max_work.max(c.last_work());
            if ok != in_mask {
                *mismatches += 1;
            }
            if !ok {
                return false;
            }
        }
        let _ = c.fill_mask(mask);
        let eos_in_mask = self
            .vocab
            .eos_tokens()
            .iter()
            .all(|&t| mask[t as usize / 64] >> (t % 64) & 1 == 1);
        if c.is_complete() != eos_in_mask && !self.vocab.eos_tokens().is_empty() {
            *mismatches += 1;
        }
        c.is_complete()
    }

    /// Runs one file: MaskBench's `{schema, tests: [{data, valid}]}` or the
    /// JSON-Schema-Test-Suite's array of `{description, schema, tests}`.
    pub fn run_file(&mut self, path: &Path) -> Result<Vec<SchemaOutcome>, Error> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| Error::Io {
            path: file.clone(),
            reason: e.to_string(),
        })?;
        let v: Value = serde_json::from_str(&text).map_err(|e| Error::Io {
            path: file.clone(),
            reason: e.to_string(),
        })?;
        let groups: Vec<&Value> = match &v {
            Value::Array(a) => a.iter().collect(),
            _ => vec![&v],
        };
        let stem = path
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut outs = Vec::new();
        for (group, g) in groups.into_iter().enumerate() {
            let (Some(schema), Some(Value::Array(tests))) = (g.get("schema"), g.get("tests"))
            else {
                return Err(Error::Io {
                    path: file,
                    reason: "expected `schema` and `tests`".into(),
                });
            };
            let mut cases = Vec::new();
            for t in tests {
                let (Some(data), Some(Value::Bool(valid))) = (t.get("data"), t.get("valid")) else {
                    return Err(Error::Io {
                        path: file,
                        reason: "each test needs `data` and `valid`".into(),
                    });
                };
                let desc = t
                    .get("description")
                    .and_then(|d| d.as_str())
                    .unwrap_or("")
                    .to_string();
                cases.push((data.clone(), *valid, desc));
            }
            let name = match g.get("description").and_then(|d| d.as_str()) {
                Some(d) => format!("{stem}: {d}"),
                None => stem.clone(),
            };
            // A schema published at a URL is read with it as its base URI, as a fetched
            // schema is, so that its relative `$ref`s name the documents beside it.
            let base = Self::source_url(g).map(str::to_string);
            let saved = std::mem::replace(&mut self.options.base_uri, base);
            outs.push(self.run_group(&file, group, &name, schema, &cases));
            self.options.base_uri = saved;
        }
        Ok(outs)
    }

    /// The schemas of a folder of MaskBench-format files as documents that `$ref`s may name
    /// ([`crate::SchemaResources`]), so that a corpus whose schemas refer to each other (JSON
    /// Schema Store's) compiles as its publisher resolves it: each file's `schema` under its
    /// identifier (`$id`, or draft-04's `id`) and, when the file's `source` names the URL it
    /// was published at (`"... schema https://json.schemastore.org/x.json ..."`, as
    /// `conformance/real-world` writes it), under that URL and the URL without `.json` (JSON
    /// Schema Store serves both). Files of another shape are skipped. Nothing is fetched.
    pub fn resources_in_dir(dir: &Path) -> Result<crate::SchemaResources, Error> {
        let files = json_files(dir)?;
        let mut resources = crate::SchemaResources::new();
        for f in files {
            let text = std::fs::read_to_string(&f).map_err(|e| Error::Io {
                path: f.display().to_string(),
                reason: e.to_string(),
            })?;
            let Ok(file @ Value::Object(_)) = serde_json::from_str::<Value>(&text) else {
                continue;
            };
            let Some(schema) = file.get("schema") else {
                continue;
            };
            if let Some(url) = Self::source_url(&file) {
                resources.insert(url, schema.clone());
                if let Some(short) = url.strip_suffix(".json") {
                    resources.insert(short, schema.clone());
                }
            }
            resources.insert_document(schema.clone());
        }
        Ok(resources)
    }

    /// Every `*.json` document under `dir`, its subfolders included, as served at `url`
    /// followed by its path below `dir` (`/` between folders): the JSON-Schema-Test-Suite's
    /// `remotes` folder, which its runners serve at `http://localhost:1234/`
    /// ([`Self::SUITE_REMOTES_URL`]). Each document also goes under its own identifier where it
    /// has one. Nothing is fetched.
    pub fn documents_served_at(dir: &Path, url: &str) -> Result<crate::SchemaResources, Error> {
        let io = |p: &Path, e: std::io::Error| Error::Io {
            path: p.display().to_string(),
            reason: e.to_string(),
        };
        let mut resources = crate::SchemaResources::new();
        let mut pending = vec![(dir.to_path_buf(), String::new())];
        while let Some((folder, prefix)) = pending.pop() {
            let mut entries: Vec<_> = std::fs::read_dir(&folder)
                .map_err(|e| io(&folder, e))?
                .filter_map(|e| e.ok())
                .collect();
            entries.sort_by_key(|e| e.file_name());
            for e in entries {
                let path = e.path();
                let name = e.file_name().to_string_lossy().into_owned();
                if path.is_dir() {
                    pending.push((path, format!("{prefix}{name}/")));
                } else if name.ends_with(".json") {
                    let text = std::fs::read_to_string(&path).map_err(|e| io(&path, e))?;
                    let doc: Value = serde_json::from_str(&text).map_err(|e| Error::Io {
                        path: path.display().to_string(),
                        reason: e.to_string(),
                    })?;
                    resources.insert_document(doc.clone());
                    resources.insert(&format!("{url}{prefix}{name}"), doc);
                }
            }
        }
        Ok(resources)
    }

    /// Where the JSON-Schema-Test-Suite's runners serve its `remotes` folder.
    pub const SUITE_REMOTES_URL: &'static str = "http://localhost:1234/";

    /// The URL a MaskBench-format file says its schema was published at: the word after
    /// `schema` in its `source` (`"... schema https://json.schemastore.org/x.json ..."`, as
    /// `conformance/real-world` writes it), when it is an `http(s)` URL. [`Self::run_file`]
    /// reads the schema with it as [`JsonOptions::base_uri`].
    pub fn source_url(file: &Value) -> Option<&str> {
        file.get("source")
            .and_then(|s| s.as_str())
            .and_then(|s| s.split_whitespace().skip_while(|w| *w != "schema").nth(1))
            .filter(|u| u.starts_with("https://") || u.starts_with("http://"))
    }

    /// Runs every `*.json` file of a directory (sorted by name) and totals the results.
    pub fn run_dir(&mut self, dir: &Path) -> Result<ConformanceReport, Error> {
        let files = json_files(dir)?;
        let mut outcomes = Vec::new();
        for f in files {
            outcomes.extend(self.run_file(&f)?);
        }
        Ok(self.report(outcomes))
    }

    /// Totals `outcomes` with the timings gathered so far.
    pub fn report(&mut self, outcomes: Vec<SchemaOutcome>) -> ConformanceReport {
        let mut r = ConformanceReport {
            schemas: outcomes.len(),
            ..Default::default()
        };
        for o in &outcomes {
            if o.compiled.is_ok() {
                r.compiled += 1;
                r.valid_total += o.valid_total;
                r.valid_accepted += o.valid_accepted;
                r.invalid_total += o.invalid_total;
                r.invalid_rejected += o.invalid_rejected;
                r.mask_mismatches += o.mask_mismatches;
            } else {
                r.unsupported += 1;
            }
        }
        r.outcomes = outcomes;
        r.mask_us_each = self.mask_times.clone();
        r.compile_ms_each = self.compile_times.clone();
        r.mask_us = Percentiles::of(&mut self.mask_times);
        r.max_work = self.max_work;
        r.compile_ms = Percentiles::of(&mut self.compile_times);
        r
    }
}

/// The `*.json` regular files of a corpus folder, sorted by name. A FIFO or a device named
/// `*.json` is skipped (after symbolic links), since reading it could block for ever.
fn json_files(dir: &Path) -> Result<Vec<std::path::PathBuf>, Error> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| Error::Io {
            path: dir.display().to_string(),
            reason: e.to_string(),
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .filter(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file()))
        .collect();
    files.sort();
    Ok(files)
}
