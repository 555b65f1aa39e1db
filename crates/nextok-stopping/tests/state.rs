//! Behaviour of `StopState` through its public API: validation, the order of the conditions,
//! flushing, and the serde names.

use nextok_stopping::{Error, Stop, StopConditions, StopReason, StopState};

const EOS: u32 = 2;

fn run(state: &mut StopState, pieces: &[(u32, &str)]) -> (String, Option<Stop>) {
    let mut text = String::new();
    for (id, piece) in pieces {
        let step = state.push(*id, piece.as_bytes());
        text.push_str(&step.text);
        if let Some(stop) = step.stop {
            return (text, Some(stop));
        }
    }
    (text, None)
}

#[test]
fn empty_stop_sequence_is_rejected_with_its_index() {
    let conditions = StopConditions {
        stop_sequences: vec!["\n".into(), String::new()],
        ..Default::default()
    };
    assert_eq!(
        StopState::new(&conditions, 0).unwrap_err(),
        Error::EmptyStopSequence { index: 1 }
    );
}

#[test]
fn zero_max_new_tokens_is_rejected() {
    let conditions = StopConditions {
        max_new_tokens: Some(0),
        ..Default::default()
    };
    assert_eq!(conditions.validate(), Err(Error::ZeroMaxNewTokens));
}

#[test]
fn prompt_longer_than_the_window_names_both_numbers() {
    let conditions = StopConditions {
        context_window: Some(2048),
        ..Default::default()
    };
    let err = StopState::new(&conditions, 3000).unwrap_err();
    assert_eq!(
        err,
        Error::PromptFillsContextWindow {
            prompt_tokens: 3000,
            context_window: 2048
        }
    );
    let message = err.to_string();
    assert!(
        message.contains("3000") && message.contains("2048"),
        "{message}"
    );
    // One token of room is enough to start.
    assert_eq!(
        StopState::new(&conditions, 2047).unwrap().tokens_left(),
        Some(1)
    );
}

#[test]
fn end_token_adds_no_text_and_flushes_held_text() {
    let conditions = StopConditions {
        end_tokens: vec![EOS, 7],
        stop_sequences: vec!["\n\n".into()],
        ..Default::default()
    };
    let mut state = StopState::new(&conditions, 5).unwrap();
    // The trailing "\n" could start "\n\n", so it waits; the end token decides it.
    let step = state.push(10, b"done\n");
    assert_eq!(step.text, "done");
    assert_eq!(state.held_back(), b"\n");
    let step = state.push(7, b"<|im_end|>");
    assert_eq!(step.text, "\n");
    assert_eq!(step.stop, Some(Stop::EndTurn { token: 7 }));
}

#[test]
fn end_token_on_the_last_allowed_token_reports_end_turn() {
    let conditions = StopConditions {
        end_tokens: vec![EOS],
        max_new_tokens: Some(2),
        ..Default::default()
    };
    let mut state = StopState::new(&conditions, 5).unwrap();
    let (text, stop) = run(&mut state, &[(10, "Hi"), (EOS, "")]);
    assert_eq!(text, "Hi");
    assert_eq!(stop, Some(Stop::EndTurn { token: EOS }));
}

#[test]
fn stop_sequence_on_the_last_allowed_token_reports_stop_sequence() {
    let conditions = StopConditions {
        max_new_tokens: Some(2),
        stop_sequences: vec!["!".into()],
        ..Default::default()
    };
    let mut state = StopState::new(&conditions, 5).unwrap();
    let (text, stop) = run(&mut state, &[(10, "Hi"), (11, "!")]);
    assert_eq!(text, "Hi");
    assert_eq!(stop.map(|s| s.reason()), Some(StopReason::StopSequence));
}

#[test]
fn max_tokens_wins_over_the_window_when_both_are_reached() {
    let conditions = StopConditions {
        max_new_tokens: Some(3),
        context_window: Some(10),
        ..Default::default()
    };
    let mut state = StopState::new(&conditions, 7).unwrap();
    let (_, stop) = run(&mut state, &[(1, "a"), (1, "b"), (1, "c"), (1, "d")]);
    assert_eq!(stop, Some(Stop::MaxTokens));
    assert_eq!(state.generated(), 3);
}

#[test]
fn include_stop_sequence_keeps_it_and_drops_what_follows() {
    let conditions = StopConditions {
        stop_sequences: vec!["</answer>".into()],
        include_stop_sequence: true,
        ..Default::default()
    };
    let mut state = StopState::new(&conditions, 0).unwrap();
    let (text, stop) = run(&mut state, &[(1, "42</ans"), (2, "wer> and more")]);
    assert_eq!(text, "42</answer>");
    assert_eq!(
        stop,
        Some(Stop::StopSequence {
            index: 0,
            text: "</answer>".into()
        })
    );
}

#[test]
fn pushes_after_a_stop_release_nothing_and_repeat_the_stop() {
    let conditions = StopConditions {
        max_new_tokens: Some(1),
        ..Default::default()
    };
    let mut state = StopState::new(&conditions, 0).unwrap();
    assert_eq!(state.push(1, b"a").stop, Some(Stop::MaxTokens));
    let again = state.push(1, b"b");
    assert_eq!(again.text, "");
    assert_eq!(again.stop, Some(Stop::MaxTokens));
    assert_eq!(state.generated(), 1);
    assert_eq!(state.tokens_left(), Some(0));
    assert_eq!(state.finish(), "");
}

#[test]
fn finish_releases_a_pending_stop_prefix() {
    let conditions = StopConditions {
        stop_sequences: vec!["STOP".into()],
        ..Default::default()
    };
    let mut state = StopState::new(&conditions, 0).unwrap();
    assert_eq!(state.push(1, b"a ST").text, "a ");
    assert_eq!(state.finish(), "ST");
}

#[test]
fn finish_turns_a_cut_character_into_a_replacement_character() {
    let mut state = StopState::new(&StopConditions::default(), 0).unwrap();
    // The first two bytes of "€" (E2 82 AC): the stream ended inside the character.
    assert_eq!(state.push(1, b"1 \xE2\x82").text, "1 ");
    assert_eq!(state.finish(), "\u{FFFD}");
}

#[test]
fn tokens_left_is_the_smaller_limit() {
    let conditions = StopConditions {
        max_new_tokens: Some(100),
        context_window: Some(8192),
        ..Default::default()
    };
    let mut state = StopState::new(&conditions, 8150).unwrap();
    assert_eq!(state.tokens_left(), Some(42));
    state.push(1, b"x");
    assert_eq!(state.tokens_left(), Some(41));
    let unlimited = StopState::new(&StopConditions::default(), 10).unwrap();
    assert_eq!(unlimited.tokens_left(), None);
}

#[test]
fn serde_uses_the_names_users_know() {
    let names: Vec<String> = [
        StopReason::EndTurn,
        StopReason::MaxTokens,
        StopReason::StopSequence,
        StopReason::ContextWindow,
    ]
    .iter()
    .map(|r| serde_json::to_string(r).unwrap())
    .collect();
    assert_eq!(
        names,
        [
            "\"end_turn\"",
            "\"max_tokens\"",
            "\"stop_sequence\"",
            "\"context_window\""
        ]
    );
    let stop = Stop::StopSequence {
        index: 0,
        text: "\n".into(),
    };
    let json = serde_json::to_string(&stop).unwrap();
    assert_eq!(
        json,
        r#"{"stop_reason":"stop_sequence","index":0,"text":"\n"}"#
    );
    assert_eq!(serde_json::from_str::<Stop>(&json).unwrap(), stop);
    assert_eq!(
        serde_json::to_string(&Stop::EndTurn { token: 2 }).unwrap(),
        r#"{"stop_reason":"end_turn","token":2}"#
    );
}

#[test]
fn conditions_deserialise_with_defaults_and_reject_unknown_fields() {
    let conditions: StopConditions =
        serde_json::from_str(r#"{"stop_sequences":["\n"],"max_new_tokens":5}"#).unwrap();
    assert_eq!(conditions.max_new_tokens, Some(5));
    assert!(conditions.end_tokens.is_empty());
    assert!(serde_json::from_str::<StopConditions>(r#"{"max_tokens":5}"#).is_err());
}

#[test]
fn a_long_stop_sequence_is_held_whole_and_matched_in_linear_time() {
    // 50,000 one-byte tokens against a 50,001-byte stop sequence: a matcher that rescans its
    // held bytes on every token would do billions of comparisons here.
    let long = "a".repeat(50_000) + "b";
    let conditions = StopConditions {
        stop_sequences: vec![long.clone()],
        ..Default::default()
    };
    let mut state = StopState::new(&conditions, 0).unwrap();
    for _ in 0..50_000 {
        assert_eq!(state.push(1, b"a").text, "");
    }
    assert_eq!(state.held_back().len(), 50_000);
    let step = state.push(2, b"b");
    assert_eq!(step.text, "");
    assert_eq!(
        step.stop,
        Some(Stop::StopSequence {
            index: 0,
            text: long
        })
    );
}
