//! Hugging Face `tokenizer.json`, encoded by the `tokenizers` crate.

use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;

use serde_json::Value as Json;

use crate::bytelevel;
use crate::vocab::{end_of_generation, vocab_methods, Fragment, Pieces, Vocab};
use crate::{EncodeOptions, Error, SpecialTokens, TokenId, TokenKind, Tokenizer};

/// A tokenizer loaded from a Hugging Face `tokenizer.json` (and, optionally, the
/// `tokenizer_config.json` beside it, which names BOS, EOS, padding and unknown tokens).
///
/// The `tokenizers` crate encodes each stretch of text between special tokens; this type splits
/// at special tokens itself, so that [`EncodeOptions::parse_special`] means the same as for the
/// GGUF tokenizers, and adds BOS itself (the file's post-processor is not used). Token bytes are
/// read from the decoder the file declares: byte-level (`ByteLevel`), SentencePiece style
/// (`▁` for a space, `<0x..>` byte fallback, a stripped leading space), or the text as it is.
pub struct HfTokenizer {
    inner: tokenizers::Tokenizer,
    vocab: Vocab,
}

impl std::fmt::Debug for HfTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HfTokenizer")
            .field("vocab_size", &self.vocab.len())
            .field("special", self.vocab.special_tokens())
            .finish()
    }
}

/// How the file's decoder turns token texts into bytes.
#[derive(Debug, Clone, Copy, Default)]
struct DecoderStyle {
    byte_level: bool,
    metaspace: bool,
    byte_fallback: bool,
    strip_leading_space: bool,
}

impl DecoderStyle {
    fn from_json(decoder: &Json) -> Self {
        let mut style = DecoderStyle::default();
        style.visit(decoder);
        style
    }

    fn visit(&mut self, decoder: &Json) {
        match decoder.get("type").and_then(Json::as_str) {
            Some("ByteLevel") => self.byte_level = true,
            Some("ByteFallback") => self.byte_fallback = true,
            Some("Metaspace") => {
                self.metaspace = true;
                let scheme = decoder.get("prepend_scheme").and_then(Json::as_str);
                let add = decoder.get("add_prefix_space").and_then(Json::as_bool);
                self.strip_leading_space = scheme.map_or(add.unwrap_or(true), |s| s != "never");
            }
            Some("Replace") => {
                let pattern = decoder
                    .get("pattern")
                    .and_then(|p| p.get("String"))
                    .and_then(Json::as_str);
                let content = decoder.get("content").and_then(Json::as_str);
                if pattern == Some("▁") && content == Some(" ") {
                    self.metaspace = true;
                }
            }
            Some("Strip") => {
                let content = decoder.get("content").and_then(Json::as_str);
                let start = decoder.get("start").and_then(Json::as_u64);
                if content == Some(" ") && start.unwrap_or(0) > 0 {
                    self.strip_leading_space = true;
                }
            }
            Some("Sequence") => {
                if let Some(list) = decoder.get("decoders").and_then(Json::as_array) {
                    for d in list {
                        self.visit(d);
                    }
                }
            }
            _ => {}
        }
    }
}

/// A token named in `tokenizer_config.json`: a string, or an object with `content`.
fn config_token(config: &Json, key: &str) -> Option<String> {
    match config.get(key)? {
        Json::String(s) => Some(s.clone()),
        Json::Object(o) => o.get("content")?.as_str().map(str::to_owned),
        _ => None,
    }
}

fn parse_json(bytes: &[u8]) -> Result<(&str, Json), Error> {
    let text = std::str::from_utf8(bytes).map_err(|e| Error::InvalidUtf8 {
        offset: e.valid_up_to(),
    })?;
    let json = serde_json::from_str(text).map_err(|e| Error::TokenizerJson {
        message: e.to_string(),
    })?;
    Ok((text, json))
}

impl HfTokenizer {
    /// Loads `tokenizer.json`, and `tokenizer_config.json` when there is one in the same folder.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        let read = |p: &Path| {
            std::fs::read(p).map_err(|e| Error::Io {
                path: p.display().to_string(),
                message: e.to_string(),
            })
        };
        let json = read(path)?;
        let config_path = path.with_file_name("tokenizer_config.json");
        let config = if config_path.exists() {
            Some(read(&config_path)?)
        } else {
            None
        };
        Self::from_bytes(&json, config.as_deref())
    }

    /// Loads a `tokenizer.json` held in memory, with an optional `tokenizer_config.json`.
    pub fn from_bytes(json: &[u8], config: Option<&[u8]>) -> Result<Self, Error> {
        let (text, parsed) = parse_json(json)?;
        let config = match config {
            Some(bytes) => Some(parse_json(bytes)?.1),
            None => None,
        };
        let mut inner: tokenizers::Tokenizer =
            text.parse()
                .map_err(
                    |e: Box<dyn std::error::Error + Send + Sync>| Error::TokenizerJson {
                        message: e.to_string(),
                    },
                )?;
        // Special tokens are split out before the text reaches the `tokenizers` crate.
        inner.set_encode_special_tokens(true);

        let vocab = inner.get_vocab(true);
        let size = vocab.values().max().map_or(0, |&m| m as usize + 1);
        if size == 0 {
            return Err(Error::EmptyVocabulary);
        }
        let mut texts = vec![String::new(); size];
        let mut kinds = vec![TokenKind::Unused; size];
        for (text, &id) in &vocab {
            texts[id as usize] = text.clone();
            kinds[id as usize] = TokenKind::Normal;
        }
        for (id, added) in inner.get_added_tokens_decoder() {
            if let Some(kind) = kinds.get_mut(id as usize) {
                *kind = if added.special {
                    TokenKind::Control
                } else {
                    TokenKind::UserDefined
                };
                texts[id as usize] = added.content.clone();
            }
        }
        let style = parsed
            .get("decoder")
            .map(DecoderStyle::from_json)
            .unwrap_or_default();
        let index: HashMap<String, TokenId> = vocab;

        let lookup = |key: &str| -> Result<Option<TokenId>, Error> {
            let Some(name) = config.as_ref().and_then(|c| config_token(c, key)) else {
                return Ok(None);
            };
            index
                .get(&name)
                .copied()
                .map(Some)
                .ok_or_else(|| Error::TokenizerJson {
                    message: format!(
                        "tokenizer_config.json names {key} {name:?}, which is not a token"
                    ),
                })
        };
        let model_unk = parsed
            .get("model")
            .and_then(|m| m.get("unk_token"))
            .and_then(Json::as_str)
            .and_then(|t| index.get(t).copied());
        let mut special = SpecialTokens {
            bos: lookup("bos_token")?,
            eos: lookup("eos_token")?,
            eot: None,
            pad: lookup("pad_token")?,
            unk: lookup("unk_token")?.or(model_unk),
            end_of_generation: Vec::new(),
        };
        end_of_generation(|t| index.get(t).copied(), &mut kinds, &mut special);
        if let Some(unk) = special.unk {
            if kinds[unk as usize] == TokenKind::Normal {
                kinds[unk as usize] = TokenKind::Unknown;
            }
        }

        let mut pieces = Pieces::default();
        for (text, kind) in texts.iter_mut().zip(kinds.iter_mut()) {
            match kind {
                TokenKind::Normal if style.byte_level => pieces.push(&bytelevel::decode(text)),
                TokenKind::Normal => {
                    let byte = style
                        .byte_fallback
                        .then(|| text.strip_prefix("<0x")?.strip_suffix('>'))
                        .flatten()
                        .filter(|hex| hex.len() == 2)
                        .and_then(|hex| u8::from_str_radix(hex, 16).ok());
                    match byte {
                        Some(b) => {
                            *kind = TokenKind::Byte;
                            pieces.push(&[b]);
                        }
                        None if style.metaspace => pieces.push(text.replace('▁', " ").as_bytes()),
                        None => pieces.push(text.as_bytes()),
                    }
                }
                TokenKind::Unused => pieces.push(&[]),
                _ => pieces.push(text.as_bytes()),
            }
        }
        let add_bos = config
            .as_ref()
            .and_then(|c| c.get("add_bos_token"))
            .and_then(Json::as_bool)
            .unwrap_or(false);
        Ok(HfTokenizer {
            inner,
            vocab: Vocab::new(
                texts,
                kinds,
                pieces,
                index,
                special,
                add_bos,
                style.strip_leading_space,
            ),
        })
    }
}

impl Tokenizer for HfTokenizer {
    fn encode_with_plain_ranges(
        &self,
        text: &str,
        plain: &[Range<usize>],
        options: EncodeOptions,
    ) -> Result<Vec<TokenId>, Error> {
        let mut out = self.vocab.start(options, text.len() / 3 + 2)?;
        for fragment in self.vocab.split(text, options.parse_special, plain)? {
            match fragment {
                Fragment::Token(id) => out.push(id),
                Fragment::Text(t) => {
                    let encoding =
                        self.inner
                            .encode_fast(t, false)
                            .map_err(|e| Error::HfTokenizer {
                                operation: "encode",
                                message: e.to_string(),
                            })?;
                    out.extend_from_slice(encoding.get_ids());
                }
            }
        }
        Ok(out)
    }

    vocab_methods!();
}
