//! Exact speculative decoding on the real default model (SmolLM2-135M-Instruct Q4_1): the
//! answers with drafts are the answers without, token for token, and on a task that copies
//! from the prompt the drafts are kept.
//!
//! These tests fail, rather than skip, when the model is absent: run `cargo xtask fetch-model`.

mod common;

use common::real_engine as engine;
use nextok::sampling::SamplingParams;
use nextok::{Completion, ConstraintSpec, GenerateOptions, Prompt, SpeculativeStats, Stop};

const PASSAGE: &str = "The committee met on Tuesday to review the budget for the new library. \
                       After a long discussion, members agreed to fund the reading room, the \
                       children's corner and a small garden, and to postpone the cafe until next \
                       year.";

fn rewrite() -> Prompt {
    Prompt::chat(
        None,
        &format!("Write out this text again, exactly as it is:\n\n{PASSAGE}"),
    )
}

fn greedy(max_tokens: usize) -> GenerateOptions {
    GenerateOptions {
        sampling: SamplingParams::greedy(),
        max_tokens: Some(max_tokens),
        ..GenerateOptions::default()
    }
}

/// The completion with speculative decoding off, the one with it on, and how drafting went.
fn both(prompt: &Prompt, options: &GenerateOptions) -> (Completion, Completion, SpeculativeStats) {
    let run = |speculative| {
        let options = GenerateOptions {
            speculative,
            ..options.clone()
        };
        let mut g = engine().generate(prompt, &options).unwrap();
        let mut c = g.collect_completions().unwrap();
        assert_eq!(c.len(), 1);
        (c.remove(0), g.speculative_stats())
    };
    let (plain, _) = run(false);
    let (spec, stats) = run(true);
    assert_eq!(plain.tokens, spec.tokens);
    assert_eq!(plain.text, spec.text);
    assert_eq!(plain.stop, spec.stop);
    assert_eq!(plain.logprob.to_bits(), spec.logprob.to_bits());
    (plain, spec, stats)
}

#[test]
fn greedy_rewriting_keeps_drafts_and_equals_plain_decoding() {
    let (plain, _, stats) = both(&rewrite(), &greedy(80));
    assert!(plain.tokens.len() >= 20, "{:?}", plain.text);
    // The answer copies the prompt: most of its tokens come from kept drafts.
    assert!(
        stats.accepted_tokens * 2 >= plain.tokens.len(),
        "{stats:?} for {} tokens",
        plain.tokens.len()
    );
}

#[test]
fn seeded_sampling_equals_plain_decoding() {
    let mut accepted = 0;
    for seed in [1, 2] {
        let options = GenerateOptions {
            sampling: SamplingParams {
                temperature: 0.7,
                top_p: 0.95,
                seed: Some(seed),
                ..SamplingParams::default()
            },
            top_logprobs: 2,
            ..greedy(40)
        };
        accepted += both(&rewrite(), &options).2.accepted_tokens;
    }
    assert!(accepted > 0);
}

#[test]
fn a_stop_sequence_and_a_json_schema_give_the_same_answers() {
    let (plain, _, stats) = both(
        &rewrite(),
        &GenerateOptions {
            stop: vec!["garden".into()],
            ..greedy(80)
        },
    );
    assert!(
        matches!(plain.stop, Stop::StopSequence { .. }),
        "{:?}: {:?}",
        plain.stop,
        plain.text
    );
    assert!(stats.accepted_tokens > 0);
    let schema = serde_json::json!({
        "type": "object",
        "properties": {"text": {"type": "string"}, "words": {"type": "integer"}},
        "required": ["text", "words"]
    });
    let prompt = Prompt::chat(
        None,
        &format!("Give this text as JSON with keys text and words:\n\n{PASSAGE}"),
    );
    both(
        &prompt,
        &GenerateOptions {
            constraint: Some(ConstraintSpec::JsonSchema(schema)),
            ..greedy(40)
        },
    );
}
