//! `nextok bench --sampler DIR`: the sampler's time per token on logits saved by llama.cpp's
//! harness (`llama-sampler-bench.sh DIR` writes `DIR/logits_<vocab>.f32`), with the chains that
//! harness times, so that both are measured on the same numbers.

use std::path::{Path, PathBuf};
use std::time::Instant;

use nextok::sampling::{Context, Sampler, SamplingParams, StageKind};
use serde_json::{json, Map, Value};

use crate::output::{println, significant};

/// Timed draws per chain and vocabulary, as many as llama.cpp's harness makes.
pub const RUNS: usize = 101;

/// Why the logits folder cannot be benchmarked.
#[derive(Debug, thiserror::Error)]
pub enum SamplerBenchError {
    /// The folder (or a file in it) cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The folder or file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The folder holds no `logits_<vocab>.f32` file.
    #[error("{dir} holds no logits_<vocab>.f32 file (llama-sampler-bench.sh DIR writes them)")]
    NoLogitsFiles {
        /// The folder.
        dir: PathBuf,
    },
    /// A file's size is not a whole number of little-endian `f32`s.
    #[error("{path} is {bytes} bytes, not a whole number of 4-byte floats")]
    NotFloats {
        /// The file.
        path: PathBuf,
        /// Its size.
        bytes: u64,
    },
    /// A file holds a different number of logits than its name says.
    #[error("{path} holds {floats} logits, but its name says {vocab}")]
    WrongLength {
        /// The file.
        path: PathBuf,
        /// Logits in the file.
        floats: usize,
        /// The vocabulary in its name.
        vocab: usize,
    },
}

/// One vocabulary's logits, from `DIR/logits_<vocab>.f32`.
#[derive(Debug)]
pub struct LogitsFile {
    /// The vocabulary in the file's name.
    pub vocab: usize,
    /// The logits.
    pub logits: Vec<f32>,
}

/// Reads every `logits_<vocab>.f32` of `dir`, smallest vocabulary first.
pub fn load(dir: &Path) -> Result<Vec<LogitsFile>, SamplerBenchError> {
    let read_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| SamplerBenchError::Read { path, source }
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(read_err(dir))? {
        let entry = entry.map_err(read_err(dir))?;
        let name = entry.file_name();
        let Some(vocab) = name
            .to_str()
            .and_then(|n| n.strip_prefix("logits_"))
            .and_then(|n| n.strip_suffix(".f32"))
            .and_then(|n| n.parse::<usize>().ok())
        else {
            continue;
        };
        let path = entry.path();
        let bytes = std::fs::read(&path).map_err(read_err(&path))?;
        if bytes.len() % 4 != 0 {
            return Err(SamplerBenchError::NotFloats {
                path,
                bytes: bytes.len() as u64,
            });
        }
        let logits: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        if logits.len() != vocab {
            return Err(SamplerBenchError::WrongLength {
                path,
                floats: logits.len(),
                vocab,
            });
        }
        files.push(LogitsFile { vocab, logits });
    }
    if files.is_empty() {
        return Err(SamplerBenchError::NoLogitsFiles {
            dir: dir.to_path_buf(),
        });
    }
    files.sort_by_key(|f| f.vocab);
    Ok(files)
}

/// The chains of llama.cpp's harness, in its order: the filters first, then temperature 0.8 and
/// the draw (`default` is llama.cpp's usual top-k 40, top-p 0.95, min-p 0.05).
pub fn chains() -> Vec<(&'static str, SamplingParams)> {
    // llama.cpp applies temperature after the filters.
    let order = vec![
        StageKind::Penalties,
        StageKind::LogitBias,
        StageKind::TopK,
        StageKind::TopP,
        StageKind::MinP,
        StageKind::Temperature,
    ];
    let sampled = |top_k, top_p, min_p| SamplingParams {
        temperature: 0.8,
        top_k,
        top_p,
        min_p,
        seed: Some(1234),
        order: order.clone(),
        ..SamplingParams::default()
    };
    vec![
        ("greedy", SamplingParams::greedy()),
        ("default", sampled(Some(40), 0.95, 0.05)),
        ("top_p", sampled(None, 0.95, 0.0)),
        ("min_p", sampled(None, 1.0, 0.05)),
    ]
}

/// Minimum, median and maximum, in µs per token.
type Summary = (f64, f64, f64);

/// Minimum, median and maximum of `RUNS` timings, in µs.
fn summary(mut us: Vec<f64>) -> Summary {
    us.sort_by(f64::total_cmp);
    (us[0], us[us.len() / 2], us[us.len() - 1])
}

/// Runs `nextok bench --sampler DIR`.
pub fn run(dir: &Path, as_json: bool) -> anyhow::Result<()> {
    let files = load(dir)?;
    let ctx = Context::default();
    // chain -> [(vocab, timings)]
    let mut results: Vec<(&str, Vec<(usize, Summary)>)> = Vec::new();
    for (name, params) in chains() {
        let mut row = Vec::new();
        for file in &files {
            // A fresh sampler per vocabulary, as the harness builds a fresh chain: its first
            // draw, which sizes the buffers, is one of the timed ones.
            let mut sampler = Sampler::new(&params)?;
            let mut us = Vec::with_capacity(RUNS);
            for _ in 0..RUNS {
                let t = Instant::now();
                let chosen = sampler.choose(&file.logits, &ctx)?;
                us.push(t.elapsed().as_secs_f64() * 1e6);
                std::hint::black_box(chosen);
            }
            row.push((file.vocab, summary(us)));
        }
        results.push((name, row));
    }
    if as_json {
        let mut chains = Map::new();
        for (name, row) in &results {
            let mut by_vocab = Map::new();
            for (vocab, (min, median, max)) in row {
                by_vocab.insert(
                    vocab.to_string(),
                    json!({"min": min, "median": median, "max": max}),
                );
            }
            chains.insert(name.to_string(), Value::Object(by_vocab));
        }
        return println(&json!({ "sampler_us": chains }).to_string());
    }
    let mut out = format!(
        "{:<10} {:>8} {:>10} {:>10} {:>10}   (µs per token, {RUNS} draws)\n",
        "chain", "vocab", "min", "median", "max"
    );
    for (name, row) in &results {
        for (vocab, (min, median, max)) in row {
            out.push_str(&format!(
                "{name:<10} {vocab:>8} {:>10} {:>10} {:>10}\n",
                significant(*min),
                significant(*median),
                significant(*max)
            ));
        }
    }
    crate::output::print(&out)
}
