//! The scheduler on the real default model (SmolLM2-135M-Instruct Q4_1; `cargo xtask
//! fetch-model` puts it in place): concurrent requests give exactly the tokens each gives alone.

use nextok::sampling::SamplingParams;
use nextok::{Completion, Engine, GenerateOptions, Prompt, Request, Scheduler, SchedulerOptions};
use std::sync::{Arc, OnceLock};

/// The real engine behind an `Arc`, as the scheduler takes it (loaded once per test binary;
/// fails, never skips, when the model is absent).
fn engine() -> Arc<Engine> {
    static ENGINE: OnceLock<Arc<Engine>> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            let path = nextok::default_model_path().expect("a cache folder for the default model");
            assert!(
                path.is_file(),
                "the default model is not at {}: run `cargo xtask fetch-model`",
                path.display()
            );
            Arc::new(
                Engine::load(&path, &nextok::EngineOptions::default())
                    .expect("the default model loads"),
            )
        })
        .clone()
}

fn alone(engine: &Engine, request: &Request) -> Completion {
    let mut c = engine
        .generate_ids(request.prompt.clone(), &request.options, None)
        .unwrap()
        .collect_completions()
        .unwrap();
    assert_eq!(c.len(), 1);
    c.remove(0)
}

const QUESTIONS: [&str; 8] = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Translate to Italian: I love you very much",
    "Name three primary colours.",
    "What is 12 times 12?",
    "Give me a synonym for happy.",
    "Why is the sky blue?",
    "Say hello in Spanish.",
];

/// Eight requests at once, half greedy and half sampled with their own seeds, under a small step
/// budget so that prompts are read in chunks beside the others' decoding: each one's tokens,
/// text and log-probability are those it gives alone.
#[test]
fn eight_concurrent_requests_give_what_each_gives_alone() {
    let engine = engine();
    let scheduler = Scheduler::new(
        engine.clone(),
        SchedulerOptions {
            max_tokens_per_step: 24,
            ..SchedulerOptions::default()
        },
    )
    .unwrap();
    let requests: Vec<Request> = QUESTIONS
        .iter()
        .enumerate()
        .map(|(i, q)| Request {
            prompt: engine.encode_prompt(&Prompt::chat(None, q)).unwrap(),
            options: GenerateOptions {
                sampling: if i % 2 == 0 {
                    SamplingParams::greedy()
                } else {
                    SamplingParams {
                        seed: Some(100 + i as u64),
                        ..SamplingParams::default()
                    }
                },
                max_tokens: Some(16),
                ..GenerateOptions::default()
            },
        })
        .collect();
    let handles: Vec<_> = requests
        .iter()
        .map(|r| scheduler.submit(r.clone()).unwrap())
        .collect();
    for (request, mut handle) in requests.iter().zip(handles) {
        let got = handle.collect_completions().unwrap().remove(0);
        let want = alone(&engine, request);
        assert_eq!(got.tokens, want.tokens, "{:?}", want.text);
        assert_eq!(got.text, want.text);
        assert_eq!(got.stop, want.stop);
        assert_eq!(got.logprob.to_bits(), want.logprob.to_bits());
    }
    scheduler.wait_idle();
    let stats = scheduler.stats();
    assert_eq!((stats.running, stats.kv_blocks_used), (0, 0));
    // Eight prompts of dozens of tokens at 24 tokens per step with decodes first: they were read
    // in chunks beside each other, in far fewer passes than one per request and token.
    let tokens: u64 = stats.generation_tokens_total;
    assert!(
        stats.steps < stats.prompt_tokens_total + tokens,
        "{stats:?}"
    );
}

/// Two requests that share a long system prompt: the second reads the first's full blocks from
/// the prefix cache (and says so in its usage), and gives the tokens it gives alone.
#[test]
fn a_shared_long_prompt_is_read_from_the_prefix_cache() {
    let engine = engine();
    let scheduler = Scheduler::new(engine.clone(), SchedulerOptions::default()).unwrap();
    let system = "You are a careful assistant. You answer in one short sentence, you never make \
                  up facts, and when you do not know something you say so plainly. You write in \
                  plain English without lists, headings or emphasis, and you keep numbers exact.";
    let request = |question: &str| Request {
        prompt: engine
            .encode_prompt(&Prompt::chat(Some(system), question))
            .unwrap(),
        options: GenerateOptions {
            sampling: SamplingParams::greedy(),
            max_tokens: Some(8),
            ..GenerateOptions::default()
        },
    };
    let first = request("What is the capital of Italy?");
    let second = request("What is the capital of Spain?");
    let a = scheduler
        .submit(first)
        .unwrap()
        .collect_completions()
        .unwrap();
    assert_eq!(a[0].usage.cached_prompt_tokens, 0);
    let b = scheduler
        .submit(second.clone())
        .unwrap()
        .collect_completions()
        .unwrap();
    let common = first_difference(&a[0].prompt_tokens, &second.prompt);
    assert!(common >= 32, "the prompts share {common} tokens");
    // Whole blocks of 16 of the common part come from the cache.
    assert_eq!(b[0].usage.cached_prompt_tokens, common / 16 * 16);
    let want = alone(&engine, &second);
    assert_eq!(b[0].tokens, want.tokens);
    assert_eq!(b[0].logprob.to_bits(), want.logprob.to_bits());
}

/// How many leading tokens two prompts share.
fn first_difference(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}
