//! Every SIMD kernel against the portable one (bit for bit), products of many tokens against
//! products of one, every thread count against one thread, and all of them against an f64
//! dot product over the exactly dequantised weights.

use nextok_gguf::GgmlType;
use nextok_kernels::dequant;
use nextok_kernels::{matmul, matmul_serial, Isa, Layout, QMat, ThreadPool};
use proptest::prelude::*;

const TYPES: [GgmlType; 8] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q8_0,
    GgmlType::Q4K,
    GgmlType::Q5K,
    GgmlType::Q6K,
    GgmlType::F16,
    GgmlType::F32,
];

/// Offsets of the f16 scale fields inside one block, which must hold finite numbers.
fn f16_fields(ty: GgmlType) -> &'static [usize] {
    match ty {
        GgmlType::Q4_0 | GgmlType::Q8_0 => &[0],
        GgmlType::Q4_1 | GgmlType::Q4K | GgmlType::Q5K => &[0, 2],
        GgmlType::Q6K => &[208],
        GgmlType::F16 => &[0],
        _ => &[],
    }
}

/// A small deterministic generator, so that a failing case is reproducible from its seed.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn unit(&mut self) -> f32 {
        (self.next() % 2_000_001) as f32 / 1_000_000.0 - 1.0
    }
}

fn random_matrix(ty: GgmlType, rows: usize, cols: usize, rng: &mut Lcg) -> Vec<u8> {
    let blocks = rows * cols / ty.block_elements() as usize;
    let bb = ty.block_bytes() as usize;
    let mut data = Vec::with_capacity(blocks * bb);
    for _ in 0..blocks {
        let start = data.len();
        if ty == GgmlType::F32 {
            data.extend_from_slice(&rng.unit().to_le_bytes());
            continue;
        }
        for _ in 0..bb {
            data.push(rng.next() as u8);
        }
        for &off in f16_fields(ty) {
            // Scales between 2^-10 and 2^-1, positive or negative: finite, and of the size real
            // checkpoints have.
            let exponent = 5 + (rng.next() % 10) as u16;
            let bits =
                (exponent << 10) | (rng.next() as u16 & 0x3ff) | ((rng.next() as u16 & 1) << 15);
            data[start + off..start + off + 2].copy_from_slice(&bits.to_le_bytes());
        }
    }
    data
}

fn reference(
    ty: GgmlType,
    rows: usize,
    cols: usize,
    data: &[u8],
    x: &[f32],
    tokens: usize,
) -> Vec<f64> {
    let mut w = vec![0.0f32; rows * cols];
    dequant::dequantize_row(ty, data, &mut w).unwrap();
    let mut out = vec![0.0f64; tokens * rows];
    for t in 0..tokens {
        for r in 0..rows {
            out[t * rows + r] = (0..cols)
                .map(|k| f64::from(w[r * cols + k]) * f64::from(x[t * cols + k]))
                .sum();
        }
    }
    out
}

fn case(ty: GgmlType, rows: usize, blocks: usize, tokens: usize, seed: u64) {
    let cols = blocks * ty.block_elements().max(32) as usize;
    let mut rng = Lcg(seed);
    let data = random_matrix(ty, rows, cols, &mut rng);
    let x: Vec<f32> = (0..tokens * cols).map(|_| rng.unit()).collect();
    let w = QMat::new(ty, rows, cols, &data).unwrap();

    let mut portable = vec![0.0f32; tokens * rows];
    matmul_serial(Isa::Portable, w, &x, tokens, &mut portable).unwrap();

    // Against f64: the lanes are f32 sums of at most a few thousand terms of size ~1.
    let exact = reference(ty, rows, cols, &data, &x, tokens);
    for (i, (&p, &e)) in portable.iter().zip(&exact).enumerate() {
        let scale: f64 = 1.0 + e.abs();
        assert!(
            (f64::from(p) - e).abs() <= 1e-4 * scale * (cols as f64).sqrt(),
            "{ty:?} element {i}: {p} vs exact {e}"
        );
    }

    // Q4_1 and Q8_0 also in the packed layout: the file's bytes come back exactly, and every kernel on
    // the packed rows gives the bits of the portable kernel on the file's rows.
    let packed_bytes = QMat::packable(ty).then(|| w.pack().unwrap());
    let mut layouts = vec![w];
    if let Some(bytes) = &packed_bytes {
        let p = QMat::new_packed(ty, rows, cols, bytes).unwrap();
        assert_eq!(p.layout(), Layout::Packed);
        let rb = data.len() / rows;
        let mut back = vec![0u8; rb];
        for r in 0..rows {
            p.gguf_row(r, &mut back);
            assert_eq!(
                back,
                data[r * rb..(r + 1) * rb],
                "row {r} does not unpack to the file"
            );
        }
        layouts.push(p);
    }
    for (isa, w) in Isa::available()
        .into_iter()
        .flat_map(|isa| layouts.iter().map(move |&w| (isa, w)))
    {
        let ty = (ty, w.layout());
        let mut simd = vec![0.0f32; tokens * rows];
        matmul_serial(isa, w, &x, tokens, &mut simd).unwrap();
        assert_eq!(
            simd.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            portable.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "{isa:?} differs from the portable kernel for {ty:?}"
        );
        // One token at a time gives the same bits as all tokens together.
        for t in 0..tokens {
            let mut one = vec![0.0f32; rows];
            matmul_serial(isa, w, &x[t * cols..(t + 1) * cols], 1, &mut one).unwrap();
            assert_eq!(
                one.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                portable[t * rows..(t + 1) * rows]
                    .iter()
                    .map(|v| v.to_bits())
                    .collect::<Vec<_>>(),
                "{isa:?}: token {t} alone differs from the batch for {ty:?}"
            );
        }
        for threads in [2, 3] {
            let pool = ThreadPool::new(threads);
            let mut par = vec![0.0f32; tokens * rows];
            matmul(&pool, isa, w, &x, tokens, &mut par).unwrap();
            assert_eq!(
                par.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                portable.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{isa:?} with {threads} threads differs for {ty:?}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn every_isa_tile_and_thread_count_gives_the_portable_bits(
        ty in prop::sample::select(TYPES.to_vec()),
        rows in 1usize..11,
        blocks in 1usize..4,
        tokens in 1usize..10,
        seed in any::<u64>(),
    ) {
        case(ty, rows, blocks, tokens, seed);
    }

    #[test]
    fn packed_rows_of_every_group_shape_give_the_portable_bits(
        ty in prop::sample::select(vec![GgmlType::Q4_1, GgmlType::Q8_0]),
        rows in 1usize..7,
        blocks in 1usize..12,
        tokens in 1usize..6,
        seed in any::<u64>(),
    ) {
        // 1 to 11 blocks: for Q4_1, rows of whole groups of four and rows ending in a two
        // and/or a one.
        case(ty, rows, blocks, tokens, seed);
    }
}

#[test]
fn q4_1_rows_beyond_one_tile_and_split_over_threads_give_the_portable_bits() {
    // 37 rows: two whole packed tiles of 16 and one padded one; 2 and 3 threads split them at
    // tile boundaries, and 5 blocks exercise the kernels' groups of 4, 2 and 1 blocks.
    case(GgmlType::Q4_1, 37, 5, 9, 11);
    case(GgmlType::Q4_1, 16, 7, 1, 12);
}

#[test]
fn q4_1_applies_scale_and_minimum_once_per_block() {
    // One block with every nibble 3, d = 0.5 (f16 0x3800) and m = -1 (f16 0xbc00); x_i = i.
    // Weights are 0.5 · 3 − 1 = 0.5, so the product is 0.5 · Σ i = 248: the definition's
    // D = 0.5 · (3 · 496) = 744 and M = −1 · 496, all exact.
    let mut block = vec![0x00u8, 0x38, 0x00, 0xbc];
    block.extend_from_slice(&[0x33u8; 16]);
    let x: Vec<f32> = (0..32).map(|i| i as f32).collect();
    let mut xs = [0.0f32; 1];
    nextok_kernels::portable::block_sums(&x, &mut xs);
    assert_eq!(xs, [496.0]);
    assert_eq!(
        nextok_kernels::portable::q4_1::<1>(&block, [&x], [&xs]),
        [248.0]
    );
    let w = QMat::new(GgmlType::Q4_1, 1, 32, &block).unwrap();
    let packed = w.pack().unwrap();
    assert_eq!(packed.len(), 320);
    for isa in Isa::available() {
        for m in [w, QMat::new_packed(GgmlType::Q4_1, 1, 32, &packed).unwrap()] {
            let mut out = [0.0f32];
            matmul_serial(isa, m, &x, 1, &mut out).unwrap();
            assert_eq!(out, [248.0], "{isa:?} {:?}", m.layout());
        }
    }
}

#[test]
fn q8_0_rows_beyond_one_tile_and_split_over_threads_give_the_portable_bits() {
    // As for Q4_1: 37 rows are two whole tiles and a padded one, 9 blocks exercise the decode
    // kernel's groups of four and its last group, and 1,536 columns a long row.
    case(GgmlType::Q8_0, 37, 9, 9, 13);
    case(GgmlType::Q8_0, 16, 18, 1, 14);
    case(GgmlType::Q8_0, 33, 48, 2, 15);
}

#[test]
fn q8_0_applies_the_scale_once_per_block() {
    // Two blocks: q_i = i − 16 with d = 0.5 (f16 0x3800), then q_i = 1 with d = −2 (0xc000);
    // x_i = 1 everywhere. The definition's S_0 = Σ (i − 16) = −16 and S_1 = 32, so the product
    // is 0.5 · −16 − 2 · 32 = −72, all exact; the packed tile holds 544 bytes per block.
    let mut row = vec![0x00u8, 0x38];
    row.extend((0..32).map(|i| (i as i8 - 16) as u8));
    row.extend_from_slice(&[0x00, 0xc0]);
    row.extend_from_slice(&[1u8; 32]);
    let x = vec![1.0f32; 64];
    assert_eq!(nextok_kernels::portable::q8_0::<1>(&row, [&x]), [-72.0]);
    let w = QMat::new(GgmlType::Q8_0, 1, 64, &row).unwrap();
    let packed = w.pack().unwrap();
    assert_eq!(packed.len(), 2 * 544);
    for isa in Isa::available() {
        for m in [w, QMat::new_packed(GgmlType::Q8_0, 1, 64, &packed).unwrap()] {
            let mut out = [0.0f32];
            matmul_serial(isa, m, &x, 1, &mut out).unwrap();
            assert_eq!(out, [-72.0], "{isa:?} {:?}", m.layout());
        }
    }
}

#[test]
fn a_long_row_and_many_tokens_cross_the_token_blocks() {
    // 70 tokens cross the 32-token blocks and every tile size; 1,536 columns is SmolLM2's
    // feed-forward width.
    case(GgmlType::Q4_1, 9, 48, 70, 7);
    case(GgmlType::Q8_0, 5, 18, 37, 8);
}

#[test]
fn many_tokens_over_rows_beyond_one_chunk_give_the_portable_bits() {
    // A batched decode step's products go chunk of weight rows by chunk (128 KB of tiles), each
    // chunk against every token block of a group of 32 tokens. 1,536 columns make a Q4_1 tile
    // 15 KB (chunks of 8 tiles) and a Q8_0 tile 26 KB (chunks of 4): 300 and 150 rows are
    // several chunks and a padded last tile, and 41 tokens two groups, the second a lone
    // block and a one-token rest; 2 and 3 threads start their rows inside chunks.
    case(GgmlType::Q4_1, 300, 48, 41, 21);
    case(GgmlType::Q8_0, 150, 48, 41, 22);
}

#[test]
fn f32_rows_that_are_not_a_multiple_of_16_use_the_same_lanes() {
    let (rows, cols, tokens) = (3, 37, 2);
    let mut rng = Lcg(3);
    let data = random_matrix(GgmlType::F32, rows, cols, &mut rng);
    let x: Vec<f32> = (0..tokens * cols).map(|_| rng.unit()).collect();
    let w = QMat::new(GgmlType::F32, rows, cols, &data).unwrap();
    let mut want = vec![0.0f32; rows * tokens];
    matmul_serial(Isa::Portable, w, &x, tokens, &mut want).unwrap();
    for isa in Isa::available() {
        let mut got = vec![0.0f32; rows * tokens];
        matmul_serial(isa, w, &x, tokens, &mut got).unwrap();
        assert_eq!(got, want, "{isa:?}");
    }
}

#[test]
fn bad_shapes_are_errors() {
    assert!(QMat::new(GgmlType::Q4_1, 2, 32, &[0u8; 39]).is_err());
    assert!(QMat::new(GgmlType::Q4_1, 1, 33, &[0u8; 20]).is_err());
    assert!(QMat::new(GgmlType::Q8K, 1, 256, &[0u8; 292]).is_err());
    let data = vec![0u8; 20];
    let w = QMat::new(GgmlType::Q4_1, 1, 32, &data).unwrap();
    let mut out = [0.0f32; 1];
    assert!(matmul_serial(Isa::Portable, w, &[0.0; 31], 1, &mut out).is_err());
    assert!(matmul_serial(Isa::Portable, w, &[0.0; 32], 1, &mut [0.0; 2]).is_err());
    // More matrices than one grouped call takes, or a missing output: errors, not a panic.
    let pool = ThreadPool::new(2);
    let many = vec![w; nextok_kernels::MAX_GROUPED + 1];
    let mut bufs = vec![[0.0f32; 1]; many.len()];
    let mut outs: Vec<&mut [f32]> = bufs.iter_mut().map(|b| b.as_mut_slice()).collect();
    assert!(
        nextok_kernels::matmul_many(&pool, Isa::Portable, &many, &[0.0; 32], 1, &mut outs).is_err()
    );
    assert!(nextok_kernels::matmul_many(
        &pool,
        Isa::Portable,
        &many[..2],
        &[0.0; 32],
        1,
        &mut outs[..1]
    )
    .is_err());
    // Packed rows: tiles of 16 rows (the last tile padded), 320 bytes per block for Q4_1 and 544
    // for Q8_0, no other type, never packed twice.
    assert!(QMat::new_packed(GgmlType::Q4_1, 1, 32, &[0u8; 20]).is_err());
    assert!(QMat::new_packed(GgmlType::Q4_1, 1, 32, &[0u8; 320]).is_ok());
    assert!(QMat::new_packed(GgmlType::Q4_1, 16, 64, &[0u8; 640]).is_ok());
    assert!(QMat::new_packed(GgmlType::Q4_1, 17, 32, &[0u8; 320]).is_err());
    assert!(QMat::new_packed(GgmlType::Q4_1, 17, 32, &[0u8; 640]).is_ok());
    assert!(QMat::new_packed(GgmlType::Q8_0, 1, 32, &[0u8; 36]).is_err());
    assert!(QMat::new_packed(GgmlType::Q8_0, 1, 32, &[0u8; 544]).is_ok());
    assert!(QMat::new_packed(GgmlType::Q8_0, 17, 64, &[0u8; 2 * 1088]).is_ok());
    assert!(QMat::new_packed(GgmlType::Q4_0, 1, 32, &[0u8; 18]).is_err());
    let q4_0 = QMat::new(GgmlType::Q4_0, 1, 32, &[0u8; 18]).unwrap();
    assert!(q4_0.pack().is_err());
    let packed = w.pack().unwrap();
    assert!(QMat::new_packed(GgmlType::Q4_1, 1, 32, &packed)
        .unwrap()
        .pack()
        .is_err());
}

#[test]
fn the_pool_runs_every_part_once_and_reraises_panics() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let pool = ThreadPool::new(3);
    for _ in 0..1000 {
        let hits: [AtomicUsize; 3] = Default::default();
        pool.run(|part| {
            hits[part].fetch_add(1, Ordering::SeqCst);
        });
        assert!(hits.iter().all(|h| h.load(Ordering::SeqCst) == 1));
    }
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        pool.run(|part| assert!(part != 2, "part 2 fails"));
    }));
    assert!(result.is_err());
    // The pool still works after a panic.
    let hits = AtomicUsize::new(0);
    pool.run(|_| {
        hits.fetch_add(1, Ordering::SeqCst);
    });
    assert_eq!(hits.load(Ordering::SeqCst), 3);
}

#[test]
fn an_oversubscribed_pool_polls_briefly_then_sleeps() {
    // Issue 13: `--threads 32` on 2 cores spun 24× slower than 2 threads, because waiting threads
    // polled for 65,536 rounds while the thread everyone waited for had no core. A pool with
    // more threads than cores polls a few times per wait and then sleeps; the count of polls is
    // the work-unit bound (a wall-clock limit would depend on the machine's load).
    use std::sync::atomic::{AtomicUsize, Ordering};
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = 4 * cores + 1;
    let pool = ThreadPool::new(threads);
    let full = ThreadPool::new(1);
    assert!(pool.spin_limit() <= 64, "short spins when oversubscribed");
    assert!(full.spin_limit() > pool.spin_limit());
    let runs = 300u64;
    let total = AtomicUsize::new(0);
    for _ in 0..runs {
        pool.run(|part| {
            // A little work per part, so that parts overlap on the cores.
            let mut x = part as u64 + 1;
            for _ in 0..2_000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
            total.fetch_add(usize::from(x != 0), Ordering::SeqCst);
        });
    }
    assert_eq!(total.load(Ordering::SeqCst), threads * runs as usize);
    let bound = (runs + 1) * threads as u64 * u64::from(pool.spin_limit());
    assert!(
        pool.polls() <= bound,
        "{} polls for {runs} runs of {threads} threads (bound {bound})",
        pool.polls()
    );
}

#[test]
fn a_pool_with_a_chosen_spin_limit_keeps_it_and_runs_every_part() {
    // A pool whose jobs come far apart (the mask worker of a constrained decode) polls a few
    // times and sleeps: the limit it is given is the one its waits keep to.
    use std::sync::atomic::{AtomicUsize, Ordering};
    let pool = ThreadPool::with_spin_limit(2, 8).unwrap();
    assert_eq!(pool.threads(), 2);
    assert_eq!(pool.spin_limit(), 8);
    let runs = 200u64;
    let hits: [AtomicUsize; 2] = Default::default();
    for _ in 0..runs {
        pool.run(|part| {
            hits[part].fetch_add(1, Ordering::SeqCst);
        });
    }
    assert!(hits
        .iter()
        .all(|h| h.load(Ordering::SeqCst) == runs as usize));
    let bound = (runs + 1) * 2 * 8;
    assert!(
        pool.polls() <= bound,
        "{} polls (bound {bound})",
        pool.polls()
    );
    // `run_beside`: the caller's own part returns a value and borrows mutably; the workers run
    // the other parts, and both have finished when it returns.
    let pool3 = ThreadPool::with_spin_limit(3, 8).unwrap();
    let mut mine = vec![0u32; 4];
    let others: [AtomicUsize; 3] = Default::default();
    let got = pool3.run_beside(
        || {
            mine.iter_mut().for_each(|m| *m += 1);
            mine.len()
        },
        &|part| {
            others[part].fetch_add(1, Ordering::SeqCst);
        },
    );
    assert_eq!(got, 4);
    assert_eq!(mine, [1; 4]);
    let counts: Vec<usize> = others.iter().map(|o| o.load(Ordering::SeqCst)).collect();
    assert_eq!(counts, [0, 1, 1], "part 0 is the caller's own");
    // One thread: no worker, the caller runs the only part.
    let alone = ThreadPool::with_spin_limit(1, 0).unwrap();
    let ran = AtomicUsize::new(0);
    alone.run(|part| {
        ran.fetch_add(part + 1, Ordering::SeqCst);
    });
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn dot_and_axpy_give_the_portable_bits_on_every_isa(len in 0usize..100, seed in any::<u64>(), alpha in -2.0f32..2.0) {
        let mut rng = Lcg(seed);
        let a: Vec<f32> = (0..len).map(|_| rng.unit()).collect();
        let b: Vec<f32> = (0..len).map(|_| rng.unit()).collect();
        let want = nextok_kernels::dot(Isa::Portable, &a, &b);
        let exact: f64 = a.iter().zip(&b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum();
        prop_assert!((f64::from(want) - exact).abs() < 1e-5 * (1.0 + len as f64));
        let mut y0 = b.clone();
        nextok_kernels::axpy(Isa::Portable, alpha, &a, &mut y0);
        for isa in Isa::available() {
            prop_assert_eq!(nextok_kernels::dot(isa, &a, &b).to_bits(), want.to_bits());
            let mut y = b.clone();
            nextok_kernels::axpy(isa, alpha, &a, &mut y);
            prop_assert_eq!(&y, &y0);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn batched_scores_and_weighted_sums_equal_the_single_calls(
        keys in 0usize..11,
        width in prop::sample::select(vec![16usize, 48, 64, 70]),
        seed in any::<u64>(),
    ) {
        let mut rng = Lcg(seed);
        let offset = 5;
        let q: Vec<f32> = (0..width).map(|_| rng.unit()).collect();
        let rows: Vec<Vec<f32>> = (0..keys).map(|_| (0..offset + width).map(|_| rng.unit()).collect()).collect();
        let refs: Vec<&[f32]> = rows.iter().map(|r| &r[..]).collect();
        let probs: Vec<f32> = (0..keys).map(|_| rng.unit().abs()).collect();
        for isa in Isa::available() {
            let mut got = vec![0.0f32; keys];
            nextok_kernels::dots(isa, &q, &refs, offset, &mut got);
            for (j, r) in rows.iter().enumerate() {
                prop_assert_eq!(got[j].to_bits(), nextok_kernels::dot(Isa::Portable, &q, &r[offset..offset + width]).to_bits());
            }
            let mut acc = q.clone();
            nextok_kernels::weighted_sum(isa, &probs, &refs, offset, &mut acc);
            let mut want = q.clone();
            for (&p, r) in probs.iter().zip(&rows) {
                nextok_kernels::axpy(Isa::Portable, p, &r[offset..offset + width], &mut want);
            }
            prop_assert_eq!(acc, want);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    /// One dispatch for several products, and the fused SwiGLU, give the bits of separate
    /// products (and of the formula applied to them), on every ISA and thread count.
    #[test]
    fn grouped_and_swiglu_products_equal_separate_ones(
        ty in prop::sample::select(TYPES.to_vec()),
        rows in prop::collection::vec(1usize..20, 1..4),
        blocks in 1usize..4,
        tokens in 1usize..6,
        seed in any::<u64>(),
    ) {
        let cols = blocks * ty.block_elements().max(32) as usize;
        let mut rng = Lcg(seed);
        let data: Vec<Vec<u8>> = rows.iter().map(|&r| random_matrix(ty, r, cols, &mut rng)).collect();
        let x: Vec<f32> = (0..tokens * cols).map(|_| rng.unit()).collect();
        let ws: Vec<QMat> = rows.iter().zip(&data).map(|(&r, d)| QMat::new(ty, r, cols, d).unwrap()).collect();
        let up_data = random_matrix(ty, rows[0], cols, &mut rng);
        let up_w = QMat::new(ty, rows[0], cols, &up_data).unwrap();
        for isa in Isa::available() {
            let mut up_want = vec![0.0f32; tokens * rows[0]];
            matmul_serial(isa, up_w, &x, tokens, &mut up_want).unwrap();
            let want: Vec<Vec<f32>> = ws.iter().map(|w| {
                let mut out = vec![0.0f32; tokens * w.rows()];
                matmul_serial(isa, *w, &x, tokens, &mut out).unwrap();
                out
            }).collect();
            for threads in [1, 2, 3] {
                let pool = ThreadPool::new(threads);
                let mut got: Vec<Vec<f32>> = want.iter().map(|w| vec![0.0; w.len()]).collect();
                let mut outs: Vec<&mut [f32]> = got.iter_mut().map(|g| g.as_mut_slice()).collect();
                nextok_kernels::matmul_many(&pool, isa, &ws, &x, tokens, &mut outs).unwrap();
                for (g, w) in got.iter().zip(&want) {
                    prop_assert_eq!(g.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), w.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
                }
                // SwiGLU with the first matrix as the gate.
                let mut gate = vec![0.0f32; want[0].len()];
                let mut up = vec![0.0f32; want[0].len()];
                nextok_kernels::matmul_swiglu(&pool, isa, ws[0], up_w, &x, tokens, &mut gate, &mut up).unwrap();
                for (i, &g) in gate.iter().enumerate() {
                    let (gw, uw) = (want[0][i], up_want[i]);
                    prop_assert_eq!(g.to_bits(), nextok_kernels::silu_times(gw, uw).to_bits());
                    prop_assert_eq!(up[i].to_bits(), uw.to_bits());
                }
            }
        }
    }
}

/// A matrix of random blocks whose f16 scale fields hold any finite f16 (subnormal, zero,
/// negative, up to ±65504): the K-quant kernels widen them with F16C, the dequantising path in
/// software, and the two must agree everywhere, not only on typical scales.
fn matrix_with_any_finite_scales(ty: GgmlType, rows: usize, cols: usize, rng: &mut Lcg) -> Vec<u8> {
    let mut data = random_matrix(ty, rows, cols, rng);
    let bb = ty.block_bytes() as usize;
    for block in data.chunks_exact_mut(bb) {
        for &off in f16_fields(ty) {
            // Exponent 31 is infinity or NaN; every other exponent is finite.
            let bits = loop {
                let b = rng.next() as u16;
                if (b >> 10) & 0x1f != 31 {
                    break b;
                }
            };
            block[off..off + 2].copy_from_slice(&bits.to_le_bytes());
        }
    }
    data
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]
    /// Q4_K, Q5_K and Q6_K have in-register kernels (one and two rows at a time, AVX-512 and
    /// AVX2): every ISA, token count (tiles of 8, of 4, pairs of rows in tiles of 4 and 2), odd
    /// and even row count, and thread count gives the bits of the portable dequantise-then-dot
    /// path.
    #[test]
    fn k_quant_kernels_give_the_bits_of_the_dequantising_path(
        ty in prop::sample::select(vec![GgmlType::Q4K, GgmlType::Q5K, GgmlType::Q6K]),
        rows in 1usize..12,
        blocks in 1usize..5,
        tokens in 1usize..11,
        any_scales in any::<bool>(),
        seed in any::<u64>(),
    ) {
        if !any_scales {
            case(ty, rows, blocks, tokens, seed);
            return Ok(());
        }
        let cols = blocks * 256;
        let mut rng = Lcg(seed);
        let data = matrix_with_any_finite_scales(ty, rows, cols, &mut rng);
        let x: Vec<f32> = (0..tokens * cols).map(|_| rng.unit()).collect();
        let w = QMat::new(ty, rows, cols, &data).unwrap();
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        let mut want = vec![0.0f32; tokens * rows];
        matmul_serial(Isa::Portable, w, &x, tokens, &mut want).unwrap();
        for isa in Isa::available() {
            for threads in [1, 2, 3] {
                let mut got = vec![0.0f32; tokens * rows];
                matmul(&ThreadPool::new(threads), isa, w, &x, tokens, &mut got).unwrap();
                prop_assert_eq!(bits(&got), bits(&want), "{:?} {:?} threads {}", isa, ty, threads);
            }
        }
    }
}

#[test]
fn q4_1_block_sums_are_the_exact_sum_rounded_once_on_every_isa() {
    // With d = 1 (f16 0x3c00) and m = 0, a one-block row's product is S_0 itself. Activations
    // within a factor 64 of the block's largest are exact in fixed point, so S_0 must be the
    // exact sum of the products (computed here in f64, where 32 products of 4-bit integers and
    // numbers spanning 7 binades are exact) rounded once to f32: 32 chained f32 roundings
    // would miss it for many of these rows.
    let mut rng = Lcg(0x5eed_0001);
    let mut differs_from_chained = 0;
    for case in 0..400 {
        let mut block = vec![0x00u8, 0x3c, 0x00, 0x00];
        block.extend((0..16).map(|_| rng.next() as u8));
        let q = |i: usize| {
            f64::from(if i < 16 {
                block[4 + i] & 15
            } else {
                block[4 + i - 16] >> 4
            })
        };
        let x: Vec<f32> = (0..32)
            .map(|_| {
                let mant = 1.0 + (rng.next() % (1 << 23)) as f32 / (1 << 23) as f32;
                let exp = (rng.next() % 6) as i32 - 3;
                let sign = if rng.next().is_multiple_of(2) {
                    1.0
                } else {
                    -1.0
                };
                sign * mant * 2f32.powi(exp)
            })
            .collect();
        let exact: f64 = (0..32).map(|i| q(i) * f64::from(x[i])).sum();
        let chained = (0..32).fold(0.0f32, |s, i| (q(i) as f32).mul_add(x[i], s));
        if chained != exact as f32 {
            differs_from_chained += 1;
        }
        let w = QMat::new(GgmlType::Q4_1, 1, 32, &block).unwrap();
        let packed = w.pack().unwrap();
        for isa in Isa::available() {
            for m in [w, QMat::new_packed(GgmlType::Q4_1, 1, 32, &packed).unwrap()] {
                let mut out = [0.0f32];
                matmul_serial(isa, m, &x, 1, &mut out).unwrap();
                assert_eq!(
                    out[0],
                    exact as f32,
                    "case {case}, {isa:?} {:?}",
                    m.layout()
                );
            }
        }
    }
    assert!(differs_from_chained > 40, "{differs_from_chained}");
}

#[test]
fn fixed_point_is_exact_near_the_largest_and_its_digits_restore_it() {
    use nextok_kernels::portable::{fixed_point, fixed_point_digits};
    let mut rng = Lcg(0x5eed_0002);
    for _ in 0..200 {
        let e0 = (rng.next() % 200) as i32 - 100;
        let x: Vec<f32> = (0..32)
            .map(|_| {
                let mant = (rng.next() % (1 << 24)) as f32 / (1 << 23) as f32;
                let exp = e0 - (rng.next() % 12) as i32;
                if rng.next().is_multiple_of(2) {
                    mant * 2f32.powi(exp)
                } else {
                    -mant * 2f32.powi(exp)
                }
            })
            .collect();
        let (scale, xq) = fixed_point(&x);
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        for (i, &v) in x.iter().enumerate() {
            let back = f64::from(xq[i]) * f64::from(scale);
            if v.abs() >= amax / 64.0 && amax >= 2f32.powi(-89) {
                assert_eq!(
                    back,
                    f64::from(v),
                    "element {i} of a block with largest {amax}"
                );
            }
            // Below 2^-90 the scale stays 2^-119 (every scale a normal f32).
            let bound = (f64::from(amax) * 2f64.powi(-30)).max(2f64.powi(-120));
            assert!(
                (back - f64::from(v)).abs() <= bound,
                "element {i}: {v} as {back}"
            );
        }
        let (mut scales, mut digits) = ([0.0f32; 1], [0i32; 32]);
        fixed_point_digits(&x, &mut scales, &mut digits);
        assert_eq!(scales[0].to_bits(), scale.to_bits());
        for (i, &want) in xq.iter().enumerate() {
            let (g, byte) = (i / 4, i % 4);
            let got: i64 = (0..4)
                .map(|j| i64::from(digits[8 * j + g].to_le_bytes()[byte] as i8) << (8 * j))
                .sum();
            assert_eq!(got, i64::from(want), "element {i}");
        }
    }
    assert_eq!(fixed_point(&[0.0; 32]), (0.0, [0; 32]));
    let mut with_inf = [1.0f32; 32];
    with_inf[7] = f32::INFINITY;
    assert!(fixed_point(&with_inf).0.is_nan());
}

#[test]
fn a_q4_1_block_with_a_nan_or_an_infinity_gives_nan_on_every_isa() {
    let mut block = vec![0x00u8, 0x3c, 0x00, 0x00];
    block.extend_from_slice(&[0x21u8; 16]);
    let row = [block.clone(), block].concat();
    let w = QMat::new(GgmlType::Q4_1, 1, 64, &row).unwrap();
    let packed = w.pack().unwrap();
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let mut x = vec![0.5f32; 64];
        x[40] = bad;
        for isa in Isa::available() {
            for m in [w, QMat::new_packed(GgmlType::Q4_1, 1, 64, &packed).unwrap()] {
                let mut out = [0.0f32];
                matmul_serial(isa, m, &x, 1, &mut out).unwrap();
                assert!(
                    out[0].is_nan(),
                    "{bad} {isa:?} {:?}: {}",
                    m.layout(),
                    out[0]
                );
            }
        }
    }
}
