//! Streaming detokenization.

use crate::{decoded_piece, Error, TokenId, Tokenizer};

/// Turns token ids into text one id at a time, returning only whole characters.
///
/// Decoding each token on its own is wrong: a character can be split across tokens (byte-level
/// BPE spells `😀` with up to four tokens), and decoding a part alone gives U+FFFD. This decoder
/// keeps the bytes of an unfinished character until the next tokens complete it. Bytes that can
/// never become a character are replaced by U+FFFD as soon as that is certain, exactly as
/// [`String::from_utf8_lossy`] replaces them on the whole sequence, so that the text returned by
/// [`StreamDecoder::push`] and then [`StreamDecoder::finish`], joined, always equals
/// [`Tokenizer::decode`] of all the ids at once (with the same `skip_special`), SentencePiece's
/// leading space included.
///
/// ```
/// # use nextok_gguf::{write::GgufWriter, Array, GgufFile, Value};
/// use nextok_tokenizer::{load_from_gguf, StreamDecoder, Tokenizer};
/// # let tokens: Vec<String> = (0..=255u8).map(|b| format!("<0x{b:02X}>")).collect();
/// # let types = vec![6; 256];
/// # let file = GgufFile::from_bytes(GgufWriter::new()
/// #     .metadata("tokenizer.ggml.model", Value::String("llama".into()))
/// #     .metadata("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)))
/// #     .metadata("tokenizer.ggml.token_type", Value::Array(Array::I32(types)))
/// #     .to_bytes())?;
/// // A vocabulary of the 256 byte tokens only: "é" is two tokens, 0xC3 and 0xA9.
/// let tokenizer = load_from_gguf(&file)?;
/// let mut stream = StreamDecoder::new(tokenizer.as_ref(), false);
/// assert_eq!(stream.push(0x61)?, "a");
/// assert_eq!(stream.push(0xC3)?, ""); // half a character: nothing yet
/// assert_eq!(stream.push(0xA9)?, "é");
/// assert_eq!(stream.finish(), "");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct StreamDecoder<'t, T: Tokenizer + ?Sized> {
    tokenizer: &'t T,
    skip_special: bool,
    at_start: bool,
    /// Bytes of a character that is not finished yet (at most three).
    pending: Vec<u8>,
}

impl<'t, T: Tokenizer + ?Sized> StreamDecoder<'t, T> {
    /// A decoder for a sequence that starts with the next id pushed.
    pub fn new(tokenizer: &'t T, skip_special: bool) -> Self {
        StreamDecoder {
            tokenizer,
            skip_special,
            at_start: true,
            pending: Vec::new(),
        }
    }

    /// Adds one token and returns the text it completes (possibly empty).
    pub fn push(&mut self, id: TokenId) -> Result<String, Error> {
        let Some(piece) = decoded_piece(self.tokenizer, id, self.skip_special, &mut self.at_start)?
        else {
            return Ok(String::new());
        };
        self.pending.extend_from_slice(piece);
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(text) => {
                    out.push_str(text);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    // The prefix was just checked to be UTF-8.
                    out.push_str(&String::from_utf8_lossy(valid));
                    match e.error_len() {
                        // Bytes that no continuation can make valid: one U+FFFD, as the lossy
                        // conversion of the whole sequence would give.
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &after[bad..];
                        }
                        // An unfinished character at the end: wait for more bytes.
                        None => {
                            rest = after;
                            break;
                        }
                    }
                }
            }
        }
        let consumed = self.pending.len() - rest.len();
        self.pending.drain(..consumed);
        Ok(out)
    }

    /// Ends the sequence: returns U+FFFD if an unfinished character is left, else nothing, and
    /// makes the decoder ready for a new sequence.
    pub fn finish(&mut self) -> String {
        let out = if self.pending.is_empty() {
            String::new()
        } else {
            char::REPLACEMENT_CHARACTER.to_string()
        };
        self.pending.clear();
        self.at_start = true;
        out
    }

    /// Whether bytes of an unfinished character are waiting.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }
}
