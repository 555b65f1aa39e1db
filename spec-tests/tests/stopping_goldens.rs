//! Golden tests from the specification's section "Stopping"
//! (the specification, *Inference and Decoding*), each run through both the reference
//! (`nextok_spec_tests::stopping`) and the streaming `nextok-stopping`.
//!
//! The examples print no probabilities, only token counts and texts, so every comparison is exact.

use nextok_spec_tests::stopping::{self, Conditions, Reason};
use nextok_stopping::{Error, Stop, StopConditions, StopState};

/// Token ids for the translation example: the specification names the tokens, not their ids.
const TI: u32 = 10;
const AMO: u32 = 11;
const MOLTO: u32 = 12;
const EOS: u32 = 2;

/// "Ti amo molto <EOS>", the translation of "I love you very much" from "The generation loop".
fn translation() -> Vec<(u32, Vec<u8>)> {
    vec![
        (TI, b"Ti".to_vec()),
        (AMO, b" amo".to_vec()),
        (MOLTO, b" molto".to_vec()),
        (EOS, Vec::new()),
    ]
}

/// Runs the streaming crate over the tokens and returns its text, stop and token count.
fn stream(
    tokens: &[(u32, Vec<u8>)],
    conditions: &StopConditions,
    prompt_tokens: usize,
) -> (String, Option<Stop>, usize) {
    let mut state = StopState::new(conditions, prompt_tokens).expect("valid conditions");
    let mut text = String::new();
    for (id, piece) in tokens {
        let step = state.push(*id, piece);
        text.push_str(&step.text);
        if let Some(stop) = step.stop {
            return (text, Some(stop), state.generated());
        }
    }
    let generated = state.generated();
    text.push_str(&state.finish());
    (text, None, generated)
}

fn reference_conditions(c: &StopConditions) -> Conditions {
    Conditions {
        end_tokens: c.end_tokens.clone(),
        max_new_tokens: c.max_new_tokens,
        stop_sequences: c.stop_sequences.clone(),
        context_window: c.context_window,
        include_stop_sequence: c.include_stop_sequence,
    }
}

/// Source: "Stopping", "The three stop conditions", Maximum tokens: "With max tokens = 2, the
/// translation would stop after "Ti amo", before "molto"".
#[test]
fn max_tokens_2_stops_after_ti_amo() {
    let conditions = StopConditions {
        end_tokens: vec![EOS],
        max_new_tokens: Some(2),
        ..Default::default()
    };
    let (text, stop, generated) = stream(&translation(), &conditions, 9);
    assert_eq!(text, "Ti amo");
    assert_eq!(stop, Some(Stop::MaxTokens));
    assert_eq!(generated, 2);

    let reference = stopping::generate(&translation(), &reference_conditions(&conditions), 9);
    assert_eq!(reference.text, "Ti amo");
    assert_eq!(reference.reason, Some(Reason::MaxTokens));
}

/// Source: "Stopping", "The three stop conditions", End token: "step 4 chose <EOS> after
/// "molto", and the loop ended there" (and the pass table of "The generation loop": pass 4
/// predicts <EOS>: stop).
#[test]
fn end_token_after_molto_ends_with_end_turn() {
    let conditions = StopConditions {
        end_tokens: vec![EOS],
        max_new_tokens: Some(100),
        ..Default::default()
    };
    let (text, stop, generated) = stream(&translation(), &conditions, 9);
    assert_eq!(text, "Ti amo molto");
    assert_eq!(stop, Some(Stop::EndTurn { token: EOS }));
    assert_eq!(generated, 4);

    let reference = stopping::generate(&translation(), &reference_conditions(&conditions), 9);
    assert_eq!(reference.text, "Ti amo molto");
    assert_eq!(reference.reason, Some(Reason::EndTurn { token: EOS }));
}

/// Source: "Stopping", "The three stop conditions", Stop sequence: the model labels a
/// transaction "Label: FRAUD"; "Setting the stop sequence to a line break ends generation as soon
/// as that line is complete, even if the model would have gone on to explain its answer. The stop
/// sequence itself is usually not included in the returned text."
#[test]
fn line_break_stop_sequence_returns_the_label_line() {
    let conditions = StopConditions {
        stop_sequences: vec!["\n".into()],
        max_new_tokens: Some(100),
        ..Default::default()
    };
    // Two tokenisations: the line break as its own token, and inside a token with the
    // explanation that follows it.
    let splits: [&[&str]; 2] = [
        &["Label", ":", " FRA", "UD", "\n", "The", " amount"],
        &["Label", ": F", "RAUD\nThe", " amount"],
    ];
    for split in splits {
        let tokens: Vec<(u32, Vec<u8>)> = split
            .iter()
            .enumerate()
            .map(|(i, p)| (100 + i as u32, p.as_bytes().to_vec()))
            .collect();
        let (text, stop, _) = stream(&tokens, &conditions, 30);
        assert_eq!(text, "Label: FRAUD", "split {split:?}");
        assert_eq!(
            stop,
            Some(Stop::StopSequence {
                index: 0,
                text: "\n".into()
            })
        );
        let reference = stopping::generate(&tokens, &reference_conditions(&conditions), 30);
        assert_eq!(reference.text, "Label: FRAUD");
        assert_eq!(reference.reason, Some(Reason::StopSequence { index: 0 }));
    }
}

/// Source: "Stopping", "The context window: a hard limit": "If a model has a context window of
/// 8,192 tokens and the prompt uses 7,000, at most 8,192 − 7,000 = 1,192 tokens are left for the
/// answer, whatever max tokens is set to."
#[test]
fn context_window_8192_minus_7000_leaves_1192_tokens() {
    let conditions = StopConditions {
        max_new_tokens: Some(4096),
        context_window: Some(8192),
        ..Default::default()
    };
    let mut state = StopState::new(&conditions, 7000).expect("room for 1,192 tokens");
    assert_eq!(state.tokens_left(), Some(1192));
    let mut generated = 0;
    let stop = loop {
        generated += 1;
        if let Some(stop) = state.push(1, b" word").stop {
            break stop;
        }
        assert!(generated < 5000, "the window never stopped the loop");
    };
    assert_eq!(generated, 1192);
    assert_eq!(stop, Stop::ContextWindow);

    let tokens = vec![(1, b" word".to_vec()); 2000];
    let reference = stopping::generate(&tokens, &reference_conditions(&conditions), 7000);
    assert_eq!(reference.tokens, 1192);
    assert_eq!(reference.reason, Some(Reason::ContextWindow));
}

/// Source: the same paragraph: the prompt and the answer "can never be longer than the model
/// allows", so a prompt that alone fills the window is an error naming both numbers, not a silent
/// truncation.
#[test]
fn prompt_that_fills_the_window_is_an_error() {
    let conditions = StopConditions {
        context_window: Some(8192),
        ..Default::default()
    };
    for prompt in [8192, 9000] {
        assert_eq!(
            StopState::new(&conditions, prompt).unwrap_err(),
            Error::PromptFillsContextWindow {
                prompt_tokens: prompt,
                context_window: 8192
            }
        );
    }
}
