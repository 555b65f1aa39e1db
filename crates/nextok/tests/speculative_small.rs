//! Exact speculative decoding on the small random model (`tests/common`): every answer must be
//! the answer of plain decoding, event for event (ids, texts, log-probabilities, alternatives,
//! stop reason) and cache for cache, whatever the drafts.
//!
//! A random model rarely repeats itself, so most tests run it behind `common::copier::Copier`:
//! the same model with a pull toward continuing the text as it went before, which makes drafts
//! succeed, or half succeed under sampling. Each such test asserts from [`Generation::speculative_stats`]
//! that drafts were checked and kept, so it proves the speculative path ran.

mod common;

use common::copier::copier;
use common::{engine, greedy, sampled};
use nextok::{
    BeamOptions, ConstraintSpec, Engine, Event, GenerateOptions, Prompt, SpeculativeStats, Stop,
    TokenEvent,
};

const REPETITIVE: &str =
    "hello the user in the system, hello the user in the system, hello the user";

/// Letters, one token each: the copier goes on with the alphabet, so every token of its answer
/// is new for 25 tokens (a stop token then ends the answer where it stands in a draft).
const ALPHABET: &str = "abcdefghijklmnopqrstuvwxyza";

/// Everything a generation gave: its events, how drafting went, the cache it leaves.
struct Outcome {
    events: Vec<Event>,
    stats: SpeculativeStats,
    cache: Option<Vec<u32>>,
}

fn outcome(engine: &Engine, prompt: &Prompt, options: &GenerateOptions) -> Outcome {
    let mut g = engine.generate(prompt, options).unwrap();
    let events = g.by_ref().map(|e| e.unwrap()).collect();
    let stats = g.speculative_stats();
    let cache = g.into_cache().map(|c| c.tokens().to_vec());
    Outcome {
        events,
        stats,
        cache,
    }
}

/// Runs `options` with speculative decoding off and on, asserts that every event (timings
/// aside) and the cache left behind are the same, and returns the plain events and how
/// drafting went.
fn same_answer(engine: &Engine, prompt: &Prompt, options: &GenerateOptions) -> Outcome {
    let plain = outcome(
        engine,
        prompt,
        &GenerateOptions {
            speculative: false,
            ..options.clone()
        },
    );
    let spec = outcome(
        engine,
        prompt,
        &GenerateOptions {
            speculative: true,
            ..options.clone()
        },
    );
    assert_eq!(plain.stats, SpeculativeStats::default());
    assert_eq!(plain.events.len(), spec.events.len(), "{options:?}");
    for (i, (p, s)) in plain.events.iter().zip(&spec.events).enumerate() {
        match (p, s) {
            (Event::Token(p), Event::Token(s)) => {
                assert_eq!(bits(p), bits(s), "event {i}, {options:?}")
            }
            (Event::Done(p), Event::Done(s)) => {
                // Timings differ; the log-probability is compared as bits (a beam's may be NaN).
                assert_eq!(p.logprob.to_bits(), s.logprob.to_bits());
                let mut s = (**s).clone();
                s.timings = p.timings;
                s.logprob = p.logprob;
                assert_eq!(**p, s, "{options:?}");
            }
            _ => panic!("event {i} differs in kind: {p:?} and {s:?}"),
        }
    }
    assert_eq!(plain.cache, spec.cache, "the caches left behind differ");
    Outcome {
        stats: spec.stats,
        ..plain
    }
}

/// A token event's index, id, text, log-probabilities as bits and alternatives (id, text,
/// log-probability as bits).
type EventBits<'a> = (
    usize,
    u32,
    &'a str,
    u32,
    Option<u32>,
    Vec<(u32, &'a str, u32)>,
);

/// A token event with its numbers as bits, so that two events compare exactly (NaN too).
fn bits(e: &TokenEvent) -> EventBits<'_> {
    let top = e
        .top
        .iter()
        .map(|a| (a.id, a.text.as_str(), a.logprob.to_bits()))
        .collect();
    (
        e.index,
        e.id,
        &e.text,
        e.logprob.to_bits(),
        e.raw_logprob.map(f32::to_bits),
        top,
    )
}

fn completion(o: &Outcome) -> &nextok::Completion {
    match o.events.last() {
        Some(Event::Done(c)) => c,
        other => panic!("the last event is not a completion: {other:?}"),
    }
}

#[test]
fn greedy_copying_is_drafted_kept_and_equals_plain_decoding() {
    let engine = copier(8.0, 4096);
    let prompt = Prompt::raw(REPETITIVE);
    let o = same_answer(&engine, &prompt, &greedy(60));
    let c = completion(&o);
    assert_eq!(c.tokens.len(), 60);
    // The copier repeats the prompt's pattern, so drafts are kept: fewer passes than tokens.
    assert!(o.stats.accepted_tokens >= 30, "{:?}", o.stats);
    assert!(o.stats.drafts < o.stats.accepted_tokens, "{:?}", o.stats);
}

#[test]
fn seeded_sampling_equals_plain_decoding_with_drafts_kept_and_dropped() {
    let engine = copier(3.0, 4096);
    let prompt = Prompt::raw(REPETITIVE);
    let mut total = SpeculativeStats::default();
    for seed in 0..8 {
        let mut options = sampled(seed, 40);
        if seed % 2 == 1 {
            options.sampling.top_k = Some(20);
            options.sampling.top_p = 0.9;
            options.top_logprobs = 3;
        }
        let o = same_answer(&engine, &prompt, &options);
        total.drafts += o.stats.drafts;
        total.drafted_tokens += o.stats.drafted_tokens;
        total.accepted_tokens += o.stats.accepted_tokens;
    }
    // Both paths of the walk ran: drafted tokens kept, and drafts cut short.
    assert!(total.accepted_tokens > 0, "{total:?}");
    assert!(total.drafted_tokens > total.accepted_tokens, "{total:?}");
}

#[test]
fn the_plain_random_model_gives_the_same_answers() {
    for prompt in ["hello the user in the system", REPETITIVE] {
        let prompt = Prompt::raw(prompt);
        same_answer(engine(), &prompt, &greedy(40));
        for seed in 0..4 {
            same_answer(engine(), &prompt, &sampled(seed, 40));
        }
    }
}

#[test]
fn max_tokens_ends_the_answer_at_the_same_token() {
    let engine = copier(8.0, 4096);
    let prompt = Prompt::raw(REPETITIVE);
    let prompt_len = engine.encode_prompt(&prompt).unwrap().len();
    let mut accepted = 0;
    for max in 1..=24 {
        let o = same_answer(&engine, &prompt, &greedy(max));
        let c = completion(&o);
        assert_eq!(c.tokens.len(), max);
        assert_eq!(c.stop, Stop::MaxTokens);
        // The cache holds the prompt and every token but the last, which never ran.
        assert_eq!(o.cache.as_ref().map(Vec::len), Some(prompt_len + max - 1));
        accepted += o.stats.accepted_tokens;
    }
    assert!(accepted > 0);
}

#[test]
fn stop_tokens_and_stop_sequences_end_the_answer_inside_a_draft() {
    let engine = copier(8.0, 4096);
    let prompt = Prompt::raw(ALPHABET);
    let prompt_len = engine.encode_prompt(&prompt).unwrap().len();
    let long = completion(&same_answer(&engine, &prompt, &greedy(40))).clone();
    assert_eq!(long.text, "bcdefghijklmnopqrstuvwxyzabcdefghijklmno");
    let mut accepted = 0;
    // A stop token at each place of the answer: wherever it falls in a draft, the answer ends
    // with it, as it does without drafts.
    for &id in &long.tokens[..25] {
        let options = GenerateOptions {
            stop_token_ids: vec![id],
            ..greedy(40)
        };
        let o = same_answer(&engine, &prompt, &options);
        let c = completion(&o);
        assert_eq!(c.stop, Stop::EndTurn { token: id });
        assert_eq!(c.tokens.last(), Some(&id));
        assert_eq!(
            o.cache.as_ref().map(Vec::len),
            Some(prompt_len + c.tokens.len() - 1)
        );
        accepted += o.stats.accepted_tokens;
    }
    // Stop sequences cut from the answer's own text, at several places.
    let chars: Vec<char> = long.text.chars().collect();
    for start in [2, 5, 9, 14, 20] {
        let stop: String = chars[start..start + 3].iter().collect();
        let options = GenerateOptions {
            stop: vec![stop.clone()],
            ..greedy(40)
        };
        let o = same_answer(&engine, &prompt, &options);
        assert!(
            matches!(&completion(&o).stop, Stop::StopSequence { text, .. } if *text == stop),
            "{:?}",
            completion(&o).stop
        );
        accepted += o.stats.accepted_tokens;
    }
    assert!(accepted > 0);
}

#[test]
fn a_json_schema_constraint_equals_plain_decoding_and_the_sequential_masks() {
    let engine = copier(4.0, 4096);
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string", "enum": ["user", "the", "system"]}}
        },
        "required": ["name", "tags"]
    });
    let spec = ConstraintSpec::JsonSchema(schema);
    let prompt = Prompt::raw(r#"{"name": "user", "tags": ["the", "user", "the", "user", "#);
    let options = GenerateOptions {
        constraint: Some(spec.clone()),
        ..greedy(60)
    };
    let o = same_answer(&engine, &prompt, &options);
    let c = completion(&o).clone();
    // Each greedy token is the argmax of fresh logits under the mask of a constraint walked one
    // token at a time on this thread: the masks computed beside the forward passes are the
    // sequential ones.
    let ids = engine.encode_prompt(&prompt).unwrap();
    common::assert_masked_greedy(&engine, &spec, &ids, &c.tokens);
    for seed in 0..4 {
        let options = GenerateOptions {
            constraint: Some(spec.clone()),
            ..sampled(seed, 60)
        };
        same_answer(&engine, &prompt, &options);
    }
}

#[test]
fn the_context_window_ends_the_answer_at_the_same_token() {
    let engine = copier(8.0, 48);
    let prompt = Prompt::raw(REPETITIVE);
    let o = same_answer(&engine, &prompt, &greedy(1000));
    assert_eq!(completion(&o).stop, Stop::ContextWindow);
    assert!(o.stats.accepted_tokens > 0, "{:?}", o.stats);
}

#[test]
fn several_completions_and_beams_do_not_draft() {
    let engine = copier(8.0, 4096);
    let prompt = Prompt::raw(REPETITIVE);
    let n = same_answer(
        &engine,
        &prompt,
        &GenerateOptions {
            n: 2,
            ..sampled(1, 20)
        },
    );
    assert_eq!(n.stats, SpeculativeStats::default());
    let beams = same_answer(
        &engine,
        &prompt,
        &GenerateOptions {
            beams: Some(BeamOptions {
                width: 2,
                length_penalty: 1.0,
            }),
            ..greedy(10)
        },
    );
    assert_eq!(beams.stats, SpeculativeStats::default());
}
