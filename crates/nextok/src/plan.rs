//! The cost model of the specification: how much memory a model needs and how fast it can run.
//!
//! Every figure here is a formula of the specification (`inference-and-decoding.txt`), applied
//! to a model and a machine:
//!
//! - weight memory, and training memory (weights, gradients, Adam's `m` and `v`: four numbers
//!   per weight) — "Why inference needs less memory";
//! - the time of one forward pass as the slower of reading the weights and doing the arithmetic
//!   (`2 × weights × tokens` FLOPs), and the arithmetic intensity — "Prefill vs decode";
//! - the KV cache, `2 × layers × d_model × bytes per number` per token — "How much memory the
//!   cache needs";
//! - tokens left in the context window, and a window in words and pages — "Stopping";
//! - many users at once ("In practice": providers batch users' decode steps so that the weights
//!   are read once for all of them): one decode step over `users` tokens, each user's and the
//!   aggregate tokens per second, and how many users' KV caches fit a memory budget.
//!
//! Attention's own arithmetic, which grows with the length of the text, is left out, as the
//! specification leaves it out: these are estimates for planning, not measurements. Its
//! memory traffic is not left out of the batched decode step, where it matters: the weights
//! are read once for every user, but each user's step reads that user's own KV cache, so with
//! many users or long conversations the caches, not the weights, set the step's time
//! ([`batched_decode`]). The single-user figures are the specification's, weights only.
//!
//! ```
//! use nextok::plan::{Machine, ModelFigures, Workload, plan};
//!
//! // The specification's 7-billion-weight example: 16-bit weights, Llama 2 7B's shape.
//! let model = ModelFigures::from_dims(7e9, 2.0, 32, 4096, 2.0)?;
//! let report = plan(&model, &Machine::SPEC_EXAMPLE, &Workload::default())?;
//! assert_eq!(report.weight_bytes, 14e9);
//! assert!((report.time_to_first_token_s - 0.028).abs() < 1e-12);
//! assert!((report.tokens_per_second - 142.857).abs() < 1e-3);
//! # Ok::<(), nextok::Error>(())
//! ```

use crate::Error;
use serde::Serialize;

/// English words per token, the specification's rule of thumb (Chapter 1).
pub const WORDS_PER_TOKEN: f64 = 0.75;
/// Words on a printed page, as the specification counts them.
pub const WORDS_PER_PAGE: f64 = 500.0;
/// Numbers kept in memory per weight during training: the weight, its gradient, and Adam's `m`
/// and `v`.
pub const TRAINING_NUMBERS_PER_WEIGHT: f64 = 4.0;

/// A model's size, as the cost model sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelFigures {
    /// Number of weights.
    pub weights: f64,
    /// Bytes the weights take as stored (weights × bytes per weight, or a quantised file's
    /// tensor bytes).
    pub weight_bytes: f64,
    /// Layers that attend to earlier tokens (and so keep a KV cache).
    pub layers: u64,
    /// Key (or value) numbers per token per layer, summed over the heads that have their own keys:
    /// `d_model` in the specification, `kv_heads × head_dim` under grouped-query attention.
    pub kv_width: u64,
    /// Bytes per number in the KV cache (4 for 32-bit, 2 for 16-bit).
    pub kv_bytes_per_number: f64,
    /// The context window in tokens, when known.
    pub context_window: Option<u64>,
}

/// `value`, if it is finite: a figure computed from finite inputs can still overflow to infinity.
fn finite(figure: &'static str, value: f64) -> Result<f64, Error> {
    if value.is_finite() {
        Ok(value)
    } else {
        Err(Error::PlanOverflow { figure, value })
    }
}

fn positive(what: &'static str, value: f64) -> Result<f64, Error> {
    if value.is_finite() && value > 0.0 {
        Ok(value)
    } else {
        Err(Error::InvalidPlanInput {
            what,
            value,
            expected: "a positive number",
        })
    }
}

impl ModelFigures {
    /// A model given by hand: its number of weights and bytes per weight, its layers, the width of
    /// its keys per layer (`d_model` without grouped-query attention) and the KV cache's bytes per
    /// number.
    pub fn from_dims(
        weights: f64,
        bytes_per_weight: f64,
        layers: u64,
        kv_width: u64,
        kv_bytes_per_number: f64,
    ) -> Result<Self, Error> {
        let weights = positive("number of weights", weights)?;
        let bytes_per_weight = positive("bytes per weight", bytes_per_weight)?;
        positive("layers", layers as f64)?;
        positive("d_model", kv_width as f64)?;
        Ok(ModelFigures {
            weights,
            weight_bytes: finite("weight bytes", weights * bytes_per_weight)?,
            layers,
            kv_width,
            kv_bytes_per_number: positive("KV cache bytes per number", kv_bytes_per_number)?,
            context_window: None,
        })
    }

    /// A model given by hand with its attention heads: `d_model`, `heads` and `kv_heads` (the
    /// heads with their own keys and values, grouped-query attention), from which the KV width is
    /// `kv_heads × d_model / heads`. Each must be at least 1, `heads` must divide `d_model`, and
    /// `kv_heads` must divide `heads` (each group of query heads shares one key head); a figure
    /// that breaks a rule is named in the error.
    pub fn from_heads(
        weights: f64,
        bytes_per_weight: f64,
        layers: u64,
        d_model: u64,
        heads: u64,
        kv_heads: u64,
        kv_bytes_per_number: f64,
    ) -> Result<Self, Error> {
        positive("d_model", d_model as f64)?;
        positive("heads", heads as f64)?;
        positive("KV heads", kv_heads as f64)?;
        if !d_model.is_multiple_of(heads) {
            return Err(Error::InvalidPlanInput {
                what: "heads",
                value: heads as f64,
                expected: "a divisor of d_model (each head takes d_model / heads numbers)",
            });
        }
        if kv_heads > heads || !heads.is_multiple_of(kv_heads) {
            return Err(Error::InvalidPlanInput {
                what: "KV heads",
                value: kv_heads as f64,
                expected: "a divisor of heads (each group of query heads shares one key head)",
            });
        }
        // kv_heads ≤ heads, so the width is at most d_model: no overflow.
        let kv_width = kv_heads * (d_model / heads);
        Self::from_dims(
            weights,
            bytes_per_weight,
            layers,
            kv_width,
            kv_bytes_per_number,
        )
    }

    /// The figures of a GGUF model: weights and bytes from its tensors, the shape from its
    /// `{architecture}.*` metadata. Under grouped-query attention the KV width is
    /// `head_count_kv × embedding_length / head_count`.
    pub fn from_gguf(
        file: &nextok_gguf::GgufFile,
        kv_bytes_per_number: f64,
    ) -> Result<Self, Error> {
        let meta = file.metadata();
        let arch = meta.get_str("general.architecture")?;
        let key = |k: &str| format!("{arch}.{k}");
        let layers = meta.get_u64(&key("block_count"))?;
        let d_model = meta.get_u64(&key("embedding_length"))?;
        let heads = meta.get_u64(&key("attention.head_count"))?;
        let kv_heads = meta
            .get_u64(&key("attention.head_count_kv"))
            .unwrap_or(heads);
        let head_dim = match meta.get_u64(&key("attention.key_length")) {
            Ok(k) => k,
            Err(_) if heads > 0 => d_model / heads,
            Err(_) => 0,
        };
        // Sums in f64: a crafted file's tensors could add up past u64, and the cost model works
        // in f64 anyway.
        let weights: f64 = file.tensors().iter().map(|t| t.elements() as f64).sum();
        let weight_bytes: f64 = file.tensors().iter().map(|t| t.size as f64).sum();
        positive("number of weights", weights)?;
        positive("layers", layers as f64)?;
        let kv_width = kv_heads.checked_mul(head_dim).ok_or(Error::PlanOverflow {
            figure: "KV width (head_count_kv × key_length)",
            value: kv_heads as f64 * head_dim as f64,
        })?;
        positive("KV width", kv_width as f64)?;
        Ok(ModelFigures {
            weights,
            weight_bytes,
            layers,
            kv_width,
            kv_bytes_per_number: positive("KV cache bytes per number", kv_bytes_per_number)?,
            context_window: meta.get_u64(&key("context_length")).ok(),
        })
    }

    /// Bytes per weight on average.
    pub fn bytes_per_weight(&self) -> f64 {
        self.weight_bytes / self.weights
    }
}

/// A machine's two speed limits.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Machine {
    /// Memory bandwidth, bytes per second.
    pub memory_bandwidth: f64,
    /// Arithmetic speed, floating-point operations per second.
    pub flops: f64,
}

impl Machine {
    /// The specification's illustrative GPU: 2,000 GB/s and 500 trillion FLOP/s ("Worked
    /// example: a 7-billion-weight model").
    pub const SPEC_EXAMPLE: Machine = Machine {
        memory_bandwidth: 2e12,
        flops: 500e12,
    };

    /// A machine from its bandwidth in GB/s and its speed in TFLOP/s.
    pub fn new(bandwidth_gb_per_s: f64, tflops: f64) -> Result<Self, Error> {
        Ok(Machine {
            memory_bandwidth: positive("memory bandwidth (GB/s)", bandwidth_gb_per_s)? * 1e9,
            flops: positive("arithmetic speed (TFLOP/s)", tflops)? * 1e12,
        })
    }
}

/// What is run: the lengths and the number of users.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Workload {
    /// Tokens in the prompt (one prefill pass).
    pub prompt_tokens: u64,
    /// Tokens in the answer (one decode pass each).
    pub answer_tokens: u64,
    /// Tokens in one conversation, for the KV cache's size.
    pub conversation_tokens: u64,
    /// Conversations served at once: for the KV cache's size, and the batch of one decode step
    /// (every user's next token in one pass).
    pub users: u64,
    /// Memory of the machine in bytes, when given: how many users' KV caches fit beside the
    /// weights ([`Plan::users_that_fit`]).
    pub memory_bytes: Option<u64>,
}

impl Default for Workload {
    /// The specification's examples: a 1,000-token prompt, a 200-token answer, conversations of
    /// 4,096 tokens and 32 users.
    fn default() -> Self {
        Workload {
            prompt_tokens: 1000,
            answer_tokens: 200,
            conversation_tokens: 4096,
            users: 32,
            memory_bytes: None,
        }
    }
}

/// Which limit sets the time of a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// Reading the weights takes longer than the arithmetic.
    Memory,
    /// The arithmetic takes longer than reading the weights.
    Compute,
}

/// The cost of one forward pass over some tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Pass {
    /// Tokens processed in the pass.
    pub tokens: u64,
    /// Floating-point operations: `2 × weights × tokens`.
    pub flops: f64,
    /// Seconds to read every weight once.
    pub memory_s: f64,
    /// Seconds for the arithmetic.
    pub compute_s: f64,
    /// The pass's time: the slower of the two.
    pub seconds: f64,
    /// Which of the two it is.
    pub bound: Bound,
    /// FLOPs per byte read (weights, and KV caches in a batched decode step).
    pub arithmetic_intensity: f64,
    /// Bytes of KV cache read by the pass: every user's cache in a batched decode step
    /// ([`batched_decode`]); 0 in the specification's passes ([`pass`]), which count the
    /// weights only.
    pub kv_bytes_read: f64,
}

/// The cost of one forward pass over `tokens` tokens ("Prefill vs decode").
pub fn pass(model: &ModelFigures, machine: &Machine, tokens: u64) -> Pass {
    let flops = 2.0 * model.weights * tokens as f64;
    let memory_s = model.weight_bytes / machine.memory_bandwidth;
    let compute_s = flops / machine.flops;
    let (seconds, bound) = if compute_s > memory_s {
        (compute_s, Bound::Compute)
    } else {
        (memory_s, Bound::Memory)
    };
    Pass {
        tokens,
        flops,
        memory_s,
        compute_s,
        seconds,
        bound,
        arithmetic_intensity: flops / model.weight_bytes,
        kv_bytes_read: 0.0,
    }
}

/// One decode step of `users` users at once, each user's KV cache holding `kv_positions`
/// positions: the weights are read once for all of them, every user's cache is read (attention
/// at one new token reads every key and value it holds: `kv_positions × kv_bytes_per_token`
/// bytes a user), and the arithmetic is `2 × weights` FLOPs per user. Its time is the slower of
/// reading `weights + users × kv_positions × kv_bytes_per_token` bytes and the arithmetic.
pub fn batched_decode(
    model: &ModelFigures,
    machine: &Machine,
    users: u64,
    kv_positions: f64,
) -> Pass {
    let flops = 2.0 * model.weights * users as f64;
    let kv_bytes_read = users as f64 * kv_positions * kv_bytes_per_token(model);
    let bytes = model.weight_bytes + kv_bytes_read;
    let memory_s = bytes / machine.memory_bandwidth;
    let compute_s = flops / machine.flops;
    let (seconds, bound) = if compute_s > memory_s {
        (compute_s, Bound::Compute)
    } else {
        (memory_s, Bound::Memory)
    };
    Pass {
        tokens: users,
        flops,
        memory_s,
        compute_s,
        seconds,
        bound,
        arithmetic_intensity: flops / bytes,
        kv_bytes_read,
    }
}

/// KV cache bytes per token: `2 × layers × kv_width × bytes per number`.
pub fn kv_bytes_per_token(model: &ModelFigures) -> f64 {
    2.0 * model.layers as f64 * model.kv_width as f64 * model.kv_bytes_per_number
}

/// Conversations whose KV caches (`kv_bytes_per_conversation` each) fit in `memory_bytes` once
/// the weights are in: `⌊(memory − weights) / per conversation⌋`, 0 when the weights alone do not
/// fit.
pub fn users_that_fit(memory_bytes: f64, weight_bytes: f64, kv_bytes_per_conversation: f64) -> u64 {
    let left = memory_bytes - weight_bytes;
    if left <= 0.0 || kv_bytes_per_conversation <= 0.0 {
        return 0;
    }
    // A float that is beyond u64 saturates; such a budget holds "all" users.
    (left / kv_bytes_per_conversation).floor() as u64
}

/// Tokens left for the answer in a context window once the prompt is in it (0 when the prompt
/// fills it or more).
pub fn tokens_left(context_window: u64, prompt_tokens: u64) -> u64 {
    context_window.saturating_sub(prompt_tokens)
}

/// A number of tokens in English words and printed pages ("How big is a context window?").
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TextSize {
    /// Tokens.
    pub tokens: u64,
    /// Words: tokens × 0.75.
    pub words: f64,
    /// Pages: words ÷ 500.
    pub pages: f64,
}

/// `tokens` in words and pages.
pub fn text_size(tokens: u64) -> TextSize {
    let words = tokens as f64 * WORDS_PER_TOKEN;
    TextSize {
        tokens,
        words,
        pages: words / WORDS_PER_PAGE,
    }
}

/// Positions a decoder processes to write `n` tokens without a KV cache: `n (n + 1) / 2`, or
/// `None` when that does not fit in a `u64`.
pub fn positions_without_cache(n: u64) -> Option<u64> {
    // One of n and n + 1 is even: halve it first, so that only the true result can overflow.
    let (a, b) = if n.is_multiple_of(2) {
        (n / 2, n.checked_add(1)?)
    } else {
        (n, n.checked_add(1)? / 2)
    };
    a.checked_mul(b)
}

/// Every figure of the cost model for one model, machine and workload.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    /// The model's figures.
    pub model: ModelFigures,
    /// The machine.
    pub machine: Machine,
    /// The workload.
    pub workload: Workload,
    /// Bytes of weights (inference memory before the KV cache).
    pub weight_bytes: f64,
    /// Bytes for training at the same number format: weights, gradients, `m` and `v`.
    pub training_bytes: f64,
    /// KV cache bytes per token.
    pub kv_bytes_per_token: f64,
    /// KV cache bytes for one conversation of `workload.conversation_tokens`.
    pub kv_bytes_per_conversation: f64,
    /// KV cache bytes for `workload.users` such conversations.
    pub kv_bytes_all_users: f64,
    /// The context window in words and pages, when it is known.
    pub context_window_size: Option<TextSize>,
    /// Tokens left for the answer after the prompt, when the context window is known.
    pub tokens_left: Option<u64>,
    /// The prefill pass over the prompt.
    pub prefill: Pass,
    /// One decode pass.
    pub decode: Pass,
    /// Time to first token: the prefill's time.
    pub time_to_first_token_s: f64,
    /// Time per output token: one decode pass.
    pub time_per_output_token_s: f64,
    /// Tokens per second while decoding.
    pub tokens_per_second: f64,
    /// The whole answer: prefill, then one decode pass per answer token.
    pub answer_s: f64,
    /// How many times faster prefill is than decode, per token.
    pub prefill_speedup_per_token: f64,
    /// Positions each user's KV cache holds in a decode step, on average over the answer: the
    /// prompt and half the answer.
    pub kv_positions_per_user: f64,
    /// One decode step of every user at once ([`batched_decode`]): a pass over
    /// `workload.users` tokens, the weights read once for all of them and every user's KV cache
    /// of [`Self::kv_positions_per_user`] positions read.
    pub batched_decode: Pass,
    /// Each user's tokens per second when all decode together: one token per batched step.
    pub per_user_tokens_per_second: f64,
    /// All users' tokens per second together: `users` tokens per batched step.
    pub aggregate_tokens_per_second: f64,
    /// The aggregate over one user's decode speed alone (a batched step of one user, its own
    /// KV cache read as well): what batching buys.
    pub batching_speedup: f64,
    /// Conversations of `workload.conversation_tokens` whose KV caches fit in
    /// `workload.memory_bytes` beside the weights (0 when the weights alone do not fit); `None`
    /// when no memory was given.
    pub users_that_fit: Option<u64>,
}

/// Applies the cost model.
pub fn plan(model: &ModelFigures, machine: &Machine, workload: &Workload) -> Result<Plan, Error> {
    positive("memory bandwidth", machine.memory_bandwidth)?;
    positive("arithmetic speed", machine.flops)?;
    positive("prompt tokens", workload.prompt_tokens as f64)?;
    let prefill = pass(model, machine, workload.prompt_tokens);
    let decode = pass(model, machine, 1);
    let per_token = kv_bytes_per_token(model);
    let per_conversation = per_token * workload.conversation_tokens as f64;
    positive("users", workload.users as f64)?;
    let kv_positions = workload.prompt_tokens as f64 + workload.answer_tokens as f64 / 2.0;
    let batched = batched_decode(model, machine, workload.users, kv_positions);
    let one_user = batched_decode(model, machine, 1, kv_positions);
    let users_that_fit = workload
        .memory_bytes
        .map(|m| users_that_fit(m as f64, model.weight_bytes, per_conversation));
    let p = Plan {
        model: model.clone(),
        machine: *machine,
        workload: *workload,
        weight_bytes: model.weight_bytes,
        training_bytes: TRAINING_NUMBERS_PER_WEIGHT * model.weight_bytes,
        kv_bytes_per_token: per_token,
        kv_bytes_per_conversation: per_conversation,
        kv_bytes_all_users: per_conversation * workload.users as f64,
        context_window_size: model.context_window.map(text_size),
        tokens_left: model
            .context_window
            .map(|w| tokens_left(w, workload.prompt_tokens)),
        prefill,
        decode,
        time_to_first_token_s: prefill.seconds,
        time_per_output_token_s: decode.seconds,
        tokens_per_second: 1.0 / decode.seconds,
        answer_s: prefill.seconds + workload.answer_tokens as f64 * decode.seconds,
        prefill_speedup_per_token: decode.seconds / (prefill.seconds / prefill.tokens as f64),
        kv_positions_per_user: kv_positions,
        batched_decode: batched,
        per_user_tokens_per_second: 1.0 / batched.seconds,
        aggregate_tokens_per_second: workload.users as f64 / batched.seconds,
        batching_speedup: workload.users as f64 * one_user.seconds / batched.seconds,
        users_that_fit,
    };
    // Every input is finite and positive, but products of huge ones overflow to infinity (and
    // infinity over infinity is NaN): a figure that is not finite is refused, never printed.
    for (figure, value) in [
        ("weight bytes", p.weight_bytes),
        ("training bytes", p.training_bytes),
        ("KV cache bytes per token", p.kv_bytes_per_token),
        (
            "KV cache bytes per conversation",
            p.kv_bytes_per_conversation,
        ),
        ("KV cache bytes for all users", p.kv_bytes_all_users),
        ("prefill FLOPs", p.prefill.flops),
        ("prefill time", p.prefill.seconds),
        ("decode time", p.decode.seconds),
        ("arithmetic intensity", p.prefill.arithmetic_intensity),
        ("tokens per second", p.tokens_per_second),
        ("answer time", p.answer_s),
        ("prefill speed-up per token", p.prefill_speedup_per_token),
        (
            "KV cache bytes read per batched step",
            p.batched_decode.kv_bytes_read,
        ),
        ("batched decode time", p.batched_decode.seconds),
        ("aggregate tokens per second", p.aggregate_tokens_per_second),
        ("batching speed-up", p.batching_speedup),
    ] {
        finite(figure, value)?;
    }
    // Tokens per second, the speed-up and the intensity are ratios: a figure so small that it
    // rounds to 0 makes them infinite or NaN, caught above; a zero time would be caught there too.
    Ok(p)
}
