//! Text to token ids and back: byte-level BPE and SentencePiece tokenizers from GGUF or
//! `tokenizer.json`, chat templates, streaming detokenization.
//!
//! # Contents
//! - [`Tokenizer`]: the one interface. Three implementations:
//!   - [`BpeTokenizer`]: byte-level BPE from a GGUF file whose `tokenizer.ggml.model` is `gpt2`
//!     (SmolLM2, Llama 3, Qwen 2, GPT-2), with the pre-tokenizer `tokenizer.ggml.pre` names
//!     ([`PreTokenizer`]).
//!   - [`SpmTokenizer`]: SentencePiece from a GGUF file whose `tokenizer.ggml.model` is `llama`
//!     (Llama 2, Mistral, TinyLlama): score-ordered merges, byte fallback, the leading space.
//!   - `HfTokenizer`: a Hugging Face `tokenizer.json`, encoded by the `tokenizers` crate (the
//!     `hf` feature).
//! - [`load_from_gguf`]: picks the right one for a GGUF file; [`load_from_gguf_path`] opens the
//!   file too. [`GgufFile`] is re-exported, so loading needs no second dependency.
//! - [`StreamDecoder`]: detokenization one id at a time that only ever returns whole characters.
//! - `ChatTemplate`: a model's Jinja chat template (or a built-in one) rendered as transformers
//!   renders it (the `template` feature).
//!
//! # Crate features
//! Both are on by default; `default-features = false` leaves a GGUF-only tokenizer that compiles
//! neither the `tokenizers` crate nor minijinja (the GGUF tokenizers need neither).
//! - `hf`: `HfTokenizer`, over the `tokenizers` crate.
//! - `template`: `ChatTemplate` and `Message`, over minijinja and minijinja-contrib.
//!
//! # Constrained decoding
//! A constraint must never allow a control token such as `<|im_start|>`, whose bytes are its
//! text. [`Tokenizer::all_token_bytes`] gives every token's bytes as decoding sees them, control
//! tokens' text included; `nextok_constraints::TokenVocab::from_tokenizer` builds the vocabulary
//! a constraint needs (control tokens without bytes, the end-of-generation tokens as ends).
//!
//! # Parity with llama.cpp
//! The GGUF tokenizers follow llama.cpp (`src/llama-vocab.cpp`): the same pre-tokenizer regular
//! expressions, merge order (lowest rank first, leftmost first among equals), special-token
//! splitting (longest special text first; control tokens only when special tokens are parsed,
//! user-defined tokens always), SentencePiece's space prefix, and the same rule for the set of
//! tokens that end a generation. The tests check the 16 reference tokenizations of
//! `conformance/tokenize.json` against the real SmolLM2 model, and llama.cpp's own
//! tokenizations (`tests/data/`) of 3,200 texts over SmolLM2 and small `gpt-2`, `smollm`,
//! `llama-bpe`, `qwen2` and SentencePiece vocabularies.
//!
//! # Decoding
//! Every token has exact bytes ([`Tokenizer::token_bytes`]): a byte-level BPE token's bytes, a
//! SentencePiece piece with `▁` as a space, a byte token's single byte, or a special token's text.
//! Decoding concatenates them (skipping control tokens when asked) and, for SentencePiece, drops
//! the space the encoder put in front of the text. Bytes that are not UTF-8 become U+FFFD, exactly
//! as [`String::from_utf8_lossy`] does on the whole sequence; [`StreamDecoder`] gives the same
//! text piece by piece.
//!
//! # Speed
//! Words are merged with a rank lookup per adjacent pair (a priority queue for words over 48
//! bytes), and each distinct word is merged once and then taken from a cache. On SmolLM2's
//! vocabulary `cargo bench -p nextok-benches --bench tokenizer` measured about 18 MiB/s against
//! the `tokenizers` crate's 1.1 MiB/s on 3 MB of mixed text, with identical ids.
//!
//! # Differences from the references
//! - A byte that no token spells (SmolLM2 has no token for 0x04 or 0xF5 to 0xFF, for example)
//!   is dropped when encoding, as llama.cpp drops it; such text cannot round-trip.
//! - Per-model special-token attributes that llama.cpp hard-codes (`lstrip`/`rstrip` around a
//!   few models' special tokens) are not applied.
//! - The chat-template environment has no `strftime_now` (templates that use it fall back to
//!   their default date when it is undefined).
//!
//! # Example
//! A tiny byte-level BPE vocabulary built in memory (real ones come from a model file, with
//! [`load_from_gguf_path`]):
//! ```
//! use nextok_gguf::{write::GgufWriter, Array, Value};
//! use nextok_tokenizer::{load_from_gguf, EncodeOptions, GgufFile, StreamDecoder};
//!
//! // Byte-level BPE spells a space as `Ġ`.
//! let mut tokens: Vec<String> = vec!["<|endoftext|>".into()];
//! tokens.extend(["h", "i", "Ġ", "hi", "Ġhi"].map(String::from));
//! let types = vec![3, 1, 1, 1, 1, 1]; // 3 = control, 1 = normal
//! let file = GgufFile::from_bytes(
//!     GgufWriter::new()
//!         .metadata("tokenizer.ggml.model", Value::String("gpt2".into()))
//!         .metadata("tokenizer.ggml.pre", Value::String("gpt2".into()))
//!         .metadata("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)))
//!         .metadata("tokenizer.ggml.token_type", Value::Array(Array::I32(types)))
//!         .metadata(
//!             "tokenizer.ggml.merges",
//!             Value::Array(Array::String(vec!["h i".into(), "Ġ hi".into()])),
//!         )
//!         .metadata("tokenizer.ggml.eos_token_id", Value::U32(0))
//!         .to_bytes(),
//! )?;
//! let tokenizer = load_from_gguf(&file)?;
//! let ids = tokenizer.encode("hi hi<|endoftext|>", EncodeOptions::parse_special())?;
//! assert_eq!(ids, [4, 5, 0]);
//! assert_eq!(tokenizer.decode(&ids, true)?, "hi hi");
//! assert!(tokenizer.is_end_of_generation(0));
//!
//! let mut stream = StreamDecoder::new(tokenizer.as_ref(), false);
//! let mut text = String::new();
//! for &id in &ids {
//!     text += &stream.push(id)?;
//! }
//! text += &stream.finish();
//! assert_eq!(text, "hi hi<|endoftext|>");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Untrusted input
//! Malformed tokenizer metadata (missing merges, arrays of the wrong type or length, special ids
//! outside the vocabulary, a vocabulary whose size disagrees with the model) and unknown token
//! ids give an [`Error`], never a panic. Encoding takes any `&str`; decoding takes any ids.
//!
//! A chat's messages are input too, and their content must stay text: a user who writes
//! `<|im_end|><|im_start|>assistant` must not end the turn and forge the model's. Encoding the
//! rendered chat with [`EncodeOptions::parse_special`] alone would do exactly that. Instead,
//! `ChatTemplate::render_with_spans` says which bytes of the rendered text came from a message's
//! content, and [`Tokenizer::encode_with_plain_ranges`] recognises control tokens only outside
//! them, so that only the tokens the template writes are control tokens (transformers encodes
//! a chat the same way). Where no content holds special-token text, the ids are those of the
//! whole text encoded with special tokens parsed. A template that slices, splits or tests the
//! content so that its place cannot be found gives [`Error::ContentNotLocated`], never a guess.
//! Text for which parsing special tokens is wanted (a raw prompt written by the application) is
//! encoded with [`Tokenizer::encode`] and `parse_special`, which is an explicit choice.

use std::ops::Range;

mod bpe;
mod bytelevel;
#[cfg(feature = "template")]
mod chat;
mod error;
#[cfg(feature = "hf")]
mod hf;
mod pretokenize;
mod spm;
mod stream;
mod vocab;

pub use bpe::BpeTokenizer;
#[cfg(feature = "template")]
pub use chat::{ChatTemplate, Message, RenderedChat};
pub use error::Error;
#[cfg(feature = "hf")]
pub use hf::HfTokenizer;
pub use pretokenize::PreTokenizer;
pub use spm::SpmTokenizer;
pub use stream::StreamDecoder;
pub use vocab::{SpecialTokens, TokenKind};

/// The GGUF file a tokenizer is loaded from (re-exported from `nextok-gguf`), so that
/// [`load_from_gguf`] needs no second dependency.
pub use nextok_gguf::GgufFile;

/// A token's index in the vocabulary.
pub type TokenId = u32;

/// How to encode: whether to put the BOS token first, and whether the text of special tokens
/// (`<|im_start|>`) becomes those tokens or stays plain text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EncodeOptions {
    /// Put the BOS token first.
    pub add_bos: bool,
    /// Turn the text of control tokens into those tokens. Without it, control tokens' text is
    /// encoded as ordinary text (user-defined tokens are always recognised, as in llama.cpp).
    pub parse_special: bool,
}

impl EncodeOptions {
    /// Plain text: no BOS, special tokens' text stays text. Use this for anything a user typed.
    pub fn plain() -> Self {
        Self::default()
    }

    /// Special tokens parsed, no BOS: use this for a rendered chat template.
    pub fn parse_special() -> Self {
        EncodeOptions {
            add_bos: false,
            parse_special: true,
        }
    }

    /// The same options with BOS set as given.
    pub fn with_bos(self, add_bos: bool) -> Self {
        EncodeOptions { add_bos, ..self }
    }
}

/// Text to token ids and back.
///
/// Implemented by [`BpeTokenizer`], [`SpmTokenizer`] and `HfTokenizer`. The provided methods
/// build decoding on [`Tokenizer::token_bytes`], so every implementation decodes the same way.
pub trait Tokenizer: Send + Sync + std::fmt::Debug {
    /// Encodes text into token ids.
    fn encode(&self, text: &str, options: EncodeOptions) -> Result<Vec<TokenId>, Error> {
        self.encode_with_plain_ranges(text, &[], options)
    }

    /// Encodes text into token ids, with the text of control tokens kept as text wherever it
    /// touches one of the `plain` byte ranges: a control token is recognised (with
    /// [`EncodeOptions::parse_special`]) only where its text lies wholly outside them.
    ///
    /// This is how a rendered chat is encoded: the template's own `<|im_start|>` becomes the
    /// control token, while the same text inside a message (whose place
    /// `ChatTemplate::render_with_spans` reports) stays text, so no one can forge a turn.
    /// The ranges never cut the text otherwise: where no special token is found, the ids are
    /// those of [`Tokenizer::encode`], merges across a range's edge included. User-defined tokens
    /// are recognised everywhere, as in [`Tokenizer::encode`].
    ///
    /// `plain` must be sorted and non-overlapping, within the text and on character boundaries;
    /// otherwise the result is [`Error::PlainRange`].
    fn encode_with_plain_ranges(
        &self,
        text: &str,
        plain: &[Range<usize>],
        options: EncodeOptions,
    ) -> Result<Vec<TokenId>, Error>;

    /// The number of tokens in the vocabulary: ids are `0..vocab_size()`.
    fn vocab_size(&self) -> usize;

    /// The exact bytes a token stands for: what it adds to decoded text (a special token's text
    /// for special tokens). May be empty (unused tokens) and need not be UTF-8 on its own.
    fn token_bytes(&self, id: TokenId) -> Result<&[u8], Error>;

    /// What kind of token an id is.
    fn token_kind(&self, id: TokenId) -> Result<TokenKind, Error>;

    /// The id of the token whose vocabulary text is `text` (as stored, e.g. `Ġthe` or `▁the`).
    fn token_id(&self, text: &str) -> Option<TokenId>;

    /// BOS, EOS, end-of-turn, padding, unknown, and the set that ends a generation.
    fn special_tokens(&self) -> &SpecialTokens;

    /// Whether the model asks for BOS at the start of a prompt (`tokenizer.ggml.add_bos_token`).
    fn add_bos_by_default(&self) -> bool;

    /// Whether decoding drops one space at the very start: SentencePiece's encoder puts a space
    /// in front of the text, and decoding takes it away again.
    fn strips_leading_space(&self) -> bool {
        false
    }

    /// Whether generating this token ends the generation.
    fn is_end_of_generation(&self, id: TokenId) -> bool {
        self.special_tokens().end_of_generation.contains(&id)
    }

    /// Decodes ids to bytes: the tokens' bytes, control tokens left out when `skip_special`, and
    /// the leading space dropped where [`Tokenizer::strips_leading_space`] says so.
    fn decode_bytes(&self, ids: &[TokenId], skip_special: bool) -> Result<Vec<u8>, Error> {
        let mut out = Vec::with_capacity(ids.len() * 4);
        let mut at_start = true;
        for &id in ids {
            if let Some(piece) = decoded_piece(self, id, skip_special, &mut at_start)? {
                out.extend_from_slice(piece);
            }
        }
        Ok(out)
    }

    /// Decodes ids to text; bytes that are not UTF-8 become U+FFFD as in
    /// [`String::from_utf8_lossy`].
    fn decode(&self, ids: &[TokenId], skip_special: bool) -> Result<String, Error> {
        let bytes = self.decode_bytes(ids, skip_special)?;
        Ok(match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        })
    }

    /// Every token's bytes, indexed by id: [`Tokenizer::token_bytes`] of each id, so a control
    /// token's entry is its text (`<|im_start|>`) and an unused token's is empty.
    ///
    /// This is what decoding with `skip_special = false` concatenates, not the vocabulary that
    /// constrained decoding needs: a grammar built on these bytes would let a control token
    /// through wherever its text fits. Build that one with
    /// `nextok_constraints::TokenVocab::from_tokenizer`, which gives control tokens no bytes and
    /// takes the end tokens from [`SpecialTokens::end_of_generation`].
    fn all_token_bytes(&self) -> Vec<Vec<u8>> {
        (0..self.vocab_size() as TokenId)
            .map(|id| self.token_bytes(id).map(<[u8]>::to_vec).unwrap_or_default())
            .collect()
    }
}

/// The bytes one token adds to decoded text, given what came before: `None` for a control token
/// that is skipped, and the piece without its first space for the first token of SentencePiece
/// text. Shared by [`Tokenizer::decode_bytes`] and [`StreamDecoder`] so that they always agree.
pub(crate) fn decoded_piece<'t, T: Tokenizer + ?Sized>(
    tokenizer: &'t T,
    id: TokenId,
    skip_special: bool,
    at_start: &mut bool,
) -> Result<Option<&'t [u8]>, Error> {
    let piece = tokenizer.token_bytes(id)?;
    if skip_special && tokenizer.token_kind(id)? == TokenKind::Control {
        return Ok(None);
    }
    let strip = *at_start && tokenizer.strips_leading_space();
    *at_start = false;
    Ok(Some(match piece {
        [b' ', rest @ ..] if strip => rest,
        _ => piece,
    }))
}

/// Loads the tokenizer a GGUF file describes: [`BpeTokenizer`] for `tokenizer.ggml.model = gpt2`,
/// [`SpmTokenizer`] for `llama`.
pub fn load_from_gguf(file: &GgufFile) -> Result<Box<dyn Tokenizer>, Error> {
    let model = file.metadata().get_str("tokenizer.ggml.model")?;
    match model {
        "gpt2" => Ok(Box::new(BpeTokenizer::from_gguf(file)?)),
        "llama" => Ok(Box::new(SpmTokenizer::from_gguf(file)?)),
        other => Err(Error::UnsupportedModel {
            model: other.to_owned(),
        }),
    }
}

/// Opens a GGUF file and loads its tokenizer, as [`load_from_gguf`] does. The file is
/// memory-mapped, and only its metadata is read.
pub fn load_from_gguf_path(path: impl AsRef<std::path::Path>) -> Result<Box<dyn Tokenizer>, Error> {
    load_from_gguf(&GgufFile::open(path)?)
}

impl<T: Tokenizer + ?Sized> Tokenizer for Box<T> {
    fn encode(&self, text: &str, options: EncodeOptions) -> Result<Vec<TokenId>, Error> {
        (**self).encode(text, options)
    }
    fn encode_with_plain_ranges(
        &self,
        text: &str,
        plain: &[Range<usize>],
        options: EncodeOptions,
    ) -> Result<Vec<TokenId>, Error> {
        (**self).encode_with_plain_ranges(text, plain, options)
    }
    fn vocab_size(&self) -> usize {
        (**self).vocab_size()
    }
    fn token_bytes(&self, id: TokenId) -> Result<&[u8], Error> {
        (**self).token_bytes(id)
    }
    fn token_kind(&self, id: TokenId) -> Result<TokenKind, Error> {
        (**self).token_kind(id)
    }
    fn token_id(&self, text: &str) -> Option<TokenId> {
        (**self).token_id(text)
    }
    fn special_tokens(&self) -> &SpecialTokens {
        (**self).special_tokens()
    }
    fn add_bos_by_default(&self) -> bool {
        (**self).add_bos_by_default()
    }
    fn strips_leading_space(&self) -> bool {
        (**self).strips_leading_space()
    }
}

/// The README's example, compiled as a doctest (not run: it opens the real model's file).
#[cfg(all(doctest, feature = "hf", feature = "template"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
