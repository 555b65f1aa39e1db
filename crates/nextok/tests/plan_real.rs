//! The cost model read from the real default model's GGUF. Fails (does not skip) when the model
//! is absent: run `cargo xtask fetch-model`.

use nextok::plan::{kv_bytes_per_token, ModelFigures};

#[test]
fn figures_of_smollm2_135m() {
    let path = nextok::default_model_path().unwrap();
    assert!(
        path.is_file(),
        "the default model is not at {}: run `cargo xtask fetch-model`",
        path.display()
    );
    let file = nextok::gguf::GgufFile::open(&path).unwrap();
    let m = ModelFigures::from_gguf(&file, 4.0).unwrap();
    // SmolLM2-135M's published configuration: 30 layers, hidden size 576, 9 attention heads of
    // 64, 3 key/value heads, 8,192 positions; about 135 million parameters.
    assert_eq!(m.layers, 30);
    assert_eq!(m.kv_width, 3 * 64);
    assert_eq!(m.context_window, Some(8192));
    assert!((130e6..140e6).contains(&m.weights), "{}", m.weights);
    // Q4_1 stores 32 weights in 20 bytes (0.625 bytes each); tensors kept in wider types and the
    // f32 norms raise the average, but the tensors are smaller than the whole file, 98,362,432
    // bytes (conformance README).
    assert!(m.weight_bytes < 98_362_432.0, "{}", m.weight_bytes);
    assert!(m.bytes_per_weight() > 0.5 && m.bytes_per_weight() < 1.0);
    // The specification's formula with grouped-query attention: 2 × 30 × 192 × 4 bytes.
    assert_eq!(kv_bytes_per_token(&m), 46_080.0);
}
