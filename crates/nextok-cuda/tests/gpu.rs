//! The CPU backend is the oracle: every test here runs the same work on the CUDA backend and on
//! `CpuBackend`, and compares. They need an NVIDIA GPU, so they are ignored by default and run
//! with `cargo test -p nextok-cuda -- --ignored`; run that way on a machine without a usable GPU,
//! they fail (they never pass without having run).
//!
//! Tolerances, per stage:
//! - weight products (attention projections, feed-forward, logits): the CPU's bits exactly; the
//!   kernels use the CPU kernels' operations in the CPU kernels' order;
//! - attention: 1e-5 absolute (outputs are convex combinations of value rows of magnitude up to
//!   about 1; the only step allowed to differ is the exponential, by its last bit);
//! - end-to-end logits: 1e-3 absolute, and greedy continuations identical, for the model's one
//!   forward pass on the CUDA backend (activations in device memory), with a host cache and with
//!   a paged cache in device memory (`DeviceStorage`, read in place), one sequence at a time and
//!   in a batch; and a sequence's GPU logits are the same bits alone and in a batch.

mod common;

use std::collections::BTreeMap;
use std::sync::Mutex;

use nextok_cuda::{CudaBackend, DeviceStorage};
use nextok_gguf::{GgmlType, GgufFile};
use nextok_kernels::{Layout, QMat};
use nextok_kv_cache::{CacheConfig, KvCache, KvPool, KvType};
use nextok_model::testing::RandomLlama;
use nextok_model::{Backend, CpuBackend, LlamaModel, LoadOptions, Logits, Mask, QMatrix, Sequence};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;

use common::{first_difference, kv_rows, random};

const ATTENTION_TOLERANCE: f32 = 1e-5;
const LOGITS_TOLERANCE: f32 = 1e-3;

/// The backend on device 0; a test that needs it fails here, with the reason, on a machine
/// without one.
fn gpu() -> CudaBackend {
    CudaBackend::new(0).unwrap_or_else(|e| {
        panic!("this test needs an NVIDIA GPU with its driver and NVRTC, and none is usable: {e}")
    })
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn model(spec: &RandomLlama, seed: u64) -> LlamaModel {
    let file = GgufFile::from_bytes(spec.to_gguf(seed)).expect("random model parses");
    LlamaModel::from_gguf(file, LoadOptions::default()).expect("random model loads")
}

#[test]
#[ignore = "needs an NVIDIA GPU: cargo test -p nextok-cuda -- --ignored"]
fn weight_products_give_the_cpu_bits_for_every_type() {
    let gpu = gpu();
    let cpu = CpuBackend::new(1);
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let types = [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q8_0,
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q4K,
        GgmlType::Q5K,
        GgmlType::Q6K,
    ];
    for ty in types {
        // 256 columns so that the K-quants' 256-number blocks fit; 50 rows is a multiple of
        // neither the block kernels' 4 rows per block nor the plain kernels' 8.
        let spec = RandomLlama {
            layers: 1,
            d_model: 256,
            ffn_dim: 512,
            vocab: 50,
            weight_type: ty,
            tied_output: false,
            ..RandomLlama::default()
        };
        let file = GgufFile::from_bytes(spec.to_gguf(3)).expect("random model parses");
        for name in [
            "output.weight",
            "blk.0.ffn_down.weight",
            "blk.0.attn_k.weight",
        ] {
            let info = file
                .tensors()
                .iter()
                .find(|t| t.name == name)
                .expect("tensor present");
            let (cols, rows) = (info.dims[0] as usize, info.dims[1] as usize);
            let data = file.view(info).data;
            let file_layout = QMatrix {
                ty,
                rows,
                cols,
                layout: Layout::Gguf,
                data,
            };
            // The CPU kernels' packed Q4_1 rows too: the backend unpacks them at upload.
            let packed = QMat::packable(ty).then(|| {
                QMat::new(ty, rows, cols, data)
                    .and_then(|m| m.pack())
                    .expect("Q4_1 packs")
            });
            let mut forms = vec![file_layout];
            if let Some(p) = &packed {
                forms.push(QMatrix {
                    layout: Layout::Packed,
                    data: p,
                    ..file_layout
                });
            }
            for (w, tokens) in forms
                .into_iter()
                .flat_map(|w| [1, 3, 8, 9, 17].map(|t| (w, t)))
            {
                let x = random(&mut rng, tokens * cols);
                let (mut on_gpu, mut on_cpu) = (vec![0.0; tokens * rows], vec![0.0; tokens * rows]);
                gpu.matmul(w, &x, tokens, &mut on_gpu).expect("GPU product");
                cpu.matmul(w, &x, tokens, &mut on_cpu).expect("CPU product");
                if let Some((i, g, c)) = first_difference(&on_gpu, &on_cpu) {
                    panic!(
                        "{ty:?} {:?} {name} ({rows} × {cols}), {tokens} tokens: output {i} \
                         (token {}, row {}) is {g:e} on the GPU and {c:e} on the CPU",
                        w.layout,
                        i / rows,
                        i % rows
                    );
                }
            }
        }
    }
    // Every matrix was uploaded once and kept: 11 types × 3 matrices, and the 3 packed ones.
    assert_eq!(gpu.weights_on_device().0, 36);
}

/// A cache of `positions` random key and value rows.
fn random_cache(kv_type: KvType, positions: usize, rng: &mut ChaCha8Rng) -> KvCache {
    let config = CacheConfig::new(2, 2, 64, kv_type);
    let mut cache = KvCache::new(config).expect("cache");
    let tokens: Vec<u32> = (0..positions as u32).collect();
    cache
        .push_tokens(&tokens)
        .expect("an unbounded cache has room");
    for layer in 0..2 {
        for pos in 0..positions {
            let (k, v) = (random(rng, 128), random(rng, 128));
            cache.write(layer, pos, &k, &v).expect("write");
        }
    }
    cache
}

#[test]
#[ignore = "needs an NVIDIA GPU: cargo test -p nextok-cuda -- --ignored"]
fn attention_matches_the_cpu_and_each_row_is_independent_of_its_batch() {
    let gpu = gpu();
    let cpu = CpuBackend::new(1);
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let heads = 4;
    let width = heads * 64;
    for kv_type in [KvType::F32, KvType::F16, KvType::BF16] {
        let cache = random_cache(kv_type, 300, &mut rng);
        for (mask, rows) in [
            (Mask::Causal { first: 0 }, 300),
            (Mask::Causal { first: 290 }, 10),
            (Mask::Causal { first: 299 }, 1),
            (Mask::Full, 3),
        ] {
            // Scores of magnitude up to about 8, so that the softmax is far from uniform.
            let q: Vec<f32> = random(&mut rng, rows * width)
                .iter()
                .map(|v| v * 8.0)
                .collect();
            let (mut on_gpu, mut on_cpu) = (vec![0.0; q.len()], vec![0.0; q.len()]);
            gpu.attention(&q, &cache, 1, mask, heads, &mut on_gpu)
                .expect("GPU attention");
            cpu.attention(&q, &cache, 1, mask, heads, &mut on_cpu)
                .expect("CPU attention");
            let diff = max_abs_diff(&on_gpu, &on_cpu);
            let same = on_gpu
                .iter()
                .zip(&on_cpu)
                .filter(|(a, b)| a.to_bits() == b.to_bits())
                .count();
            eprintln!(
                "attention {kv_type:?} {mask:?} × {rows}: max |GPU − CPU| = {diff:e}, \
                 {same} of {} numbers bit-identical",
                q.len()
            );
            assert!(
                diff <= ATTENTION_TOLERANCE,
                "attention {kv_type:?} {mask:?}: GPU and CPU differ by {diff:e}"
            );
            // The exactness contract: a row alone gives the bits it gives among others.
            if let Mask::Causal { first } = mask {
                for i in [0, rows / 2, rows - 1] {
                    let mut alone = vec![0.0; width];
                    gpu.attention(
                        &q[i * width..(i + 1) * width],
                        &cache,
                        1,
                        Mask::Causal { first: first + i },
                        heads,
                        &mut alone,
                    )
                    .expect("GPU attention of one row");
                    assert_eq!(
                        first_difference(&alone, &on_gpu[i * width..(i + 1) * width]),
                        None,
                        "row {i} alone differs from row {i} in a batch of {rows}"
                    );
                }
            }
        }
    }
}

/// Which stage of the forward pass a weight product is, by its shape.
fn stage(w: &QMatrix<'_>, spec: (usize, usize)) -> &'static str {
    let (vocab, ffn) = spec;
    if w.rows == vocab {
        "logits"
    } else if w.rows == ffn || w.cols == ffn {
        "feed-forward"
    } else {
        "attention projections"
    }
}

/// Runs every call on both backends, records the largest difference per stage, and returns the
/// CPU's result, so that every stage is compared on the same inputs.
struct Compare<'a> {
    gpu: &'a CudaBackend,
    cpu: CpuBackend,
    vocab: usize,
    ffn: usize,
    worst: Mutex<BTreeMap<&'static str, (f32, usize)>>,
}

impl Compare<'_> {
    fn record(&self, stage: &'static str, diff: f32) {
        let mut worst = self.worst.lock().unwrap_or_else(|e| e.into_inner());
        let entry = worst.entry(stage).or_insert((0.0, 0));
        entry.0 = entry.0.max(diff);
        entry.1 += 1;
    }
}

impl Backend for Compare<'_> {
    fn matmul(
        &self,
        w: QMatrix<'_>,
        x: &[f32],
        tokens: usize,
        out: &mut [f32],
    ) -> Result<(), nextok_model::Error> {
        let mut on_gpu = vec![0.0; out.len()];
        self.gpu.matmul(w, x, tokens, &mut on_gpu)?;
        self.cpu.matmul(w, x, tokens, out)?;
        let stage = stage(&w, (self.vocab, self.ffn));
        if let Some((i, g, c)) = first_difference(&on_gpu, out) {
            panic!(
                "{stage} ({:?}, {} × {}): output {i} is {g:e} on the GPU, {c:e} on the CPU",
                w.ty, w.rows, w.cols
            );
        }
        self.record(stage, 0.0);
        Ok(())
    }

    fn attention(
        &self,
        q: &[f32],
        cache: &KvCache,
        layer: usize,
        mask: Mask,
        heads: usize,
        out: &mut [f32],
    ) -> Result<(), nextok_model::Error> {
        let mut on_gpu = vec![0.0; out.len()];
        self.gpu
            .attention(q, cache, layer, mask, heads, &mut on_gpu)?;
        self.cpu.attention(q, cache, layer, mask, heads, out)?;
        self.record("attention", max_abs_diff(&on_gpu, out));
        Ok(())
    }
}

/// Greedy: the first largest logit.
fn argmax(l: &[f32]) -> u32 {
    l.iter()
        .enumerate()
        .fold((0, f32::NEG_INFINITY), |(bi, bv), (i, &v)| {
            if v > bv {
                (i, v)
            } else {
                (bi, bv)
            }
        })
        .0 as u32
}

/// Prefill of `prompt`, then `steps` decode steps of its own greedy choices, through `backend`,
/// into `cache`: the logits and the choice of every step.
fn prefill_and_decode(
    model: &LlamaModel,
    backend: &dyn Backend,
    mut cache: KvCache,
    prompt: &[u32],
    steps: usize,
) -> (Vec<Vec<f32>>, Vec<u32>) {
    let mut logits = Vec::new();
    let mut chosen = Vec::new();
    let mut next: Vec<u32> = prompt.to_vec();
    for _ in 0..=steps {
        let out = model
            .forward(
                backend,
                &mut [Sequence {
                    cache: &mut cache,
                    tokens: &next,
                    logits: Logits::Last,
                }],
            )
            .expect("forward");
        let l = out.into_iter().next().expect("one sequence");
        let best = argmax(&l);
        chosen.push(best);
        logits.push(l);
        next = vec![best];
    }
    (logits, chosen)
}

/// A pool of `model`'s caches in `backend`'s memory, with room for a few thousand positions.
fn pool(model: &LlamaModel, backend: &dyn Backend) -> KvPool {
    let per_token = model.cache_config(KvType::F32).bytes_per_token();
    model
        .new_pool(backend, KvType::F32, 4096 * per_token)
        .expect("a pool")
}

/// Three prompts of different lengths decoded together, `steps` steps of given tokens, in one
/// forward call per step: every sequence's logits of every step, per sequence.
fn batch_run(
    model: &LlamaModel,
    backend: &dyn Backend,
    pool: &KvPool,
    steps: usize,
) -> Vec<Vec<Vec<f32>>> {
    let prompts: [&[u32]; 3] = [
        &[1, 5, 9, 2, 7, 30, 4],
        &[3],
        &[8, 8, 2, 6, 1, 1, 4, 9, 11, 2, 5, 3, 7, 7, 2, 1, 9, 4],
    ];
    let mut caches: Vec<KvCache> = prompts.iter().map(|_| pool.new_cache()).collect();
    let mut out = vec![Vec::new(); prompts.len()];
    for step in 0..=steps {
        let tokens: Vec<Vec<u32>> = prompts
            .iter()
            .enumerate()
            .map(|(s, p)| {
                if step == 0 {
                    p.to_vec()
                } else {
                    vec![(step * 7 + s * 3) as u32 % 40]
                }
            })
            .collect();
        let mut batch: Vec<Sequence<'_>> = caches
            .iter_mut()
            .zip(&tokens)
            .map(|(cache, t)| Sequence {
                cache,
                tokens: t,
                logits: Logits::Last,
            })
            .collect();
        let logits = model.forward(backend, &mut batch).expect("batch forward");
        for (s, l) in logits.into_iter().enumerate() {
            out[s].push(l);
        }
    }
    out
}

/// The stage-by-stage comparison, then whole runs on each backend alone.
fn check_model(gpu: &CudaBackend, model: &LlamaModel, prompt: &[u32], steps: usize, what: &str) {
    let c = model.config();
    let compare = Compare {
        gpu,
        cpu: CpuBackend::new(1),
        vocab: c.vocab,
        ffn: c.ffn_dim,
        worst: Mutex::new(BTreeMap::new()),
    };
    prefill_and_decode(model, &compare, model.new_cache(KvType::F32), prompt, steps);
    let worst = compare
        .worst
        .into_inner()
        .unwrap_or_else(|e| e.into_inner());
    for (stage, (diff, calls)) in &worst {
        eprintln!("{what}: {stage}: {calls} calls, max |GPU − CPU| = {diff:e}");
    }
    for stage in [
        "attention projections",
        "feed-forward",
        "logits",
        "attention",
    ] {
        assert!(worst.contains_key(stage), "{what}: stage {stage} never ran");
    }
    let attention = worst["attention"].0;
    assert!(
        attention <= ATTENTION_TOLERANCE,
        "{what}: attention differs by {attention:e}"
    );

    // The whole pass on the GPU, activations in device memory: with a host cache (its rows
    // copied in for attention), and with a paged cache in device memory read in place.
    let cpu = CpuBackend::new(1);
    let (cl, ct) = prefill_and_decode(model, &cpu, model.new_cache(KvType::F32), prompt, steps);
    let device_pool = pool(model, gpu);
    assert!(
        device_pool
            .storage()
            .as_any()
            .downcast_ref::<DeviceStorage>()
            .is_some(),
        "{what}: the CUDA backend's pool is not in device memory"
    );
    for (cache, place) in [
        (model.new_cache(KvType::F32), "host cache"),
        (device_pool.new_cache(), "device cache"),
    ] {
        let (gl, gt) = prefill_and_decode(model, gpu, cache, prompt, steps);
        for (step, (g, c)) in gl.iter().zip(&cl).enumerate() {
            let diff = max_abs_diff(g, c);
            eprintln!("{what}, {place}: step {step} logits max |GPU − CPU| = {diff:e}");
            assert!(
                diff <= LOGITS_TOLERANCE,
                "{what}, {place}: logits of step {step} differ by {diff:e}"
            );
        }
        assert_eq!(gt, ct, "{what}, {place}: greedy continuations differ");
    }
    assert_eq!(
        device_pool.used_blocks(),
        0,
        "{what}: the caches gave their blocks back"
    );

    // A batch of three sequences on the GPU against the CPU; and each sequence alone on the GPU
    // gives the bits it has in the batch (no output depends on its batch).
    let on_cpu = batch_run(model, &cpu, &pool(model, &cpu), 4);
    let on_gpu = batch_run(model, gpu, &device_pool, 4);
    for (s, (g, c)) in on_gpu.iter().zip(&on_cpu).enumerate() {
        for (step, (g, c)) in g.iter().zip(c).enumerate() {
            let diff = max_abs_diff(g, c);
            assert!(
                diff <= LOGITS_TOLERANCE,
                "{what}: batch sequence {s} step {step} differs from the CPU by {diff:e}"
            );
        }
    }
    let alone = |s: usize| {
        let cache = device_pool.new_cache();
        let prompt: &[u32] = match s {
            0 => &[1, 5, 9, 2, 7, 30, 4],
            1 => &[3],
            _ => &[8, 8, 2, 6, 1, 1, 4, 9, 11, 2, 5, 3, 7, 7, 2, 1, 9, 4],
        };
        let (l, _) = prefill_and_decode(model, gpu, cache, prompt, 0);
        l.into_iter().next().expect("one step")
    };
    for (s, steps) in on_gpu.iter().enumerate() {
        assert_eq!(
            first_difference(&alone(s), &steps[0]),
            None,
            "{what}: sequence {s}'s prefill logits change in a batch"
        );
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU: cargo test -p nextok-cuda -- --ignored"]
fn random_models_match_the_cpu_stage_by_stage() {
    let gpu = gpu();
    let specs = [
        RandomLlama {
            weight_type: GgmlType::Q4_1,
            ..RandomLlama::default()
        },
        RandomLlama {
            weight_type: GgmlType::Q8_0,
            tied_output: false,
            attention_bias: true,
            architecture: "qwen2".into(),
            ..RandomLlama::default()
        },
        RandomLlama {
            weight_type: GgmlType::Q4_0,
            layers: 3,
            ..RandomLlama::default()
        },
        RandomLlama {
            weight_type: GgmlType::Q4K,
            d_model: 256,
            ffn_dim: 512,
            ..RandomLlama::default()
        },
        RandomLlama {
            weight_type: GgmlType::F16,
            ..RandomLlama::default()
        },
    ];
    for (i, spec) in specs.iter().enumerate() {
        let m = model(spec, 100 + i as u64);
        check_model(
            &gpu,
            &m,
            &[1, 5, 9, 2, 7, 30, 4],
            12,
            &format!("{:?} model", spec.weight_type),
        );
    }
}

/// The default model of the `nextok` command, if it has been fetched (`NEXTOK_MODEL` overrides).
fn real_model_path() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("NEXTOK_MODEL") {
        return p.into();
    }
    let home = std::env::var_os("HOME").unwrap_or_default();
    std::path::Path::new(&home).join(".cache/nextok/models/SmolLM2-135M-Instruct.Q4_1.gguf")
}

#[test]
#[ignore = "needs an NVIDIA GPU: cargo test -p nextok-cuda -- --ignored"]
fn real_model_matches_the_cpu_stage_by_stage() {
    let path = real_model_path();
    assert!(
        path.is_file(),
        "the real model is not at {} (fetch it with `nextok generate` once, or set NEXTOK_MODEL)",
        path.display()
    );
    let gpu = gpu();
    let m = LlamaModel::open(&path).expect("the real model loads");
    // Arbitrary ids inside the vocabulary of 49,152 (any ids exercise the same arithmetic; the
    // tokenizer is not this crate's concern).
    let prompt = [
        504, 3575, 282, 4649, 314, 7306, 30, 378, 6057, 282, 260, 1345,
    ];
    check_model(&gpu, &m, &prompt, 24, "SmolLM2-135M Q4_1");
}

#[test]
#[ignore = "needs an NVIDIA GPU: cargo test -p nextok-cuda -- --ignored"]
fn a_device_pool_holds_what_a_host_pool_holds_and_attention_reads_it() {
    let gpu = gpu();
    let cpu = CpuBackend::new(1);
    let mut rng = ChaCha8Rng::seed_from_u64(41);
    for kv_type in [KvType::F32, KvType::F16, KvType::BF16] {
        let config = CacheConfig::new(2, 2, 16, kv_type);
        let budget = 32 * config.block_bytes();
        let pools = [
            gpu.new_pool(config, budget).expect("device pool"),
            cpu.new_pool(config, budget).expect("host pool"),
        ];
        // The same writes, forks and copies-on-write in both pools.
        let rows: Vec<(Vec<f32>, Vec<f32>)> = (0..2 * 40)
            .map(|_| (random(&mut rng, 32), random(&mut rng, 32)))
            .collect();
        let mut read_back = Vec::new();
        let mut attended = Vec::new();
        let q = random(&mut rng, 5 * 4 * 16);
        let backends: [&dyn Backend; 2] = [&gpu, &cpu];
        for (pool, backend) in pools.iter().zip(backends) {
            let mut a = pool.new_cache();
            a.push_tokens(&(0..40).collect::<Vec<u32>>()).expect("room");
            for layer in 0..2 {
                for pos in 0..40 {
                    let (k, v) = &rows[layer * 40 + pos];
                    a.write(layer, pos, k, v).expect("write");
                }
            }
            let mut b = a.fork();
            b.truncate(20);
            b.push_tokens(&[7, 7, 7]).expect("room");
            for layer in 0..2 {
                for pos in 20..23 {
                    // Other numbers than `a` holds there: key and value swapped.
                    let (v, k) = &rows[layer * 40 + pos];
                    b.write(layer, pos, k, v).expect("write");
                }
            }
            let mut numbers = Vec::new();
            for cache in [&a, &b] {
                for layer in 0..2 {
                    for pos in 0..cache.len() {
                        let id = cache.block_table()[pos / config.block_positions];
                        for value in [false, true] {
                            let mut out = vec![0.0f32; 32];
                            pool.storage()
                                .read(id, layer, pos % config.block_positions, value, &mut out)
                                .expect("read");
                            numbers.extend(out);
                        }
                    }
                }
            }
            read_back.push(numbers);
            // Attention over the fork through the slice API: on the GPU, in place in the
            // device pool's blocks.
            let mut out = vec![0.0f32; q.len()];
            backend
                .attention(&q, &b, 1, Mask::Causal { first: 18 }, 4, &mut out)
                .expect("attention");
            attended.push(out);
        }
        let diff = max_abs_diff(&attended[0], &attended[1]);
        assert!(
            diff <= ATTENTION_TOLERANCE,
            "{kv_type:?}: attention over the device pool differs by {diff:e}"
        );
        assert_eq!(
            first_difference(&read_back[0], &read_back[1]),
            None,
            "{kv_type:?}: the device pool's numbers differ from the host pool's"
        );
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU: cargo test -p nextok-cuda -- --ignored"]
fn kv_writes_on_the_device_store_the_host_pools_numbers() {
    let gpu = gpu();
    let cpu = CpuBackend::new(1);
    let mut rng = ChaCha8Rng::seed_from_u64(43);
    let row_len = 32;
    for kv_type in [KvType::F32, KvType::F16, KvType::BF16] {
        let config = CacheConfig::new(2, 2, 16, kv_type).with_block_positions(4);
        let budget = 32 * config.block_bytes();
        let pools = [
            gpu.new_pool(config, budget).expect("device pool"),
            cpu.new_pool(config, budget).expect("host pool"),
        ];
        assert!(pools[0]
            .storage()
            .as_any()
            .downcast_ref::<DeviceStorage>()
            .is_some());
        // Per layer: a prompt of 10 rows, then 12 rows of which the last 11 are written.
        let prompt: Vec<(Vec<f32>, Vec<f32>)> = (0..2)
            .map(|_| {
                (
                    kv_rows(&mut rng, 10, row_len),
                    kv_rows(&mut rng, 10, row_len),
                )
            })
            .collect();
        let step: Vec<(Vec<f32>, Vec<f32>)> = (0..2)
            .map(|_| {
                (
                    kv_rows(&mut rng, 12, row_len),
                    kv_rows(&mut rng, 12, row_len),
                )
            })
            .collect();
        let mut read_back = Vec::new();
        let backends: [&dyn Backend; 2] = [&gpu, &cpu];
        for (pool, backend) in pools.iter().zip(backends) {
            let write = |cache: &mut KvCache,
                         layer: usize,
                         first: usize,
                         rows,
                         (k, v): &(Vec<f32>, Vec<f32>)| {
                let keys = backend.upload(k.clone()).expect("upload");
                let values = backend.upload(v.clone()).expect("upload");
                backend
                    .write_kv(cache, layer, first, &keys, &values, rows)
                    .expect("write_kv");
            };
            // Blocks out of order, a prefix-cache block and a fork that shares it: the
            // device write copies the shared block on the device, then scatters the rows.
            let mut filler = pool.new_cache();
            filler.push_tokens(&[1; 9]).expect("room");
            let mut parent = pool.new_cache();
            parent
                .push_tokens(&(0..10).collect::<Vec<u32>>())
                .expect("room");
            for (layer, rows) in prompt.iter().enumerate() {
                write(&mut parent, layer, 0, 0..10, rows);
            }
            drop(filler);
            assert_eq!(parent.publish_prefix(), 2);
            let mut child = parent.fork();
            child.truncate(6);
            child
                .push_tokens(&(100..107).collect::<Vec<u32>>())
                .expect("room");
            for (layer, rows) in step.iter().enumerate() {
                write(&mut child, layer, 2, 1..12, rows);
            }
            assert_eq!(child.shared_blocks(), 0);
            let mut numbers = Vec::new();
            for cache in [&parent, &child] {
                for layer in 0..2 {
                    for pos in 0..cache.len() {
                        let id = cache.block_table()[pos / config.block_positions];
                        for value in [false, true] {
                            let mut out = vec![0.0f32; row_len];
                            pool.storage()
                                .read(id, layer, pos % config.block_positions, value, &mut out)
                                .expect("read");
                            numbers.extend(out);
                        }
                    }
                }
            }
            read_back.push(numbers);
        }
        assert_eq!(
            first_difference(&read_back[0], &read_back[1]),
            None,
            "{kv_type:?}: rows written on the device differ from the host pool's"
        );
    }
}
