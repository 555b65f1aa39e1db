//! Encoding throughput of our GGUF byte-level BPE against the `tokenizers` crate on the same
//! vocabulary: SmolLM2's 49,152 tokens and 48,900 merges, with SmolLM2's pre-tokenizer (single
//! digits, then GPT-2's byte-level split) in both.
//!
//! Run with `cargo bench -p nextok-benches --bench tokenizer` (needs the default model: run
//! `cargo xtask fetch-model` first). The text is about 3 MB of English prose, source code, and
//! Chinese, Japanese, Russian, Arabic and emoji, generated here from a fixed seed.

use std::path::PathBuf;
use std::time::Duration;

use criterion::{criterion_main, Criterion, Throughput};
use nextok_gguf::GgufFile;
use nextok_tokenizer::{BpeTokenizer, EncodeOptions, Tokenizer};

fn model_path() -> PathBuf {
    if let Some(path) = std::env::var_os("NEXTOK_MODEL") {
        return PathBuf::from(path);
    }
    let cache = match std::env::var_os("XDG_CACHE_HOME") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache"),
    };
    cache.join("nextok/models/SmolLM2-135M-Instruct.Q4_1.gguf")
}

const ENGLISH: &[&str] = &[
    "the",
    "of",
    "and",
    "to",
    "in",
    "a",
    "is",
    "that",
    "for",
    "it",
    "as",
    "was",
    "with",
    "be",
    "by",
    "on",
    "not",
    "he",
    "this",
    "are",
    "or",
    "his",
    "from",
    "at",
    "which",
    "but",
    "have",
    "an",
    "had",
    "they",
    "you",
    "were",
    "their",
    "one",
    "all",
    "we",
    "can",
    "her",
    "has",
    "there",
    "been",
    "if",
    "more",
    "when",
    "will",
    "would",
    "who",
    "so",
    "no",
    "model",
    "inference",
    "tokenizer",
    "probability",
    "generation",
    "attention",
    "transformer",
    "translation",
    "Italian",
    "beautiful",
    "understanding",
    "extraordinary",
    "quickly",
    "government",
    "information",
    "development",
    "international",
    "responsibility",
    "Wednesday",
    "London",
    "Einstein's",
    "don't",
    "it's",
    "they'll",
    "we've",
    "I'm",
];

const CODE: &[&str] = &[
    "fn main() {\n    let mut total = 0u64;\n    for i in 0..1000 {\n        total += i * i;\n    }\n    println!(\"{total}\");\n}\n",
    "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n",
    "for (int i = 0; i < n; ++i) {\n\tif (buf[i] == '\\n') { lines++; }\n}\n",
    "const result = await fetch(`/api/v1/items?page=${page}`).then((r) => r.json());\n",
    "SELECT id, name, created_at FROM users WHERE age > 21 ORDER BY created_at DESC;\n",
    "<div class=\"container\"><p id=\"intro\">Hello &amp; welcome</p></div>\n",
    "    # TODO: handle the error case properly\n    if err != nil {\n        return nil, err\n    }\n",
];

const OTHER: &[&str] = &[
    "我爱你。今天天气很好，我们去公园散步吧！",
    "机器学习模型通过大量数据进行训练，然后用于推理。",
    "東京は日本の首都です。ラーメンが大好きです。",
    "Привет, как дела? Сегодня хорошая погода для прогулки.",
    "مرحبا بالعالم، هذا نص تجريبي باللغة العربية.",
    "Ελληνικά γράμματα και λέξεις για δοκιμή.",
    "😀🎉👍🏽❤️ Café naïve résumé — déjà vu! Ünïcödé façade",
    "한국어 문장도 포함되어 있습니다.",
];

/// About `size` bytes of mixed text from a fixed xorshift seed.
fn corpus(size: usize) -> String {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut text = String::with_capacity(size + 1024);
    while text.len() < size {
        match next() % 10 {
            0..=5 => {
                // A sentence of 8 to 24 English words, with a number now and then.
                let n = 8 + next() % 17;
                for i in 0..n {
                    let w = ENGLISH[(next() % ENGLISH.len() as u64) as usize];
                    if i == 0 {
                        let mut c = w.chars();
                        if let Some(first) = c.next() {
                            text.extend(first.to_uppercase());
                            text.push_str(c.as_str());
                        }
                    } else {
                        text.push(' ');
                        text.push_str(w);
                    }
                    if next() % 20 == 0 {
                        text.push_str(&format!(" {}", next() % 100_000));
                    }
                }
                text.push_str(if next() % 4 == 0 { ".\n" } else { ". " });
            }
            6..=7 => text.push_str(CODE[(next() % CODE.len() as u64) as usize]),
            _ => {
                text.push_str(OTHER[(next() % OTHER.len() as u64) as usize]);
                text.push('\n');
            }
        }
    }
    text
}

/// The `tokenizers` crate's tokenizer for the same vocabulary and merges: a BPE model with a
/// digit splitter and the byte-level pre-tokenizer, as SmolLM2's own tokenizer.json has.
fn hf_tokenizer(file: &GgufFile) -> tokenizers::Tokenizer {
    let meta = file.metadata();
    let tokens = meta.get_str_array("tokenizer.ggml.tokens").unwrap();
    let merges = meta.get_str_array("tokenizer.ggml.merges").unwrap();
    let vocab: serde_json::Map<String, serde_json::Value> = tokens
        .iter()
        .enumerate()
        .map(|(id, t)| (t.clone(), serde_json::Value::from(id)))
        .collect();
    let json = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": true},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}
        ]},
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null,
            "continuing_subword_prefix": null, "end_of_word_suffix": null, "fuse_unk": false,
            "byte_fallback": false, "ignore_merges": false, "vocab": vocab, "merges": merges}
    });
    json.to_string().parse().unwrap()
}

fn bench(c: &mut Criterion) {
    let path = model_path();
    let file = GgufFile::open(&path).unwrap_or_else(|e| {
        panic!(
            "cannot open {}: {e}; run `cargo xtask fetch-model` first",
            path.display()
        )
    });
    let ours = BpeTokenizer::from_gguf(&file).unwrap();
    let theirs = hf_tokenizer(&file);
    let text = corpus(3 << 20);

    // Both must give the same ids, or the comparison means nothing.
    let a = ours.encode(&text, EncodeOptions::plain()).unwrap();
    let b = theirs.encode_fast(text.as_str(), false).unwrap();
    assert_eq!(a, b.get_ids(), "the two tokenizers disagree on the corpus");
    eprintln!("corpus: {} bytes, {} tokens", text.len(), a.len());

    let mut group = c.benchmark_group("encode_3MB");
    group.throughput(Throughput::Bytes(text.len() as u64));
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(8));
    group.bench_function("nextok_gguf_bpe", |bench| {
        bench.iter(|| ours.encode(&text, EncodeOptions::plain()).unwrap().len())
    });
    group.bench_function("nextok_gguf_bpe_no_cache", |bench| {
        bench.iter(|| ours.encode_uncached(&text).unwrap().len())
    });
    group.bench_function("tokenizers_crate", |bench| {
        bench.iter(|| theirs.encode_fast(text.as_str(), false).unwrap().len())
    });
    group.finish();

    // The same text as many short inputs (one per line), as prompts arrive in practice.
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let mut group = c.benchmark_group("encode_3MB_by_line");
    group.throughput(Throughput::Bytes(text.len() as u64));
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(8));
    group.bench_function("nextok_gguf_bpe", |bench| {
        bench.iter(|| {
            lines
                .iter()
                .map(|l| ours.encode(l, EncodeOptions::plain()).unwrap().len())
                .sum::<usize>()
        })
    });
    group.bench_function("tokenizers_crate", |bench| {
        bench.iter(|| {
            lines
                .iter()
                .map(|l| theirs.encode_fast(*l, false).unwrap().len())
                .sum::<usize>()
        })
    });
    group.finish();
}

// `criterion_group!` defines an undocumented public function; keeping it in its own module lets
// the lint exception cover that function alone.
#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::bench);
}
criterion_main!(group::benches);
