//! A small model for tests that must run without the downloaded one: a Llama with seeded random
//! weights (`nextok_model::testing::RandomLlama`) and, in the same in-memory GGUF file, a real
//! byte-level BPE vocabulary with ChatML's control tokens and a ChatML chat template. The real
//! tokenizer, template, model and loop code all run; only the weights are random.
//!
//! Also the real default model, loaded once per test binary, for the tests that compare against
//! it ([`real_engine`]).

#![allow(dead_code)]

pub mod copier;

use nextok::gguf::write::GgufWriter;
use nextok::gguf::{Array, GgmlType, GgufFile, Value};
use nextok::kv_cache::KvType;
use nextok::model::testing::RandomLlama;
use nextok::model::{CpuBackend, LlamaModel, LoadOptions};
use nextok::sampling::SamplingParams;
use nextok::tokenizer::ChatTemplate;
use nextok::{ConstraintSpec, Engine, GenerateOptions, LlamaOnBackend};

/// The seed of the weights every test uses unless it says otherwise.
pub const SEED: u64 = 12;

/// `<|endoftext|>`: EOS in many GPT-2-style vocabularies; here an end token by its text.
pub const ENDOFTEXT: u32 = 0;
/// `<|im_start|>`: opens a ChatML turn (and the file's BOS).
pub const IM_START: u32 = 1;
/// `<|im_end|>`: closes a ChatML turn; the file's EOS, and the end-of-turn token by its text.
pub const IM_END: u32 = 2;

/// SmolLM2's template, the ChatML shape.
pub const CHATML: &str = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/// Merges, as plain text pairs, in rank order. None joins whitespace to whitespace, so a prompt
/// that ends in a newline tokenizes to a prefix of the same prompt continued (what a chat's
/// cache reuse needs to be visible in a test).
const MERGES: &[(&str, &str)] = &[
    ("u", "s"),
    ("us", "e"),
    ("use", "r"),
    ("a", "s"),
    ("as", "s"),
    ("ass", "i"),
    ("assi", "s"),
    ("assis", "t"),
    ("assist", "a"),
    ("assista", "n"),
    ("assistan", "t"),
    ("s", "y"),
    ("sy", "s"),
    ("sys", "t"),
    ("syst", "e"),
    ("syste", "m"),
    ("h", "e"),
    ("l", "l"),
    ("he", "ll"),
    ("hell", "o"),
    (" ", "t"),
    (" t", "h"),
    (" th", "e"),
    ("i", "n"),
    ("e", "r"),
    ("o", "n"),
    (" ", "a"),
];

/// GPT-2's byte-level character for a byte, from its definition: printable Latin-1 bytes stand
/// for themselves, the others take code points from U+0100 up in byte order.
fn byte_char(b: u8) -> char {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable(b) {
        return b as char;
    }
    let n = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(0x100 + n).expect("a code point below U+0200")
}

fn byte_level(text: &str) -> String {
    text.bytes().map(byte_char).collect()
}

/// The vocabulary: the three control tokens, the 256 bytes, then each merge's result.
fn vocabulary() -> (Vec<String>, Vec<i32>, Vec<String>) {
    let mut tokens: Vec<String> = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        .map(String::from)
        .to_vec();
    tokens.extend((0..=255u8).map(|b| byte_char(b).to_string()));
    let mut merges = Vec::new();
    for (a, b) in MERGES {
        merges.push(format!("{} {}", byte_level(a), byte_level(b)));
        let joined = byte_level(&format!("{a}{b}"));
        assert!(!tokens.contains(&joined), "merge {a:?} {b:?} repeated");
        tokens.push(joined);
    }
    // 3: control; 1: normal.
    let mut types = vec![1i32; tokens.len()];
    types[..3].fill(3);
    (tokens, types, merges)
}

/// Tokens in the small vocabulary (and rows of the small model's logits).
pub fn vocab_size() -> usize {
    vocabulary().0.len()
}

/// The small model's shape: two layers of width 64, Q8_0 weights, an output projection of its
/// own, `context` positions.
pub fn spec(context: usize) -> RandomLlama {
    RandomLlama {
        vocab: vocab_size(),
        context,
        weight_type: GgmlType::Q8_0,
        // A separate output projection of scale 1/√d_model gives logits of order one: varied
        // answers. (Tied to the embedding, whose numbers are of order one, the logits are so
        // large that every step picks the same token.)
        tied_output: false,
        ..RandomLlama::default()
    }
}

/// The whole GGUF file: seeded random weights, the vocabulary and the ChatML template.
pub fn gguf(seed: u64, context: usize) -> Vec<u8> {
    let (tokens, types, merges) = vocabulary();
    let w: GgufWriter = spec(context)
        .to_gguf_writer(seed)
        .metadata("tokenizer.ggml.model", Value::String("gpt2".into()))
        .metadata("tokenizer.ggml.pre", Value::String("gpt2".into()))
        .metadata("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)))
        .metadata("tokenizer.ggml.token_type", Value::Array(Array::I32(types)))
        .metadata("tokenizer.ggml.merges", Value::Array(Array::String(merges)))
        .metadata("tokenizer.ggml.bos_token_id", Value::U32(IM_START))
        .metadata("tokenizer.ggml.eos_token_id", Value::U32(IM_END))
        .metadata("tokenizer.ggml.add_bos_token", Value::Bool(false))
        .metadata("tokenizer.chat_template", Value::String(CHATML.into()));
    w.to_bytes()
}

/// The small model as an engine built from parts, on a one-thread CPU backend.
pub fn engine_with(seed: u64, context: usize) -> Engine {
    let file = GgufFile::from_bytes(gguf(seed, context)).expect("the small GGUF parses");
    let tokenizer = nextok::tokenizer::load_from_gguf(&file).expect("the small vocabulary loads");
    let template = ChatTemplate::from_gguf(&file).expect("the ChatML template parses");
    let model = LlamaModel::from_gguf(file, LoadOptions::default()).expect("the small model loads");
    let model = LlamaOnBackend::new(model, Box::new(CpuBackend::new(1)));
    Engine::from_parts(Box::new(model), tokenizer, Some(template), KvType::F32)
        .expect("the parts agree")
}

/// The small model with [`SEED`] and a context of 4096 positions.
pub fn engine() -> &'static Engine {
    static ENGINE: std::sync::OnceLock<Engine> = std::sync::OnceLock::new();
    ENGINE.get_or_init(|| engine_with(SEED, 4096))
}

/// The real default model (SmolLM2-135M-Instruct Q4_1), loaded once per test binary. Fails, never
/// skips, when it is absent.
pub fn real_engine() -> &'static Engine {
    static ENGINE: std::sync::OnceLock<Engine> = std::sync::OnceLock::new();
    ENGINE.get_or_init(|| {
        let path = nextok::default_model_path().expect("a cache folder for the default model");
        assert!(
            path.is_file(),
            "the default model is not at {}: run `cargo xtask fetch-model`",
            path.display()
        );
        Engine::load(&path, &nextok::EngineOptions::default()).expect("the default model loads")
    })
}

/// Greedy decoding of `max_tokens` tokens, not stopping at end tokens (the references run to the
/// length asked).
pub fn greedy(max_tokens: usize) -> GenerateOptions {
    GenerateOptions {
        sampling: SamplingParams::greedy(),
        max_tokens: Some(max_tokens),
        ignore_eos: true,
        ..GenerateOptions::default()
    }
}

/// Plain sampling (temperature 1, no filter) with `seed`, `max_tokens` tokens, not stopping at
/// end tokens.
pub fn sampled(seed: u64, max_tokens: usize) -> GenerateOptions {
    GenerateOptions {
        sampling: SamplingParams {
            temperature: 1.0,
            seed: Some(seed),
            ..SamplingParams::default()
        },
        max_tokens: Some(max_tokens),
        ignore_eos: true,
        ..GenerateOptions::default()
    }
}

/// Asserts that `tokens`, a greedy answer to `prompt` under the constraint `spec`, are the
/// masked greedy choices made one at a time on this thread: each is the largest of fresh logits
/// ([`Engine::logits`] over the prompt and the tokens before it) among the tokens that the
/// constraint, walked one token at a time, allows (the lowest id on a tie). So the masks that
/// were computed beside the forward passes are the sequential ones.
pub fn assert_masked_greedy(
    engine: &Engine,
    spec: &ConstraintSpec,
    prompt: &[u32],
    tokens: &[u32],
) {
    let mut constraint = engine.constraint(spec).expect("the constraint compiles");
    let mut mask = constraint.vocab().empty_mask();
    let mut seen = prompt.to_vec();
    for (i, &t) in tokens.iter().enumerate() {
        constraint.fill_mask(&mut mask).expect("a mask");
        let row = engine.logits(&seen, false).expect("the logits");
        let allowed = |i: usize| mask[i / 64] >> (i % 64) & 1 == 1;
        let best = (0..row.len())
            .filter(|&i| allowed(i))
            .fold(None, |b: Option<usize>, i| match b {
                Some(b) if row[b] >= row[i] => Some(b),
                _ => Some(i),
            })
            .expect("the constraint allows a token");
        assert_eq!(t as usize, best, "token {i} of {tokens:?}");
        constraint.advance(t).expect("the chosen token is allowed");
        seen.push(t);
    }
}
