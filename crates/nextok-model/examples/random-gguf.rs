//! Writes a small Llama-family model with seeded random weights as a GGUF file (for fuzzing
//! seeds, and for trying the tools without a download).
//!
//! `cargo run -p nextok-model --example random-gguf -- OUT.gguf [SEED] [TYPE]` where TYPE is one
//! of f32, q8_0, q4_0, q4_1 (default q8_0).

use nextok_gguf::GgmlType;
use nextok_model::testing::RandomLlama;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let out = args
        .next()
        .ok_or("usage: random-gguf OUT.gguf [SEED] [TYPE]")?;
    let seed = args.next().map_or(Ok(0), |s| s.parse())?;
    let weight_type = match args.next().as_deref() {
        None | Some("q8_0") => GgmlType::Q8_0,
        Some("f32") => GgmlType::F32,
        Some("q4_0") => GgmlType::Q4_0,
        Some("q4_1") => GgmlType::Q4_1,
        Some(other) => return Err(format!("unknown type {other}").into()),
    };
    let spec = RandomLlama {
        layers: 1,
        d_model: 32,
        heads: 2,
        kv_heads: 1,
        ffn_dim: 32,
        vocab: 4,
        weight_type,
        ..RandomLlama::default()
    };
    std::fs::write(&out, spec.to_gguf(seed))?;
    Ok(())
}
