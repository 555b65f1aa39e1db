//! `nextok plan`: the specification's cost model for a model and a machine.

use super::model_path;
use crate::args::{ModelArgs, PlanArgs};
use crate::output::{bytes, group, println, seconds, significant};
use anyhow::Context;
use nextok::plan::{plan, Bound, Machine, ModelFigures, Plan, Workload};

/// Runs `nextok plan`.
pub fn run(a: &PlanArgs) -> anyhow::Result<()> {
    let model = figures(a)?;
    let machine = Machine::new(a.bandwidth, a.tflops)?;
    let memory_bytes = match a.memory {
        None => None,
        Some(gb) if gb.is_finite() && gb > 0.0 && gb * 1e9 < u64::MAX as f64 => {
            Some((gb * 1e9).round() as u64)
        }
        Some(gb) => anyhow::bail!("--memory {gb}: give a positive number of GB"),
    };
    let workload = Workload {
        prompt_tokens: a.prompt_tokens,
        answer_tokens: a.answer_tokens,
        conversation_tokens: a.conversation_tokens,
        users: a.users,
        memory_bytes,
    };
    let p = plan(&model, &machine, &workload)?;
    if a.json {
        println(&serde_json::to_string_pretty(&p)?)
    } else {
        println(&table(&p))
    }
}

fn figures(a: &PlanArgs) -> anyhow::Result<ModelFigures> {
    let mut model = if let Some(weights) = a.weights {
        // clap makes --layers and --d-model required with --weights.
        let layers = a.layers.context("--weights needs --layers")?;
        let d_model = a.d_model.context("--weights needs --d-model")?;
        let kv_bytes = a.kv_bytes.unwrap_or(2.0);
        match (a.heads, a.kv_heads) {
            // clap makes --heads and --kv-heads go together.
            (Some(heads), Some(kv_heads)) => ModelFigures::from_heads(
                weights,
                a.bytes_per_weight,
                layers,
                d_model,
                heads,
                kv_heads,
                kv_bytes,
            )?,
            _ => ModelFigures::from_dims(weights, a.bytes_per_weight, layers, d_model, kv_bytes)?,
        }
    } else {
        let path = model_path(&ModelArgs {
            model: a.model.clone(),
        })?;
        let file = nextok::gguf::GgufFile::open(&path).map_err(nextok::Error::from)?;
        ModelFigures::from_gguf(&file, a.kv_bytes.unwrap_or(4.0))?
    };
    if a.context.is_some() {
        model.context_window = a.context;
    }
    Ok(model)
}

fn bound(b: Bound) -> &'static str {
    match b {
        Bound::Memory => "limited by memory",
        Bound::Compute => "limited by arithmetic",
    }
}

fn table(p: &Plan) -> String {
    let m = &p.model;
    let w = &p.workload;
    let mut out = String::new();
    let mut line = |label: &str, value: String| {
        out.push_str(&format!("{label:<40} {value}\n"));
    };
    line(
        "model",
        format!(
            "{} weights, {} bytes/weight, {} layers, KV width {}",
            significant(m.weights),
            significant(m.bytes_per_weight()),
            m.layers,
            m.kv_width
        ),
    );
    line(
        "machine",
        format!(
            "{} GB/s memory, {} TFLOP/s",
            significant(p.machine.memory_bandwidth / 1e9),
            significant(p.machine.flops / 1e12)
        ),
    );
    line("weights in memory (inference)", bytes(p.weight_bytes));
    line(
        "training (weights, gradients, m, v)",
        bytes(p.training_bytes),
    );
    line(
        "KV cache per token",
        format!(
            "{} bytes ({} bytes per number)",
            group(p.kv_bytes_per_token.round() as u64),
            significant(m.kv_bytes_per_number)
        ),
    );
    line(
        &format!("KV cache, {} tokens", group(w.conversation_tokens)),
        bytes(p.kv_bytes_per_conversation),
    );
    line(
        &format!("KV cache, {} users", group(w.users)),
        bytes(p.kv_bytes_all_users),
    );
    if let (Some(window), Some(size), Some(left)) =
        (m.context_window, p.context_window_size, p.tokens_left)
    {
        line(
            "context window",
            format!(
                "{} tokens ≈ {} words ≈ {} pages",
                group(window),
                group(size.words.round() as u64),
                significant(size.pages)
            ),
        );
        line(
            &format!(
                "tokens left after a {}-token prompt",
                group(w.prompt_tokens)
            ),
            group(left),
        );
    }
    line(
        &format!("prefill, {} tokens", group(w.prompt_tokens)),
        format!(
            "read {}, arithmetic {}: {} ({}), {} FLOPs/byte",
            seconds(p.prefill.memory_s),
            seconds(p.prefill.compute_s),
            seconds(p.prefill.seconds),
            bound(p.prefill.bound),
            significant(p.prefill.arithmetic_intensity)
        ),
    );
    line(
        "decode, 1 token",
        format!(
            "read {}, arithmetic {}: {} ({}), {} FLOPs/byte",
            seconds(p.decode.memory_s),
            seconds(p.decode.compute_s),
            seconds(p.decode.seconds),
            bound(p.decode.bound),
            significant(p.decode.arithmetic_intensity)
        ),
    );
    line("time to first token", seconds(p.time_to_first_token_s));
    line(
        "tokens per second",
        format!(
            "{} ({} per token)",
            significant(p.tokens_per_second),
            seconds(p.time_per_output_token_s)
        ),
    );
    line(
        &format!("whole answer, {} tokens", group(w.answer_tokens)),
        seconds(p.answer_s),
    );
    line(
        "prefill vs decode, per token",
        format!("{}× faster", significant(p.prefill_speedup_per_token)),
    );
    line(
        &format!("decode, {} users in one step", group(w.users)),
        format!(
            "read {} (weights, and {} of KV caches), arithmetic {}: {} ({})",
            seconds(p.batched_decode.memory_s),
            bytes(p.batched_decode.kv_bytes_read),
            seconds(p.batched_decode.compute_s),
            seconds(p.batched_decode.seconds),
            bound(p.batched_decode.bound)
        ),
    );
    line(
        "tokens per second, each user",
        significant(p.per_user_tokens_per_second),
    );
    line(
        "tokens per second, all users",
        format!(
            "{} ({}× one user alone)",
            significant(p.aggregate_tokens_per_second),
            significant(p.batching_speedup)
        ),
    );
    line(
        &format!("KV cache per user, {} tokens", group(w.conversation_tokens)),
        bytes(p.kv_bytes_per_conversation),
    );
    if let (Some(memory), Some(fit)) = (w.memory_bytes, p.users_that_fit) {
        line(
            &format!("users that fit in {}", bytes(memory as f64)),
            group(fit),
        );
    }
    out.trim_end().to_string()
}
