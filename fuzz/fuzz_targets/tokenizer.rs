//! Fuzzes `nextok-tokenizer`: encoding, decoding and the streaming decoder, for a byte-level BPE
//! and a SentencePiece vocabulary built in memory (so that no model file is needed).
//!
//! Input: byte 0 chooses what to do: bit 0 parse special tokens, bit 1 skip special tokens when
//! decoding, bit 2 treat the rest as token ids (little-endian `u16` pairs, some outside the
//! vocabulary) instead of text (lossy UTF-8). It checks that nothing panics, that encoded text
//! decodes back to itself, that unknown ids are typed errors, and that streaming gives exactly the
//! whole decode.

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use nextok_gguf::write::GgufWriter;
use nextok_gguf::{Array, GgufFile, Value};
use nextok_tokenizer::{load_from_gguf, EncodeOptions, Error, StreamDecoder, Tokenizer};

fn byte_char(b: u8) -> char {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable(b) {
        return b as char;
    }
    let n = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(0x100 + n).unwrap()
}

fn tokenizers() -> &'static [Box<dyn Tokenizer>; 2] {
    static TOKS: OnceLock<[Box<dyn Tokenizer>; 2]> = OnceLock::new();
    TOKS.get_or_init(|| {
        // Byte-level BPE: two control tokens, the 256 bytes, a few merges.
        let mut tokens = vec!["<|endoftext|>".to_owned(), "<|im_end|>".to_owned()];
        tokens.extend((0..=255u8).map(|b| byte_char(b).to_string()));
        let merges: Vec<String> = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "a a", "aa aa"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        for m in &merges {
            tokens.push(m.replace(' ', ""));
        }
        let mut types = vec![1i32; tokens.len()];
        types[0] = 3;
        types[1] = 3;
        let bpe = GgufWriter::new()
            .metadata("tokenizer.ggml.model", Value::String("gpt2".into()))
            .metadata("tokenizer.ggml.pre", Value::String("smollm".into()))
            .metadata("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)))
            .metadata("tokenizer.ggml.token_type", Value::Array(Array::I32(types)))
            .metadata("tokenizer.ggml.merges", Value::Array(Array::String(merges)))
            .metadata("tokenizer.ggml.eos_token_id", Value::U32(1));
        // SentencePiece: <unk>, <s>, </s>, 256 byte tokens, a few scored pieces.
        let mut tokens: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
        let mut types = vec![2, 3, 3];
        let mut scores = vec![0.0f32; 3];
        for b in 0..=255u8 {
            tokens.push(format!("<0x{b:02X}>"));
            types.push(6);
            scores.push(0.0);
        }
        for (i, p) in ["▁", "▁t", "he", "▁the", "in", "a", "aa", "é"]
            .iter()
            .enumerate()
        {
            tokens.push((*p).to_owned());
            types.push(1);
            scores.push(-(i as f32));
        }
        let spm = GgufWriter::new()
            .metadata("tokenizer.ggml.model", Value::String("llama".into()))
            .metadata("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)))
            .metadata("tokenizer.ggml.token_type", Value::Array(Array::I32(types)))
            .metadata("tokenizer.ggml.scores", Value::Array(Array::F32(scores)));
        let load =
            |w: GgufWriter| load_from_gguf(&GgufFile::from_bytes(w.to_bytes()).unwrap()).unwrap();
        [load(bpe), load(spm)]
    })
}

fn stream_equals_decode(tok: &dyn Tokenizer, ids: &[u32], skip: bool) {
    let whole = tok.decode(ids, skip);
    let mut stream = StreamDecoder::new(tok, skip);
    let mut text = String::new();
    for &id in ids {
        match stream.push(id) {
            Ok(part) => text.push_str(&part),
            Err(e) => {
                assert!(matches!(e, Error::UnknownTokenId { .. }), "{e:?}");
                assert!(whole.is_err());
                return;
            }
        }
    }
    text.push_str(&stream.finish());
    assert_eq!(text, whole.unwrap());
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let parse_special = flags & 1 != 0;
    let skip = flags & 2 != 0;
    for tok in tokenizers() {
        if flags & 4 != 0 {
            let ids: Vec<u32> = rest
                .chunks_exact(2)
                .map(|c| u32::from(u16::from_le_bytes([c[0], c[1]])) % 300)
                .collect();
            stream_equals_decode(tok.as_ref(), &ids, skip);
        } else {
            let text = String::from_utf8_lossy(rest);
            let options = EncodeOptions {
                add_bos: false,
                parse_special,
            };
            let ids = tok.encode(&text, options).unwrap();
            // SentencePiece cannot give back a literal `▁` (it is its space), and it puts a
            // space after every parsed special token that decoding does not remove.
            if !text.contains('▁') && !(parse_special && tok.strips_leading_space()) {
                assert_eq!(tok.decode(&ids, false).unwrap(), text);
            }
            stream_equals_decode(tok.as_ref(), &ids, skip);
        }
    }
});
