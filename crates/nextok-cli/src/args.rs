//! The command line's grammar: every subcommand and flag.

use clap::builder::RangedU64ValueParser;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// The longest answer, prompt or bench length in tokens a flag may ask for: far beyond any
/// context window nextok runs, so never the limit that matters, but a bound that keeps every
/// count and sum of counts far from overflow.
pub const MAX_TOKENS: u64 = 1 << 24;
/// The most repetitions of a bench measurement.
pub const MAX_REPETITIONS: u64 = 1000;
/// The largest batch `nextok bench --batch` times.
pub const MAX_BATCH: u64 = 1024;
/// The largest figure `plan` takes as a count (layers, widths, heads, tokens, users): 2^40, a
/// thousand times any real model or workload, so that products of two stay exact in a u64.
pub const MAX_PLAN_COUNT: u64 = 1 << 40;

/// A whole number between `min` and `max`, checked by clap before anything runs: a value out of
/// range is a usage error (exit code 2) that names the flag, the value and the range.
fn count(min: u64, max: u64) -> RangedU64ValueParser<usize> {
    RangedU64ValueParser::<usize>::new().range(min..=max)
}

/// A `u64` figure between 1 and [`MAX_PLAN_COUNT`].
fn plan_count() -> RangedU64ValueParser<u64> {
    RangedU64ValueParser::<u64>::new().range(1..=MAX_PLAN_COUNT)
}

/// `--threads`: between 1 and the library's limit on this machine.
fn threads() -> RangedU64ValueParser<usize> {
    count(1, nextok::EngineOptions::max_threads() as u64)
}

/// The `nextok` command. Its one-line summary in `--help` is the package description (Cargo.toml),
/// which names every visible subcommand.
#[derive(Debug, Parser)]
#[command(name = "nextok", version, about, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Generate an answer to a prompt, streamed to stdout (stop reason and timings on stderr).
    Generate(GenerateArgs),
    /// An interactive conversation in the terminal, with history.
    Chat(ChatArgs),
    /// Split text into tokens.
    Tokenize(TokenizeArgs),
    /// Render a conversation (a JSON file of {"role", "content"} messages) through the model's
    /// chat template, with the generation prompt.
    Template(TemplateArgs),
    /// Print the model's logits for a prompt or token ids.
    Logits(LogitsArgs),
    /// Log-probability of every token of a text, and its perplexity.
    Score(ScoreArgs),
    /// Show what each stage of the sampling chain does to a list of logits.
    Sample(SampleArgs),
    /// The cost model: memory, KV cache, time to first token and tokens/s for a model and machine.
    Plan(PlanArgs),
    /// Label a text: ask the model, through its chat template, to answer with one of the labels,
    /// and print each label's probability as the whole answer, raw and renormalised over the
    /// labels.
    Classify(ClassifyArgs),
    /// Run the constrained-decoding benchmark over a folder of cases.
    ConstrainBench(ConstrainBenchArgs),
    /// Measure prefill and decode speed and time to first token on this machine.
    Bench(BenchArgs),
    /// Serve the model over HTTP with the OpenAI API (chat and text completions, streaming),
    /// batching concurrent requests into one forward pass per step.
    Serve(ServeArgs),
    /// Fetch the default model if it is not there yet, check its SHA-256 and print its path (what
    /// `cargo xtask fetch-model` runs; the other commands fetch it on first use by themselves).
    #[command(hide = true)]
    FetchModel,
}

/// Which model file. Commands that only read the file (its tokenizer, its chat template) take
/// this alone.
#[derive(Debug, Args, Clone)]
pub struct ModelArgs {
    /// A GGUF model file. Default: $NEXTOK_MODEL, else SmolLM2-135M-Instruct Q4_1 in the user's
    /// cache, fetched on first use.
    #[arg(long, value_name = "PATH")]
    pub model: Option<PathBuf>,
}

/// Which model, and where its forward pass runs: for the commands that run it.
#[derive(Debug, Args, Clone)]
pub struct RunArgs {
    #[command(flatten)]
    pub file: ModelArgs,
    /// Threads for the forward pass (default: all cores; at most 8 per core, and at most 256).
    #[arg(long, value_name = "N", value_parser = threads())]
    pub threads: Option<usize>,
    /// Where the forward pass runs: `cpu`, or `cuda` (`cuda:N` for GPU N) in builds with the
    /// `cuda` feature.
    #[arg(long, value_name = "DEVICE", default_value = "cpu", value_parser = parse_device)]
    pub device: nextok::Device,
}

/// `cpu`, `cuda` or `cuda:N`.
fn parse_device(s: &str) -> Result<nextok::Device, String> {
    match s {
        "cpu" => Ok(nextok::Device::Cpu),
        "cuda" => Ok(nextok::Device::Cuda(0)),
        _ => s
            .strip_prefix("cuda:")
            .and_then(|n| n.parse().ok())
            .map(nextok::Device::Cuda)
            .ok_or_else(|| format!("`{s}` is not a device: use cpu, cuda or cuda:N")),
    }
}

/// The sampling chain's settings.
#[derive(Debug, Args, Clone)]
pub struct SamplingArgs {
    /// Divide logits by T before softmax; 0 is greedy.
    #[arg(
        long,
        value_name = "T",
        default_value_t = 0.7,
        allow_negative_numbers = true
    )]
    pub temperature: f32,
    /// Keep only the K most likely tokens.
    #[arg(long, value_name = "K")]
    pub top_k: Option<usize>,
    /// Keep the smallest top group whose probabilities add up to P.
    #[arg(
        long,
        value_name = "P",
        default_value_t = 0.9,
        allow_negative_numbers = true
    )]
    pub top_p: f32,
    /// Keep tokens at least MIN_P times as likely as the top one.
    #[arg(
        long,
        value_name = "MIN_P",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub min_p: f32,
    /// Repetition penalty over the prompt and the answer (1 is off; 1.1 to 1.3 are usual).
    #[arg(
        long,
        alias = "repeat-penalty",
        value_name = "R",
        default_value_t = 1.0,
        allow_negative_numbers = true
    )]
    pub repetition_penalty: f32,
    /// Presence penalty over the answer's tokens (0 is off).
    #[arg(
        long,
        value_name = "X",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub presence_penalty: f32,
    /// Frequency penalty over the answer's tokens (0 is off).
    #[arg(
        long,
        value_name = "X",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub frequency_penalty: f32,
    /// Seed of the random choice: the same prompt, settings and seed give the same answer.
    /// Without it a fresh random seed is drawn, and printed with the timings (and in --json), so
    /// that --seed with that number gives the same answer again.
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// The stages beyond these (issue #16).
    #[command(flatten)]
    pub more: MoreSamplingArgs,
}

/// The sampling stages transformers and llama.cpp users reach for, under their names (each flag
/// is the field of `SamplingParams` with dashes; the defaults turn the stage off).
#[derive(Debug, Args, Clone)]
pub struct MoreSamplingArgs {
    /// The fewest tokens top-p, min-p, typical-p and the epsilon and eta cutoffs leave.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub min_tokens_to_keep: usize,
    /// Locally typical sampling: keep the most typical tokens up to this mass (1 is off).
    #[arg(
        long,
        alias = "typical",
        value_name = "P",
        default_value_t = 1.0,
        allow_negative_numbers = true
    )]
    pub typical_p: f32,
    /// Keep tokens at least this likely (0 is off; 3e-4 is usual).
    #[arg(
        long,
        value_name = "E",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub epsilon_cutoff: f32,
    /// Eta sampling's epsilon: the cutoff falls with the entropy (0 is off; 3e-4 is usual).
    #[arg(
        long,
        value_name = "E",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub eta_cutoff: f32,
    /// Never repeat an n-gram of this size from the prompt and the answer (0 is off).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub no_repeat_ngram_size: usize,
    /// Never repeat in the answer an n-gram of this size from the prompt (0 is off).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub encoder_no_repeat_ngram_size: usize,
    /// DRY: penalise tokens that extend a repetition (0 is off; 0.8 is usual).
    #[arg(
        long,
        value_name = "X",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub dry_multiplier: f32,
    /// DRY: growth of the penalty per repeated token.
    #[arg(
        long,
        value_name = "X",
        default_value_t = 1.75,
        allow_negative_numbers = true
    )]
    pub dry_base: f32,
    /// DRY: the longest repetition left alone.
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub dry_allowed_length: usize,
    /// DRY: how many of the last tokens to look at (-1 all, 0 off).
    #[arg(long, value_name = "N", default_value_t = -1, allow_negative_numbers = true)]
    pub dry_penalty_last_n: i64,
    /// DRY: a text that ends a repetition (repeatable; default "\n", ":", "\"" and "*").
    #[arg(long = "dry-sequence-breaker", value_name = "TEXT")]
    pub dry_sequence_breakers: Vec<String>,
    /// XTC: the chance, at each token, of removing the top choices (0 is off).
    #[arg(
        long,
        value_name = "P",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub xtc_probability: f32,
    /// XTC: the probability a choice needs to be removed (above 0.5 is off).
    #[arg(
        long,
        value_name = "P",
        default_value_t = 0.1,
        allow_negative_numbers = true
    )]
    pub xtc_threshold: f32,
    /// Keep tokens within N standard deviations of the top logit (<= 0 is off).
    #[arg(long, value_name = "N", default_value_t = -1.0, allow_negative_numbers = true)]
    pub top_n_sigma: f32,
    /// Mirostat version: 0 off, 1 or 2.
    #[arg(long, value_name = "V", default_value_t = 0)]
    pub mirostat: u8,
    /// Mirostat's target surprise, in bits.
    #[arg(
        long,
        alias = "mirostat-ent",
        value_name = "TAU",
        default_value_t = 5.0,
        allow_negative_numbers = true
    )]
    pub mirostat_tau: f32,
    /// Mirostat's learning rate.
    #[arg(
        long,
        alias = "mirostat-lr",
        value_name = "ETA",
        default_value_t = 0.1,
        allow_negative_numbers = true
    )]
    pub mirostat_eta: f32,
    /// Dynamic temperature: the temperature moves within T +- this range with the entropy
    /// (0 is off).
    #[arg(
        long,
        value_name = "R",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub dynatemp_range: f32,
    /// Dynamic temperature's exponent.
    #[arg(
        long,
        alias = "dynatemp-exp",
        value_name = "X",
        default_value_t = 1.0,
        allow_negative_numbers = true
    )]
    pub dynatemp_exponent: f32,
}

/// Settings shared by `generate` and `chat`.
#[derive(Debug, Args, Clone)]
pub struct AnswerArgs {
    /// Stop after this many new tokens (at least 1, at most 16,777,216; the context window
    /// also ends the answer).
    #[arg(long, value_name = "N", default_value_t = 256, value_parser = count(1, MAX_TOKENS))]
    pub max_tokens: usize,
    /// Stop when the answer contains this text (repeatable; the text is not printed).
    #[arg(long, value_name = "TEXT")]
    pub stop: Vec<String>,
    /// A system message (ignored with --raw).
    #[arg(long, value_name = "TEXT")]
    pub system: Option<String>,
    /// Keep going past the model's end tokens (until --max-tokens or a stop sequence).
    #[arg(long)]
    pub ignore_eos: bool,
    /// Decode one token per pass: no speculative decoding (which drafts from the prompt and the
    /// answer so far and keeps only the tokens plain decoding chooses, so the answer is the same
    /// either way).
    #[arg(long)]
    pub no_speculative: bool,
}

/// `nextok generate`.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// The prompt (`-` reads it from stdin).
    pub prompt: String,
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    #[command(flatten)]
    pub answer: AnswerArgs,
    /// Continue the prompt as it is, without the chat template.
    #[arg(long)]
    pub raw: bool,
    /// Special-token text in a raw prompt (such as `<|im_start|>`) becomes the special tokens.
    #[arg(long)]
    pub parse_special: bool,
    /// Beam search with N beams instead of sampling (at most 512).
    #[arg(long, value_name = "N", value_parser = count(1, nextok::GenerateOptions::MAX_BEAMS as u64))]
    pub beams: Option<usize>,
    /// Beam search's length penalty: scores are divided by length^ALPHA.
    #[arg(
        long,
        value_name = "ALPHA",
        default_value_t = 1.0,
        allow_negative_numbers = true
    )]
    pub length_penalty: f32,
    /// Number of completions of the prompt (they share its KV cache; at most 128).
    #[arg(
        short = 'n',
        long = "completions",
        value_name = "N",
        default_value_t = 1,
        value_parser = count(1, nextok::GenerateOptions::MAX_COMPLETIONS as u64)
    )]
    pub n: usize,
    /// Report the K most likely alternatives of each token.
    #[arg(long, value_name = "K")]
    pub logprobs: Option<usize>,
    /// Print one JSON object instead of the streamed text.
    ///
    /// The object's fields:
    ///   text: the answer, without the end token or the stop sequence;
    ///   tokens: the generated token ids, the end token included when there is one;
    ///   prompt_tokens: the prompt's token ids (after the chat template);
    ///   stop_reason: end_turn, max_tokens, stop_sequence or context_window;
    ///   stop_token: the end token's id (only with end_turn);
    ///   stop_sequence: the stop text that matched (only with stop_sequence);
    ///   logprob: the sum of the tokens' natural log-probabilities under the final distribution,
    ///     the one each token was drawn from after the sampling chain: at --temperature 0 (greedy)
    ///     that distribution gives the chosen token probability 1, so logprob is 0 (see
    ///     --logprobs for the model's own log-probabilities); under --beams, the sum of the
    ///     model's own log-probabilities;
    ///   seed: the sampling seed: the one --seed gave, or the one drawn when it was not given
    ///     (--seed with it gives the same answer again);
    ///   usage: prompt_tokens, cached_prompt_tokens (prompt tokens taken from a cache instead of
    ///     the prefill), completion_tokens, total_tokens (counts);
    ///   timings: time_to_first_token_s, prefill_s, prefill_tokens_per_s, decode_s (first token to
    ///     last), decode_tokens_per_s and time_per_output_token_s (tokens after the first; 0 for a
    ///     one-token answer), total_s, kv_cache_bytes (the KV cache at the end);
    ///   logprobs (with --logprobs K): one entry per token, {id, text, logprob (final
    ///     distribution), raw_logprob (the model's own), top: the K most likely [{id, text,
    ///     logprob (the model's own)}]};
    ///   choices (with -n above 1): one such object per completion, in order; the top-level fields
    ///     are the first completion's.
    #[arg(long, verbatim_doc_comment)]
    pub json: bool,
    #[command(flatten)]
    pub constraint: ConstraintArgs,
    #[command(flatten)]
    pub schema: SchemaArgs,
}

/// Constrained decoding: at most one of these.
#[derive(Debug, Args, Clone, Default)]
#[group(multiple = false)]
pub struct ConstraintArgs {
    /// The answer is exactly one of these (comma-separated).
    #[arg(long, value_name = "A,B,...", value_delimiter = ',')]
    pub choice: Option<Vec<String>>,
    /// The answer matches this regular expression.
    #[arg(long, value_name = "REGEX")]
    pub regex: Option<String>,
    /// The answer is one JSON value (`--json` is the output format, hence this name).
    #[arg(long)]
    pub json_object: bool,
    /// The answer is JSON valid against this JSON Schema file.
    #[arg(long, value_name = "FILE")]
    pub json_schema: Option<PathBuf>,
    /// The answer follows this grammar file (GBNF or Lark).
    #[arg(long, value_name = "FILE")]
    pub grammar: Option<PathBuf>,
}

/// How JSON Schemas (`--json-schema`, a request's `response_format`) are read.
#[derive(Debug, Args, Clone, Default)]
pub struct SchemaArgs {
    /// Refuse keywords that JSON Schema does not define (`x-*`, `javaType`, `self`...) instead
    /// of reading them as annotations, which are not enforced and are listed (on standard
    /// error; by the server in the `x-nextok-schema-ignored` header).
    #[arg(long)]
    pub schema_strict: bool,
    /// Read `format` as an annotation only, as draft 2020-12 does by default (default: the
    /// formats nextok knows, `date`, `email`, `uri`, `uuid`..., are enforced exactly).
    #[arg(long)]
    pub schema_format_annotation: bool,
    /// The draft of a schema whose `$schema` names none: 4, 6, 7, 2019-09 or 2020-12
    /// (default: every draft's forms where they cannot be confused, the stricter reading
    /// where drafts differ).
    #[arg(long, value_name = "DRAFT", value_parser = parse_draft)]
    pub schema_draft: Option<nextok::constraints::Draft>,
    /// JSON Schema documents that `$ref`s may name by URI: each `.json` file in this folder,
    /// under its `$id` (draft-04: `id`). nextok never fetches a URI.
    #[arg(long, value_name = "DIR")]
    pub schema_resources: Option<PathBuf>,
}

/// A JSON Schema draft by its number.
fn parse_draft(s: &str) -> Result<nextok::constraints::Draft, String> {
    use nextok::constraints::Draft;
    Ok(
        match s.trim_start_matches("draft-").trim_start_matches('0') {
            "4" => Draft::Draft4,
            "6" => Draft::Draft6,
            "7" => Draft::Draft7,
            "2019-09" => Draft::Draft2019_09,
            "2020-12" => Draft::Draft2020_12,
            _ => return Err(format!("`{s}` is not a draft: 4, 6, 7, 2019-09 or 2020-12")),
        },
    )
}

/// `nextok chat`.
#[derive(Debug, Args)]
pub struct ChatArgs {
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    #[command(flatten)]
    pub answer: AnswerArgs,
    /// Print timings after each answer.
    #[arg(long)]
    pub verbose: bool,
}

/// `nextok tokenize`.
#[derive(Debug, Args)]
pub struct TokenizeArgs {
    /// The text (`-` reads it from stdin).
    pub text: String,
    #[command(flatten)]
    pub model: ModelArgs,
    /// Special-token text (such as `<|im_start|>`) becomes the special tokens.
    #[arg(long)]
    pub parse_special: bool,
    /// Print `{"ids": [...], "pieces": [...]}`.
    #[arg(long)]
    pub json: bool,
}

/// `nextok template`.
#[derive(Debug, Args)]
pub struct TemplateArgs {
    /// A JSON file: `[{"role": ..., "content": ...}, ...]`.
    pub file: PathBuf,
    #[command(flatten)]
    pub model: ModelArgs,
    /// Leave out the generation prompt (the assistant's header at the end).
    #[arg(long)]
    pub no_generation_prompt: bool,
}

/// `nextok logits`.
#[derive(Debug, Args)]
pub struct LogitsArgs {
    /// The prompt, continued as it is (no chat template); or give --ids.
    #[arg(required_unless_present = "ids", conflicts_with = "ids")]
    pub prompt: Option<String>,
    /// Token ids instead of a prompt, comma-separated.
    #[arg(long, value_name = "ID,ID,...", value_delimiter = ',')]
    pub ids: Option<Vec<u32>>,
    #[command(flatten)]
    pub run: RunArgs,
    /// Special-token text in the prompt becomes the special tokens.
    #[arg(long)]
    pub parse_special: bool,
    /// Write the logits to FILE as little-endian f32 instead of printing the top-k.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Every position's logits, row after row (default: the last position's).
    #[arg(long)]
    pub all_positions: bool,
    /// How many of the most likely tokens to print without --out.
    #[arg(long, value_name = "K", default_value_t = 10)]
    pub top_k: usize,
}

/// `nextok score`.
#[derive(Debug, Args)]
pub struct ScoreArgs {
    /// The text (`-` reads it from stdin).
    pub text: String,
    #[command(flatten)]
    pub run: RunArgs,
    /// Special-token text becomes the special tokens.
    #[arg(long)]
    pub parse_special: bool,
    /// Print JSON instead of a table: `{"tokens": the ids, "pieces": their text, "logprobs": the
    /// natural log-probability of each token after the first, given those before it,
    /// "perplexity": exp of minus their mean}`.
    #[arg(long)]
    pub json: bool,
}

/// `nextok sample`.
#[derive(Debug, Args)]
pub struct SampleArgs {
    /// The logits, comma-separated (e.g. 6.2,4.9,2.1,1.0).
    #[arg(
        long,
        value_name = "X,Y,...",
        value_delimiter = ',',
        required = true,
        allow_negative_numbers = true
    )]
    pub logits: Vec<f32>,
    /// Names for the tokens, comma-separated (default: their indices).
    #[arg(long, value_name = "A,B,...", value_delimiter = ',')]
    pub tokens: Option<Vec<String>>,
    /// Divide logits by T before softmax; 0 is greedy.
    #[arg(
        long,
        value_name = "T",
        default_value_t = 1.0,
        allow_negative_numbers = true
    )]
    pub temperature: f32,
    /// Keep only the K most likely tokens.
    #[arg(long, value_name = "K")]
    pub top_k: Option<usize>,
    /// Keep the smallest top group whose probabilities add up to P.
    #[arg(
        long,
        value_name = "P",
        default_value_t = 1.0,
        allow_negative_numbers = true
    )]
    pub top_p: f32,
    /// Keep tokens at least MIN_P times as likely as the top one.
    #[arg(
        long,
        value_name = "MIN_P",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub min_p: f32,
    /// Print `{"stages": [{"name", "probs"}], "final": [...]}`.
    #[arg(long)]
    pub json: bool,
}

/// `nextok plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// A GGUF model to read the figures from (default: the default model, unless --weights is
    /// given).
    #[arg(long, value_name = "PATH", conflicts_with = "weights")]
    pub model: Option<PathBuf>,
    /// Number of weights, for a model given by hand (e.g. 7e9).
    #[arg(long, value_name = "N", requires_all = ["layers", "d_model"])]
    pub weights: Option<f64>,
    /// Bytes per weight (4 for 32-bit, 2 for 16-bit, 0.5 for 4-bit).
    #[arg(long, value_name = "B", default_value_t = 2.0)]
    pub bytes_per_weight: f64,
    /// Layers, for a model given by hand.
    #[arg(long, value_name = "N", value_parser = plan_count())]
    pub layers: Option<u64>,
    /// d_model, for a model given by hand.
    #[arg(long, value_name = "N", value_parser = plan_count())]
    pub d_model: Option<u64>,
    /// Attention heads, for a model given by hand (only needed with --kv-heads; must divide
    /// d_model).
    #[arg(long, value_name = "N", requires = "kv_heads", value_parser = plan_count())]
    pub heads: Option<u64>,
    /// Heads with their own keys and values (grouped-query attention; must divide --heads).
    #[arg(long, value_name = "N", requires = "heads", value_parser = plan_count())]
    pub kv_heads: Option<u64>,
    /// The context window in tokens (read from a GGUF when not given).
    #[arg(long, value_name = "N", value_parser = plan_count())]
    pub context: Option<u64>,
    /// Bytes per number in the KV cache (default: 2 by hand, as the specification's 7B example;
    /// 4 for a GGUF, as nextok's cache stores f32).
    #[arg(long, value_name = "B")]
    pub kv_bytes: Option<f64>,
    /// Memory bandwidth in GB/s (default: the specification's illustrative GPU).
    #[arg(long, value_name = "GB/S", default_value_t = 2000.0)]
    pub bandwidth: f64,
    /// Arithmetic speed in TFLOP/s (default: the specification's illustrative GPU).
    #[arg(long, value_name = "TFLOP/S", default_value_t = 500.0)]
    pub tflops: f64,
    /// Tokens in the prompt.
    #[arg(long, value_name = "N", default_value_t = 1000, value_parser = plan_count())]
    pub prompt_tokens: u64,
    /// Tokens in the answer.
    #[arg(long, value_name = "N", default_value_t = 200, value_parser = plan_count())]
    pub answer_tokens: u64,
    /// Tokens per conversation, for the KV cache.
    #[arg(long, value_name = "N", default_value_t = 4096, value_parser = plan_count())]
    pub conversation_tokens: u64,
    /// Users at once: their KV caches, and one decode step for all of them (the weights read once
    /// per step, and every user's KV cache of the prompt and half the answer): each user's and
    /// the aggregate tokens per second.
    #[arg(long, value_name = "N", default_value_t = 32, value_parser = plan_count())]
    pub users: u64,
    /// Memory of the machine in GB (10^9 bytes): how many users' KV caches fit beside the
    /// weights.
    #[arg(long, value_name = "GB")]
    pub memory: Option<f64>,
    /// Print JSON instead of a table: every figure of `nextok::plan::Plan` (model, machine,
    /// workload, weight_bytes, training_bytes, kv_bytes_per_token, kv_bytes_per_conversation,
    /// kv_bytes_all_users, context_window_size, tokens_left, prefill and decode passes,
    /// time_to_first_token_s, time_per_output_token_s, tokens_per_second, answer_s,
    /// prefill_speedup_per_token, kv_positions_per_user, batched_decode (with kv_bytes_read),
    /// per_user_tokens_per_second,
    /// aggregate_tokens_per_second, batching_speedup, users_that_fit), in bytes, seconds and
    /// FLOPs.
    #[arg(long)]
    pub json: bool,
}

/// `nextok classify`.
#[derive(Debug, Args)]
pub struct ClassifyArgs {
    /// The text to label.
    pub text: String,
    /// The labels, comma-separated.
    #[arg(long, value_name = "A,B,...", value_delimiter = ',', required = true)]
    pub labels: Vec<String>,
    #[command(flatten)]
    pub run: RunArgs,
    /// Print JSON: `{"label": the most likely, "labels": [{"label", "tokens" (its ids, then the
    /// end-of-turn token), "logprob" (natural, of those tokens after the prompt), "probability"
    /// (exp of logprob), "constrained" (renormalised over the labels)}]}`, most likely first.
    #[arg(long)]
    pub json: bool,
}

/// `nextok constrain-bench`.
#[derive(Debug, Args)]
pub struct ConstrainBenchArgs {
    /// The folder of cases: one JSON file per schema, `{"schema": ..., "tests": [{"data": ...,
    /// "valid": ...}]}` (MaskBench's format), or JSON-Schema-Test-Suite files.
    pub dir: PathBuf,
    #[command(flatten)]
    pub model: ModelArgs,
    /// Print one JSON object instead of a table: schemas, compiled, unsupported, valid_total,
    /// valid_accepted, invalid_total, invalid_rejected, mask_mismatches, and mask_us and
    /// compile_ms as {median, p99, p999, max}, and refusals (keyword: schemas refused).
    #[arg(long)]
    pub json: bool,
    /// Also list every refused schema (file, keyword, path, reason), every valid instance
    /// refused and every invalid instance accepted (file, group and test index); with --json,
    /// as the arrays "refused" and "failures".
    #[arg(long)]
    pub verbose: bool,
    /// A folder of documents that the cases' `$ref`s may name but that are not cases themselves
    /// (files of the same format; `schema` read, `tests` ignored), besides the cases' own
    /// schemas; repeatable. The real-world corpus's is `conformance/real-world/schemastore-resources`.
    #[arg(long, value_name = "DIR")]
    pub resources: Vec<PathBuf>,
    /// A folder of plain schema documents served at http://localhost:1234/ (each file at its
    /// path below the folder), as the JSON-Schema-Test-Suite's runners serve its `remotes`
    /// folder: `conformance/json-schema-test-suite/remotes`. Nothing is fetched.
    #[arg(long, value_name = "DIR")]
    pub remotes: Option<PathBuf>,
    /// Run the cases this many times, each run after the first in a fresh process, and print
    /// beside the first run's timings each mask's and each compile's least time over all runs
    /// (on a shared machine one run's tail holds whatever else ran at that moment). The counts
    /// are the first run's; with --json, the object "least_of_runs" {runs, mask_us,
    /// compile_ms}.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = count(1, 100))]
    pub runs: usize,
    /// Print only every mask's and every compile's time, in the order timed, as one JSON
    /// object {"mask_us": [...], "compile_ms": [...]}: what a run of --runs reads from the
    /// others.
    #[arg(long, hide = true)]
    pub samples: bool,
}

/// `nextok bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// Prompt lengths whose prefill is timed, comma-separated (each at least 1, and within the
    /// model's context window).
    #[arg(
        long,
        value_name = "N,N,...",
        value_delimiter = ',',
        default_values_t = [128, 512],
        value_parser = count(1, MAX_TOKENS)
    )]
    pub prefill: Vec<usize>,
    /// Tokens decoded after the decode prompt (at least 1; with the decode prompt, within the
    /// context window).
    #[arg(long, value_name = "N", default_value_t = 128, value_parser = count(1, MAX_TOKENS))]
    pub decode: usize,
    /// Length of the prompt before decoding (at least 1).
    #[arg(long, value_name = "N", default_value_t = 16, value_parser = count(1, MAX_TOKENS))]
    pub decode_prompt: usize,
    /// How many times each measurement is repeated (min, median and max are reported; 1 to
    /// 1000).
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = count(1, MAX_REPETITIONS))]
    pub repetitions: usize,
    /// Batch sizes whose aggregate decode speed is timed, comma-separated (e.g. 1,2,4,8,16,32):
    /// that many requests, each after its own --batch-prompt tokens, decode --decode tokens
    /// together through the scheduler, one forward pass per step for all of them.
    #[arg(
        long,
        value_name = "N,N,...",
        value_delimiter = ',',
        value_parser = count(1, MAX_BATCH)
    )]
    pub batch: Vec<usize>,
    /// Length of each request's own prompt in the --batch measurements.
    #[arg(long, value_name = "N", default_value_t = 128, value_parser = count(1, MAX_TOKENS))]
    pub batch_prompt: usize,
    /// Print one JSON object: device, threads, prefill_tok_s (per prompt length), decode_tok_s,
    /// constrained_decode_tok_s (the same decode under a JSON schema), ttft_ms and, with
    /// --batch, batch_decode_tok_s (per batch size), each as {min, median, max}; with
    /// --speculative, {"speculative": {TASK: {"plain", "speculative", "stats": {"drafts",
    /// "drafted_tokens", "accepted_tokens"}}}} instead.
    #[arg(long)]
    pub json: bool,
    /// Time the sampler instead, on the logits files DIR/logits_<vocab>.f32 (little-endian f32,
    /// as llama.cpp's harness llama-sampler-bench.sh DIR writes them): llama.cpp's four chains
    /// (greedy; default = top-k 40, top-p 0.95, min-p 0.05, temperature 0.8; top_p = top-p 0.95,
    /// temperature 0.8; min_p = min-p 0.05, temperature 0.8), 101 draws each. With --json:
    /// {"sampler_us": {CHAIN: {VOCAB: {min, median, max}}}} in µs per token. Loads no model.
    #[arg(long, value_name = "DIR")]
    pub sampler: Option<PathBuf>,
    /// Time speculative decoding against plain decoding instead (decode tokens/s, median of
    /// --repetitions runs, the two alternating): on a repetitive task (rewriting a text given in
    /// the prompt) and a free one.
    #[arg(long)]
    pub speculative: bool,
}

/// `nextok serve`'s flags.
#[derive(Debug, Args, Clone)]
pub struct ServeArgs {
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub schema: SchemaArgs,
    /// The address to listen on (0.0.0.0 for every interface).
    #[arg(long, value_name = "HOST", default_value = "127.0.0.1")]
    pub host: String,
    /// The port to listen on (0 picks a free one, printed at start).
    #[arg(long, value_name = "PORT", default_value_t = 8080)]
    pub port: u16,
    /// The model's id in /v1/models and in responses (default: the file's name without .gguf).
    #[arg(long, value_name = "NAME")]
    pub model_name: Option<String>,
    /// Require `Authorization: Bearer KEY` on every route but /health (and /metrics, unless
    /// --protect-metrics). Default: $NEXTOK_API_KEY when set, else no key.
    #[arg(long, value_name = "KEY")]
    pub api_key: Option<String>,
    /// /metrics needs the key too.
    #[arg(long)]
    pub protect_metrics: bool,
    /// The largest request body, in bytes (K, M and G suffixes: powers of 1024); a larger one
    /// is refused with 413.
    #[arg(long, value_name = "SIZE", default_value = "8M", value_parser = parse_size)]
    pub max_body: u64,
    /// The most tokens one completion may ask for (max_tokens), and the answer's length when a
    /// request gives none. Default: up to the context window.
    #[arg(long, value_name = "N", value_parser = count(1, MAX_TOKENS))]
    pub max_tokens_limit: Option<usize>,
    /// Sequences decoding at once (the scheduler's running batch).
    #[arg(long, value_name = "N", default_value_t = nextok::SchedulerOptions::default().max_running, value_parser = count(1, nextok::SchedulerOptions::MAX_REQUESTS as u64))]
    pub max_running: usize,
    /// Tokens per forward pass: the running sequences' next tokens first, then chunks of
    /// waiting prompts.
    #[arg(long, value_name = "N", default_value_t = nextok::SchedulerOptions::default().max_tokens_per_step, value_parser = count(1, nextok::SchedulerOptions::MAX_TOKENS_PER_STEP as u64))]
    pub max_tokens_per_step: usize,
    /// Prompt tokens in a step that also decodes: a step decoding D sequences reads at most
    /// max(N, D) prompt tokens, so a long prompt delays the running streams' next tokens
    /// (inter-token latency) by that many tokens' work a step, not by its whole prefill, while
    /// prompts are still read in every step beside the decodes (Sarathi-Serve's and vLLM's
    /// chunked prefill). Why 8: in the load test at 4 and 8 streams a cap of 16 made the steps
    /// that read a prompt chunk 27-32 ms longer than a decode step, which set the inter-token
    /// p99; 8 halves that, for a slower time to first token while others decode. A step with
    /// nothing decoding still reads up to --max-tokens-per-step.
    #[arg(long, value_name = "N", default_value_t = nextok::SchedulerOptions::default().max_prefill_while_decoding, value_parser = count(1, nextok::SchedulerOptions::MAX_TOKENS_PER_STEP as u64))]
    pub max_prefill_while_decoding: usize,
    /// Memory for the KV cache (K, M and G suffixes: powers of 1024). Default: enough for
    /// --max-running full context windows, at most 2G.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub kv_memory: Option<u64>,
    /// Requests that may wait for admission; one more is refused with 429 and Retry-After.
    #[arg(long, value_name = "N", default_value_t = nextok::SchedulerOptions::default().max_waiting, value_parser = count(1, nextok::SchedulerOptions::MAX_REQUESTS as u64))]
    pub max_waiting: usize,
    /// Do not reuse the KV cache of prompt prefixes that earlier requests computed.
    #[arg(long)]
    pub no_prefix_cache: bool,
    /// Decode one token per step for every request: no speculative decoding (which drafts from
    /// each request's prompt and answer so far and keeps only the tokens plain decoding
    /// chooses, so every answer is the same either way).
    #[arg(long)]
    pub no_speculative: bool,
    /// Drafted tokens in one step, in all: a step decoding D sequences gives each a draft of at
    /// most N / D tokens (none while more than N decode), within what
    /// --max-prefill-while-decoding leaves after the step's prompt tokens. A draft's tokens
    /// lengthen the step for every stream, so this bounds what drafting adds to the
    /// inter-token latency.
    #[arg(long, value_name = "N", default_value_t = nextok::SchedulerOptions::default().max_draft_tokens_per_step, value_parser = count(1, nextok::SchedulerOptions::MAX_TOKENS_PER_STEP as u64))]
    pub max_draft_tokens_per_step: usize,
    /// Compiled grammars kept (JSON Schemas, GBNF and Lark grammars of requests; as many
    /// automata of patterns and choices), the most recently used: a request whose constraint was met before starts without compiling it,
    /// and each request's constraint is compiled once, not once more per completion on the
    /// scheduler's thread. 0 keeps none.
    #[arg(long, value_name = "N", default_value_t = nextok::DEFAULT_GRAMMAR_CACHE_CAPACITY, value_parser = count(0, 1 << 20))]
    pub grammar_cache: usize,
    /// The most memory the kept grammars may hold (and as much the kept automata), e.g. 128M
    /// or 1G: a grammar larger than that is used and not kept.
    #[arg(long, value_name = "SIZE", default_value = "128M", value_parser = parse_size)]
    pub grammar_cache_memory: u64,
    /// Seconds that SIGINT or SIGTERM leave running requests to finish before they are
    /// cancelled; the process then exits 0.
    #[arg(long, value_name = "SECONDS", default_value_t = 10, value_parser = RangedU64ValueParser::<u64>::new().range(0..=3600))]
    pub shutdown_grace: u64,
    /// Constraint limit, per request's grammar or JSON Schema (checked as it compiles): grammar
    /// rules after lowering.
    #[arg(long, value_name = "N", default_value_t = nextok::constraints::Limits::DEFAULT.max_rules, value_parser = count(1, 1 << 32))]
    pub max_grammar_rules: usize,
    /// Constraint limit: grammar items (symbols over all rules, plus one per rule).
    #[arg(long, value_name = "N", default_value_t = nextok::constraints::Limits::DEFAULT.max_items, value_parser = count(1, 1 << 32))]
    pub max_grammar_items: usize,
    /// Constraint limit: distinct terminal automata in one grammar.
    #[arg(long, value_name = "N", default_value_t = nextok::constraints::Limits::DEFAULT.max_terminals, value_parser = count(1, 1 << 32))]
    pub max_grammar_terminals: usize,
    /// Constraint limit: automaton states over all terminals of one grammar.
    #[arg(long, value_name = "N", default_value_t = nextok::constraints::Limits::DEFAULT.max_terminal_states, value_parser = count(1, 1 << 32))]
    pub max_grammar_states: usize,
    /// Constraint limit, checked as each token is chosen: work units (grammar items processed,
    /// completions, terminal steps) of one mask or one token; a request past it ends with a 400
    /// before its answer starts, or with its error mid-answer.
    #[arg(long, value_name = "N", default_value_t = nextok::constraints::Limits::DEFAULT.max_mask_work, value_parser = clap::value_parser!(u64).range(1..=1 << 40))]
    pub max_mask_work: u64,
}

/// A size in bytes: a whole number with an optional K, M or G (powers of 1024; `B`, `iB` and
/// lower case accepted).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .or_else(|| t.strip_suffix('b'))
        .unwrap_or(t);
    let (digits, shift) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 10),
        Some('m' | 'M') => (&t[..t.len() - 1], 20),
        Some('g' | 'G') => (&t[..t.len() - 1], 30),
        _ => (t, 0),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("`{s}` is not a size: give bytes, or a number with K, M or G"))?;
    let bytes = n
        .checked_mul(1 << shift)
        .filter(|&b| b <= 1 << 50)
        .ok_or_else(|| format!("`{s}` is too large: at most 1024 TiB"))?;
    if bytes == 0 {
        return Err(format!("`{s}` is zero: give a size of at least one byte"));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_grammar_is_consistent() {
        // clap checks at run time that flag names, groups and requirements fit together; this
        // makes every subcommand's definition go through those checks.
        <super::Cli as clap::CommandFactory>::command().debug_assert();
    }

    #[test]
    fn sizes_take_binary_suffixes_and_refuse_zero_and_overflow() {
        use super::parse_size;
        assert_eq!(parse_size("8M"), Ok(8 << 20));
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("100"), Ok(100));
        assert_eq!(parse_size("100B"), Ok(100));
        assert!(parse_size("0").is_err());
        assert!(parse_size("1.5G").is_err());
        assert!(parse_size("G").is_err());
        assert!(parse_size("18446744073709551615G").is_err());
        assert!(parse_size("2000000G").is_err());
    }
}
