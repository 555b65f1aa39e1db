//! Golden tests for constrained decoding: the specification's "Constrained decoding" section,
//! worked example "the fraud label" (its table of probabilities before and after masking), the
//! paragraph "Longer formats", and the caution "Measure what you deploy".

use std::sync::Arc;

use nextok_constraints::{apply_mask, from_gbnf, Constraint, RegexConstraint, TokenVocab};

const FRAUD: u32 = 0;
const OK: u32 = 1;
const I: u32 = 2;
const THE: u32 = 3;
const EOS: u32 = 6;

/// The example's vocabulary: FRAUD, OK, I, The, two stand-ins for "all other tokens", and an end
/// token.
fn vocab() -> Arc<TokenVocab> {
    let tokens = ["FRAUD", "OK", "I", "The", "Maybe", "Yes", "<eos>"];
    Arc::new(
        TokenVocab::new(
            tokens.iter().map(|t| t.as_bytes().to_vec()).collect(),
            &[EOS],
        )
        .unwrap(),
    )
}

/// The table's probabilities as logits: FRAUD 0.55, OK 0.30, I 0.08, The 0.05, all other tokens
/// 0.02 (split evenly between the two stand-ins), the end token 0.
fn logits() -> Vec<f32> {
    [0.55f64, 0.30, 0.08, 0.05, 0.01, 0.01, 0.0]
        .iter()
        .map(|p| p.ln() as f32)
        .collect()
}

fn softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let e: Vec<f64> = logits.iter().map(|&l| (l as f64 - max).exp()).collect();
    let s: f64 = e.iter().sum();
    e.iter().map(|x| x / s).collect()
}

#[test]
fn fraud_label_mask_and_renormalise() {
    let vocab = vocab();
    let mut c = RegexConstraint::from_choices(&["FRAUD", "OK"], &vocab).unwrap();
    let mut mask = vocab.empty_mask();
    c.fill_mask(&mut mask).unwrap();
    let mut l = logits();
    apply_mask(&mut l, &mask);
    let p = softmax(&l);
    // "After masking and renormalising": 0.55 / 0.85 = 0.647 and 0.30 / 0.85 = 0.353, printed to
    // three decimals, so the tolerance is half a unit in the last place.
    assert!(
        (p[FRAUD as usize] - 0.647).abs() < 5e-4,
        "{}",
        p[FRAUD as usize]
    );
    assert!((p[OK as usize] - 0.353).abs() < 5e-4, "{}", p[OK as usize]);
    // "I", "The" and all other tokens get exactly 0 (their logits are −∞).
    for t in [I, THE, 4, 5, EOS] {
        assert_eq!(p[t as usize], 0.0);
    }
    // "With greedy decoding it is FRAUD."
    let greedy = (0..l.len()).max_by(|&a, &b| l[a].total_cmp(&l[b])).unwrap() as u32;
    assert_eq!(greedy, FRAUD);
    c.advance(greedy).unwrap();
    assert!(c.is_complete());
}

#[test]
fn threshold_depends_on_the_kind_of_score() {
    // "with a threshold of 0.6, this transaction would pass without constrained decoding (0.55)
    // but be flagged with it (0.647)".
    let vocab = vocab();
    let raw = softmax(&logits())[FRAUD as usize];
    let mut c = RegexConstraint::from_choices(&["FRAUD", "OK"], &vocab).unwrap();
    let mut mask = vocab.empty_mask();
    c.fill_mask(&mut mask).unwrap();
    let mut l = logits();
    apply_mask(&mut l, &mask);
    let constrained = softmax(&l)[FRAUD as usize];
    assert!((raw - 0.55).abs() < 5e-3 && (constrained - 0.647).abs() < 5e-4);
    let threshold = 0.6;
    assert!(raw < threshold, "not flagged without the mask");
    assert!(constrained >= threshold, "flagged with the mask");
}

#[test]
fn longer_formats_follow_the_output() {
    // "After {"label": " only the start of FRAUD or OK is allowed; after the label, only the
    // closing "; and so on until the object is complete." Single-byte tokens plus whole words.
    let mut tokens: Vec<Vec<u8>> = vec![b"<eos>".to_vec()];
    tokens.extend((0..=255u8).map(|b| vec![b]));
    for w in ["FRAUD", "OK", "FR", "\"}", "{\"label\": \""] {
        tokens.push(w.as_bytes().to_vec());
    }
    let vocab = Arc::new(TokenVocab::new(tokens, &[0]).unwrap());
    let grammar = r#"root ::= "{\"label\": \"" ("FRAUD" | "OK") "\"}""#;
    let mut c = from_gbnf(grammar, &vocab).unwrap();
    let opening = (0..vocab.len() as u32)
        .find(|&t| vocab.token_bytes(t) == Some(b"{\"label\": \""))
        .unwrap();
    c.advance(opening).unwrap();
    let allowed = |c: &mut dyn Constraint| -> Vec<Vec<u8>> {
        let mut mask = vocab.empty_mask();
        c.fill_mask(&mut mask).unwrap();
        (0..vocab.len() as u32)
            .filter(|&t| mask[t as usize / 64] >> (t % 64) & 1 == 1)
            .map(|t| vocab.token_bytes(t).unwrap().to_vec())
            .collect()
    };
    let mut after_opening = allowed(&mut c);
    after_opening.sort();
    assert_eq!(
        after_opening,
        vec![
            b"F".to_vec(),
            b"FR".to_vec(),
            b"FRAUD".to_vec(),
            b"O".to_vec(),
            b"OK".to_vec()
        ]
    );
    let fraud = (0..vocab.len() as u32)
        .find(|&t| vocab.token_bytes(t) == Some(b"FRAUD"))
        .unwrap();
    c.advance(fraud).unwrap();
    let mut after_label = allowed(&mut c);
    after_label.sort();
    assert_eq!(after_label, vec![b"\"".to_vec(), b"\"}".to_vec()]);
    let close = (0..vocab.len() as u32)
        .find(|&t| vocab.token_bytes(t) == Some(b"\"}"))
        .unwrap();
    c.advance(close).unwrap();
    assert!(c.is_complete());
    assert_eq!(allowed(&mut c), vec![b"<eos>".to_vec()]);
}
