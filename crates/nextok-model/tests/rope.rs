//! Rotary-embedding options from the file: linear position scaling (`rope.scaling.*`) and
//! Llama 3.1-style per-frequency divisors (`rope_freqs.weight`). Dividing every frequency by s
//! is the same rotation as dividing every position by s, so the two must agree.

use nextok_gguf::write::GgufWriter;
use nextok_gguf::{GgufFile, Value};
use nextok_kv_cache::KvType;
use nextok_model::testing::RandomLlama;
use nextok_model::{CpuBackend, Error, LlamaModel, LoadOptions, Logits, Sequence};

/// A copy of a GGUF file with extra metadata and F32 tensors.
fn extend(bytes: Vec<u8>, meta: &[(&str, Value)], tensors: &[(&str, Vec<f32>)]) -> GgufFile {
    let file = GgufFile::from_bytes(bytes).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in file.metadata().iter() {
        w = w.metadata(k, v.clone());
    }
    for (k, v) in meta {
        w = w.metadata(k, v.clone());
    }
    for info in file.tensors() {
        let data = file.view(info).data.to_vec();
        w = w.tensor_raw(&info.name, &info.dims, info.ggml_type, data);
    }
    for (name, values) in tensors {
        w = w.tensor_f32(name, &[values.len() as u64], values);
    }
    GgufFile::from_bytes(w.to_bytes()).unwrap()
}

fn logits(file: GgufFile) -> Vec<f32> {
    let model = LlamaModel::from_gguf(file, LoadOptions::default()).unwrap();
    let mut cache = model.new_cache(KvType::F32);
    let tokens = [3, 1, 4, 1, 5, 9, 2, 6];
    model
        .forward(
            &CpuBackend::new(1),
            &mut [Sequence {
                cache: &mut cache,
                tokens: &tokens,
                logits: Logits::All,
            }],
        )
        .unwrap()
        .remove(0)
}

#[test]
fn frequency_divisors_equal_linear_position_scaling() {
    let spec = RandomLlama::default();
    let half = spec.d_model / spec.heads / 2;
    let bytes = spec.to_gguf(9);
    let plain = logits(extend(bytes.clone(), &[], &[]));
    let linear = logits(extend(
        bytes.clone(),
        &[
            ("llama.rope.scaling.type", Value::String("linear".into())),
            ("llama.rope.scaling.factor", Value::F32(4.0)),
        ],
        &[],
    ));
    let divided = logits(extend(
        bytes.clone(),
        &[],
        &[("rope_freqs.weight", vec![4.0; half])],
    ));
    let max = |a: &[f32], b: &[f32]| {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0f32, f32::max)
    };
    // The scaling matters...
    assert!(max(&plain, &linear) > 1e-3);
    // ...and the two ways of expressing it agree (up to f64 rounding of the angles).
    assert!(max(&linear, &divided) < 1e-5, "{}", max(&linear, &divided));
    // Divisors of 1 change nothing at all.
    let ones = logits(extend(
        bytes,
        &[],
        &[("rope_freqs.weight", vec![1.0; half])],
    ));
    assert_eq!(ones, plain);
}

#[test]
fn unsupported_scaling_is_an_error() {
    let file = extend(
        RandomLlama::default().to_gguf(9),
        &[("llama.rope.scaling.type", Value::String("yarn".into()))],
        &[],
    );
    assert_eq!(
        LlamaModel::from_gguf(file, LoadOptions::default()).unwrap_err(),
        Error::UnsupportedRopeScaling {
            kind: "yarn".into()
        }
    );
}
