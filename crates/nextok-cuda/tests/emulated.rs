//! The kernels' own source (`src/kernels.cu`), compiled as C++ against a CPU emulation of the
//! CUDA built-ins they use (`tests/emu/emu.h`: one OS thread per CUDA thread, barriers for warp
//! shuffles and `__syncthreads`) and run with the grids the backend launches, compared with the
//! CPU backend. This checks the kernels' indexing, lanes, reduction trees and masks on a machine
//! without a GPU; what it cannot check (the driver, NVRTC's code, the real hardware's
//! scheduling) the GPU tests do.
//!
//! It needs a C++20 compiler (`$CXX`, else `c++`); without one each test says so and checks
//! nothing.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use nextok_gguf::{GgmlType, GgufFile};
use nextok_kernels::dequant;
use nextok_kernels::Layout;
use nextok_kv_cache::{CacheConfig, KvCache, KvPool, KvType};
use nextok_model::testing::RandomLlama;
use nextok_model::{Backend, CpuBackend, Mask, QMatrix};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;

use common::{first_difference, kv_rows, random};

/// The emulator binary, built once per test run; `None` (with the reason printed) without a
/// C++ compiler.
fn emulator() -> Option<&'static Path> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("nextok-cuda-emu");
            std::fs::create_dir_all(&dir).expect("temporary folder");
            let exe = dir.join("emu");
            let cxx = std::env::var("CXX").unwrap_or_else(|_| String::from("c++"));
            let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/emu/main.cpp");
            let status = Command::new(&cxx)
                .args(["-std=c++20", "-O1", "-pthread", "-w", "-o"])
                .arg(&exe)
                .arg(&src)
                .status();
            match status {
                Ok(s) if s.success() => Some(exe),
                Ok(s) => panic!("{cxx} could not compile the emulated kernels ({s})"),
                Err(e) => {
                    eprintln!(
                        "NOTE: no C++ compiler ({cxx}: {e}), so the emulated kernels were NOT run"
                    );
                    None
                }
            }
        })
        .as_deref()
}

/// Runs `emu ARGS...` with `inputs` written to files named in the arguments as `@name`, and
/// returns the f32 numbers of the output file, named `@out`.
fn run(exe: &Path, args: &[&str], inputs: &[(&str, &[u8])]) -> Vec<f32> {
    static CALL: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = CALL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = exe.with_file_name(format!("call-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("call folder");
    for (name, bytes) in inputs {
        std::fs::write(dir.join(name), bytes).expect("write an input");
    }
    let args: Vec<String> = args
        .iter()
        .map(|a| match a.strip_prefix('@') {
            Some(name) => dir.join(name).display().to_string(),
            None => (*a).to_owned(),
        })
        .collect();
    let out = Command::new(exe)
        .args(&args)
        .output()
        .expect("emulator runs");
    assert!(
        out.status.success(),
        "emulator {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(dir.join("out")).expect("emulator output");
    let _ = std::fs::remove_dir_all(&dir);
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn emulated_weight_products_give_the_cpu_bits() {
    let Some(exe) = emulator() else { return };
    let cpu = CpuBackend::new(1);
    let mut rng = ChaCha8Rng::seed_from_u64(21);
    let types = [
        (GgmlType::Q4_0, "q4_0"),
        (GgmlType::Q4_1, "q4_1"),
        (GgmlType::Q8_0, "q8_0"),
        (GgmlType::F32, "f32"),
        (GgmlType::F16, "f16"),
        (GgmlType::BF16, "bf16"),
        // Types without a kernel of their own: dequantised to f32 as the backend uploads them.
        (GgmlType::Q5_0, "f32"),
        (GgmlType::Q5_1, "f32"),
        (GgmlType::Q4K, "f32"),
        (GgmlType::Q5K, "f32"),
        (GgmlType::Q6K, "f32"),
    ];
    for (ty, layout) in types {
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
        // 50 rows: a multiple of neither the block kernels' 4 rows per block nor the plain
        // kernels' 8; 9 tokens: a full tile of 8 and a partial one. (The emulation starts a
        // thread per CUDA thread, so the sizes stay small.)
        for name in ["output.weight"] {
            let info = file
                .tensors()
                .iter()
                .find(|t| t.name == name)
                .expect("tensor");
            let (cols, rows) = (info.dims[0] as usize, info.dims[1] as usize);
            let data = file.view(info).data;
            let w = QMatrix {
                ty,
                rows,
                cols,
                layout: Layout::Gguf,
                data,
            };
            let device_bytes = if layout == "f32" && ty != GgmlType::F32 {
                let mut numbers = vec![0.0f32; rows * cols];
                dequant::dequantize_row(ty, data, &mut numbers).expect("dequantise");
                f32_bytes(&numbers)
            } else {
                data.to_vec()
            };
            for tokens in [1usize, 9] {
                let x = random(&mut rng, tokens * cols);
                let mut on_cpu = vec![0.0; tokens * rows];
                cpu.matmul(w, &x, tokens, &mut on_cpu).expect("CPU product");
                let (r, c, t) = (rows.to_string(), cols.to_string(), tokens.to_string());
                let emulated = run(
                    exe,
                    &["matmul", layout, &r, &c, &t, "@w", "@x", "@out"],
                    &[("w", &device_bytes), ("x", &f32_bytes(&x))],
                );
                if let Some((i, g, c)) = first_difference(&emulated, &on_cpu) {
                    panic!(
                        "{ty:?} {name} ({rows} × {cols}), {tokens} tokens: output {i} is {g:e} \
                         emulated and {c:e} on the CPU"
                    );
                }
            }
        }
    }
}

#[test]
fn emulated_attention_matches_the_cpu() {
    let Some(exe) = emulator() else { return };
    let cpu = CpuBackend::new(1);
    let mut rng = ChaCha8Rng::seed_from_u64(8);
    let (heads, kv_heads, hd, positions) = (4usize, 2usize, 64usize, 40usize);
    let width = heads * hd;
    for kv_type in [KvType::F32, KvType::F16] {
        let mut cache = KvCache::new(CacheConfig::new(1, kv_heads, hd, kv_type)).expect("cache");
        cache
            .push_tokens(&(0..positions as u32).collect::<Vec<_>>())
            .expect("an unbounded cache has room");
        for pos in 0..positions {
            let (k, v) = (
                random(&mut rng, kv_heads * hd),
                random(&mut rng, kv_heads * hd),
            );
            cache.write(0, pos, &k, &v).expect("write");
        }
        // The keys and values as the backend copies them to the device: f32 rows in order.
        let (mut keys, mut values) = (Vec::new(), Vec::new());
        for pos in 0..positions {
            let mut row = vec![0.0f32; kv_heads * hd];
            cache
                .key(0, pos)
                .expect("key")
                .to_f32(0..row.len(), &mut row);
            keys.extend_from_slice(&row);
            cache
                .value(0, pos)
                .expect("value")
                .to_f32(0..row.len(), &mut row);
            values.extend_from_slice(&row);
        }
        for (mask, rows) in [
            (Mask::Causal { first: 0 }, positions),
            (Mask::Causal { first: 35 }, 5),
            (Mask::Full, 3),
        ] {
            let q: Vec<f32> = random(&mut rng, rows * width)
                .iter()
                .map(|v| v * 8.0)
                .collect();
            let mut on_cpu = vec![0.0; q.len()];
            cpu.attention(&q, &cache, 0, mask, heads, &mut on_cpu)
                .expect("CPU attention");
            let (first, causal) = match mask {
                Mask::Causal { first } => (first, 1),
                Mask::Full => (0, 0),
            };
            let nums = [rows, heads, kv_heads, hd, first, causal, positions].map(|v| v.to_string());
            let mut args = vec!["attention"];
            args.extend(nums.iter().map(String::as_str));
            args.extend(["@q", "@k", "@v", "@out"]);
            let emulated = run(
                exe,
                &args,
                &[
                    ("q", &f32_bytes(&q)),
                    ("k", &f32_bytes(&keys)),
                    ("v", &f32_bytes(&values)),
                ],
            );
            let diff = emulated
                .iter()
                .zip(&on_cpu)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            let same = emulated
                .iter()
                .zip(&on_cpu)
                .filter(|(a, b)| a.to_bits() == b.to_bits())
                .count();
            eprintln!(
                "emulated attention {kv_type:?} {mask:?} × {rows}: max |Δ| = {diff:e}, {same} of {} identical",
                q.len()
            );
            // Outputs are convex combinations of value rows in [−1, 1]; only the exponential
            // may differ from the CPU's, in its last bit.
            assert!(
                diff <= 1e-5,
                "{kv_type:?} {mask:?}: emulated attention differs by {diff:e}"
            );
        }
    }
}

#[test]
fn emulated_norm_rotary_and_swiglu_follow_the_host_formulas() {
    let Some(exe) = emulator() else { return };
    let mut rng = ChaCha8Rng::seed_from_u64(13);

    // RMSNorm, as nextok-model's host code computes it (sum of squares in f64, in order).
    let (rows, d, eps) = (3usize, 576usize, 1e-5f32);
    let x: Vec<f32> = random(&mut rng, rows * d).iter().map(|v| v * 3.0).collect();
    let w: Vec<f32> = random(&mut rng, d).iter().map(|v| 1.0 + 0.1 * v).collect();
    let mut host = vec![0.0f32; rows * d];
    for (row, dst) in x.chunks_exact(d).zip(host.chunks_exact_mut(d)) {
        let ss: f64 = row.iter().map(|&v| v as f64 * v as f64).sum();
        let scale = 1.0 / (ss / d as f64 + eps as f64).sqrt();
        for ((o, &v), &g) in dst.iter_mut().zip(row).zip(&w) {
            *o = (v as f64 * scale) as f32 * g;
        }
    }
    let (r, dd) = (rows.to_string(), d.to_string());
    let emulated = run(
        exe,
        &["rms_norm", &r, &dd, "1e-5", "@x", "@w", "@out"],
        &[("x", &f32_bytes(&x)), ("w", &f32_bytes(&w))],
    );
    // The f64 sum of squares is taken in order by one thread, as on the host: the same bits.
    assert_eq!(first_difference(&emulated, &host), None, "RMSNorm");

    // The rows whose logits are wanted, in the order asked (a row twice, rows out of order).
    let wanted = [2i32, 0, 2];
    let idx: Vec<u8> = wanted.iter().flat_map(|r| r.to_le_bytes()).collect();
    let emulated = run(
        exe,
        &["rms_norm_rows", "@rows", &dd, "1e-5", "@x", "@w", "@out"],
        &[("rows", &idx), ("x", &f32_bytes(&x)), ("w", &f32_bytes(&w))],
    );
    let expected: Vec<f32> = wanted
        .iter()
        .flat_map(|&r| host[r as usize * d..(r as usize + 1) * d].to_vec())
        .collect();
    assert_eq!(
        first_difference(&emulated, &expected),
        None,
        "RMSNorm of chosen rows"
    );

    // Rotary embeddings, both pairings, as the host's RopeTable applies them.
    let (rows, heads, hd, half) = (3usize, 9usize, 64usize, 32usize);
    let x = random(&mut rng, rows * heads * hd);
    let cos_sin: Vec<f32> = (0..rows * half)
        .flat_map(|i| {
            let angle = (i as f64 * 0.37).sin() * 3.0;
            [angle.cos() as f32, angle.sin() as f32]
        })
        .collect();
    for neox in [0, 1] {
        let mut host = x.clone();
        for (r, row) in host.chunks_exact_mut(heads * hd).enumerate() {
            for head in row.chunks_exact_mut(hd) {
                for i in 0..half {
                    let (co, s) = (cos_sin[(r * half + i) * 2], cos_sin[(r * half + i) * 2 + 1]);
                    let (a, b) = if neox == 1 {
                        (i, i + half)
                    } else {
                        (2 * i, 2 * i + 1)
                    };
                    let (x0, x1) = (head[a], head[b]);
                    head[a] = x0 * co - x1 * s;
                    head[b] = x0 * s + x1 * co;
                }
            }
        }
        let (r, h, dh, nx) = (
            rows.to_string(),
            heads.to_string(),
            hd.to_string(),
            neox.to_string(),
        );
        let emulated = run(
            exe,
            &["rope", &r, &h, &dh, &nx, "@x", "@cs", "@out"],
            &[("x", &f32_bytes(&x)), ("cs", &f32_bytes(&cos_sin))],
        );
        assert_eq!(
            first_difference(&emulated, &host),
            None,
            "rotary, neox = {neox}"
        );
    }

    // SwiGLU against nextok-kernels' formula (its exponential in f32; the kernel's in f64,
    // rounded once): a few units in the last place at most.
    let g: Vec<f32> = random(&mut rng, 1000).iter().map(|v| v * 6.0).collect();
    let u = random(&mut rng, 1000);
    let emulated = run(
        exe,
        &["silu_mul", "@g", "@u", "@out"],
        &[("g", &f32_bytes(&g)), ("u", &f32_bytes(&u))],
    );
    for (i, ((e, &gi), &ui)) in emulated.iter().zip(&g).zip(&u).enumerate() {
        let host = nextok_kernels::silu_times(gi, ui);
        assert!(
            (e - host).abs() <= 4.0 * f32::EPSILON * host.abs(),
            "SwiGLU {i}: {e:e} emulated, {host:e} on the host"
        );
    }
}

/// Every block of a host pool, one after another in block-number order, as f32 numbers in the
/// storage's layout: what a device storage holds (its blocks at their own addresses).
fn pool_numbers(pool: &KvPool, blocks: usize) -> Vec<f32> {
    let config = *pool.config();
    let host = pool.storage().host().expect("a host pool");
    let row_len = config.row_len();
    let mut out = vec![0.0f32; blocks * config.block_numbers()];
    for b in 0..blocks {
        // A block the pool never handed out stays zero.
        let Ok(block) = host.block(nextok_kv_cache::BlockId::new(b as u32)) else {
            continue;
        };
        let base = b * config.block_numbers();
        for layer in 0..config.layers {
            for slot in 0..config.block_positions {
                for value in [false, true] {
                    let at = base + config.row_offset(layer, slot, value);
                    let row = if value {
                        block.value(layer, slot)
                    } else {
                        block.key(layer, slot)
                    }
                    .expect("row");
                    row.to_f32(0..row_len, &mut out[at..at + row_len]);
                }
            }
        }
    }
    out
}

#[test]
fn emulated_paged_attention_reads_the_blocks_in_place_and_matches_the_cpu() {
    let Some(exe) = emulator() else { return };
    let cpu = CpuBackend::new(1);
    let mut rng = ChaCha8Rng::seed_from_u64(29);
    let (layers, heads, kv_heads, hd) = (2usize, 4usize, 2usize, 32usize);
    let width = heads * hd;
    for kv_type in [KvType::F32, KvType::F16] {
        let config = CacheConfig::new(layers, kv_heads, hd, kv_type).with_block_positions(16);
        let pool = KvPool::new(config, 64 * config.block_bytes()).expect("pool");
        let mut write_rows = |cache: &mut KvCache, range: std::ops::Range<usize>| {
            for layer in 0..layers {
                for pos in range.clone() {
                    let (k, v) = (
                        random(&mut rng, kv_heads * hd),
                        random(&mut rng, kv_heads * hd),
                    );
                    cache.write(layer, pos, &k, &v).expect("write");
                }
            }
        };
        // A first cache takes the first blocks and gives them back, so that the sequence below
        // gets blocks out of order: its block table is not 0, 1, 2, ...
        let mut filler = pool.new_cache();
        filler.push_tokens(&[1; 20]).expect("room");
        let mut a = pool.new_cache();
        a.push_tokens(&(0..40).collect::<Vec<u32>>()).expect("room");
        write_rows(&mut a, 0..40);
        drop(filler);
        // A fork that keeps 24 positions and grows: its partial block is copied on write, and
        // its first block stays shared with `a`.
        let mut b = a.fork();
        b.truncate(24);
        b.push_tokens(&(100..121).collect::<Vec<u32>>())
            .expect("room");
        write_rows(&mut b, 24..45);
        let table: Vec<u32> = b.block_table().iter().map(|id| id.index() as u32).collect();
        assert_eq!(table.len(), 3);
        assert_eq!(
            table[0],
            a.block_table()[0].index() as u32,
            "shared first block"
        );
        assert!(
            table.windows(2).any(|w| w[1] != w[0] + 1),
            "the block table {table:?} should not be consecutive"
        );
        let blocks = table.iter().map(|&t| t as usize + 1).max().expect("blocks");
        let numbers = pool_numbers(&pool, blocks);
        let table_bytes: Vec<u8> = table.iter().flat_map(|t| t.to_le_bytes()).collect();
        let positions = b.len();
        for layer in 0..layers {
            for (mask, rows) in [
                (Mask::Causal { first: 0 }, positions),
                (Mask::Causal { first: 41 }, 4),
                (Mask::Full, 3),
            ] {
                let q: Vec<f32> = random(&mut rng, rows * width)
                    .iter()
                    .map(|v| v * 8.0)
                    .collect();
                let mut on_cpu = vec![0.0; q.len()];
                cpu.attention(&q, &b, layer, mask, heads, &mut on_cpu)
                    .expect("CPU attention");
                let (first, causal) = match mask {
                    Mask::Causal { first } => (first, 1),
                    Mask::Full => (0, 0),
                };
                let nums = [
                    rows, heads, kv_heads, hd, first, causal, positions, layer, layers, 16,
                ]
                .map(|v| v.to_string());
                let mut args = vec!["attention_paged"];
                args.extend(nums.iter().map(String::as_str));
                args.extend(["@q", "@pool", "@table", "@out"]);
                let emulated = run(
                    exe,
                    &args,
                    &[
                        ("q", &f32_bytes(&q)),
                        ("pool", &f32_bytes(&numbers)),
                        ("table", &table_bytes),
                    ],
                );
                let diff = emulated
                    .iter()
                    .zip(&on_cpu)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0f32, f32::max);
                let same = emulated
                    .iter()
                    .zip(&on_cpu)
                    .filter(|(a, b)| a.to_bits() == b.to_bits())
                    .count();
                eprintln!(
                    "emulated paged attention {kv_type:?} layer {layer} {mask:?} × {rows}: \
                     max |Δ| = {diff:e}, {same} of {} identical",
                    q.len()
                );
                // As for contiguous rows: only the exponential may differ, in its last bit.
                assert!(
                    diff <= 1e-5,
                    "{kv_type:?} layer {layer} {mask:?}: paged attention differs by {diff:e}"
                );
                assert!(
                    same * 50 >= q.len() * 49,
                    "{kv_type:?} layer {layer} {mask:?}: only {same} of {} outputs identical",
                    q.len()
                );
            }
        }
    }
}

#[test]
fn emulated_kv_writes_store_the_bytes_the_host_stores() {
    let Some(exe) = emulator() else { return };
    let mut rng = ChaCha8Rng::seed_from_u64(31);
    let (layers, kv_heads, hd, bp) = (2usize, 2usize, 16usize, 4usize);
    let row_len = kv_heads * hd;
    for (kv_type, code) in [(KvType::F32, 0), (KvType::F16, 1), (KvType::BF16, 2)] {
        let config = CacheConfig::new(layers, kv_heads, hd, kv_type).with_block_positions(bp);
        let pool = KvPool::new(config, 16 * config.block_bytes()).expect("pool");
        let total = pool.total_blocks();
        // A filler takes the first blocks and gives them back, so that the caches below get
        // blocks out of order.
        let mut filler = pool.new_cache();
        filler.push_tokens(&[1; 9]).expect("room");
        let mut parent = pool.new_cache();
        parent
            .push_tokens(&(0..10).collect::<Vec<u32>>())
            .expect("room");
        for layer in 0..layers {
            for pos in 0..10 {
                let (k, v) = (random(&mut rng, row_len), random(&mut rng, row_len));
                parent.write(layer, pos, &k, &v).expect("write");
            }
        }
        drop(filler);
        // Its two full blocks go to the prefix cache; a fork keeps 6 positions and grows to 13
        // (its partial second block copied by the push).
        assert_eq!(parent.publish_prefix(), 2);
        let mut child = parent.fork();
        child.truncate(6);
        child
            .push_tokens(&(100..107).collect::<Vec<u32>>())
            .expect("room");
        let table: Vec<usize> = child.block_table().iter().map(|b| b.index()).collect();
        assert!(
            table.windows(2).any(|w| w[1] != w[0] + 1),
            "the block table {table:?} should not be consecutive"
        );
        for layer in 0..layers {
            // Rows 2..13: the first block is shared with the parent and the prefix cache, so the
            // write copies it; 11 rows over four blocks, 352 numbers: two thread blocks.
            let (keys, values) = (
                kv_rows(&mut rng, 11, row_len),
                kv_rows(&mut rng, 11, row_len),
            );
            let mut emulated = Vec::new();
            let mut before = Vec::new();
            child
                .write_rows(layer, 2..13, |storage, places| {
                    // The pool as the device holds it when the kernel runs: shared blocks
                    // already copied, the new rows not yet written.
                    before = pool_numbers(&pool, total);
                    let place_bytes: Vec<u8> = places
                        .iter()
                        .flat_map(|p| [p.block.index() as u32, p.slot as u32])
                        .flat_map(u32::to_le_bytes)
                        .collect();
                    let nums = [layer, layers, bp, code].map(|v| v.to_string());
                    let mut args = vec!["write_kv_paged"];
                    args.extend(nums.iter().map(String::as_str));
                    args.extend(["@pool", "@keys", "@values", "@places", "@out"]);
                    emulated = run(
                        exe,
                        &args,
                        &[
                            ("pool", &f32_bytes(&before)),
                            ("keys", &f32_bytes(&keys)),
                            ("values", &f32_bytes(&values)),
                            ("places", &place_bytes),
                        ],
                    );
                    // The host path: the storage's own write, row by row.
                    for (i, p) in places.iter().enumerate() {
                        let r = i * row_len..(i + 1) * row_len;
                        storage.write(p.block, layer, p.slot, &keys[r.clone()], &values[r])?;
                    }
                    Ok::<(), nextok_kv_cache::Error>(())
                })
                .expect("write rows");
            // The first layer's write copied the shared block: the child's is its own.
            assert_ne!(child.block_table()[0], parent.block_table()[0]);
            assert_eq!(child.shared_blocks(), 0);
            let on_host = pool_numbers(&pool, total);
            if let Some((i, e, h)) = first_difference(&emulated, &on_host) {
                panic!(
                    "{kv_type:?} layer {layer}: number {i} (block {}) is {e:e} ({:#x}) emulated, \
                     {h:e} ({:#x}) on the host",
                    i / config.block_numbers(),
                    e.to_bits(),
                    h.to_bits()
                );
            }
            // Nothing but the rows' numbers changed.
            let mut rows_at = vec![false; before.len()];
            for (i, id) in child.block_table().iter().enumerate() {
                for slot in 0..bp {
                    let pos = i * bp + slot;
                    if !(2..13).contains(&pos) {
                        continue;
                    }
                    for value in [false, true] {
                        let at = id.index() * config.block_numbers()
                            + config.row_offset(layer, slot, value);
                        rows_at[at..at + row_len].fill(true);
                    }
                }
            }
            let stray = (0..before.len())
                .find(|&i| !rows_at[i] && before[i].to_bits() != emulated[i].to_bits());
            assert_eq!(
                stray, None,
                "{kv_type:?} layer {layer}: a number outside the rows changed"
            );
            // The parent's blocks, and so the prefix cache's, are untouched.
            let block = config.block_numbers();
            for id in parent.block_table() {
                let r = id.index() * block..(id.index() + 1) * block;
                assert!(
                    first_difference(&before[r.clone()], &emulated[r]).is_none(),
                    "{kv_type:?}: the parent's block {} was written",
                    id.index()
                );
            }
        }
    }
}

#[test]
fn emulated_bias_and_residual_additions_are_the_hosts() {
    let Some(exe) = emulator() else { return };
    let mut rng = ChaCha8Rng::seed_from_u64(17);
    // 3 rows of 192 with a bias of 192, and a residual of 1000 numbers (past one block of 256
    // threads): each number is one f32 addition, as on the host.
    let x = random(&mut rng, 3 * 192);
    let b = random(&mut rng, 192);
    let emulated = run(
        exe,
        &["add_bias", "@x", "@b", "@out"],
        &[("x", &f32_bytes(&x)), ("b", &f32_bytes(&b))],
    );
    let host: Vec<f32> = x.iter().enumerate().map(|(i, v)| v + b[i % 192]).collect();
    assert_eq!(first_difference(&emulated, &host), None, "bias");
    let (x, y) = (random(&mut rng, 1000), random(&mut rng, 1000));
    let emulated = run(
        exe,
        &["add", "@x", "@y", "@out"],
        &[("x", &f32_bytes(&x)), ("y", &f32_bytes(&y))],
    );
    let host: Vec<f32> = x.iter().zip(&y).map(|(a, b)| a + b).collect();
    assert_eq!(first_difference(&emulated, &host), None, "residual");
}

#[test]
fn emulated_embedding_rows_are_the_hosts_dequantised_rows() {
    let Some(exe) = emulator() else { return };
    let types = [
        (GgmlType::Q4_0, "q4_0"),
        (GgmlType::Q4_1, "q4_1"),
        (GgmlType::Q8_0, "q8_0"),
        (GgmlType::F32, "f32"),
        (GgmlType::F16, "f16"),
        (GgmlType::BF16, "bf16"),
        // Dequantised to f32 at upload, as for the products.
        (GgmlType::Q5_1, "f32"),
        (GgmlType::Q6K, "f32"),
    ];
    let tokens: [u32; 5] = [0, 49, 7, 7, 23];
    for (ty, layout) in types {
        let spec = RandomLlama {
            layers: 1,
            d_model: 256,
            ffn_dim: 512,
            vocab: 50,
            weight_type: ty,
            ..RandomLlama::default()
        };
        let file = GgufFile::from_bytes(spec.to_gguf(4)).expect("random model parses");
        let info = file
            .tensors()
            .iter()
            .find(|t| t.name == "token_embd.weight")
            .expect("tensor");
        let (cols, rows) = (info.dims[0] as usize, info.dims[1] as usize);
        let data = file.view(info).data;
        let w = QMatrix {
            ty: info.ggml_type,
            rows,
            cols,
            layout: Layout::Gguf,
            data,
        };
        // The model crate's embedding: each row dequantised exactly on the host.
        let mut expected = vec![0.0f32; tokens.len() * cols];
        for (row, &t) in expected.chunks_exact_mut(cols).zip(&tokens) {
            w.row(t as usize, row).expect("row");
        }
        let device_bytes = if layout == "f32" && w.ty != GgmlType::F32 {
            let mut numbers = vec![0.0f32; rows * cols];
            dequant::dequantize_row(w.ty, data, &mut numbers).expect("dequantise");
            f32_bytes(&numbers)
        } else {
            data.to_vec()
        };
        let ids: Vec<u8> = tokens
            .iter()
            .flat_map(|&t| (t as i32).to_le_bytes())
            .collect();
        let c = cols.to_string();
        let emulated = run(
            exe,
            &["embed", layout, &c, "@w", "@ids", "@out"],
            &[("w", &device_bytes), ("ids", &ids)],
        );
        if let Some((i, g, h)) = first_difference(&emulated, &expected) {
            panic!("{ty:?} embedding: number {i} is {g:e} emulated and {h:e} on the host");
        }
    }
}
