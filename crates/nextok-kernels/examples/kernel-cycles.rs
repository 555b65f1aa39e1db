//! Runs one product many times on one thread, for counting cycles and instructions with
//! `perf stat`, which are steadier than wall time on a busy machine; it also prints the mean
//! wall time per product on standard error, and where Linux reports it the thread's time on a
//! CPU per product (which leaves out the time other processes held the core; Linux updates it at
//! scheduler ticks, so give it runs of a tenth of a second or more).
//!
//! `cargo run --release -p nextok-kernels --example kernel-cycles -- TOKENS REPEATS [TYPE [ROWS]]`
//!
//! `TYPE` is `q4_1` (the default: a SmolLM2-shaped 1536 × 576 product), `packed` (the same in the
//! packed layout), `q8_0` and `q8_0_packed` (the same shape), or `q4_k`, `q5_k`, `q6_k`
//! (1536 × 768: K-quant rows are whole blocks of 256).
//! `ROWS` replaces the 1536 rows: a matrix larger than the caches (say 16384) measures products
//! that stream their weights from memory, as decode does.
//! `NEXTOK_ISA` chooses the instruction set (see `Isa::detect`).

use nextok_gguf::GgmlType;
use nextok_kernels::{matmul_serial, Isa, QMat};
use std::time::Instant;

/// Bytes from a xorshift generator, with the block's f16 scales (at `scales`) set to 2^-7 and
/// −2^-9, finite numbers of the size real checkpoints have.
fn matrix(ty: GgmlType, rows: usize, cols: usize, scales: &[usize]) -> Vec<u8> {
    let bb = ty.block_bytes() as usize;
    let mut state = 0x9e3779b97f4a7c15u64;
    let mut data: Vec<u8> = (0..rows * cols / ty.block_elements() as usize * bb)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    for block in data.chunks_exact_mut(bb) {
        for (k, &at) in scales.iter().enumerate() {
            let bits: u16 = if k == 0 { 0x2000 } else { 0x9800 };
            block[at..at + 2].copy_from_slice(&bits.to_le_bytes());
        }
    }
    data
}

/// Nanoseconds this thread has run on a CPU (Linux `schedstat`), if the system reports it.
fn cpu_ns() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    stat.split_whitespace().next()?.parse().ok()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let tokens: usize = args.next().unwrap_or_else(|| "1".into()).parse()?;
    let repeats: usize = args.next().unwrap_or_else(|| "1000".into()).parse()?;
    let kind = args.next().unwrap_or_else(|| "q4_1".into());
    let (ty, rows, cols, scales): (_, _, _, &[usize]) = match kind.as_str() {
        "q4_1" | "packed" => (GgmlType::Q4_1, 1536, 576, &[0, 2]),
        "q8_0" | "q8_0_packed" => (GgmlType::Q8_0, 1536, 576, &[0]),
        "q4_k" => (GgmlType::Q4K, 1536, 768, &[0, 2]),
        "q5_k" => (GgmlType::Q5K, 1536, 768, &[0, 2]),
        "q6_k" => (GgmlType::Q6K, 1536, 768, &[208]),
        other => return Err(format!("unknown type {other}").into()),
    };
    let rows = match args.next() {
        Some(r) => r.parse()?,
        None => rows,
    };
    let data = matrix(ty, rows, cols, scales);
    let mut w = QMat::new(ty, rows, cols, &data)?;
    let packed;
    if kind == "packed" || kind == "q8_0_packed" {
        packed = w.pack()?;
        w = QMat::new_packed(ty, rows, cols, &packed)?;
    }
    let x: Vec<f32> = (0..tokens * cols).map(|i| (i % 13) as f32 * 0.01).collect();
    let mut out = vec![0.0f32; tokens * rows];
    let isa = Isa::detect();
    let (start, cpu_start) = (Instant::now(), cpu_ns());
    for _ in 0..repeats {
        matmul_serial(isa, w, &x, tokens, &mut out)?;
    }
    let per = |total: f64| total / repeats.max(1) as f64;
    let micros = per(start.elapsed().as_secs_f64() * 1e6);
    let cpu = match (cpu_start, cpu_ns()) {
        (Some(a), Some(b)) => format!(", {:.1} µs on a CPU", per((b - a) as f64 / 1e3)),
        _ => String::new(),
    };
    eprintln!("{kind} {rows}×{cols} {tokens} token(s) {isa:?}: {micros:.1} µs per product{cpu}");
    println!("{}", out.iter().sum::<f32>());
    Ok(())
}
