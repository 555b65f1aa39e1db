//! Properties of the streaming stop matcher in `nextok-stopping`, checked against the whole-string
//! reference in `nextok_spec_tests::stopping`.
//!
//! Texts and stop sequences are drawn from a small alphabet of 1- to 4-byte characters so that
//! stop sequences overlap and match often; texts are split into pieces at arbitrary byte offsets,
//! including inside characters, as a byte-level detokenizer would produce them.

use nextok_spec_tests::stopping::{self, Conditions, Reason};
use nextok_stopping::{Stop, StopConditions, StopState};
use proptest::prelude::*;

const EOS: u32 = 2;
/// One- to four-byte characters: 'a', 'b', '\n', 'é' (2 bytes), '€' (3), '😀' (4).
const ALPHABET: [char; 6] = ['a', 'b', '\n', 'é', '€', '😀'];

fn text(max_chars: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(&ALPHABET[..]), 0..max_chars)
        .prop_map(|chars| chars.into_iter().collect())
}

fn stop_sequences() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(
        prop::collection::vec(prop::sample::select(&ALPHABET[..]), 1..4)
            .prop_map(|chars| chars.into_iter().collect::<String>()),
        0..4,
    )
}

/// Splits `bytes` into pieces of 0 to 5 bytes (empty pieces happen: a token can decode to
/// nothing yet), and inserts end tokens after some pieces.
fn tokens(bytes: &[u8], lengths: &[usize], end_after: &[usize]) -> Vec<(u32, Vec<u8>)> {
    let mut tokens = Vec::new();
    let mut at = 0;
    // Only zero lengths would never finish the text, so then every piece is one byte.
    let all_empty = lengths.iter().all(|&len| len == 0);
    let mut lengths = lengths.iter().cycle();
    while at < bytes.len() {
        let len = lengths.next().copied().unwrap_or(1);
        let len = if all_empty {
            1
        } else {
            len.min(bytes.len() - at)
        };
        tokens.push((100 + tokens.len() as u32, bytes[at..at + len].to_vec()));
        at += len;
        if end_after.contains(&tokens.len()) {
            // The end token's own text must never appear in the answer.
            tokens.push((EOS, b"<|im_end|>".to_vec()));
        }
    }
    tokens
}

struct Streamed {
    text: String,
    stop: Option<Stop>,
    generated: usize,
}

fn stream(tokens: &[(u32, Vec<u8>)], conditions: &StopConditions, prompt: usize) -> Streamed {
    let mut state = StopState::new(conditions, prompt).expect("valid conditions");
    let mut text = String::new();
    for (id, piece) in tokens {
        let step = state.push(*id, piece);
        text.push_str(&step.text);
        if step.stop.is_some() {
            return Streamed {
                text,
                stop: step.stop,
                generated: state.generated(),
            };
        }
    }
    let generated = state.generated();
    text.push_str(&state.finish());
    Streamed {
        text,
        stop: None,
        generated,
    }
}

fn reason_of(stop: &Stop, stop_sequences: &[String]) -> Reason {
    match stop {
        Stop::EndTurn { token } => Reason::EndTurn { token: *token },
        Stop::MaxTokens => Reason::MaxTokens,
        Stop::StopSequence { index, text } => {
            assert_eq!(
                Some(text),
                stop_sequences.get(*index),
                "wrong text for the index"
            );
            Reason::StopSequence { index: *index }
        }
        Stop::ContextWindow => Reason::ContextWindow,
        other => panic!("a stop the reference does not know: {other:?}"),
    }
}

#[allow(clippy::too_many_arguments)]
fn check_against_reference(
    bytes: &[u8],
    lengths: &[usize],
    end_after: &[usize],
    stop_sequences: Vec<String>,
    max_new_tokens: Option<usize>,
    window: Option<(usize, usize)>,
    include_stop_sequence: bool,
) -> Result<(), TestCaseError> {
    let (context_window, prompt) = match window {
        Some((prompt, room)) => (Some(prompt + room), prompt),
        None => (None, 0),
    };
    let conditions = StopConditions {
        end_tokens: vec![EOS],
        max_new_tokens,
        stop_sequences: stop_sequences.clone(),
        context_window,
        include_stop_sequence,
    };
    let reference = Conditions {
        end_tokens: vec![EOS],
        max_new_tokens,
        stop_sequences: stop_sequences.clone(),
        context_window,
        include_stop_sequence,
    };
    let tokens = tokens(bytes, lengths, end_after);
    let streamed = stream(&tokens, &conditions, prompt);
    let expected = stopping::generate(&tokens, &reference, prompt);
    prop_assert_eq!(&streamed.text, &expected.text);
    prop_assert_eq!(
        streamed
            .stop
            .as_ref()
            .map(|s| reason_of(s, &stop_sequences)),
        expected.reason
    );
    prop_assert_eq!(streamed.generated, expected.tokens);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Streaming gives the same text, reason and token count as matching the whole string,
    /// however the text is split into tokens, with end tokens, max tokens and the window mixed in.
    #[test]
    fn streaming_equals_whole_string_matching(
        text in text(40),
        lengths in prop::collection::vec(0usize..6, 1..8),
        end_after in prop::collection::vec(1usize..60, 0..2),
        stop_sequences in stop_sequences(),
        max_new_tokens in prop::option::of(1usize..40),
        window in prop::option::of((0usize..100, 1usize..40)),
        include_stop_sequence in any::<bool>(),
    ) {
        check_against_reference(
            text.as_bytes(), &lengths, &end_after, stop_sequences, max_new_tokens, window,
            include_stop_sequence,
        )?;
    }

    /// The same with arbitrary bytes, including invalid UTF-8: the decoded answer is still the
    /// lossy decoding of the whole answer.
    #[test]
    fn streaming_equals_whole_string_matching_on_arbitrary_bytes(
        bytes in prop::collection::vec(
            prop_oneof![Just(b'a'), Just(b'\n'), Just(0xE2u8), Just(0x82u8), Just(0xACu8), any::<u8>()],
            0..40,
        ),
        lengths in prop::collection::vec(0usize..6, 1..8),
        stop_sequences in stop_sequences(),
        include_stop_sequence in any::<bool>(),
    ) {
        check_against_reference(
            &bytes, &lengths, &[], stop_sequences, None, None, include_stop_sequence,
        )?;
    }

    /// After every token: the released text is a prefix of the final answer (String guarantees
    /// valid UTF-8, and it is whole characters since it concatenates to the answer); released plus
    /// held-back bytes are exactly the text so far; and the held-back bytes are exactly what could
    /// still start a stop sequence or finish a character, nothing more and nothing less.
    #[test]
    fn only_possible_stop_starts_and_unfinished_characters_are_held(
        text in text(40),
        lengths in prop::collection::vec(0usize..6, 1..8),
        stop_sequences in stop_sequences(),
    ) {
        let conditions = StopConditions { stop_sequences: stop_sequences.clone(), ..Default::default() };
        let tokens = tokens(text.as_bytes(), &lengths, &[]);
        let final_text = stopping::generate(
            &tokens,
            &Conditions { stop_sequences: stop_sequences.clone(), ..Default::default() },
            0,
        ).text;
        let mut state = StopState::new(&conditions, 0).expect("valid");
        let mut released = String::new();
        let mut so_far = Vec::new();
        for (id, piece) in &tokens {
            so_far.extend_from_slice(piece);
            let step = state.push(*id, piece);
            released.push_str(&step.text);
            prop_assert!(final_text.starts_with(&released), "{released:?} is not a prefix of {final_text:?}");
            if step.stop.is_some() {
                break;
            }
            let mut joined = released.as_bytes().to_vec();
            joined.extend_from_slice(state.held_back());
            prop_assert_eq!(&joined, &so_far);
            prop_assert_eq!(
                state.held_back().len(),
                stopping::must_hold(&so_far, &stop_sequences),
                "held {:?} after {:?}", state.held_back(), so_far
            );
        }
    }

    /// Without stop sequences and with whole characters per token, nothing is ever held back.
    #[test]
    fn nothing_is_held_without_stop_sequences(chars in prop::collection::vec(prop::sample::select(&ALPHABET[..]), 1..30)) {
        let mut state = StopState::new(&StopConditions::default(), 0).expect("valid");
        for (i, c) in chars.iter().enumerate() {
            let step = state.push(100 + i as u32, c.to_string().as_bytes());
            prop_assert_eq!(step.text, c.to_string());
            prop_assert!(state.held_back().is_empty());
        }
    }
}
