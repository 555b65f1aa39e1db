//! Prefill and decode speed of `LlamaModel::forward` on the CUDA backend or the CPU, with the
//! physical limit of decode next to it (weight bytes read per token ÷ memory bandwidth).
//!
//! ```text
//! cargo run --release -p nextok-cuda --example bench -- [--device cpu|cuda] [--model PATH]
//!     [--threads N] [--bandwidth-gbs 4800] [--decode 128] [--reps 3] [--host-cache]
//! ```
//!
//! The sequence's KV cache comes from the backend's own pool (`LlamaModel::new_pool`): on CUDA a
//! paged cache in device memory, so the whole decode step runs on the GPU. `--host-cache` keeps
//! the cache in host memory instead (on CUDA its rows are then copied in for every attention).
//!
//! Without `--model` the model is a seeded random one of SmolLM2-135M's shape and type (30
//! layers, d_model 576, 9 heads of 64, 3 KV heads, feed-forward 1536, vocabulary 49,152, Q4_1,
//! tied output), with no download: 84 MB of weights read per token against the real file's 96 MB
//! (its embedding, which is also its output projection, is Q8_0), so nearly the same speed.
//! Prints one JSON object.

use std::time::Instant;

use nextok_gguf::GgufFile;
use nextok_kv_cache::KvType;
use nextok_model::testing::RandomLlama;
use nextok_model::{Backend, CpuBackend, LlamaModel, LoadOptions, Logits, Sequence};

struct Args {
    device: String,
    model: Option<String>,
    threads: Option<usize>,
    bandwidth_gbs: f64,
    decode: usize,
    reps: usize,
    host_cache: bool,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        device: String::from("cuda"),
        model: None,
        threads: None,
        bandwidth_gbs: 4800.0,
        decode: 128,
        reps: 3,
        host_cache: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--device" => a.device = value()?,
            "--model" => a.model = Some(value()?),
            "--threads" => a.threads = Some(value()?.parse().map_err(|e| format!("{e}"))?),
            "--bandwidth-gbs" => a.bandwidth_gbs = value()?.parse().map_err(|e| format!("{e}"))?,
            "--decode" => a.decode = value()?.parse().map_err(|e| format!("{e}"))?,
            "--reps" => a.reps = value()?.parse().map_err(|e| format!("{e}"))?,
            "--host-cache" => a.host_cache = true,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(a)
}

/// One forward call of the path being measured: `(fresh sequence?, new tokens) -> last logits`.
type Step<'a> = Box<dyn FnMut(bool, &[u32]) -> Result<Vec<f32>, Box<dyn std::error::Error>> + 'a>;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Bytes of weight matrices one decode step reads: every 2-D tensor but the token embedding,
/// which a step reads one row of, unless it is also the output projection.
fn weight_bytes_per_token(file: &GgufFile) -> u64 {
    let tied = !file.tensors().iter().any(|t| t.name == "output.weight");
    file.tensors()
        .iter()
        .filter(|t| t.dims.len() == 2 && (tied || t.name != "token_embd.weight"))
        .map(|t| file.view(t).data.len() as u64)
        .sum()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = parse()?;
    let (file, name) = match &a.model {
        Some(p) => (GgufFile::open(p)?, p.clone()),
        None => {
            let spec = RandomLlama {
                layers: 30,
                d_model: 576,
                heads: 9,
                kv_heads: 3,
                ffn_dim: 1536,
                vocab: 49_152,
                weight_type: nextok_gguf::GgmlType::Q4_1,
                tied_output: true,
                ..RandomLlama::default()
            };
            (
                GgufFile::from_bytes(spec.to_gguf(1))?,
                String::from("random model of SmolLM2-135M's shape, Q4_1"),
            )
        }
    };
    let bytes_per_token = weight_bytes_per_token(&file);
    let model = LlamaModel::from_gguf(file, LoadOptions::default())?;
    let vocab = model.config().vocab as u32;
    let tokens =
        |n: usize| -> Vec<u32> { (0..n as u32).map(|i| (i * 7919 + 13) % vocab).collect() };
    // One forward call of the chosen path: a fresh sequence (`None`) or the current one.
    let backend: Box<dyn Backend> = match a.device.as_str() {
        "cpu" => Box::new(match a.threads {
            Some(n) => CpuBackend::new(n),
            None => CpuBackend::all_cores(),
        }),
        "cuda" => Box::new(nextok_cuda::CudaBackend::new(0)?),
        d => return Err(format!("unknown device {d}").into()),
    };
    // Room for the longest sequence measured (512 positions), in the backend's memory.
    let budget = 1024 * model.cache_config(KvType::F32).bytes_per_token();
    let pool = model.new_pool(backend.as_ref(), KvType::F32, budget)?;
    let host_cache = a.host_cache;
    let new_cache = || {
        if host_cache {
            model.new_cache(KvType::F32)
        } else {
            pool.new_cache()
        }
    };
    let model = &model;
    let mut cache = new_cache();
    let mut path: Step<'_> = Box::new(move |fresh, ids| {
        if fresh {
            // The old cache's blocks go back to the pool first.
            cache = model.new_cache(KvType::F32);
            cache = new_cache();
        }
        let out = model.forward(
            backend.as_ref(),
            &mut [Sequence {
                cache: &mut cache,
                tokens: ids,
                logits: Logits::Last,
            }],
        )?;
        Ok(out.into_iter().next().unwrap_or_default())
    });
    // Warm-up: on the GPU this uploads every weight matrix once.
    path(true, &tokens(8))?;

    let mut prefill = serde_like::Object::new();
    for n in [128usize, 512] {
        let ids = tokens(n);
        let mut rates = Vec::new();
        for _ in 0..a.reps {
            let t = Instant::now();
            path(true, &ids)?;
            rates.push(n as f64 / t.elapsed().as_secs_f64());
        }
        prefill.push(&n.to_string(), median(rates));
    }
    let (mut decode, mut ttft) = (Vec::new(), Vec::new());
    for _ in 0..a.reps {
        let t = Instant::now();
        let mut logits = path(true, &tokens(16))?;
        ttft.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        for _ in 0..a.decode {
            let l = &logits;
            let next = (0..l.len()).fold(0, |b, i| if l[i] > l[b] { i } else { b }) as u32;
            logits = path(false, &[next])?;
        }
        decode.push(a.decode as f64 / t.elapsed().as_secs_f64());
    }
    let limit = a.bandwidth_gbs * 1e9 / bytes_per_token as f64;
    println!(
        "{{\"device\": \"{}{}\", \"model\": \"{}\", \"prefill_tok_s\": {}, \"decode_tok_s\": {:.1}, \
         \"ttft_ms\": {:.2}, \"weight_bytes_per_token\": {}, \"bandwidth_gbs\": {}, \
         \"decode_limit_tok_s\": {:.0}}}",
        a.device,
        if a.host_cache { " (host cache)" } else { "" },
        name,
        prefill.finish(),
        median(decode),
        median(ttft),
        bytes_per_token,
        a.bandwidth_gbs,
        limit
    );
    Ok(())
}

/// A tiny JSON object writer, so that the example needs no JSON dependency.
mod serde_like {
    pub struct Object(Vec<String>);

    impl Object {
        pub fn new() -> Self {
            Object(Vec::new())
        }

        pub fn push(&mut self, key: &str, value: f64) {
            self.0.push(format!("\"{key}\": {value:.1}"));
        }

        pub fn finish(self) -> String {
            format!("{{{}}}", self.0.join(", "))
        }
    }
}
