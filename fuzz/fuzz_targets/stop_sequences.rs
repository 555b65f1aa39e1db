//! Fuzzes the streaming stop-sequence matcher of `nextok-stopping` with arbitrary byte pieces
//! (valid UTF-8 or not), arbitrary stop sequences and an optional end token and token limit.
//!
//! The input format is described on `Input`. It checks that nothing panics, that invalid
//! conditions are typed errors, that released text is always a prefix of the final answer, that the held-back bytes stay within their bound, and that
//! streaming gives the same text and reason as matching the whole string at once (the reference
//! below is the same definition as `spec-tests/src/stopping.rs`, kept here so that the fuzz
//! workspace needs no extra crate).

#![no_main]

use libfuzzer_sys::fuzz_target;
use nextok_stopping::{Error, Stop, StopConditions, StopState};

const EOS: u32 = 2;
/// Separates the stop sequences from the chunks.
const RECORD: u8 = 0x1E;
/// Separates one stop sequence or one chunk from the next.
const UNIT: u8 = 0x1F;

/// The input, in a format simple enough to write seeds by hand (see `corpus/stop_sequences/`):
///
/// - byte 0: flags: bit 0 `include_stop_sequence`; bit 1 `max_new_tokens = byte 1`; bit 2 an
///   end token is inserted before chunk number byte 2;
/// - then the stop sequences, separated by 0x1F and read as lossy UTF-8 (an empty section means
///   none), then 0x1E, then the chunks: raw bytes, separated by 0x1F.
///
/// The separators are ASCII control bytes, which never occur inside a multi-byte character, so
/// chunks can still split characters anywhere.
#[derive(Debug)]
struct Input {
    stop_sequences: Vec<String>,
    chunks: Vec<Vec<u8>>,
    end_before: Option<usize>,
    max_new_tokens: Option<usize>,
    include_stop_sequence: bool,
}

impl Input {
    fn parse(data: &[u8]) -> Option<Input> {
        let (&[flags, max, end], rest) = data.split_first_chunk::<3>()?;
        let (stops, chunks) = match rest.iter().position(|&b| b == RECORD) {
            Some(at) => (&rest[..at], &rest[at + 1..]),
            None => (rest, &[][..]),
        };
        let stop_sequences = if stops.is_empty() {
            Vec::new()
        } else {
            stops
                .split(|&b| b == UNIT)
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        };
        Some(Input {
            stop_sequences,
            chunks: chunks.split(|&b| b == UNIT).map(<[u8]>::to_vec).collect(),
            end_before: (flags & 4 != 0).then_some(usize::from(end)),
            max_new_tokens: (flags & 2 != 0).then_some(usize::from(max)),
            include_stop_sequence: flags & 1 != 0,
        })
    }
}

/// The first stop sequence in `text`: smallest end, then longest, then lowest index.
fn earliest_stop(text: &[u8], stops: &[String]) -> Option<(usize, usize, usize)> {
    (1..=text.len()).find_map(|end| {
        stops
            .iter()
            .enumerate()
            .filter(|(_, s)| text[..end].ends_with(s.as_bytes()))
            .map(|(i, s)| (end - s.len(), end, i))
            .min_by_key(|&(start, _, i)| (start, i))
    })
}

fuzz_target!(|data: &[u8]| {
    let Some(input) = Input::parse(data) else {
        return;
    };
    let conditions = StopConditions {
        end_tokens: vec![EOS],
        max_new_tokens: input.max_new_tokens,
        stop_sequences: input.stop_sequences.clone(),
        context_window: None,
        include_stop_sequence: input.include_stop_sequence,
    };
    let mut state = match StopState::new(&conditions, 0) {
        Ok(state) => state,
        Err(Error::EmptyStopSequence { index }) => {
            assert!(input.stop_sequences[index].is_empty());
            return;
        }
        Err(Error::ZeroMaxNewTokens) => {
            assert_eq!(input.max_new_tokens, Some(0));
            return;
        }
        Err(e) => panic!("unexpected error {e:?}"),
    };
    let stops = &input.stop_sequences;
    let hold_bound = stops
        .iter()
        .map(String::len)
        .max()
        .unwrap_or(0)
        .saturating_sub(1)
        .max(3);

    let mut tokens: Vec<(u32, &[u8])> = input.chunks.iter().map(|c| (100, c.as_slice())).collect();
    if let Some(at) = input.end_before {
        let at = at.min(tokens.len());
        tokens.insert(at, (EOS, b"<|im_end|>"));
    }

    // The whole string at once.
    let mut bytes = Vec::new();
    let mut expected_stop = None;
    for (i, &(id, piece)) in tokens.iter().enumerate() {
        if id == EOS {
            expected_stop = Some(Stop::EndTurn { token: EOS });
            break;
        }
        bytes.extend_from_slice(piece);
        if conditions.max_new_tokens.is_some_and(|max| i + 1 >= max) {
            expected_stop = Some(Stop::MaxTokens);
            break;
        }
    }
    let expected_text = match earliest_stop(&bytes, stops) {
        Some((start, end, index)) => {
            expected_stop = Some(Stop::StopSequence {
                index,
                text: stops[index].clone(),
            });
            let cut = if input.include_stop_sequence {
                end
            } else {
                start
            };
            String::from_utf8_lossy(&bytes[..cut]).into_owned()
        }
        None => String::from_utf8_lossy(&bytes).into_owned(),
    };

    // Streaming.
    let mut text = String::new();
    let mut stop = None;
    for &(id, piece) in &tokens {
        let step = state.push(id, piece);
        text.push_str(&step.text);
        assert!(expected_text.starts_with(&text));
        assert!(state.held_back().len() <= hold_bound);
        if step.stop.is_some() {
            stop = step.stop;
            break;
        }
    }
    if stop.is_none() {
        text.push_str(&state.finish());
    }

    assert_eq!(text, expected_text);
    assert_eq!(stop, expected_stop);
});
