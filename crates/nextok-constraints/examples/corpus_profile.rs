//! Where the time of a conformance corpus goes, schema by schema: each schema's compile time to
//! its first mask, and every mask of its instances timed as `nextok constrain-bench` times them
//! (a fresh constraint per instance, the model's tokenization, the vocabulary's mask cache shared
//! by the whole run). Prints the slowest compiles and the slowest masks with their files, then
//! the overall percentiles, so that the schemas behind a p99 can be looked at one by one.
//!
//! Times are the thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`, on Linux), not wall time, so that
//! a machine loaded by other work changes them little; the wall-time percentiles are printed too.
//!
//! ```text
//! cargo run --release -p nextok-constraints --example corpus_profile -- \
//!     conformance/real-world/schemastore [top] [file name filter]
//! ```
//! `$CORPUS_RESOURCES` names a folder of more documents that `$ref`s may name (as
//! `constrain-bench --resources`).
//! The model's tokenizer is read from `$NEXTOK_MODEL` or the default model's place in the cache
//! (`$XDG_CACHE_HOME` or `~/.cache`, then `nextok/models/SmolLM2-135M-Instruct.Q4_1.gguf`).

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use nextok_constraints::{
    compile_json_schema, ConformanceRun, Constraint, GrammarConstraint, JsonOptions, Percentiles,
    TokenVocab,
};
use nextok_tokenizer::EncodeOptions;
use serde_json::Value;

/// The calling thread's CPU time, in seconds.
#[cfg(target_os = "linux")]
fn cpu_now() -> f64 {
    #[repr(C)]
    struct Timespec {
        sec: i64,
        nsec: i64,
    }
    extern "C" {
        fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
    }
    const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
    let mut ts = Timespec { sec: 0, nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec (two 64-bit fields on 64-bit Linux), and the
    // clock id is Linux's thread CPU clock; the call writes nothing else.
    let rc = unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    ts.sec as f64 + ts.nsec as f64 * 1e-9
}

/// Elsewhere, wall time stands in for CPU time (the "CPU" lines are then wall time too).
#[cfg(not(target_os = "linux"))]
fn cpu_now() -> f64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_secs_f64()
}

/// A timer of CPU and wall time.
struct Timer(f64, Instant);

impl Timer {
    fn start() -> Timer {
        Timer(cpu_now(), Instant::now())
    }

    /// (CPU, wall) seconds since the start.
    fn elapsed(&self) -> (f64, f64) {
        (cpu_now() - self.0, self.1.elapsed().as_secs_f64())
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(
        args.next()
            .unwrap_or("conformance/real-world/schemastore".into()),
    );
    let top: usize = args.next().map_or(Ok(15), |r| r.parse())?;
    // Only the files whose names contain this, when given.
    let only = args.next().unwrap_or_default();
    let model = common::model_path();
    let tok = nextok_tokenizer::load_from_gguf_path(&model)?;
    let vocab = Arc::new(TokenVocab::from_tokenizer(tok.as_ref())?);
    let mut resources = ConformanceRun::resources_in_dir(&dir)?;
    // More documents that `$ref`s may name, as `constrain-bench --resources` takes them.
    if let Some(extra) = std::env::var_os("CORPUS_RESOURCES") {
        resources.extend(ConformanceRun::resources_in_dir(std::path::Path::new(
            &extra,
        ))?);
    }
    let mut opts = JsonOptions::default().with_resources(resources);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .filter(|p| p.to_string_lossy().contains(&only))
        .collect();
    files.sort();
    // (compile ms, file) and (mask µs, file, instance, token index, work), CPU time; and the
    // same in wall time.
    let mut compiles: Vec<(f64, String)> = Vec::new();
    let mut masks: Vec<(f64, String, usize, usize, u64)> = Vec::new();
    let (mut compiles_wall, mut masks_wall) = (Vec::new(), Vec::new());
    let mut mask = vocab.empty_mask();
    let mut refused = 0;
    for f in &files {
        let name = f
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(f)?)?;
        let (Some(schema), Some(Value::Array(tests))) = (doc.get("schema"), doc.get("tests"))
        else {
            continue;
        };
        // Read with the URL it was published at as its base, as the conformance runner reads
        // it, so that its relative `$ref`s name the documents beside it (lsdlschema's).
        opts.base_uri = ConformanceRun::source_url(&doc).map(str::to_string);
        let t0 = Timer::start();
        let g = match compile_json_schema(schema, &opts) {
            Ok(g) => g,
            // A schema refused, or one of no value (which the runner counts as compiled, and
            // times): neither has a mask to time.
            Err(e) => {
                let (cpu, wall) = t0.elapsed();
                if matches!(e, nextok_constraints::Error::EmptyLanguage) {
                    compiles.push((cpu * 1e3, format!("{name} (no value)")));
                    compiles_wall.push(wall * 1e3);
                } else {
                    refused += 1;
                }
                continue;
            }
        };
        let (grammar_cpu, _) = t0.elapsed();
        let mut c = GrammarConstraint::new(Arc::clone(&g), &vocab);
        let _ = c.fill_mask(&mut mask);
        let (cpu, wall) = t0.elapsed();
        let (positions, terminals) = g.size();
        compiles.push((
            cpu * 1e3,
            format!(
                "{name} (grammar {:.3} ms, first mask {:.3} ms; {positions} rule positions, \
                 {terminals} terminals)",
                grammar_cpu * 1e3,
                (cpu - grammar_cpu) * 1e3
            ),
        ));
        compiles_wall.push(wall * 1e3);
        for (i, t) in tests.iter().enumerate() {
            let Some(data) = t.get("data") else { continue };
            // Compact JSON, as the conformance runner forces it.
            let text = serde_json::to_string(data)?;
            let ids = tok.encode(&text, EncodeOptions::plain())?;
            let mut c = GrammarConstraint::new(Arc::clone(&g), &vocab);
            for (j, &id) in ids.iter().enumerate() {
                let t0 = Timer::start();
                if c.fill_mask(&mut mask).is_err() {
                    break;
                }
                let (cpu, wall) = t0.elapsed();
                masks_wall.push(wall * 1e6);
                masks.push((cpu * 1e6, name.clone(), i, j, c.last_work()));
                if c.advance(id).is_err() {
                    break;
                }
            }
        }
    }
    compiles.sort_by(|a, b| b.0.total_cmp(&a.0));
    masks.sort_by(|a, b| b.0.total_cmp(&a.0));
    println!("{refused} schemas refused");
    println!("slowest compiles to the first mask (CPU ms):");
    for (ms, f) in compiles.iter().take(top) {
        println!("  {ms:9.3}  {f}");
    }
    println!("slowest masks (CPU µs; file, instance, token, work):");
    for (us, f, i, j, w) in masks.iter().take(top) {
        println!("  {us:9.1}  {f} #{i} token {j} work {w}");
    }
    let mut c: Vec<f64> = compiles.iter().map(|x| x.0).collect();
    let mut m: Vec<f64> = masks.iter().map(|x| x.0).collect();
    for (what, c, m) in [
        ("CPU", &mut c, &mut m),
        ("wall", &mut compiles_wall, &mut masks_wall),
    ] {
        let (pc, pm) = (Percentiles::of(c), Percentiles::of(m));
        println!(
            "{what} compile ms: median {:.3} p99 {:.3} max {:.3} ({} schemas)",
            pc.median,
            pc.p99,
            pc.max,
            c.len()
        );
        println!(
            "{what} mask µs: median {:.2} p99 {:.1} max {:.1} ({} masks)",
            pm.median,
            pm.p99,
            pm.max,
            m.len()
        );
    }
    Ok(())
}
