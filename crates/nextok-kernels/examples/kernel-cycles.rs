//! Runs one SmolLM2-shaped Q4_1 product (1536 × 576) many times on one thread, for counting
//! cycles and instructions with `perf stat`, which are steadier than wall time on a busy machine.
//!
//! `cargo run --release -p nextok-kernels --example kernel-cycles -- TOKENS REPEATS [packed]`

use nextok_gguf::GgmlType;
use nextok_kernels::{matmul_serial, Isa, QMat};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let tokens: usize = args.next().unwrap_or_else(|| "1".into()).parse()?;
    let repeats: usize = args.next().unwrap_or_else(|| "1000".into()).parse()?;
    let (rows, cols) = (1536, 576);
    let mut data = vec![0x5au8; rows * cols / 32 * 20];
    for block in data.chunks_exact_mut(20) {
        block[..2].copy_from_slice(&0x2000u16.to_le_bytes());
        block[2..4].copy_from_slice(&0xa000u16.to_le_bytes());
    }
    let mut w = QMat::new(GgmlType::Q4_1, rows, cols, &data)?;
    let packed;
    if args.next().as_deref() == Some("packed") {
        packed = w.pack()?;
        w = QMat::new_packed(GgmlType::Q4_1, rows, cols, &packed)?;
    }
    let x: Vec<f32> = (0..tokens * cols).map(|i| (i % 13) as f32 * 0.01).collect();
    let mut out = vec![0.0f32; tokens * rows];
    for _ in 0..repeats {
        matmul_serial(Isa::detect(), w, &x, tokens, &mut out)?;
    }
    println!("{}", out.iter().sum::<f32>());
    Ok(())
}
