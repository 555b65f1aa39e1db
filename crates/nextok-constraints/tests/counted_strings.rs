//! Strings of a long bounded length over SmolLM2's real vocabulary (the GGUF file of `cargo
//! xtask fetch-model`, or `$NEXTOK_MODEL`): `{"type": "string", "minLength": 400}` is a chain
//! of hundreds of automaton states that count characters, each with a mask of its own in the
//! vocabulary's cache (issue #16). Every mask
//! of a walk through the bound must equal what `advance` takes, and the closing quote must be
//! allowed exactly when serde_json reads the output so far, closed, as a string of the right
//! length.

mod common;

use common::{bit, check_mask};
use nextok_constraints::{from_json_schema, Constraint, JsonOptions};
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use serde_json::json;

/// Whether `content` (the bytes after the opening quote) closed by a quote is a JSON string of
/// `min..=max` characters, by serde_json.
fn closes(content: &[u8], min: usize, max: Option<usize>) -> bool {
    let text = [b"\"", content, b"\""].concat();
    serde_json::from_slice::<String>(&text)
        .is_ok_and(|s| s.chars().count() >= min && max.is_none_or(|m| s.chars().count() <= m))
}

#[test]
fn long_length_bounds_mask_exactly_over_the_real_vocabulary() {
    let (vocab, _) = common::smollm2();
    let quote = common::token_id(&vocab, "\"");
    // Tokens of plain text, mostly several characters each, so that a walk reaches the bound
    // in a hundred steps or so; one step in `ODDS` takes any allowed token instead (escapes,
    // multi-byte characters, split UTF-8 sequences).
    let plain: Vec<u32> = (0..vocab.len() as u32)
        .filter(|&t| {
            let b = vocab.token_bytes(t).unwrap_or_default();
            b.len() >= 3 && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b' ')
        })
        .collect();
    assert!(plain.len() > 10_000, "{}", plain.len());
    const ODDS: u32 = 5;
    // Several walks of one bound share the vocabulary's cache, so that the later ones read
    // masks the earlier ones stored.
    let bounds = [
        (400, None),
        (400, None),
        (400, None),
        (400, None),
        (400, Some(430)),
        (250, Some(260)),
    ];
    for (seed, (min, max)) in bounds.into_iter().enumerate() {
        let mut schema = json!({"type": "string", "minLength": min});
        if let Some(m) = max {
            schema["maxLength"] = json!(m);
        }
        let mut c = from_json_schema(&schema, &vocab, &JsonOptions::default()).expect("compiles");
        let mut rng = ChaCha8Rng::seed_from_u64(seed as u64);
        let mut out: Vec<u8> = Vec::new();
        for step in 0..400 {
            let mask = check_mask(&mut c, &out);
            if step == 0 {
                assert!(bit(&mask, quote), "{schema}: no opening quote");
                c.advance(quote).expect("the opening quote");
                out.push(b'"');
                continue;
            }
            // Closed, by serde_json's reading (a token may close it after other characters).
            if serde_json::from_slice::<String>(&out).is_ok() {
                // Only an end token is left: the walk is done.
                assert!(bit(&mask, 0), "{schema}: no end after {step} tokens");
                c.advance(0).expect("the end token");
                break;
            }
            // After an odd run of backslashes, a quote is an escaped character instead.
            let escaping = out.iter().rev().take_while(|&&b| b == b'\\').count() % 2 == 1;
            let may_close = !escaping && closes(&out[1..], min, max);
            assert_eq!(
                bit(&mask, quote),
                escaping || may_close,
                "{schema}: the quote after {:?}",
                String::from_utf8_lossy(&out)
            );
            let t = if may_close && rng.next_u32().is_multiple_of(4) {
                quote
            } else {
                let liked: Vec<u32> = plain.iter().copied().filter(|&t| bit(&mask, t)).collect();
                let pool: Vec<u32> = if liked.is_empty() || rng.next_u32().is_multiple_of(ODDS) {
                    (1..vocab.len() as u32)
                        .filter(|&t| bit(&mask, t) && t != quote)
                        .collect()
                } else {
                    liked
                };
                if pool.is_empty() {
                    quote
                } else {
                    pool[rng.next_u32() as usize % pool.len()]
                }
            };
            c.advance(t).expect("an allowed token");
            out.extend_from_slice(vocab.token_bytes(t).expect("a token of the vocabulary"));
        }
        assert!(c.is_finished(), "{schema}: walk did not end");
        let s: String = serde_json::from_slice(&out).expect("a JSON string");
        let n = s.chars().count();
        assert!(n >= min && max.is_none_or(|m| n <= m), "{schema}: {n}");
    }
}
