//! Request bodies: OpenAI's fields (and the extensions llama.cpp and vLLM users send), checked
//! and mapped onto the library's [`GenerateOptions`].
//!
//! A body is read in three passes, so that every refusal names its field: the keys (unknown ones
//! and known OpenAI fields nextok does not implement are refused by name), the types (through
//! `serde_path_to_error`, which gives the path of a value of the wrong type), then the values
//! (ranges, token ids, one constraint at most, the constraint's [`Limits`]).

use crate::error::ApiError;
use nextok::constraints::Limits;
use nextok::sampling::SamplingParams;
use nextok::tokenizer::Message;
use nextok::{ConstraintSpec, Engine, GenerateOptions, Prompt};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Which endpoint a body came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// `/v1/chat/completions`.
    Chat,
    /// `/v1/completions`.
    Completion,
}

/// Fields both endpoints take.
const COMMON: &[&str] = &[
    "model",
    "max_tokens",
    "temperature",
    "top_p",
    "seed",
    "n",
    "stop",
    "stream",
    "stream_options",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "response_format",
    "top_k",
    "min_p",
    "repetition_penalty",
    "min_tokens",
    "ignore_eos",
    "stop_token_ids",
    "include_stop_str_in_output",
    "grammar",
    "regex",
    "choice",
    "logprobs",
    // The stages of issue #16, under transformers', llama.cpp's and vLLM's names.
    "min_tokens_to_keep",
    "typical_p",
    "epsilon_cutoff",
    "eta_cutoff",
    "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size",
    "dry_multiplier",
    "dry_base",
    "dry_allowed_length",
    "dry_penalty_last_n",
    "dry_sequence_breakers",
    "xtc_probability",
    "xtc_threshold",
    "top_n_sigma",
    "mirostat",
    "mirostat_tau",
    "mirostat_eta",
    "dynatemp_range",
    "dynatemp_exponent",
];
/// Fields only the chat endpoint takes.
const CHAT_ONLY: &[&str] = &["messages", "max_completion_tokens", "top_logprobs"];
/// Fields only the completions endpoint takes.
const COMPLETION_ONLY: &[&str] = &["prompt"];
/// OpenAI fields that do not change the answer (tracking and billing); accepted and unused.
const NO_EFFECT: &[&str] = &["user", "store", "metadata", "service_tier"];
/// OpenAI (and vLLM) fields nextok does not implement, and why: a request that sets one is
/// refused with a 400 that names it, never answered as if it had not been sent. `null` counts as
/// not set.
const UNSUPPORTED: &[(&str, &str)] = &[
    ("tools", ": tool calling is not implemented"),
    ("tool_choice", ": tool calling is not implemented"),
    ("functions", ": function calling is not implemented"),
    ("function_call", ": function calling is not implemented"),
    ("parallel_tool_calls", ": tool calling is not implemented"),
    ("audio", ": the model reads and writes text only"),
    ("modalities", ": the model reads and writes text only"),
    ("prediction", ": predicted outputs are not implemented"),
    ("web_search_options", ": there is no web search"),
    ("reasoning_effort", ": the model has no reasoning mode"),
    (
        "prompt_logprobs",
        " yet: only the answer's log-probabilities are returned",
    ),
    ("best_of", " (only 1)"),
    ("echo", " (only false)"),
    ("suffix", ": there is no insertion mode"),
];

/// The most stop sequences one request may give.
pub(crate) const MAX_STOP_SEQUENCES: usize = 16;
/// The most alternatives per token (`top_logprobs`, and `logprobs` of completions).
pub(crate) const MAX_TOP_LOGPROBS: u64 = 20;
/// Random seeds are below 2^53, so that they survive a JSON client that reads numbers as
/// doubles and can be sent back unchanged.
const SEED_RANGE: u64 = 1 << 53;

/// The typed fields of a body (after the key check).
#[derive(Debug, Default, Deserialize)]
struct Fields {
    model: Option<String>,
    messages: Option<Vec<Value>>,
    prompt: Option<Value>,
    max_tokens: Option<u64>,
    max_completion_tokens: Option<u64>,
    temperature: Option<f32>,
    top_p: Option<f32>,
    seed: Option<u64>,
    n: Option<u64>,
    stop: Option<StopField>,
    stream: Option<bool>,
    stream_options: Option<StreamOptions>,
    presence_penalty: Option<f32>,
    frequency_penalty: Option<f32>,
    logit_bias: Option<BTreeMap<String, f32>>,
    response_format: Option<ResponseFormat>,
    top_k: Option<i64>,
    min_p: Option<f32>,
    repetition_penalty: Option<f32>,
    min_tokens: Option<u64>,
    ignore_eos: Option<bool>,
    stop_token_ids: Option<Vec<u32>>,
    include_stop_str_in_output: Option<bool>,
    grammar: Option<String>,
    regex: Option<String>,
    choice: Option<Vec<String>>,
    logprobs: Option<Value>,
    top_logprobs: Option<u64>,
    min_tokens_to_keep: Option<usize>,
    typical_p: Option<f32>,
    epsilon_cutoff: Option<f32>,
    eta_cutoff: Option<f32>,
    no_repeat_ngram_size: Option<usize>,
    encoder_no_repeat_ngram_size: Option<usize>,
    dry_multiplier: Option<f32>,
    dry_base: Option<f32>,
    dry_allowed_length: Option<usize>,
    dry_penalty_last_n: Option<i64>,
    dry_sequence_breakers: Option<Vec<String>>,
    xtc_probability: Option<f32>,
    xtc_threshold: Option<f32>,
    top_n_sigma: Option<f32>,
    mirostat: Option<u8>,
    mirostat_tau: Option<f32>,
    mirostat_eta: Option<f32>,
    dynatemp_range: Option<f32>,
    dynatemp_exponent: Option<f32>,
}

/// `stop`: one text or a list.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum StopField {
    One(String),
    Many(Vec<String>),
}

/// `stream_options`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StreamOptions {
    include_usage: Option<bool>,
}

/// `response_format`.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
enum ResponseFormat {
    Text,
    JsonObject,
    JsonSchema { json_schema: JsonSchemaFormat },
}

/// `response_format.json_schema`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonSchemaFormat {
    #[allow(dead_code)] // Only a label in OpenAI's API.
    name: Option<String>,
    #[allow(dead_code)] // Only a label in OpenAI's API.
    description: Option<String>,
    schema: Option<Value>,
    /// Output always follows the schema, so `strict: false` (schema as a hint) is served the
    /// strict way: an answer valid under the schema is a valid non-strict answer too.
    #[allow(dead_code)]
    strict: Option<bool>,
}

/// What the server needs to know to check a body.
pub(crate) struct Context<'a> {
    pub engine: &'a Engine,
    pub model_name: &'a str,
    pub limits: &'a Limits,
    pub max_tokens_limit: Option<usize>,
}

/// A checked request, ready for the scheduler.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub endpoint: Endpoint,
    pub prompt: Vec<u32>,
    pub options: GenerateOptions,
    /// The seed the answer is drawn with (the client's, or a fresh one); completion `i` of `n`
    /// uses `seed + i`.
    pub seed: u64,
    pub stream: bool,
    pub include_usage: bool,
    /// Whether to return log-probabilities (`options.top_logprobs` alternatives with each).
    pub logprobs: bool,
    pub include_stop_str: bool,
    /// What the request's JSON Schema does not enforce (unknown keywords and `format` names,
    /// other drafts' keywords), as `keyword at path`: told to the client in a response header.
    pub ignored: Vec<String>,
}

/// Parses and checks a body sent to `endpoint`.
pub(crate) fn parse(endpoint: Endpoint, body: &[u8], cx: &Context<'_>) -> Result<Plan, ApiError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid(format!("the body is not valid JSON: {e}"), None))?;
    let Value::Object(mut object) = value else {
        return Err(ApiError::invalid("the body must be a JSON object", None));
    };
    check_keys(endpoint, &mut object)?;
    let fields: Fields = serde_path_to_error::deserialize(Value::Object(object)).map_err(|e| {
        let path = e.path().to_string();
        let field = path.split(['.', '[']).next().unwrap_or_default();
        ApiError::invalid(
            format!("`{path}`: {}", e.inner()),
            (!field.is_empty()).then_some(field),
        )
    })?;
    build(endpoint, fields, cx)
}

/// Refuses unknown keys and unsupported fields by name, and drops the no-effect ones.
fn check_keys(endpoint: Endpoint, object: &mut Map<String, Value>) -> Result<(), ApiError> {
    let own = match endpoint {
        Endpoint::Chat => CHAT_ONLY,
        Endpoint::Completion => COMPLETION_ONLY,
    };
    object.retain(|k, _| !NO_EFFECT.contains(&k.as_str()));
    for (key, value) in object.iter() {
        if COMMON.contains(&key.as_str()) || own.contains(&key.as_str()) {
            continue;
        }
        if let Some(&(field, why)) = UNSUPPORTED.iter().find(|(f, _)| *f == key.as_str()) {
            let harmless = value.is_null()
                || (key == "echo" && value == &Value::Bool(false))
                || (key == "best_of" && value.as_u64() == Some(1));
            if harmless {
                continue;
            }
            return Err(ApiError::unsupported(field, why));
        }
        let other = match endpoint {
            Endpoint::Chat => COMPLETION_ONLY.contains(&key.as_str()),
            Endpoint::Completion => CHAT_ONLY.contains(&key.as_str()),
        };
        return Err(ApiError::invalid(
            if other {
                format!("unknown field `{key}`: it belongs to the other completions endpoint")
            } else {
                format!("unknown field `{key}`")
            },
            Some(key),
        ));
    }
    // What is left of the unsupported fields is null or their one value that changes nothing.
    object.retain(|k, _| !UNSUPPORTED.iter().any(|(f, _)| *f == k.as_str()));
    Ok(())
}

/// A seed for a request that gave none: the server's choice, from the operating system, so that
/// two requests without seeds get different answers. It is reported with the answer.
pub(crate) fn fresh_seed() -> Result<u64, ApiError> {
    getrandom::u64()
        .map(|s| s % SEED_RANGE)
        .map_err(|e| ApiError::internal(format!("no random seed from the operating system: {e}")))
}

/// `Err` unless `value` lies in `[min, max]` (both finite).
fn in_range(name: &str, value: Option<f32>, min: f32, max: f32) -> Result<(), ApiError> {
    match value {
        Some(v) if !(min..=max).contains(&v) => Err(ApiError::invalid(
            format!("`{name}` is {v}, but it must be between {min} and {max}"),
            Some(name),
        )),
        _ => Ok(()),
    }
}

fn build(endpoint: Endpoint, mut f: Fields, cx: &Context<'_>) -> Result<Plan, ApiError> {
    if let Some(model) = &f.model {
        if model != cx.model_name {
            return Err(ApiError::not_found(
                format!(
                    "the model `{model}` does not exist: this server serves `{}` (see /v1/models)",
                    cx.model_name
                ),
                "model_not_found",
            ));
        }
    }
    let engine = cx.engine;
    // The prompt first: its length decides whether anything else matters.
    let (prompt, prompt_field) = match endpoint {
        Endpoint::Chat => {
            let messages = f
                .messages
                .as_ref()
                .ok_or_else(|| ApiError::invalid("`messages` is required", Some("messages")))?;
            let messages = chat_messages(messages)?;
            (Prompt::Chat(messages), "messages")
        }
        Endpoint::Completion => {
            let prompt = f
                .prompt
                .as_ref()
                .ok_or_else(|| ApiError::invalid("`prompt` is required", Some("prompt")))?;
            (completion_prompt(prompt)?, "prompt")
        }
    };
    let ids = engine.encode_prompt(&prompt).map_err(|e| {
        let mut api = ApiError::from(e);
        api.param = Some(prompt_field.into());
        api
    })?;
    let context = engine.context_window();
    if ids.len() >= context {
        return Err(ApiError {
            code: Some("context_length_exceeded"),
            ..ApiError::invalid(
                format!(
                    "the prompt has {} tokens, but the context window holds {context} tokens, \
                     prompt and answer together: shorten the prompt",
                    ids.len()
                ),
                Some(prompt_field),
            )
        });
    }

    // Ranges OpenAI documents, beyond what the library itself checks.
    in_range("temperature", f.temperature, 0.0, 2.0)?;
    in_range("top_p", f.top_p, 0.0, 1.0)?;
    in_range("presence_penalty", f.presence_penalty, -2.0, 2.0)?;
    in_range("frequency_penalty", f.frequency_penalty, -2.0, 2.0)?;
    in_range("min_p", f.min_p, 0.0, 1.0)?;

    let max_tokens = match (f.max_completion_tokens, f.max_tokens) {
        (Some(m), _) => Some(("max_completion_tokens", m)),
        (None, Some(m)) => Some(("max_tokens", m)),
        (None, None) => None,
    };
    let max_tokens = match max_tokens {
        Some((name, 0)) => {
            return Err(ApiError::invalid(
                format!("`{name}` is 0, but it must be at least 1"),
                Some(name),
            ))
        }
        Some((name, m)) => {
            if let Some(limit) = cx.max_tokens_limit {
                if m > limit as u64 {
                    return Err(ApiError::invalid(
                        format!("`{name}` is {m}, but this server allows at most {limit}"),
                        Some(name),
                    ));
                }
            }
            // Beyond the context window the window stops the answer anyway.
            Some(m.min(context as u64) as usize)
        }
        None => cx.max_tokens_limit,
    };

    let n = f.n.unwrap_or(1);
    if !(1..=GenerateOptions::MAX_COMPLETIONS as u64).contains(&n) {
        return Err(ApiError::invalid(
            format!(
                "`n` is {n}, but it must be between 1 and {}",
                GenerateOptions::MAX_COMPLETIONS
            ),
            Some("n"),
        ));
    }

    let stop = match f.stop.take() {
        None => Vec::new(),
        Some(StopField::One(s)) => vec![s],
        Some(StopField::Many(v)) => v,
    };
    if stop.len() > MAX_STOP_SEQUENCES {
        return Err(ApiError::invalid(
            format!(
                "`stop` has {} sequences, but at most {MAX_STOP_SEQUENCES} are allowed",
                stop.len()
            ),
            Some("stop"),
        ));
    }
    if stop.iter().any(String::is_empty) {
        return Err(ApiError::invalid(
            "`stop` holds an empty sequence, which would match before any text",
            Some("stop"),
        ));
    }

    let vocab = engine.vocab_size();
    let mut logit_bias = BTreeMap::new();
    for (key, &bias) in f.logit_bias.iter().flatten() {
        let id: u32 = key.parse().map_err(|_| {
            ApiError::invalid(
                format!("`logit_bias` key {key:?} is not a token id"),
                Some("logit_bias"),
            )
        })?;
        if id as usize >= vocab {
            return Err(ApiError::invalid(
                format!("`logit_bias` names token {id}, outside the vocabulary of {vocab} tokens"),
                Some("logit_bias"),
            ));
        }
        if !(-100.0..=100.0).contains(&bias) {
            return Err(ApiError::invalid(
                format!(
                    "`logit_bias` of token {id} is {bias}, but it must be between -100 and 100"
                ),
                Some("logit_bias"),
            ));
        }
        logit_bias.insert(id, bias);
    }

    let (logprobs, top_logprobs) = match endpoint {
        Endpoint::Chat => {
            let on = match &f.logprobs {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => {
                    return Err(ApiError::invalid(
                        "`logprobs` must be true or false",
                        Some("logprobs"),
                    ))
                }
            };
            if f.top_logprobs.is_some() && !on {
                return Err(ApiError::invalid(
                    "`top_logprobs` needs `logprobs: true`",
                    Some("top_logprobs"),
                ));
            }
            (on, f.top_logprobs.unwrap_or(0))
        }
        Endpoint::Completion => match &f.logprobs {
            None | Some(Value::Null) => (false, 0),
            Some(v) => match v.as_u64() {
                Some(k) => (true, k),
                None => {
                    return Err(ApiError::invalid(
                        "`logprobs` must be a whole number of alternatives (0 to 20)",
                        Some("logprobs"),
                    ))
                }
            },
        },
    };
    if top_logprobs > MAX_TOP_LOGPROBS {
        let name = match endpoint {
            Endpoint::Chat => "top_logprobs",
            Endpoint::Completion => "logprobs",
        };
        return Err(ApiError::invalid(
            format!("`{name}` is {top_logprobs}, but it must be between 0 and {MAX_TOP_LOGPROBS}"),
            Some(name),
        ));
    }

    let (constraint, ignored) = constraint(&f, cx)?;

    let seed = match f.seed {
        Some(s) => s,
        None => fresh_seed()?,
    };
    let min_tokens = f.min_tokens.unwrap_or(0);
    let sampling = SamplingParams {
        temperature: f.temperature.unwrap_or(1.0),
        // vLLM's -1 and llama.cpp's 0 both mean "off".
        top_k: f.top_k.filter(|&k| k > 0).map(|k| k as usize),
        top_p: f.top_p.unwrap_or(1.0),
        min_p: f.min_p.unwrap_or(0.0),
        repetition_penalty: f.repetition_penalty.unwrap_or(1.0),
        presence_penalty: f.presence_penalty.unwrap_or(0.0),
        frequency_penalty: f.frequency_penalty.unwrap_or(0.0),
        logit_bias,
        seed: Some(seed),
        min_tokens: usize::try_from(min_tokens).unwrap_or(usize::MAX),
        end_token_ids: if min_tokens > 0 {
            engine.end_tokens()
        } else {
            Vec::new()
        },
        ..more_sampling(&f)
    };
    let stop_token_ids = f.stop_token_ids.clone().unwrap_or_default();
    if let Some(&id) = stop_token_ids
        .iter()
        .find(|&&id| id as usize >= engine.vocab_size())
    {
        return Err(ApiError::invalid(
            format!(
                "`stop_token_ids` names token {id}, outside the vocabulary of {} tokens",
                engine.vocab_size()
            ),
            Some("stop_token_ids"),
        ));
    }
    let options = GenerateOptions {
        sampling,
        max_tokens,
        stop,
        ignore_eos: f.ignore_eos.unwrap_or(false),
        stop_token_ids,
        logprobs,
        top_logprobs: top_logprobs as usize,
        n: n as usize,
        beams: None,
        constraint,
        constraint_limits: *cx.limits,
        speculative: true,
    };
    options.validate()?;
    Ok(Plan {
        endpoint,
        prompt: ids,
        options,
        seed,
        stream: f.stream.unwrap_or(false),
        include_usage: f
            .stream_options
            .as_ref()
            .and_then(|o| o.include_usage)
            .unwrap_or(false),
        logprobs,
        include_stop_str: f.include_stop_str_in_output.unwrap_or(false),
        ignored,
    })
}

/// The stages of issue #16 over the defaults (the library checks their ranges, and a bad one is
/// a 400 that names its field).
fn more_sampling(f: &Fields) -> SamplingParams {
    let d = SamplingParams::default();
    SamplingParams {
        min_tokens_to_keep: f.min_tokens_to_keep.unwrap_or(d.min_tokens_to_keep),
        typical_p: f.typical_p.unwrap_or(d.typical_p),
        epsilon_cutoff: f.epsilon_cutoff.unwrap_or(d.epsilon_cutoff),
        eta_cutoff: f.eta_cutoff.unwrap_or(d.eta_cutoff),
        no_repeat_ngram_size: f.no_repeat_ngram_size.unwrap_or(0),
        encoder_no_repeat_ngram_size: f.encoder_no_repeat_ngram_size.unwrap_or(0),
        dry_multiplier: f.dry_multiplier.unwrap_or(d.dry_multiplier),
        dry_base: f.dry_base.unwrap_or(d.dry_base),
        dry_allowed_length: f.dry_allowed_length.unwrap_or(d.dry_allowed_length),
        dry_penalty_last_n: f.dry_penalty_last_n.unwrap_or(d.dry_penalty_last_n),
        dry_sequence_breakers: f
            .dry_sequence_breakers
            .clone()
            .unwrap_or_else(|| d.dry_sequence_breakers.clone()),
        xtc_probability: f.xtc_probability.unwrap_or(d.xtc_probability),
        xtc_threshold: f.xtc_threshold.unwrap_or(d.xtc_threshold),
        top_n_sigma: f.top_n_sigma.unwrap_or(d.top_n_sigma),
        mirostat: f.mirostat.unwrap_or(0),
        mirostat_tau: f.mirostat_tau.unwrap_or(d.mirostat_tau),
        mirostat_eta: f.mirostat_eta.unwrap_or(d.mirostat_eta),
        dynatemp_range: f.dynatemp_range.unwrap_or(d.dynatemp_range),
        dynatemp_exponent: f.dynatemp_exponent.unwrap_or(d.dynatemp_exponent),
        ..d
    }
}

/// The one format the answer must follow, if any, checked against the server's [`Limits`] (the
/// grammar's size, at compile time).
/// The request's constraint, if any, with what its JSON Schema does not enforce.
fn constraint(
    f: &Fields,
    cx: &Context<'_>,
) -> Result<(Option<ConstraintSpec>, Vec<String>), ApiError> {
    let mut specs: Vec<(&str, ConstraintSpec)> = Vec::new();
    match &f.response_format {
        None | Some(ResponseFormat::Text) => {}
        Some(ResponseFormat::JsonObject) => specs.push(("response_format", ConstraintSpec::Json)),
        Some(ResponseFormat::JsonSchema { json_schema }) => {
            let schema = json_schema.schema.clone().ok_or_else(|| {
                ApiError::invalid(
                    "`response_format.json_schema.schema` is required",
                    Some("response_format"),
                )
            })?;
            specs.push(("response_format", ConstraintSpec::JsonSchema(schema)));
        }
    }
    if let Some(g) = &f.grammar {
        specs.push(("grammar", ConstraintSpec::Gbnf(g.clone())));
    }
    if let Some(r) = &f.regex {
        specs.push(("regex", ConstraintSpec::Regex(r.clone())));
    }
    if let Some(c) = &f.choice {
        if c.is_empty() {
            return Err(ApiError::invalid(
                "`choice` must hold at least one text",
                Some("choice"),
            ));
        }
        specs.push(("choice", ConstraintSpec::Choice(c.clone())));
    }
    if specs.len() > 1 {
        let names: Vec<&str> = specs.iter().map(|(n, _)| *n).collect();
        return Err(ApiError::invalid(
            format!(
                "only one of response_format (JSON), grammar, regex and choice may be given; \
                 this request gives {}",
                names.join(", ")
            ),
            Some(names[1]),
        ));
    }
    let Some((field, spec)) = specs.pop() else {
        return Ok((None, Vec::new()));
    };
    let refused =
        |e: nextok::constraints::Error| ApiError::invalid(format!("`{field}`: {e}"), Some(field));
    // The grammars are compiled here under the server's limits, so that a grammar too large for
    // them is refused before it reaches the scheduler; the scheduler then builds the constraint
    // itself from the grammar the engine kept (and refuses a pattern or schema it cannot build).
    // Schemas are read as the engine's options say (`nextok serve --schema-strict` ...).
    let mut ignored = Vec::new();
    match &spec {
        ConstraintSpec::JsonSchema(schema) => {
            let compiled = cx
                .engine
                .check_json_schema(schema, cx.limits)
                .map_err(|e| match e {
                    nextok::Error::Constraint(c) => refused(c),
                    other => ApiError::from(other),
                })?;
            ignored = compiled
                .ignored
                .iter()
                .map(|i| format!("{} at {}", i.keyword, i.path))
                .collect();
        }
        // A grammar is compiled with the model's vocabulary, so that `<|im_end|>` names its token
        // (issue #17); patterns and choices are automata, bounded in size by the library. Each
        // is built here so that a bad one is refused under its own field's name, and kept by
        // the engine for the scheduler's constraints.
        ConstraintSpec::Gbnf(_) | ConstraintSpec::Regex(_) | ConstraintSpec::Choice(_) => {
            cx.engine
                .constraint_with_limits(&spec, cx.limits)
                .map_err(|e| match e {
                    nextok::Error::Constraint(c) => refused(c),
                    other => ApiError::from(other),
                })?;
        }
        ConstraintSpec::Json | ConstraintSpec::Lark(_) => {}
    }
    Ok((Some(spec), ignored))
}

/// `messages` as the chat template's messages: roles `system` (or OpenAI's newer name,
/// `developer`), `user` and `assistant`; content a text or a list of text parts.
pub(crate) fn chat_messages(values: &[Value]) -> Result<Vec<Message>, ApiError> {
    if values.is_empty() {
        return Err(ApiError::invalid(
            "`messages` must hold at least one message",
            Some("messages"),
        ));
    }
    let mut out = Vec::with_capacity(values.len());
    for (i, v) in values.iter().enumerate() {
        let at = |what: &str| format!("messages[{i}]{what}");
        let Value::Object(m) = v else {
            return Err(ApiError::invalid(
                format!("`{}` must be an object with `role` and `content`", at("")),
                Some("messages"),
            ));
        };
        if let Some(key) = m.keys().find(|k| !matches!(k.as_str(), "role" | "content")) {
            return Err(ApiError::invalid(
                format!(
                    "`{}` is not supported: a message has `role` and `content` only",
                    at(&format!(".{key}"))
                ),
                Some("messages"),
            ));
        }
        let role = match m.get("role").and_then(Value::as_str) {
            Some("system" | "developer") => "system",
            Some("user") => "user",
            Some("assistant") => "assistant",
            Some(other) => {
                return Err(ApiError::invalid(
                    format!(
                        "`{}` is {other:?}: nextok supports the roles system, developer, user \
                         and assistant",
                        at(".role")
                    ),
                    Some("messages"),
                ))
            }
            None => {
                return Err(ApiError::invalid(
                    format!("`{}` must be a string", at(".role")),
                    Some("messages"),
                ))
            }
        };
        let content = match m.get("content") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(parts)) => {
                let mut texts = Vec::with_capacity(parts.len());
                for (j, part) in parts.iter().enumerate() {
                    let kind = part.get("type").and_then(Value::as_str);
                    let text = part.get("text").and_then(Value::as_str);
                    match (kind, text) {
                        (Some("text"), Some(t)) => texts.push(t),
                        (Some("text"), None) => {
                            return Err(ApiError::invalid(
                                format!(
                                    "`{}` must be a string",
                                    at(&format!(".content[{j}].text"))
                                ),
                                Some("messages"),
                            ))
                        }
                        (Some(other), _) => {
                            return Err(ApiError::invalid(
                                format!(
                                    "`{}` is {other:?}: nextok reads text parts only",
                                    at(&format!(".content[{j}].type"))
                                ),
                                Some("messages"),
                            ))
                        }
                        (None, _) => {
                            return Err(ApiError::invalid(
                                format!(
                                    "`{}` must be an object {{\"type\": \"text\", \"text\": ...}}",
                                    at(&format!(".content[{j}]"))
                                ),
                                Some("messages"),
                            ))
                        }
                    }
                }
                // Parts are joined by a line break, as vLLM does.
                texts.join("\n")
            }
            Some(Value::Null) | None if role == "assistant" => String::new(),
            _ => {
                return Err(ApiError::invalid(
                    format!(
                        "`{}` must be a string or a list of text parts",
                        at(".content")
                    ),
                    Some("messages"),
                ))
            }
        };
        out.push(Message::new(role, content));
    }
    Ok(out)
}

/// `prompt` of `/v1/completions`: a text (special-token text stays text) or token ids.
fn completion_prompt(value: &Value) -> Result<Prompt, ApiError> {
    match value {
        Value::String(s) => Ok(Prompt::raw(s.clone())),
        Value::Array(items) if items.iter().all(Value::is_u64) => Ok(Prompt::Ids(
            items
                .iter()
                .map(|v| {
                    v.as_u64()
                        .and_then(|x| u32::try_from(x).ok())
                        .ok_or_else(|| {
                            ApiError::invalid(
                                "`prompt` holds a token id beyond 2^32",
                                Some("prompt"),
                            )
                        })
                })
                .collect::<Result<_, _>>()?,
        )),
        Value::Array(items) if items.len() == 1 && items[0].is_string() => {
            Ok(Prompt::raw(items[0].as_str().unwrap_or_default()))
        }
        Value::Array(_) => Err(ApiError::invalid(
            "`prompt` must be one text or one list of token ids: send one request per prompt",
            Some("prompt"),
        )),
        _ => Err(ApiError::invalid(
            "`prompt` must be a text or a list of token ids",
            Some("prompt"),
        )),
    }
}
