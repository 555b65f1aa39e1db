//! Arbitrary bytes into the GGUF reader and the model loader (as GGUF, and as safetensors): every input must give a value or a
//! typed error, never a panic, a hang, or an allocation out of proportion to the input. When a
//! file loads as a model, one token is run through it, so the kernels see the file's tensors too.

#![no_main]

use libfuzzer_sys::fuzz_target;
use nextok_gguf::GgufFile;
use nextok_kernels::dequant;
use nextok_kv_cache::KvType;
use nextok_model::{CpuBackend, LlamaModel, LoadOptions, Logits, Sequence};

/// A small Hugging Face configuration, for feeding the same bytes to the safetensors loader.
const CONFIG: &str = r#"{"model_type": "llama", "hidden_size": 32, "intermediate_size": 32,
    "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
    "tie_word_embeddings": true}"#;

fuzz_target!(|data: &[u8]| {
    // The bytes as a safetensors checkpoint: parsed, mapped and checked like a GGUF one.
    if let Ok(model) = LlamaModel::from_safetensors(CONFIG, data.to_vec(), LoadOptions::default()) {
        run_one_token(&model);
    }
    let Ok(file) = GgufFile::from_bytes(data.to_vec()) else {
        return;
    };
    // Every metadata value and every tensor description can be read back.
    for (key, _) in file.metadata().iter() {
        let _ = file.metadata().get_str(key);
        let _ = file.metadata().get_u64(key);
        let _ = file.metadata().get_f32(key);
    }
    for info in file.tensors() {
        let view = file.view(info);
        // The reader checked each extent against the file, so dequantising is bounded by it.
        if view.data.len() <= 1 << 20 {
            let _ = dequant::dequantize_tensor(view);
        }
    }
    let Ok(model) = LlamaModel::from_gguf(file, LoadOptions::default()) else {
        return;
    };
    run_one_token(&model);
});

fn run_one_token(model: &LlamaModel) {
    let mut cache = model.new_cache(KvType::F32);
    let _ = model.forward(
        &CpuBackend::new(1),
        &mut [Sequence {
            cache: &mut cache,
            tokens: &[0],
            logits: Logits::Last,
        }],
    );
}
