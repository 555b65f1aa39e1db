//! Bad files and bad calls give typed errors that say what and where, never a panic.

use nextok_gguf::{GgmlType, GgufFile};
use nextok_kv_cache::{CacheConfig, KvCache, KvType};
use nextok_model::testing::RandomLlama;
use nextok_model::{CpuBackend, Error, LlamaModel, LoadOptions, Logits, Sequence};

fn small() -> RandomLlama {
    RandomLlama {
        layers: 2,
        d_model: 32,
        heads: 2,
        kv_heads: 1,
        ffn_dim: 64,
        vocab: 10,
        ..RandomLlama::default()
    }
}

fn load(bytes: Vec<u8>) -> Result<LlamaModel, Error> {
    LlamaModel::from_gguf(GgufFile::from_bytes(bytes)?, LoadOptions::default())
}

/// Replaces the first occurrence of `from` in `bytes` by `to` (same length).
fn patch(mut bytes: Vec<u8>, from: &[u8], to: &[u8]) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let at = bytes
        .windows(from.len())
        .position(|w| w == from)
        .expect("pattern present");
    bytes[at..at + to.len()].copy_from_slice(to);
    bytes
}

#[test]
fn the_unpatched_file_loads() {
    let model = load(small().to_gguf(1)).unwrap();
    assert_eq!(
        (
            model.config().layers,
            model.config().kv_heads,
            model.config().vocab
        ),
        (2, 1, 10)
    );
    assert!(model.tied_output());
}

#[test]
fn a_missing_tensor_is_named() {
    let bytes = patch(
        small().to_gguf(1),
        b"blk.1.ffn_up.weight",
        b"blk.1.ffn_uq.weight",
    );
    assert_eq!(
        load(bytes).unwrap_err(),
        Error::MissingTensor {
            name: "blk.1.ffn_up.weight".into()
        }
    );
}

#[test]
fn a_wrong_shape_says_which_tensor_and_both_shapes() {
    // `llama.feed_forward_length` = 64 (u32, type code 4) becomes 32: the FFN weights disagree.
    let mut key = b"llama.feed_forward_length".to_vec();
    key.extend(4u32.to_le_bytes());
    let mut from = key.clone();
    from.extend(64u32.to_le_bytes());
    let mut to = key;
    to.extend(32u32.to_le_bytes());
    let bytes = patch(small().to_gguf(1), &from, &to);
    assert_eq!(
        load(bytes).unwrap_err(),
        Error::BadShape {
            tensor: "blk.0.ffn_gate.weight".into(),
            expected: vec![32, 32],
            found: vec![32, 64]
        }
    );
}

#[test]
fn an_unsupported_architecture_is_named() {
    let bytes = patch(
        small().to_gguf(1),
        b"\x05\0\0\0\0\0\0\0llama",
        b"\x05\0\0\0\0\0\0\0gpt2x",
    );
    assert_eq!(
        load(bytes).unwrap_err(),
        Error::UnsupportedArchitecture {
            architecture: "gpt2x".into()
        }
    );
}

#[test]
fn an_unsupported_tensor_type_is_named() {
    let spec = RandomLlama {
        d_model: 256,
        ffn_dim: 256,
        heads: 4,
        weight_type: GgmlType::Q2K,
        ..small()
    };
    assert_eq!(
        load(spec.to_gguf(1)).unwrap_err(),
        Error::UnsupportedTensorType {
            tensor: "token_embd.weight".into(),
            ty: GgmlType::Q2K
        }
    );
}

#[test]
fn missing_metadata_and_bad_hyperparameters() {
    let bytes = patch(
        small().to_gguf(1),
        b"llama.block_count",
        b"llama.block_cxunt",
    );
    assert!(matches!(
        load(bytes).unwrap_err(),
        Error::Gguf(nextok_gguf::Error::MissingKey { key }) if key == "llama.block_count"
    ));
    // 3 kv heads do not divide 2 query heads.
    let mut key = b"llama.attention.head_count_kv".to_vec();
    key.extend(4u32.to_le_bytes());
    let (mut from, mut to) = (key.clone(), key);
    from.extend(1u32.to_le_bytes());
    to.extend(3u32.to_le_bytes());
    assert!(matches!(
        load(patch(small().to_gguf(1), &from, &to)).unwrap_err(),
        Error::BadHyperparameter { key, value: 3, .. } if key == "llama.attention.head_count_kv"
    ));
}

/// The file with the f32 metadata value `key` = `from` replaced by `to`.
fn patch_f32(key: &str, from: f32, to: f32) -> Vec<u8> {
    // A metadata entry: key, type code 6 (f32), value.
    let mut entry = key.as_bytes().to_vec();
    entry.extend(6u32.to_le_bytes());
    let (mut a, mut b) = (entry.clone(), entry);
    a.extend(from.to_le_bytes());
    b.extend(to.to_le_bytes());
    patch(small().to_gguf(1), &a, &b)
}

#[test]
fn bad_real_hyperparameters_are_named_with_their_value() {
    // Issue 13: a NaN `rope.freq_base` was reported as "= 0", and the RMS epsilon was never
    // checked: a NaN one surfaced as "sampling: logit 0 is NaN".
    let err = load(patch_f32("llama.rope.freq_base", 10_000.0, f32::NAN)).unwrap_err();
    assert!(
        matches!(&err, Error::BadRealHyperparameter { key, value, .. }
            if key == "llama.rope.freq_base" && value.is_nan()),
        "{err:?}"
    );
    assert!(err.to_string().contains("= NaN"), "{err}");
    for bad in [f32::NAN, 0.0, -1e-5, f32::INFINITY] {
        let err = load(patch_f32(
            "llama.attention.layer_norm_rms_epsilon",
            1e-5,
            bad,
        ))
        .unwrap_err();
        assert!(
            matches!(&err, Error::BadRealHyperparameter { key, .. }
                if key == "llama.attention.layer_norm_rms_epsilon"),
            "{bad}: {err:?}"
        );
    }
    let err = load(patch_f32("llama.rope.freq_base", 10_000.0, -2.0)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid hyper-parameter `llama.rope.freq_base` = -2: the rotary base must be positive \
         and finite"
    );
}

#[test]
fn truncated_files_are_errors() {
    let bytes = small().to_gguf(1);
    for len in [0, 3, 20, bytes.len() / 2, bytes.len() - 1] {
        assert!(load(bytes[..len].to_vec()).is_err(), "{len} bytes loaded");
    }
}

#[test]
fn bad_calls_are_errors_and_leave_the_cache_alone() {
    let model = load(small().to_gguf(1)).unwrap();
    let backend = CpuBackend::new(1);
    let mut cache = model.new_cache(KvType::F32);
    model
        .forward(
            &backend,
            &mut [Sequence {
                cache: &mut cache,
                tokens: &[1, 2],
                logits: Logits::None,
            }],
        )
        .unwrap();
    let err = model
        .forward(
            &backend,
            &mut [Sequence {
                cache: &mut cache,
                tokens: &[3, 10],
                logits: Logits::Last,
            }],
        )
        .unwrap_err();
    assert_eq!(
        err,
        Error::TokenOutOfRange {
            seq: 0,
            index: 1,
            token: 10,
            vocab: 10
        }
    );
    assert_eq!(cache.tokens(), [1, 2]);
    let err = model
        .forward(
            &backend,
            &mut [Sequence {
                cache: &mut cache,
                tokens: &[],
                logits: Logits::Last,
            }],
        )
        .unwrap_err();
    assert_eq!(err, Error::NoTokens { seq: 0 });
    let mut wrong = KvCache::new(CacheConfig::new(3, 1, 16, KvType::F32)).unwrap();
    assert!(matches!(
        model.forward(
            &backend,
            &mut [Sequence {
                cache: &mut wrong,
                tokens: &[1],
                logits: Logits::Last
            }]
        ),
        Err(Error::IncompatibleCache { seq: 0, .. })
    ));
    assert!(wrong.is_empty());
}
