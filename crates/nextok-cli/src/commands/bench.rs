//! `nextok bench`: prefill and decode speed, and time to first token, on this machine.

use super::load_engine;
use crate::args::BenchArgs;
use crate::output::{println, significant};
use anyhow::bail;
use nextok::sampling::SamplingParams;
use nextok::{Engine, GenerateOptions, Prompt};
use serde_json::{json, Value};
use std::time::Instant;

/// Ordinary English text, repeated to make prompts of any length without special tokens.
const TEXT: &str = "The river ran quietly past the old mill, where the miller's children played \
                    among the sacks of flour and listened to the wheel turning in the water. ";

/// Minimum, median and maximum.
fn summary(values: &mut [f64]) -> (f64, f64, f64) {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    let median = if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    };
    (values[0], median, values[n - 1])
}

fn as_json((min, median, max): (f64, f64, f64)) -> Value {
    json!({"min": min, "median": median, "max": max})
}

fn prompt(engine: &Engine, tokens: usize) -> anyhow::Result<Vec<u32>> {
    let one = engine.encode_prompt(&Prompt::raw(TEXT))?;
    Ok(one.iter().copied().cycle().take(tokens).collect())
}

/// Runs `nextok bench`.
pub fn run(a: &BenchArgs) -> anyhow::Result<()> {
    // clap has bounded every length (1 to 2^24) and the repetitions; these checks stand for a
    // caller that builds `BenchArgs` itself.
    if a.repetitions == 0 || a.decode == 0 || a.decode_prompt == 0 {
        bail!("--repetitions, --decode and --decode-prompt must be at least 1");
    }
    if a.prefill.contains(&0) {
        bail!("--prefill lengths must be at least 1");
    }
    // The decode run's cache holds the decode prompt and the decoded tokens (the last token
    // chosen is never run through the model).
    let (Some(decode_total), Some(max_tokens)) = (
        a.decode_prompt.checked_add(a.decode),
        a.decode.checked_add(1),
    ) else {
        bail!(
            "--decode-prompt {} and --decode {} add up to more tokens than can be counted",
            a.decode_prompt,
            a.decode
        );
    };
    let engine = load_engine(&a.run)?;
    let threads = a
        .run
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let window = engine.context_window();
    if let Some(&n) = a.prefill.iter().find(|&&n| n > window) {
        bail!("--prefill {n} tokens do not fit in the model's context window of {window}: choose shorter lengths");
    }
    if decode_total > window {
        bail!(
            "--decode-prompt {} and --decode {} need {decode_total} tokens, more than the model's context window of {window}: choose shorter lengths",
            a.decode_prompt,
            a.decode
        );
    }
    let Some(runs) = a
        .prefill
        .len()
        .checked_add(1)
        .and_then(|n| n.checked_mul(a.repetitions))
    else {
        bail!(
            "--repetitions {} times the lengths is too many runs",
            a.repetitions
        );
    };
    // Progress goes to stderr, one line per measurement as it ends, so that a long run shows it
    // is moving and stdout keeps only the table (or the JSON).
    let mut done = 0;
    let mut step = |what: String| {
        done += 1;
        eprintln!("nextok: bench {done}/{runs}: {what}");
    };
    let mut prefill = Vec::new();
    for &n in &a.prefill {
        let ids = prompt(&engine, n)?;
        let mut rates = Vec::new();
        for _ in 0..a.repetitions {
            let t = Instant::now();
            engine.logits(&ids, false)?;
            let rate = n as f64 / t.elapsed().as_secs_f64();
            step(format!(
                "prefill {n} tokens: {} tokens/s",
                significant(rate)
            ));
            rates.push(rate);
        }
        prefill.push((n, summary(&mut rates)));
    }
    // Decode as `generate` does: greedy, one pass per token with the cache; the first token comes
    // from the prefill, so `decode` tokens after it are timed.
    let options = GenerateOptions {
        sampling: SamplingParams::greedy(),
        max_tokens: Some(max_tokens),
        ignore_eos: true,
        ..GenerateOptions::default()
    };
    let ids = prompt(&engine, a.decode_prompt)?;
    let (mut decode, mut ttft) = (Vec::new(), Vec::new());
    for _ in 0..a.repetitions {
        let c = engine
            .generate(&Prompt::Ids(ids.clone()), &options)?
            .collect_completions()?;
        let t = &c[0].timings;
        step(format!(
            "decode {} tokens after {}: {} tokens/s",
            a.decode,
            a.decode_prompt,
            significant(t.decode_tokens_per_s)
        ));
        decode.push(t.decode_tokens_per_s);
        ttft.push(t.time_to_first_token_s * 1e3);
    }
    let decode = summary(&mut decode);
    let ttft = summary(&mut ttft);
    if a.json {
        let mut p = serde_json::Map::new();
        for (n, s) in &prefill {
            p.insert(n.to_string(), as_json(*s));
        }
        let v = json!({
            "device": a.run.device.to_string(),
            "threads": threads,
            "prefill_tok_s": p,
            "decode_tok_s": as_json(decode),
            "ttft_ms": as_json(ttft),
        });
        return println(&v.to_string());
    }
    let row = |label: String, (min, median, max): (f64, f64, f64)| {
        format!(
            "{label:<34} {:>10} {:>10} {:>10}\n",
            significant(min),
            significant(median),
            significant(max)
        )
    };
    let on = match a.run.device {
        nextok::Device::Cpu => format!("{threads} thread(s)"),
        device => device.to_string(),
    };
    let mut out = format!(
        "{on}, {} repetition(s)\n{:<34} {:>10} {:>10} {:>10}\n",
        a.repetitions, "", "min", "median", "max"
    );
    for (n, s) in &prefill {
        out.push_str(&row(format!("prefill {n} tokens (tokens/s)"), *s));
    }
    out.push_str(&row(
        format!(
            "decode {} tokens after {} (tokens/s)",
            a.decode, a.decode_prompt
        ),
        decode,
    ));
    out.push_str(&row(
        format!("time to first token, {} (ms)", a.decode_prompt),
        ttft,
    ));
    crate::output::print(&out)
}
