//! Loading an unquantised Hugging Face checkpoint: `config.json` and `model.safetensors` (or its
//! shards, listed by `model.safetensors.index.json`).
//!
//! The hyper-parameters of `config.json` are written into GGUF metadata keys and the tensor names
//! mapped to their GGUF names, so both formats go through one loader. Hugging Face's Llama code
//! rotates with the "rotate half" (NeoX) pairing on unpermuted Q and K weights, so that is the
//! ordering of these checkpoints, whatever the architecture.

use std::path::Path;

use nextok_gguf::write::GgufWriter;
use nextok_gguf::{GgmlType, GgufFile, Value};
use serde_json::Value as Json;

use crate::config::RopeOrdering;
use crate::llama::{Backing, Found, Table};
use crate::{Error, LlamaModel, LoadOptions};

/// The GGUF name of a Hugging Face Llama-family tensor name, if the model uses it.
fn gguf_name(hf: &str) -> Option<String> {
    match hf {
        "model.embed_tokens.weight" => return Some("token_embd.weight".into()),
        "model.norm.weight" => return Some("output_norm.weight".into()),
        "lm_head.weight" => return Some("output.weight".into()),
        _ => {}
    }
    let rest = hf.strip_prefix("model.layers.")?;
    let (layer, part) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let part = match part {
        "input_layernorm.weight" => "attn_norm.weight",
        "self_attn.q_proj.weight" => "attn_q.weight",
        "self_attn.q_proj.bias" => "attn_q.bias",
        "self_attn.k_proj.weight" => "attn_k.weight",
        "self_attn.k_proj.bias" => "attn_k.bias",
        "self_attn.v_proj.weight" => "attn_v.weight",
        "self_attn.v_proj.bias" => "attn_v.bias",
        "self_attn.o_proj.weight" => "attn_output.weight",
        "post_attention_layernorm.weight" => "ffn_norm.weight",
        "mlp.gate_proj.weight" => "ffn_gate.weight",
        "mlp.up_proj.weight" => "ffn_up.weight",
        "mlp.down_proj.weight" => "ffn_down.weight",
        _ => return None,
    };
    Some(format!("blk.{layer}.{part}"))
}

fn config_u64(config: &Json, key: &str) -> Result<Option<u64>, Error> {
    match config.get(key) {
        None | Some(Json::Null) => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| Error::BadConfig {
            key: key.to_owned(),
            reason: "is not a non-negative integer",
        }),
    }
}

fn config_f64(config: &Json, key: &str) -> Result<Option<f64>, Error> {
    match config.get(key) {
        None | Some(Json::Null) => Ok(None),
        Some(v) => v.as_f64().map(Some).ok_or_else(|| Error::BadConfig {
            key: key.to_owned(),
            reason: "is not a number",
        }),
    }
}

fn required<T>(v: Option<T>, key: &str) -> Result<T, Error> {
    v.ok_or_else(|| Error::BadConfig {
        key: key.to_owned(),
        reason: "is missing",
    })
}

/// The hyper-parameters of `config.json` as a metadata-only GGUF file.
fn metadata(config: &Json) -> Result<GgufFile, Error> {
    let arch = config
        .get("model_type")
        .and_then(Json::as_str)
        .ok_or_else(|| Error::BadConfig {
            key: "model_type".into(),
            reason: "is missing or not a string",
        })?;
    if !matches!(arch, "llama" | "mistral" | "qwen2") {
        return Err(Error::UnsupportedArchitecture {
            architecture: arch.to_owned(),
        });
    }
    let hidden = required(config_u64(config, "hidden_size")?, "hidden_size")?;
    let heads = required(
        config_u64(config, "num_attention_heads")?,
        "num_attention_heads",
    )?;
    if let (Some(hd), true) = (config_u64(config, "head_dim")?, heads > 0) {
        if hd * heads != hidden {
            return Err(Error::BadConfig {
                key: "head_dim".into(),
                reason: "differs from hidden_size / num_attention_heads, which is not supported",
            });
        }
    }
    let u = |v: u64| Value::U64(v);
    let k = |s: &str| format!("{arch}.{s}");
    let mut w = GgufWriter::new()
        .metadata("general.architecture", Value::String(arch.into()))
        .metadata(&k("embedding_length"), u(hidden))
        .metadata(&k("attention.head_count"), u(heads))
        .metadata(
            &k("block_count"),
            u(required(
                config_u64(config, "num_hidden_layers")?,
                "num_hidden_layers",
            )?),
        )
        .metadata(
            &k("feed_forward_length"),
            u(required(
                config_u64(config, "intermediate_size")?,
                "intermediate_size",
            )?),
        )
        .metadata(
            &k("attention.head_count_kv"),
            u(config_u64(config, "num_key_value_heads")?.unwrap_or(heads)),
        )
        .metadata(
            &k("attention.layer_norm_rms_epsilon"),
            Value::F32(config_f64(config, "rms_norm_eps")?.unwrap_or(1e-6) as f32),
        )
        .metadata(
            &k("rope.freq_base"),
            Value::F32(config_f64(config, "rope_theta")?.unwrap_or(10_000.0) as f32),
        );
    if let Some(ctx) = config_u64(config, "max_position_embeddings")? {
        w = w.metadata(&k("context_length"), u(ctx));
    }
    match config.get("rope_scaling") {
        None | Some(Json::Null) => {}
        Some(scaling) => {
            let kind = scaling
                .get("type")
                .or_else(|| scaling.get("rope_type"))
                .and_then(Json::as_str)
                .unwrap_or("unknown");
            let factor = config_f64(scaling, "factor")?;
            w = w.metadata(&k("rope.scaling.type"), Value::String(kind.into()));
            if let Some(f) = factor {
                w = w.metadata(&k("rope.scaling.factor"), Value::F32(f as f32));
            }
        }
    }
    Ok(GgufFile::from_bytes(w.to_bytes())?)
}

/// The weight files of a checkpoint directory: `model.safetensors`, or the shards that
/// `model.safetensors.index.json` names in its `weight_map`, in name order.
fn shard_names(dir: &Path) -> Result<Vec<String>, Error> {
    if dir.join("model.safetensors").exists() {
        return Ok(vec!["model.safetensors".into()]);
    }
    let index_path = dir.join("model.safetensors.index.json");
    let text = std::fs::read_to_string(&index_path).map_err(|e| Error::Io {
        path: index_path.display().to_string(),
        message: e.to_string(),
    })?;
    let index: Json = serde_json::from_str(&text).map_err(|_| Error::BadConfig {
        key: "model.safetensors.index.json".into(),
        reason: "is not valid JSON",
    })?;
    let map = index
        .get("weight_map")
        .and_then(Json::as_object)
        .ok_or_else(|| Error::BadConfig {
            key: "weight_map".into(),
            reason: "is missing from model.safetensors.index.json or not an object",
        })?;
    let mut names: Vec<String> = Vec::new();
    for file in map.values() {
        let name = file.as_str().ok_or_else(|| Error::BadConfig {
            key: "weight_map".into(),
            reason: "has a file name that is not a string",
        })?;
        // Only plain file names inside the checkpoint's directory.
        if name.contains(['/', '\\']) || name.starts_with('.') {
            return Err(Error::BadConfig {
                key: "weight_map".into(),
                reason: "names a file outside the checkpoint directory",
            });
        }
        names.push(name.to_owned());
    }
    names.sort();
    names.dedup();
    Ok(names)
}

impl LlamaModel {
    /// Loads a checkpoint directory: `config.json`, and `model.safetensors` or the shards listed
    /// by `model.safetensors.index.json`, memory-mapping the weights.
    pub fn open_safetensors(dir: impl AsRef<Path>, options: LoadOptions) -> Result<Self, Error> {
        let dir = dir.as_ref();
        let io = |path: &Path, e: std::io::Error| Error::Io {
            path: path.display().to_string(),
            message: e.to_string(),
        };
        let config_path = dir.join("config.json");
        let config = std::fs::read_to_string(&config_path).map_err(|e| io(&config_path, e))?;
        let mut shards = Vec::new();
        for name in shard_names(dir)? {
            let path = dir.join(name);
            let file = std::fs::File::open(&path).map_err(|e| io(&path, e))?;
            // SAFETY: a read-only map; every read of it is bounds-checked (see `GgufFile::open`).
            let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| io(&path, e))?;
            shards.push(Backing::Mmap(map));
        }
        Self::load_safetensors(&config, shards, options)
    }

    /// Loads a checkpoint from the text of its `config.json` and the bytes of its
    /// `model.safetensors`.
    pub fn from_safetensors(
        config_json: &str,
        weights: Vec<u8>,
        options: LoadOptions,
    ) -> Result<Self, Error> {
        Self::load_safetensors(config_json, vec![Backing::Owned(weights)], options)
    }

    /// Loads a checkpoint whose weights are split over several safetensors files (shards).
    pub fn from_safetensors_shards(
        config_json: &str,
        shards: Vec<Vec<u8>>,
        options: LoadOptions,
    ) -> Result<Self, Error> {
        let shards = shards.into_iter().map(Backing::Owned).collect();
        Self::load_safetensors(config_json, shards, options)
    }

    fn load_safetensors(
        config_json: &str,
        shards: Vec<Backing>,
        options: LoadOptions,
    ) -> Result<Self, Error> {
        let config: Json = serde_json::from_str(config_json).map_err(|_| Error::BadConfig {
            key: "(file)".into(),
            reason: "is not valid JSON",
        })?;
        let meta = metadata(&config)?;
        let tied = config
            .get("tie_word_embeddings")
            .and_then(Json::as_bool)
            .unwrap_or(false);
        let mut table = Table::new();
        for (shard, backing) in shards.iter().enumerate() {
            let bytes = backing.bytes();
            let parsed =
                ::safetensors::SafeTensors::deserialize(bytes).map_err(|e| Error::Safetensors {
                    message: e.to_string(),
                })?;
            let base = bytes.as_ptr() as usize;
            for (name, view) in parsed.tensors() {
                let Some(gguf) = gguf_name(&name) else {
                    continue;
                };
                if tied && gguf == "output.weight" {
                    continue;
                }
                let ty = match view.dtype() {
                    ::safetensors::Dtype::F32 => GgmlType::F32,
                    ::safetensors::Dtype::F16 => GgmlType::F16,
                    ::safetensors::Dtype::BF16 => GgmlType::BF16,
                    other => {
                        return Err(Error::UnsupportedDtype {
                            tensor: name,
                            dtype: format!("{other:?}"),
                        })
                    }
                };
                let start = view.data().as_ptr() as usize - base;
                let found = Found {
                    ty,
                    // Row-major [rows, cols] is GGML's [cols, rows].
                    dims: view.shape().iter().rev().map(|&d| d as u64).collect(),
                    shard,
                    bytes: start..start + view.data().len(),
                };
                if table.insert(gguf, found).is_some() {
                    return Err(Error::Safetensors {
                        message: format!("tensor `{name}` appears in more than one shard"),
                    });
                }
            }
        }
        let options = LoadOptions {
            rope_ordering: Some(options.rope_ordering.unwrap_or(RopeOrdering::NeoX)),
            ..options
        };
        Self::load(meta, shards, &table, options)
    }
}
