//! `TokenVocab::from_tokenizer` on SmolLM2's real tokenizer (the GGUF file of
//! `cargo xtask fetch-model`, or `$NEXTOK_MODEL`): control tokens get no bytes, so no JSON or
//! regex constraint ever allows `<|im_start|>`, even where its text would fit; the vocabulary of
//! `Tokenizer::all_token_bytes` would allow it there.

mod common;

use std::sync::Arc;

use nextok_constraints::{
    from_json_schema, json_any, Constraint, JsonOptions, RegexConstraint, TokenVocab,
};
use nextok_tokenizer::{load_from_gguf_path, Tokenizer};

fn tokenizer() -> Box<dyn Tokenizer> {
    let path = common::model_path();
    load_from_gguf_path(&path).unwrap_or_else(|e| {
        panic!(
            "cannot load the tokenizer of {} ({e}): run `cargo xtask fetch-model` first",
            path.display()
        )
    })
}

fn allowed(mask: &[u64], token: u32) -> bool {
    mask[(token / 64) as usize] >> (token % 64) & 1 == 1
}

/// Advances `c` over `text`, cut into tokens by greedy longest match, and returns the mask after.
fn mask_after(c: &mut dyn Constraint, text: &str) -> Vec<u64> {
    let vocab = Arc::clone(c.vocab());
    for t in vocab
        .greedy_tokenize(text.as_bytes())
        .expect("every byte is a token")
    {
        c.advance(t).expect("the prefix is valid");
    }
    let mut mask = vocab.empty_mask();
    c.fill_mask(&mut mask).expect("mask");
    mask
}

#[test]
fn from_tokenizer_is_the_vocabulary_built_by_hand_and_from_the_metadata() {
    let vocab = TokenVocab::from_tokenizer(tokenizer().as_ref()).expect("vocab");
    let (by_hand, _) = common::smollm2();
    let from_metadata = common::smollm2_vocab_from_gguf();
    assert_eq!(vocab.len(), 49_152);
    // SmolLM2's end tokens as llama.cpp sees them (conformance README).
    assert_eq!(vocab.eos_tokens(), [0, 2, 4]);
    for id in 0..vocab.len() as u32 {
        assert_eq!(vocab.token_bytes(id), by_hand.token_bytes(id), "token {id}");
        assert_eq!(
            vocab.token_bytes(id),
            from_metadata.token_bytes(id),
            "token {id}"
        );
    }
}

#[test]
fn no_json_or_regex_constraint_allows_im_start() {
    let tok = tokenizer();
    let im_start = tok
        .token_id("<|im_start|>")
        .expect("SmolLM2 has <|im_start|>");
    let lt = tok.token_id("<").expect("SmolLM2 has <");
    // Control tokens' text is their bytes for decoding: that is what makes the test bite.
    assert_eq!(tok.token_bytes(im_start).expect("id"), b"<|im_start|>");

    let ours = Arc::new(TokenVocab::from_tokenizer(tok.as_ref()).expect("vocab"));
    let naive = Arc::new(
        TokenVocab::new(
            tok.all_token_bytes(),
            &tok.special_tokens().end_of_generation,
        )
        .expect("vocab"),
    );
    let json = JsonOptions::default();
    let schema = serde_json::json!({
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "required": ["name"]
    });

    // Inside a JSON string, and where a regex of the same characters may continue, `<` is
    // allowed, and so would `<|im_start|>` be on the bytes of `all_token_bytes`.
    for vocab in [&ours, &naive] {
        let cases: Vec<(Box<dyn Constraint>, &str)> = vec![
            (
                Box::new(from_json_schema(&schema, vocab, &json).expect("schema")),
                "{\"name\":\"",
            ),
            (Box::new(json_any(vocab, &json).expect("json")), "[\""),
            (
                Box::new(RegexConstraint::from_regex("[a-z<|>_]*", vocab).expect("regex")),
                "ab",
            ),
        ];
        for (mut c, prefix) in cases {
            let mask = mask_after(c.as_mut(), prefix);
            assert!(allowed(&mask, lt), "`<` after {prefix:?}");
            let expected = Arc::ptr_eq(vocab, &naive);
            assert_eq!(
                allowed(&mask, im_start),
                expected,
                "<|im_start|> after {prefix:?} on the {} vocabulary",
                if expected { "naive" } else { "from_tokenizer" }
            );
        }
    }

    // And never at the start of any of them on the vocabulary from the tokenizer.
    let starts: Vec<Box<dyn Constraint>> = vec![
        Box::new(json_any(&ours, &json).expect("json")),
        Box::new(from_json_schema(&schema, &ours, &json).expect("schema")),
        Box::new(RegexConstraint::from_regex("<.*", &ours).expect("regex")),
    ];
    for mut c in starts {
        let mut mask = ours.empty_mask();
        c.fill_mask(&mut mask).expect("mask");
        assert!(!allowed(&mask, im_start));
    }
}
