//! nextok's JSON Schema constraints side by side with llguidance's, on the same schemas, the same
//! instances, SmolLM2's 49,152-token vocabulary, in one process.
//!
//! Run with
//! `cargo bench -p nextok-benches --bench llguidance_compare`
//! (needs the default model for its vocabulary and tokenizer: `cargo xtask fetch-model`; the
//! JSON-Schema-Test-Suite is read from `conformance/json-schema-test-suite/draft2020-12`
//! or from `$NEXTOK_SUITE`, which may also name a folder of MaskBench-format files such as
//! `conformance/real-world/schemastore`).
//!
//! nextok reads the folder's MaskBench files, and those of a sibling `<dir>-resources` folder, as
//! documents that `$ref`s may name, and each schema with the URL its file's `source` names as
//! its base URI; llguidance takes none.
//!
//! It also counts, for each engine on its own, the schemas it compiles and, of their instances,
//! the valid ones it accepts and the invalid ones it accepts (every token allowed and the end
//! allowed after the last), on the same files.
//!
//! What it measures, for both engines alike:
//! - compile to first mask: the schema compiled into a fresh constraint (nextok:
//!   `compile_json_schema` and `GrammarConstraint::new`; llguidance: `create_parser` on one
//!   `ParserFactory` and `Matcher::new`) and its first mask, once per schema, each engine's
//!   vocabulary-wide caches shared across schemas as a server would share them (nextok also keeps
//!   the automata of regular expressions per pattern, process-wide, so a bound or format that an
//!   earlier schema used is not determinized again);
//! - per mask: every mask while forcing each valid instance (compact JSON, SmolLM2's own
//!   tokenization) token by token through a fresh constraint of the compiled schema, the mask
//!   after the last token included. An instance counts only when both engines allow every one of
//!   its tokens, so both are timed at the same positions.
//!
//! With `NEXTOK_SLOW_MASK_US=<µs>` set, every timed mask of nextok's slower than that is listed on
//! stderr with its file, test and place, beside llguidance's time for the same mask; with
//! `NEXTOK_SLOW_COMPILE_MS=<ms>`, every schema whose compile to first mask took nextok longer than
//! that, beside llguidance's time.
//!
//! Both are set to compact JSON (llguidance: `"x-guidance": {"whitespace_flexible": false}`), and
//! a schema counts only when both compile it. The nested schema of the `constraints` bench is
//! walked 50 times with its document on top of the suite (first walk cold, the rest warm).

mod common;

use common::{DOCUMENT, SCHEMA};

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{ApproximateTokEnv, TokEnv, TokRxInfo, TokTrie};
use llguidance::{Matcher, ParserFactory};
use nextok_constraints::{
    compile_json_schema, ConformanceRun, Constraint, Grammar, GrammarConstraint, JsonOptions,
    Percentiles, SchemaResources, TokenVocab,
};
use nextok_tokenizer::{BpeTokenizer, EncodeOptions, Tokenizer};
use serde_json::Value;

/// SmolLM2's end tokens: `<|endoftext|>`, `<|im_end|>` and the `<repo_name>` control token the
/// constraints bench also ends on.
const EOS: [u32; 3] = [0, 2, 4];

fn suite_dir() -> PathBuf {
    if let Ok(p) = std::env::var("NEXTOK_SUITE") {
        return PathBuf::from(p);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../conformance/json-schema-test-suite/draft2020-12")
}

/// The documents the folder's schemas may name by URI, for nextok (as `nextok constrain-bench`
/// and `tests/real_world.rs` read them): the folder's own MaskBench files by their source URL,
/// and those of a sibling folder `<dir>-resources` when there is one
/// (`conformance/real-world/schemastore-resources`). llguidance is given none: its JSON Schema
/// front end takes one document, so it refuses a reference to another.
fn resources(dir: &std::path::Path) -> SchemaResources {
    let mut resources = ConformanceRun::resources_in_dir(dir).unwrap_or_default();
    let mut sibling = dir.as_os_str().to_owned();
    sibling.push("-resources");
    let sibling = PathBuf::from(sibling);
    if sibling.is_dir() {
        resources.extend(ConformanceRun::resources_in_dir(&sibling).expect("resources readable"));
    }
    resources
}

/// llguidance's tokenizer environment over the same token bytes. Control tokens get llguidance's
/// marker byte 0xFF before their name, as its own tokenizer loaders do, so that no grammar allows
/// them as text.
fn llg_env(bytes: &[Vec<u8>], names: &[String]) -> TokEnv {
    let words: Vec<Vec<u8>> = bytes
        .iter()
        .zip(names)
        .map(|(b, n)| {
            if b.is_empty() {
                [&[0xFFu8][..], n.as_bytes()].concat()
            } else {
                b.clone()
            }
        })
        .collect();
    let info = TokRxInfo::new(words.len() as u32, EOS[1]);
    Arc::new(ApproximateTokEnv::new(TokTrie::from(&info, &words)))
}

/// Timings of one engine.
#[derive(Default)]
struct Times {
    compile_ms: Vec<f64>,
    mask_us: Vec<f64>,
}

/// One schema compiled by both engines.
struct Both {
    grammar: Arc<Grammar>,
    llg: Matcher,
}

/// Which engines compiled a schema.
struct Compiled {
    ours: Option<Arc<Grammar>>,
    theirs: Option<Matcher>,
    both: Option<Both>,
}

fn compile_both(
    schema: &Value,
    options: &JsonOptions,
    vocab: &Arc<TokenVocab>,
    factory: &ParserFactory,
    ours: &mut Times,
    theirs: &mut Times,
    slow: Option<(f64, &str)>,
) -> Compiled {
    let mut mask = vocab.empty_mask();
    let t0 = Instant::now();
    let grammar = compile_json_schema(schema, options).ok().and_then(|g| {
        let mut c = GrammarConstraint::new(Arc::clone(&g), vocab);
        c.fill_mask(&mut mask).ok().map(|_| g)
    });
    let ours_ms = t0.elapsed().as_secs_f64() * 1e3;

    let mut with_options = schema.clone();
    match &mut with_options {
        Value::Object(m) => {
            m.insert(
                "x-guidance".into(),
                serde_json::json!({"whitespace_flexible": false}),
            );
        }
        // A boolean schema has no room for options: `true` is the empty object.
        Value::Bool(true) => {
            with_options = serde_json::json!({"x-guidance": {"whitespace_flexible": false}})
        }
        _ => {}
    }
    let t0 = Instant::now();
    let llg = factory
        .create_parser(TopLevelGrammar::from_json_schema(with_options))
        .ok()
        .and_then(|p| {
            let mut m = Matcher::new(Ok(p));
            m.compute_mask().ok().map(|_| m)
        })
        .filter(|m| !m.is_error());
    let theirs_ms = t0.elapsed().as_secs_f64() * 1e3;
    let both = match (&grammar, &llg) {
        (Some(grammar), Some(llg)) => {
            if let Some((over, what)) = slow.filter(|(over, _)| ours_ms > *over) {
                eprintln!(
                    "slow compile: {what}: nextok {ours_ms:.2} ms, llguidance {theirs_ms:.2} ms \
                     (over {over} ms)"
                );
            }
            ours.compile_ms.push(ours_ms);
            theirs.compile_ms.push(theirs_ms);
            Some(Both {
                grammar: Arc::clone(grammar),
                llg: llg.deep_clone(),
            })
        }
        _ => None,
    };
    Compiled {
        ours: grammar,
        theirs: llg,
        both,
    }
}

/// Whether nextok accepts the whole instance: every token, then the end.
fn accepted_ours(grammar: &Arc<Grammar>, vocab: &Arc<TokenVocab>, tokens: &[u32]) -> bool {
    let mut c = GrammarConstraint::new(Arc::clone(grammar), vocab);
    tokens.iter().all(|&t| c.advance(t).is_ok()) && c.is_complete()
}

/// Whether llguidance accepts the whole instance: every token, then the end.
fn accepted_theirs(m: &Matcher, tokens: &[u32]) -> bool {
    let mut m = m.deep_clone();
    for &t in tokens {
        let allowed = m.compute_mask().is_ok_and(|lm| lm.is_allowed(t));
        if !allowed || m.consume_token(t).is_err() || m.is_error() {
            return false;
        }
    }
    m.is_accepting().unwrap_or(false)
}

/// Per engine: schemas compiled, and of their instances, valid ones (accepted) and invalid ones
/// (accepted).
#[derive(Default)]
struct Counts {
    compiled: usize,
    valid: usize,
    valid_accepted: usize,
    invalid: usize,
    invalid_accepted: usize,
}

impl Counts {
    fn count(&mut self, valid: bool, accepted: bool) {
        if valid {
            self.valid += 1;
            self.valid_accepted += accepted as usize;
        } else {
            self.invalid += 1;
            self.invalid_accepted += accepted as usize;
        }
    }
}

/// Which engines allowed every token of an instance.
struct Walked {
    ours: bool,
    theirs: bool,
}

/// Forces `tokens` through both engines, timing every mask, the mask after the last token
/// included. The timings are kept only when both allowed every token.
fn walk_both(
    both: &Both,
    vocab: &Arc<TokenVocab>,
    tokens: &[u32],
    ours: &mut Times,
    theirs: &mut Times,
    slow: Option<(f64, &str)>,
) -> Walked {
    let mut c = GrammarConstraint::new(Arc::clone(&both.grammar), vocab);
    let mut mask = vocab.empty_mask();
    let mut ours_us = Vec::with_capacity(tokens.len() + 1);
    let mut ours_ok = true;
    for i in 0..=tokens.len() {
        let t0 = Instant::now();
        if c.fill_mask(&mut mask).is_err() {
            ours_ok = false;
            break;
        }
        ours_us.push(t0.elapsed().as_secs_f64() * 1e6);
        let Some(&t) = tokens.get(i) else { break };
        if mask[t as usize / 64] >> (t % 64) & 1 == 0 || c.advance(t).is_err() {
            ours_ok = false;
            break;
        }
    }
    let mut m = both.llg.deep_clone();
    let mut theirs_us = Vec::with_capacity(tokens.len() + 1);
    let mut theirs_ok = true;
    for i in 0..=tokens.len() {
        let t0 = Instant::now();
        // The generation loop's call: once the grammar can only end, the mask is the end token.
        let Ok(lm) = m.compute_mask_or_eos() else {
            theirs_ok = false;
            break;
        };
        theirs_us.push(t0.elapsed().as_secs_f64() * 1e6);
        let Some(&t) = tokens.get(i) else { break };
        if !lm.is_allowed(t) || m.consume_token(t).is_err() {
            theirs_ok = false;
            break;
        }
    }
    if ours_ok && theirs_ok {
        if let Some((over, what)) = slow {
            for (i, (a, b)) in ours_us.iter().zip(&theirs_us).enumerate() {
                if *a > over {
                    eprintln!(
                        "slow mask: {what}, mask {i} of {}: nextok {a:.1} µs, llguidance {b:.1} µs",
                        tokens.len() + 1
                    );
                }
            }
        }
        ours.mask_us.extend(ours_us);
        theirs.mask_us.extend(theirs_us);
    }
    Walked {
        ours: ours_ok,
        theirs: theirs_ok,
    }
}

fn row(what: &str, unit: &str, ours: &mut [f64], theirs: &mut [f64]) {
    let (a, b) = (Percentiles::of(ours), Percentiles::of(theirs));
    let prec = if unit == "ms" { 3 } else { 2 };
    println!(
        "| {what} ({unit}) | {:.prec$} / {:.prec$} / {:.prec$} | {:.prec$} / {:.prec$} / {:.prec$} |",
        a.median, a.p99, a.max, b.median, b.p99, b.max
    );
}

fn table(title: &str, ours: &mut Times, theirs: &mut Times) {
    println!("\n{title}");
    println!("| median / p99 / max | nextok | llguidance |");
    println!("|---|---|---|");
    row(
        &format!("compile to first mask, {} schemas", ours.compile_ms.len()),
        "ms",
        &mut ours.compile_ms,
        &mut theirs.compile_ms,
    );
    row(
        &format!("per mask, {} masks", ours.mask_us.len()),
        "us",
        &mut ours.mask_us,
        &mut theirs.mask_us,
    );
}

fn encode(tok: &BpeTokenizer, text: &str) -> Option<Vec<u32>> {
    tok.encode(text, EncodeOptions::plain()).ok()
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument that is not ours is ignored.
    let (bytes, tok, names) = common::smollm2();
    let vocab = Arc::new(TokenVocab::new(bytes.clone(), &EOS).expect("vocab"));
    let env = llg_env(&bytes, &names);
    let mut factory = ParserFactory::new_simple(&env).expect("llguidance factory");
    factory.quiet();

    // `NEXTOK_SLOW_MASK_US=50` lists each timed mask of nextok's slower than 50 µs (on stderr,
    // with its file, test and place), to find what makes the tail.
    let slow_over: Option<f64> = std::env::var("NEXTOK_SLOW_MASK_US")
        .ok()
        .and_then(|v| v.parse().ok());
    // `NEXTOK_SLOW_COMPILE_MS=5` lists each schema whose compile to first mask took nextok over
    // 5 ms (on stderr, with its file and group).
    let slow_compile: Option<f64> = std::env::var("NEXTOK_SLOW_COMPILE_MS")
        .ok()
        .and_then(|v| v.parse().ok());

    // The JSON-Schema-Test-Suite.
    let dir = suite_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {} ({e})", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let mut options = JsonOptions::default().with_resources(resources(&dir));
    let (mut ours, mut theirs) = (Times::default(), Times::default());
    let (mut groups, mut compiled, mut instances, mut walked) = (0, 0, 0, 0);
    let (mut ours_compiled, mut theirs_compiled) = (0, 0);
    let (mut ours_refused, mut theirs_refused) = (0, 0);
    let (mut ours_counts, mut theirs_counts) = (Counts::default(), Counts::default());
    for f in &files {
        let text = std::fs::read_to_string(f).expect("suite file");
        // The suite's array of groups, or MaskBench's one schema per file.
        let file_groups = match serde_json::from_str::<Value>(&text) {
            Ok(Value::Array(a)) => a,
            Ok(v @ Value::Object(_)) => vec![v],
            _ => continue,
        };
        for g in &file_groups {
            let (Some(schema), Some(Value::Array(tests))) = (g.get("schema"), g.get("tests"))
            else {
                continue;
            };
            groups += 1;
            // nextok reads a schema with the URL it was published at as its base URI, as the
            // conformance runner does; llguidance takes no documents to resolve against.
            options.base_uri = ConformanceRun::source_url(g).map(str::to_string);
            let what = format!("{} group {}", f.display(), groups - 1);
            let slow = slow_compile.map(|ms| (ms, what.as_str()));
            let c = compile_both(
                schema,
                &options,
                &vocab,
                &factory,
                &mut ours,
                &mut theirs,
                slow,
            );
            ours_compiled += c.ours.is_some() as usize;
            theirs_compiled += c.theirs.is_some() as usize;
            ours_counts.compiled += c.ours.is_some() as usize;
            theirs_counts.compiled += c.theirs.is_some() as usize;
            for t in tests {
                let (Some(data), Some(Value::Bool(valid))) = (t.get("data"), t.get("valid")) else {
                    continue;
                };
                let Some(tokens) = serde_json::to_string(data)
                    .ok()
                    .and_then(|text| encode(&tok, &text))
                else {
                    continue;
                };
                if let Some(g) = &c.ours {
                    ours_counts.count(*valid, accepted_ours(g, &vocab, &tokens));
                }
                if let Some(m) = &c.theirs {
                    theirs_counts.count(*valid, accepted_theirs(m, &tokens));
                }
            }
            let Some(both) = c.both else {
                continue;
            };
            compiled += 1;
            for (n, t) in tests.iter().enumerate() {
                if t.get("valid") != Some(&Value::Bool(true)) {
                    continue;
                }
                let Some(data) = t.get("data") else { continue };
                let Ok(text) = serde_json::to_string(data) else {
                    continue;
                };
                let Some(tokens) = encode(&tok, &text) else {
                    continue;
                };
                instances += 1;
                let what = format!("{} test {n}", f.display());
                let slow = slow_over.map(|us| (us, what.as_str()));
                let w = walk_both(&both, &vocab, &tokens, &mut ours, &mut theirs, slow);
                walked += (w.ours && w.theirs) as usize;
                ours_refused += !w.ours as usize;
                theirs_refused += !w.theirs as usize;
            }
        }
    }
    println!(
        "{}: {groups} schemas; nextok compiles \
         {ours_compiled}, llguidance {theirs_compiled}, both {compiled}; {instances} valid \
         instances of those: nextok refuses {ours_refused}, llguidance {theirs_refused}, \
         {walked} accepted by both and timed",
        dir.display()
    );
    println!("\nEach engine on its own, over the schemas it compiles");
    println!("| | nextok | llguidance |");
    println!("|---|---|---|");
    let (a, b) = (&ours_counts, &theirs_counts);
    println!(
        "| schemas compiled (of {groups}) | {} | {} |",
        a.compiled, b.compiled
    );
    println!(
        "| valid instances accepted | {} of {} | {} of {} |",
        a.valid_accepted, a.valid, b.valid_accepted, b.valid
    );
    println!(
        "| invalid instances accepted | {} of {} | {} of {} |",
        a.invalid_accepted, a.invalid, b.invalid_accepted, b.invalid
    );
    table(
        "Schemas both compile, SmolLM2 49,152 tokens",
        &mut ours,
        &mut theirs,
    );

    // The nested schema of the constraints bench, walked 50 times.
    let schema: Value = serde_json::from_str(SCHEMA).expect("schema");
    let tokens = encode(&tok, DOCUMENT).expect("document");
    let (mut ours, mut theirs) = (Times::default(), Times::default());
    let plain = JsonOptions::default();
    let mut both = None;
    for _ in 0..30 {
        let c = compile_both(
            &schema,
            &plain,
            &vocab,
            &factory,
            &mut ours,
            &mut theirs,
            None,
        );
        both = both.or(c.both);
    }
    let both = both.expect("both engines compile the nested schema");
    let (mut cold_ours, mut cold_theirs) = (Times::default(), Times::default());
    let w = walk_both(
        &both,
        &vocab,
        &tokens,
        &mut cold_ours,
        &mut cold_theirs,
        None,
    );
    assert!(w.ours && w.theirs, "both engines accept the document");
    for _ in 0..50 {
        walk_both(&both, &vocab, &tokens, &mut ours, &mut theirs, None);
    }
    println!(
        "\nNested schema of the constraints bench: document of {} tokens",
        tokens.len()
    );
    println!("| median / p99 / max | nextok | llguidance |");
    println!("|---|---|---|");
    row(
        "compile to first mask, 30 times",
        "ms",
        &mut ours.compile_ms,
        &mut theirs.compile_ms,
    );
    row(
        "per mask, first walk",
        "us",
        &mut cold_ours.mask_us,
        &mut cold_theirs.mask_us,
    );
    row(
        "per mask, 50 more walks",
        "us",
        &mut ours.mask_us,
        &mut theirs.mask_us,
    );
}
