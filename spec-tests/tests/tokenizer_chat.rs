//! Goldens from the specification's chapter "Inference and Decoding", section "Decoder-only: how
//! chat models generate": the Llama 3 token sequence of its table "What a chat looks like as
//! tokens", and the two-turn translation chat.

use nextok_tokenizer::{ChatTemplate, EncodeOptions, HfTokenizer, Message, Tokenizer};

/// The table "What a chat looks like as tokens", row by row: start of text
/// `<|begin_of_text|>`; user header `<|start_header_id|> user <|end_header_id|>, then a blank
/// line`; the user's message; end of turn `<|eot_id|>`; assistant header, then a blank line.
const LLAMA3_TABLE: &str = concat!(
    "<|begin_of_text|>",
    "<|start_header_id|>user<|end_header_id|>\n\n",
    "Translate to Italian: I love you very much",
    "<|eot_id|>",
    "<|start_header_id|>assistant<|end_header_id|>\n\n",
);

#[test]
fn llama3_template_gives_the_table_sequence() {
    let template = ChatTemplate::builtin("llama3").unwrap();
    let text = template
        .render(
            &[Message::user("Translate to Italian: I love you very much")],
            true,
        )
        .unwrap();
    assert_eq!(text, LLAMA3_TABLE);
}

/// "A longer conversation simply repeats header, message and end-of-turn for every turn": the
/// two-turn chat of the section's example (User: Translate...; Assistant: Ti amo molto; User:
/// Now make it more formal.), ending with the assistant header the model continues from.
#[test]
fn llama3_two_turn_translation_chat() {
    let template = ChatTemplate::builtin("llama3").unwrap();
    let chat = [
        Message::user("Translate to Italian: I love you very much"),
        Message::assistant("Ti amo molto"),
        Message::user("Now make it more formal."),
    ];
    let expected = concat!(
        "<|begin_of_text|>",
        "<|start_header_id|>user<|end_header_id|>\n\nTranslate to Italian: I love you very much<|eot_id|>",
        "<|start_header_id|>assistant<|end_header_id|>\n\nTi amo molto<|eot_id|>",
        "<|start_header_id|>user<|end_header_id|>\n\nNow make it more formal.<|eot_id|>",
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
    );
    assert_eq!(template.render(&chat, true).unwrap(), expected);
    // The spec's word picture of the same prompt: [start] user: ... [end of turn] assistant: Ti
    // amo molto [end of turn] user: ... [end of turn] assistant:
    let words = expected
        .replace("<|begin_of_text|>", "[start] ")
        .replace("<|start_header_id|>", "")
        .replace("<|end_header_id|>\n\n", ": ")
        .replace("<|eot_id|>", " [end of turn] ");
    assert_eq!(
        words.trim_end(),
        "[start] user: Translate to Italian: I love you very much [end of turn] assistant: Ti amo \
         molto [end of turn] user: Now make it more formal. [end of turn] assistant:"
    );
}

/// The table's special tokens are single tokens ("special tokens, added to the vocabulary for
/// this purpose"): a byte-level vocabulary of the 256 bytes plus Llama 3's four special tokens
/// (256 `<|begin_of_text|>`, 257/258 the header markers, 259 `<|eot_id|>`) encodes the rendered
/// prompt with exactly those ids, in the table's order, around ordinary text.
#[test]
fn llama3_sequence_as_tokens() {
    // GPT-2's byte-level alphabet: printable bytes stand for themselves, the others from U+0100.
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    let mut vocab = Vec::new();
    let mut moved = 0u32;
    for b in 0..=255u8 {
        let c = if printable(b) {
            b as char
        } else {
            moved += 1;
            char::from_u32(0xFF + moved).unwrap()
        };
        let key = match c {
            '"' => "\\\"".to_owned(),
            '\\' => "\\\\".to_owned(),
            c => c.to_string(),
        };
        vocab.push(format!("\"{key}\": {b}"));
    }
    let specials = [
        (256, "<|begin_of_text|>"),
        (257, "<|start_header_id|>"),
        (258, "<|end_header_id|>"),
        (259, "<|eot_id|>"),
    ];
    let added: Vec<String> = specials
        .iter()
        .map(|(id, t)| {
            format!(
                r#"{{"id": {id}, "content": "{t}", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}}"#
            )
        })
        .collect();
    let byte_level = r#"{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}"#;
    let json = format!(
        r#"{{"version": "1.0", "added_tokens": [{}], "normalizer": null, "pre_tokenizer": {byte_level}, "post_processor": null, "decoder": {byte_level}, "model": {{"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null, "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false, "vocab": {{{}}}, "merges": []}}}}"#,
        added.join(", "),
        vocab.join(", ")
    );
    let config = br#"{"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}"#;
    let tok = HfTokenizer::from_bytes(json.as_bytes(), Some(config)).unwrap();
    let ids = tok
        .encode(LLAMA3_TABLE, EncodeOptions::parse_special())
        .unwrap();
    let special: Vec<u32> = ids.iter().copied().filter(|&id| id >= 256).collect();
    assert_eq!(special, [256, 257, 258, 259, 257, 258]);
    assert_eq!(ids[0], 256);
    assert_eq!(*ids.last().unwrap(), b'\n' as u32);
    assert_eq!(tok.decode(&ids, false).unwrap(), LLAMA3_TABLE);
    // "the end-of-turn token at which generation stops".
    assert!(tok.is_end_of_generation(259));
    assert_eq!(tok.special_tokens().bos, Some(256));
    // Without parsing special tokens, the markers are plain text.
    let plain = tok.encode(LLAMA3_TABLE, EncodeOptions::plain()).unwrap();
    assert!(plain.iter().all(|&id| id < 256));
}
