//! `nextok bench`: prefill and decode speed, and time to first token, on this machine.

use super::load_engine;
use crate::args::BenchArgs;
use crate::output::{println, significant};
use anyhow::bail;
use nextok::sampling::SamplingParams;
use nextok::{
    ConstraintSpec, Engine, Event, GenerateOptions, Prompt, Request, Scheduler, SchedulerOptions,
    SpeculativeStats,
};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Ordinary English text, repeated to make prompts of any length without special tokens.
const TEXT: &str = "The river ran quietly past the old mill, where the miller's children played \
                    among the sacks of flour and listened to the wheel turning in the water. ";

/// The repetitive task of `--speculative`: a text given in the prompt, to be written out again.
const PASSAGE: &str =
    "Mara kept the lighthouse on Gull Point for thirty-one years. Every evening she \
                       climbed the hundred and twelve steps, trimmed the wick, polished the great \
                       lens and wrote the weather in a blue notebook. Ships passed in the night \
                       without knowing her name, and she liked it that way. When the keepers' \
                       cottage was sold, she moved to the village, but she still walked to the \
                       point each evening to watch the light come on by itself.";

/// The free task of `--speculative`: nothing to copy from.
const FREE_TASK: &str = "Write a short story about a fox who learns to swim.";

/// The JSON schema of the constrained decode figure: an object whose one string is long enough
/// that the answer does not end before the decode does.
fn decode_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"story": {"type": "string", "minLength": 400}},
        "required": ["story"],
        "additionalProperties": false
    })
}

/// Decode tokens per second of one greedy answer to `prompt`, with speculative decoding on or
/// off, and how its drafts went (all zero when off).
fn decode_rate(
    engine: &Engine,
    prompt: &Prompt,
    max_tokens: usize,
    speculative: bool,
) -> anyhow::Result<(f64, SpeculativeStats)> {
    let options = GenerateOptions {
        sampling: SamplingParams::greedy(),
        max_tokens: Some(max_tokens),
        speculative,
        ..GenerateOptions::default()
    };
    let mut generation = engine.generate(prompt, &options)?;
    let c = generation.collect_completions()?;
    let Some(c) = c.first() else {
        bail!("the generation produced no completion");
    };
    Ok((
        c.timings.decode_tokens_per_s,
        generation.speculative_stats(),
    ))
}

/// `nextok bench --speculative`: plain and speculative decoding of the same answers,
/// alternating, `repetitions` times each, on a repetitive task and a free one.
fn speculative(engine: &Engine, a: &BenchArgs) -> anyhow::Result<()> {
    let tasks = [
        (
            "repetitive",
            Prompt::chat(
                None,
                &format!("Write out this text again, exactly as it is:\n\n{PASSAGE}"),
            ),
        ),
        ("free", Prompt::chat(None, FREE_TASK)),
    ];
    let mut results = serde_json::Map::new();
    let mut table = String::new();
    for (name, prompt) in &tasks {
        let (mut plain, mut spec) = (Vec::new(), Vec::new());
        // Greedy drafting depends only on the tokens, so every run's stats are the same; the
        // last run's are reported.
        let mut stats = SpeculativeStats::default();
        for _ in 0..a.repetitions {
            let (p, _) = decode_rate(engine, prompt, a.decode, false)?;
            let (s, st) = decode_rate(engine, prompt, a.decode, true)?;
            stats = st;
            eprintln!(
                "nextok: bench {name}: plain {} tokens/s, speculative {} tokens/s \
                 ({} drafts, {} tokens drafted, {} kept)",
                significant(p),
                significant(s),
                st.drafts,
                st.drafted_tokens,
                st.accepted_tokens
            );
            plain.push(p);
            spec.push(s);
        }
        let (_, plain, _) = summary(&mut plain);
        let (_, spec, _) = summary(&mut spec);
        results.insert(
            name.to_string(),
            json!({"plain": plain, "speculative": spec, "stats": stats}),
        );
        table.push_str(&format!(
            "{name:<12} {:>10} {:>12} {:>8}\n",
            significant(plain),
            significant(spec),
            format!("{}x", significant(spec / plain))
        ));
    }
    if a.json {
        return println(&json!({ "speculative": results }).to_string());
    }
    crate::output::print(&format!(
        "decode tokens/s, median of {} run(s)\n{:<12} {:>10} {:>12} {:>8}\n{table}",
        a.repetitions, "task", "plain", "speculative", "ratio"
    ))
}

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
    prompt_from(engine, tokens, 0)
}

/// `tokens` tokens of the text, starting `skip` tokens in: requests of a batch get different
/// prompts, so that none reads another's cached prefix.
fn prompt_from(engine: &Engine, tokens: usize, skip: usize) -> anyhow::Result<Vec<u32>> {
    let one = engine.encode_prompt(&Prompt::raw(TEXT))?;
    Ok(one
        .iter()
        .copied()
        .cycle()
        .skip(skip)
        .take(tokens)
        .collect())
}

/// Aggregate decode tokens per second of `batch` requests decoding together on the scheduler:
/// each has its own `prompt_tokens`-token prompt, and the step budget reads all prompts in the
/// first step, so every later step decodes one token of every request. The clock runs from the
/// end of that first step (the last first token) to the last token.
fn batch_decode(
    engine: &Arc<Engine>,
    batch: usize,
    prompt_tokens: usize,
    decode: usize,
) -> anyhow::Result<f64> {
    // Room for every request's whole cache, in whole blocks, so that none waits or is
    // preempted.
    let config = *engine.new_cache().config();
    let bp = config.block_positions;
    let positions = batch * ((prompt_tokens + decode + 1).div_ceil(bp) + 1) * bp;
    let scheduler = Scheduler::new(
        engine.clone(),
        SchedulerOptions {
            max_running: batch,
            max_waiting: batch,
            max_tokens_per_step: batch * (prompt_tokens + 1),
            // Every prompt is read in the first step, before anything decodes.
            max_prefill_while_decoding: batch * (prompt_tokens + 1),
            prefix_caching: false,
            kv_budget_bytes: Some(config.bytes_for(positions as u64)),
            // One token per request per step: the figure is plain batched decoding.
            speculative: false,
            ..SchedulerOptions::default()
        },
    )?;
    let options = GenerateOptions {
        sampling: SamplingParams::greedy(),
        max_tokens: Some(decode + 1),
        ignore_eos: true,
        ..GenerateOptions::default()
    };
    // Every token's time, by request; the sinks run on the scheduler's thread.
    let times: Arc<Mutex<Vec<Vec<Instant>>>> = Arc::new(Mutex::new(vec![Vec::new(); batch]));
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    for i in 0..batch {
        let times = times.clone();
        let done = done_tx.clone();
        let request = Request {
            prompt: prompt_from(engine, prompt_tokens, i * 7)?,
            options: options.clone(),
        };
        scheduler.submit_with(
            request,
            Box::new(move |event| {
                let now = Instant::now();
                match event {
                    Ok(Event::Token(_)) => {
                        if let Ok(mut t) = times.lock() {
                            t[i].push(now);
                        }
                    }
                    Ok(Event::Done(_)) => {
                        let _ = done.send(Ok(()));
                    }
                    Err(e) => {
                        let _ = done.send(Err(e));
                    }
                }
                true
            }),
        )?;
    }
    drop(done_tx);
    for _ in 0..batch {
        done_rx
            .recv()
            .map_err(|_| anyhow::anyhow!("the scheduler stopped before the batch ended"))??;
    }
    let times = times
        .lock()
        .map_err(|_| anyhow::anyhow!("a sink panicked"))?;
    let start = times.iter().filter_map(|t| t.first()).max();
    let end = times.iter().filter_map(|t| t.last()).max();
    let (Some(start), Some(end)) = (start, end) else {
        bail!("the batch produced no tokens");
    };
    // Tokens after each request's first one.
    let tokens: usize = times.iter().map(|t| t.len().saturating_sub(1)).sum();
    Ok(tokens as f64 / (*end - *start).as_secs_f64())
}

/// Runs `nextok bench`.
pub fn run(a: &BenchArgs) -> anyhow::Result<()> {
    if let Some(dir) = &a.sampler {
        return super::bench_sampler::run(dir, a.json);
    }
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
    if a.batch_prompt + a.decode + 1 > window {
        bail!(
            "--batch-prompt {} and --decode {} do not fit in the model's context window of {window}: choose shorter lengths",
            a.batch_prompt,
            a.decode
        );
    }
    if a.speculative {
        return speculative(&engine, a);
    }
    let engine = Arc::new(engine);
    let Some(runs) = a
        .prefill
        .len()
        .checked_add(2)
        .and_then(|n| n.checked_add(a.batch.len()))
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
    // from the prefill, so `decode` tokens after it are timed. Speculative decoding is off: this
    // is the speed of one pass per token (`--speculative` times it).
    let options = GenerateOptions {
        sampling: SamplingParams::greedy(),
        max_tokens: Some(max_tokens),
        ignore_eos: true,
        speculative: false,
        ..GenerateOptions::default()
    };
    // The same decode under a JSON schema: the masks are computed while the forward passes run,
    // so this should be the plain figure. Unconstrained and constrained runs alternate.
    let constrained_options = GenerateOptions {
        constraint: Some(ConstraintSpec::JsonSchema(decode_schema())),
        ..options.clone()
    };
    let ids = prompt(&engine, a.decode_prompt)?;
    let (mut decode, mut ttft, mut constrained) = (Vec::new(), Vec::new(), Vec::new());
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
        let c = engine
            .generate(&Prompt::Ids(ids.clone()), &constrained_options)?
            .collect_completions()?;
        let t = &c[0].timings;
        step(format!(
            "decode {} tokens after {} under a JSON schema: {} tokens/s",
            c[0].usage.completion_tokens.saturating_sub(1),
            a.decode_prompt,
            significant(t.decode_tokens_per_s)
        ));
        constrained.push(t.decode_tokens_per_s);
    }
    let decode = summary(&mut decode);
    let constrained = summary(&mut constrained);
    let ttft = summary(&mut ttft);
    let mut batch = Vec::new();
    for &b in &a.batch {
        let mut rates = Vec::new();
        for _ in 0..a.repetitions {
            let rate = batch_decode(&engine, b, a.batch_prompt, a.decode)?;
            step(format!(
                "decode {} tokens in a batch of {b}: {} tokens/s in all",
                a.decode,
                significant(rate)
            ));
            rates.push(rate);
        }
        batch.push((b, summary(&mut rates)));
    }
    if a.json {
        let mut p = serde_json::Map::new();
        for (n, s) in &prefill {
            p.insert(n.to_string(), as_json(*s));
        }
        let mut v = json!({
            "device": a.run.device.to_string(),
            "threads": threads,
            "prefill_tok_s": p,
            "decode_tok_s": as_json(decode),
            "constrained_decode_tok_s": as_json(constrained),
            "ttft_ms": as_json(ttft),
        });
        if !batch.is_empty() {
            let mut b = serde_json::Map::new();
            for (n, s) in &batch {
                b.insert(n.to_string(), as_json(*s));
            }
            v["batch_decode_tok_s"] = Value::Object(b);
        }
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
        "decode under a JSON schema (tokens/s)".to_string(),
        constrained,
    ));
    out.push_str(&row(
        format!("time to first token, {} (ms)", a.decode_prompt),
        ttft,
    ));
    for (n, s) in &batch {
        out.push_str(&row(format!("decode, batch of {n} (tokens/s, all)"), *s));
    }
    crate::output::print(&out)
}
