//! A Hugging Face checkpoint (config.json + model.safetensors) gives the same logits as the same
//! weights in GGUF. The safetensors file is made from a random GGUF model the way llama.cpp's
//! converter would have read it: for the Llama architecture, llama.cpp permutes the Q and K rows
//! of each head so that its adjacent-pairs rotation matches Hugging Face's rotate-half; undoing
//! that permutation here and loading with the Hugging Face ordering must give the same model.

use std::collections::HashMap;

use nextok_gguf::{GgmlType, GgufFile};
use nextok_kernels::dequant;
use nextok_kv_cache::KvType;
use nextok_model::testing::RandomLlama;
use nextok_model::{CpuBackend, Error, LlamaModel, LoadOptions, Logits, Sequence};
use safetensors::tensor::TensorView;
use safetensors::Dtype;

fn hf_name(gguf: &str) -> String {
    if let Some(rest) = gguf.strip_prefix("blk.") {
        let (layer, part) = rest.split_once('.').unwrap();
        let part = match part {
            "attn_norm.weight" => "input_layernorm.weight",
            "attn_q.weight" => "self_attn.q_proj.weight",
            "attn_q.bias" => "self_attn.q_proj.bias",
            "attn_k.weight" => "self_attn.k_proj.weight",
            "attn_k.bias" => "self_attn.k_proj.bias",
            "attn_v.weight" => "self_attn.v_proj.weight",
            "attn_v.bias" => "self_attn.v_proj.bias",
            "attn_output.weight" => "self_attn.o_proj.weight",
            "ffn_norm.weight" => "post_attention_layernorm.weight",
            "ffn_gate.weight" => "mlp.gate_proj.weight",
            "ffn_up.weight" => "mlp.up_proj.weight",
            "ffn_down.weight" => "mlp.down_proj.weight",
            other => panic!("{other}"),
        };
        return format!("model.layers.{layer}.{part}");
    }
    match gguf {
        "token_embd.weight" => "model.embed_tokens.weight".into(),
        "output_norm.weight" => "model.norm.weight".into(),
        "output.weight" => "lm_head.weight".into(),
        other => panic!("{other}"),
    }
}

/// Undoes llama.cpp's permutation of Q/K rows: GGUF row (head h, 2i + s) holds Hugging Face row
/// (h, s · hd/2 + i).
fn unpermute(rows: &[f32], n_rows: usize, cols: usize, hd: usize) -> Vec<f32> {
    let mut out = vec![0.0; rows.len()];
    let half = hd / 2;
    for g in 0..n_rows {
        let (h, j) = (g / hd, g % hd);
        let (i, s) = (j / 2, j % 2);
        let hf = h * hd + s * half + i;
        out[hf * cols..(hf + 1) * cols].copy_from_slice(&rows[g * cols..(g + 1) * cols]);
    }
    out
}

/// The GGUF model's tensors as a safetensors file of `dtype` (F32 or BF16), and its config.json.
fn convert(spec: &RandomLlama, gguf: &GgufFile, dtype: Dtype) -> (String, Vec<u8>) {
    let hd = spec.d_model / spec.heads;
    let mut data: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    for info in gguf.tensors() {
        let mut values = dequant::dequantize_tensor(gguf.view(info)).unwrap();
        let shape: Vec<usize> = info.dims.iter().rev().map(|&d| d as usize).collect();
        let permuted = info.name.ends_with("attn_q.weight") || info.name.ends_with("attn_k.weight");
        if permuted && spec.architecture == "llama" {
            values = unpermute(&values, shape[0], shape[1], hd);
        }
        // Vectors (norms, biases) stay F32, as the GGUF has them: rounding them to BF16 would
        // change the model.
        let dtype = if shape.len() == 1 { Dtype::F32 } else { dtype };
        let bytes = match dtype {
            Dtype::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            _ => values
                .iter()
                .flat_map(|&v| half::bf16::from_f32(v).to_bits().to_le_bytes())
                .collect(),
        };
        data.push((hf_name(&info.name), dtype, shape, bytes));
    }
    let views: HashMap<String, TensorView<'_>> = data
        .iter()
        .map(|(n, t, s, b)| (n.clone(), TensorView::new(*t, s.clone(), b).unwrap()))
        .collect();
    let bytes = safetensors::serialize(views, &None).unwrap();
    let config = serde_json::json!({
        "model_type": spec.architecture,
        "hidden_size": spec.d_model,
        "intermediate_size": spec.ffn_dim,
        "num_hidden_layers": spec.layers,
        "num_attention_heads": spec.heads,
        "num_key_value_heads": spec.kv_heads,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": spec.tied_output,
        "vocab_size": spec.vocab,
    });
    (config.to_string(), bytes)
}

fn logits(model: &LlamaModel, tokens: &[u32]) -> Vec<f32> {
    let mut cache = model.new_cache(KvType::F32);
    model
        .forward(
            &CpuBackend::new(1),
            &mut [Sequence {
                cache: &mut cache,
                tokens,
                logits: Logits::All,
            }],
        )
        .unwrap()
        .remove(0)
}

fn check(spec: RandomLlama, dtype: Dtype) {
    let bytes = spec.to_gguf(5);
    let gguf = GgufFile::from_bytes(bytes.clone()).unwrap();
    let (config, st) = convert(&spec, &gguf, dtype);
    let from_gguf = LlamaModel::from_gguf(gguf, LoadOptions::default()).unwrap();
    let from_st = LlamaModel::from_safetensors(&config, st, LoadOptions::default()).unwrap();
    assert_eq!(from_st.tied_output(), spec.tied_output);
    let tokens = [1, 5, 9, 2, 7, 3];
    let (a, b) = (logits(&from_gguf, &tokens), logits(&from_st, &tokens));
    let max = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max);
    // Only the order of the sums over a head's numbers differs (the heads' numbers are permuted).
    assert!(max < 1e-4, "{} {dtype:?}: max |Δ| {max}", spec.architecture);
}

#[test]
fn safetensors_llama_matches_gguf_f32() {
    check(
        RandomLlama {
            weight_type: GgmlType::F32,
            tied_output: false,
            ..RandomLlama::default()
        },
        Dtype::F32,
    );
}

#[test]
fn safetensors_llama_matches_gguf_bf16_tied() {
    // BF16 matrices, F32 vectors: a mixed-dtype checkpoint.
    check(
        RandomLlama {
            weight_type: GgmlType::BF16,
            ..RandomLlama::default()
        },
        Dtype::BF16,
    );
}

#[test]
fn safetensors_qwen2_with_bias_matches_gguf() {
    // Qwen2 GGUF files keep the Hugging Face row order and rotate with the NeoX pairing.
    let spec = RandomLlama {
        architecture: "qwen2".into(),
        weight_type: GgmlType::F32,
        attention_bias: true,
        ..RandomLlama::default()
    };
    check(spec, Dtype::F32);
}

#[test]
fn bad_checkpoints_give_typed_errors() {
    let spec = RandomLlama {
        weight_type: GgmlType::F32,
        ..RandomLlama::default()
    };
    let gguf = GgufFile::from_bytes(spec.to_gguf(1)).unwrap();
    let (config, st) = convert(&spec, &gguf, Dtype::F32);
    let bad = config.replace("\"hidden_size\":64,", "");
    assert_eq!(
        LlamaModel::from_safetensors(&bad, st.clone(), LoadOptions::default()).unwrap_err(),
        Error::BadConfig {
            key: "hidden_size".into(),
            reason: "is missing"
        }
    );
    let gpt = config.replace("\"model_type\":\"llama\"", "\"model_type\":\"gpt2\"");
    assert_eq!(
        LlamaModel::from_safetensors(&gpt, st.clone(), LoadOptions::default()).unwrap_err(),
        Error::UnsupportedArchitecture {
            architecture: "gpt2".into()
        }
    );
    assert!(matches!(
        LlamaModel::from_safetensors(&config, st[..st.len() / 2].to_vec(), LoadOptions::default()),
        Err(Error::Safetensors { .. })
    ));
    assert!(matches!(
        LlamaModel::open_safetensors("/nonexistent-dir", LoadOptions::default()),
        Err(Error::Io { .. })
    ));
}

/// The fuzz seed for the safetensors path (`fuzz/corpus/gguf_reader/tiny-llama-safetensors`) is a
/// valid checkpoint for the configuration the fuzz target uses, so fuzzing starts from a model
/// that loads and runs.
#[test]
fn the_fuzz_seed_loads_and_runs() {
    const CONFIG: &str = r#"{"model_type": "llama", "hidden_size": 32, "intermediate_size": 32,
        "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
        "tie_word_embeddings": true}"#;
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fuzz/corpus/gguf_reader/tiny-llama-safetensors"
    );
    let bytes = std::fs::read(path).unwrap();
    let model = LlamaModel::from_safetensors(CONFIG, bytes, LoadOptions::default()).unwrap();
    assert_eq!((model.config().vocab, model.config().kv_heads), (4, 1));
    assert_eq!(logits(&model, &[0, 3]).len(), 2 * 4);
}

/// A checkpoint split over two shards with `model.safetensors.index.json`, opened from a
/// directory, gives exactly the logits of the single file.
#[test]
fn sharded_checkpoints_load_from_a_directory() {
    let spec = RandomLlama {
        weight_type: GgmlType::F32,
        tied_output: false,
        ..RandomLlama::default()
    };
    let gguf = GgufFile::from_bytes(spec.to_gguf(8)).unwrap();
    let (config, single) = convert(&spec, &gguf, Dtype::F32);
    let whole = safetensors::SafeTensors::deserialize(&single).unwrap();
    // Layer tensors go to shard 2, the rest to shard 1.
    let (mut one, mut two) = (HashMap::new(), HashMap::new());
    let mut weight_map = serde_json::Map::new();
    for (name, view) in whole.tensors() {
        let (shard, file) = if name.starts_with("model.layers.") {
            (&mut two, "model-00002-of-00002.safetensors")
        } else {
            (&mut one, "model-00001-of-00002.safetensors")
        };
        weight_map.insert(name.clone(), file.into());
        shard.insert(name, view);
    }
    let dir = std::env::temp_dir().join(format!("nextok-shards-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.json"), &config).unwrap();
    std::fs::write(
        dir.join("model-00001-of-00002.safetensors"),
        safetensors::serialize(one, &None).unwrap(),
    )
    .unwrap();
    std::fs::write(
        dir.join("model-00002-of-00002.safetensors"),
        safetensors::serialize(two, &None).unwrap(),
    )
    .unwrap();
    let index = serde_json::json!({ "weight_map": weight_map });
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();

    let sharded = LlamaModel::open_safetensors(&dir, LoadOptions::default()).unwrap();
    let reference = LlamaModel::from_safetensors(&config, single, LoadOptions::default()).unwrap();
    let tokens = [2, 4, 6, 8];
    assert_eq!(logits(&sharded, &tokens), logits(&reference, &tokens));

    // A shard name that leaves the directory is refused.
    let evil = serde_json::json!({ "weight_map": { "model.norm.weight": "../model.safetensors" } });
    std::fs::write(dir.join("model.safetensors.index.json"), evil.to_string()).unwrap();
    assert!(matches!(
        LlamaModel::open_safetensors(&dir, LoadOptions::default()),
        Err(Error::BadConfig { key, .. }) if key == "weight_map"
    ));
    std::fs::remove_dir_all(&dir).unwrap();
}
