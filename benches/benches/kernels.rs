//! The quantised matrix products of SmolLM2-135M's decode and prefill, on each instruction set
//! this CPU has: one token (decode: every weight read once per token) and 64 tokens (prefill),
//! Q4_1 and Q8_0 both in the file's layout and in the packed one the model loads them into.
//! Also Q4_K and Q6_K products (the types of Q4_K_M files) of 1536 × 768: K-quant rows are whole
//! blocks of 256 weights, which SmolLM2's 576 is not.
//!
//! `cargo bench -p nextok-benches --bench kernels`

use criterion::{criterion_main, BenchmarkId, Criterion, Throughput};
use nextok_gguf::GgmlType;
use nextok_kernels::{matmul, Isa, QMat, ThreadPool};
use std::time::Duration;

/// Random blocks with finite f16 scales (Q4_1, Q4_K: scale and minimum at the front; Q8_0:
/// scale at the front; Q6_K: scale at the end).
fn matrix(ty: GgmlType, rows: usize, cols: usize) -> Vec<u8> {
    let bb = ty.block_bytes() as usize;
    let blocks = rows * cols / ty.block_elements() as usize;
    let scales: &[usize] = match ty {
        GgmlType::Q4_1 | GgmlType::Q4K => &[0, 2],
        GgmlType::Q6K => &[208],
        _ => &[0],
    };
    let mut state = 0x9e3779b97f4a7c15u64;
    let mut data = Vec::with_capacity(blocks * bb);
    for _ in 0..blocks {
        let start = data.len();
        for _ in 0..bb {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            data.push(state as u8);
        }
        // 0x2000 is 2^-7 in f16, 0xa000 is -2^-7.
        for (k, &at) in scales.iter().enumerate() {
            let bits: u16 = if k == 0 { 0x2000 } else { 0xa000 };
            data[start + at..start + at + 2].copy_from_slice(&bits.to_le_bytes());
        }
    }
    data
}

fn bench(c: &mut Criterion) {
    // (name, type, rows, cols): SmolLM2-135M's feed-forward up/gate and down projections, and
    // the tied Q8_0 output embedding.
    let shapes = [
        ("ffn_up_q4_1", GgmlType::Q4_1, 1536, 576),
        ("ffn_down_q4_1", GgmlType::Q4_1, 576, 1536),
        ("output_q8_0", GgmlType::Q8_0, 49152, 576),
        ("ffn_up_q4_k", GgmlType::Q4K, 1536, 768),
        ("ffn_up_q6_k", GgmlType::Q6K, 1536, 768),
    ];
    let mut group = c.benchmark_group("matmul");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    for threads in [1, 2] {
        let pool = ThreadPool::new(threads);
        for &(name, ty, rows, cols) in &shapes {
            let data = matrix(ty, rows, cols);
            let file = QMat::new(ty, rows, cols, &data).expect("valid matrix");
            // Q4_1 and Q8_0 also in the packed layout the model uses by default.
            let packed_bytes = QMat::packable(ty).then(|| file.pack().expect("packable"));
            let mut layouts = vec![("", file)];
            if let Some(bytes) = &packed_bytes {
                let packed = QMat::new_packed(ty, rows, cols, bytes).expect("valid packed matrix");
                layouts.push(("_packed", packed));
            }
            for (layout, w) in layouts {
                for tokens in [1usize, 64] {
                    if rows > 10_000 && tokens > 1 {
                        continue;
                    }
                    let x: Vec<f32> = (0..tokens * cols).map(|i| (i % 7) as f32 * 0.1).collect();
                    let mut out = vec![0.0f32; tokens * rows];
                    group.throughput(Throughput::Bytes(data.len() as u64));
                    for isa in Isa::available() {
                        let id = BenchmarkId::new(
                            format!("{name}{layout}/t{tokens}/threads{threads}"),
                            format!("{isa:?}"),
                        );
                        group.bench_function(id, |b| {
                            b.iter(|| matmul(&pool, isa, w, &x, tokens, &mut out).expect("product"))
                        });
                    }
                }
            }
        }
    }
    group.finish();
}

// `criterion_group!` defines an undocumented public function; keeping it in its own module lets
// the lint exception cover that function alone.
#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::bench);
}
criterion_main!(group::benches);
