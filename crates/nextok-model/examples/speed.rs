//! Plain prefill and decode speed of the default model, resident memory while generating, and
//! what a pass over a few tokens with every position's logits costs in decode steps (a
//! speculative draft's verifying pass: `DRAFT_COST` in `nextok`'s `speculative.rs`).
//!
//! `cargo run --release -p nextok-model --example speed -- [MODEL.gguf] [THREADS...]`

use std::time::Instant;

use nextok_kv_cache::KvType;
use nextok_model::{CpuBackend, LlamaModel, Logits, Sequence};

fn rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// CPU seconds used by this process so far (user + system), from `/proc/self/stat`.
fn cpu_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of the stat line (utime, stime, in clock ticks of 1/100 s) are at 11 and
    // 12 after the name.
    let tick = |i: usize| f.get(i).and_then(|x| x.parse::<f64>().ok());
    tick(11)
        .zip(tick(12))
        .map_or(f64::NAN, |(u, s)| (u + s) / 100.0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().unwrap_or_else(|| {
        format!(
            "{}/.cache/nextok/models/SmolLM2-135M-Instruct.Q4_1.gguf",
            std::env::var("HOME").unwrap_or_default()
        )
    });
    let threads: Vec<usize> = args.filter_map(|a| a.parse().ok()).collect();
    let threads = if threads.is_empty() {
        vec![1, 2]
    } else {
        threads
    };
    let model = LlamaModel::open(&path)?;
    println!("loaded {path}: resident {:.1} MB", rss_mb());
    let prompt: Vec<u32> = (0..128u32).map(|i| 100 + i * 37 % 40_000).collect();
    for &t in &threads {
        let backend = CpuBackend::new(t);
        let mut cache = model.new_cache(KvType::F32);
        let (start, cpu0) = (Instant::now(), cpu_secs());
        let out = model.forward(
            &backend,
            &mut [Sequence {
                cache: &mut cache,
                tokens: &prompt,
                logits: Logits::Last,
            }],
        )?;
        let prefill = start.elapsed().as_secs_f64();
        let prefill_cpu = cpu_secs() - cpu0;
        let mut next = out[0]
            .iter()
            .enumerate()
            .fold(0, |b, (i, &v)| if v > out[0][b] { i } else { b }) as u32;
        let steps = 32;
        let (start, cpu0) = (Instant::now(), cpu_secs());
        for _ in 0..steps {
            let out = model.forward(
                &backend,
                &mut [Sequence {
                    cache: &mut cache,
                    tokens: &[next],
                    logits: Logits::Last,
                }],
            )?;
            next = out[0]
                .iter()
                .enumerate()
                .fold(0, |b, (i, &v)| if v > out[0][b] { i } else { b }) as u32;
        }
        let decode = start.elapsed().as_secs_f64();
        let decode_cpu = cpu_secs() - cpu0;
        println!(
            "{t} thread(s): prefill {} tokens {:.1} tokens/s ({:.1} per CPU-second), decode {:.1} tokens/s ({:.1} per CPU-second), KV cache {:.2} MB, resident {:.1} MB",
            prompt.len(),
            prompt.len() as f64 / prefill,
            prompt.len() as f64 / prefill_cpu,
            steps as f64 / decode,
            steps as f64 / decode_cpu,
            cache.bytes() as f64 / 1e6,
            rss_mb()
        );
        // A verifying pass: `n` new positions after the text so far, each with its logits,
        // against one decode step (the fastest of several tries of each; the cache is cut back
        // to the text after each try, as a rejected draft's positions are).
        let base = cache.len();
        let mut pass = |n: usize| -> Result<f64, nextok_model::Error> {
            let tokens: Vec<u32> = (0..n as u32).map(|i| 500 + i).collect();
            let mut best = f64::INFINITY;
            for _ in 0..9 {
                let start = Instant::now();
                model.forward(
                    &backend,
                    &mut [Sequence {
                        cache: &mut cache,
                        tokens: &tokens,
                        logits: Logits::All,
                    }],
                )?;
                best = best.min(start.elapsed().as_secs_f64());
                cache.truncate(base);
            }
            Ok(best)
        };
        let step = pass(1)?;
        let mut line = format!("{t} thread(s): one decode step {:.2} ms", step * 1e3);
        for n in [5, 9, 17] {
            let cost = pass(n)?;
            line.push_str(&format!(
                "; a pass of {n} tokens {:.2} steps ({:.2} a drafted token)",
                cost / step,
                (cost / step - 1.0) / (n - 1) as f64
            ));
        }
        println!("{line}");
    }
    Ok(())
}
