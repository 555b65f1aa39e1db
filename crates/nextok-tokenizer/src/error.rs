use crate::TokenId;

/// What can go wrong when loading a tokenizer, encoding, decoding or rendering a chat template.
/// Each variant says what was wrong and where.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A token id outside the vocabulary.
    #[error("unknown token id {id}: the vocabulary has {vocab_size} tokens")]
    UnknownTokenId {
        /// The id that was asked for.
        id: TokenId,
        /// The number of tokens in the vocabulary.
        vocab_size: usize,
    },
    /// A GGUF metadata entry the tokenizer needs is missing or has the wrong type.
    #[error("GGUF tokenizer metadata: {0}")]
    Gguf(#[from] nextok_gguf::Error),
    /// `tokenizer.ggml.model` names a kind of tokenizer this crate does not implement.
    #[error(
        "unsupported tokenizer model `{model}` in `tokenizer.ggml.model` (supported: gpt2, llama)"
    )]
    UnsupportedModel {
        /// The value of `tokenizer.ggml.model`.
        model: String,
    },
    /// `tokenizer.ggml.pre` names a pre-tokenizer this crate does not implement.
    #[error("unsupported pre-tokenizer `{pre}` in `tokenizer.ggml.pre`")]
    UnsupportedPreTokenizer {
        /// The value of `tokenizer.ggml.pre`.
        pre: String,
    },
    /// A per-token array whose length differs from the number of tokens.
    #[error(
        "metadata array `{key}` has {found} entries, but the vocabulary has {expected} tokens"
    )]
    ArrayLength {
        /// The metadata key of the array.
        key: String,
        /// Its length.
        found: usize,
        /// The number of tokens.
        expected: usize,
    },
    /// The vocabulary's size disagrees with the size the model declares.
    #[error("the vocabulary has {tokens} tokens, but `{key}` says {declared}")]
    VocabSizeMismatch {
        /// The key that declares the size (for example `llama.vocab_size`).
        key: String,
        /// The number of tokens in `tokenizer.ggml.tokens`.
        tokens: usize,
        /// The declared size.
        declared: u64,
    },
    /// The vocabulary has no tokens.
    #[error("the vocabulary is empty")]
    EmptyVocabulary,
    /// The same token text appears twice in the vocabulary.
    #[error("token text {text:?} appears twice in the vocabulary (ids {first} and {second})")]
    DuplicateToken {
        /// The token's text.
        text: String,
        /// The first id with that text.
        first: TokenId,
        /// The second one.
        second: TokenId,
    },
    /// A merge rule that is not two symbols separated by a space.
    #[error("merge rule {index} ({rule:?}) is not two symbols separated by a space")]
    BadMerge {
        /// Its position in `tokenizer.ggml.merges`.
        index: usize,
        /// The rule's text.
        rule: String,
    },
    /// A token type code that GGUF does not define.
    #[error("token {id} has type code {code}, which is not a GGUF token type (1 to 6)")]
    BadTokenType {
        /// The token's id.
        id: TokenId,
        /// The code.
        code: i32,
    },
    /// A special token id (BOS, EOS, ...) outside the vocabulary.
    #[error("special token `{key}` = {id} is outside the vocabulary of {vocab_size} tokens")]
    SpecialTokenOutOfRange {
        /// The metadata key or field that names it.
        key: String,
        /// The id.
        id: u64,
        /// The number of tokens.
        vocab_size: usize,
    },
    /// BOS was asked for, and the vocabulary has none.
    #[error("the vocabulary has no {which} token")]
    MissingSpecialToken {
        /// Which one (`BOS`).
        which: &'static str,
    },
    /// Text that needs a byte the vocabulary cannot spell (no byte token, no unknown token).
    #[error("the vocabulary has no token for byte 0x{byte:02x} and no unknown token")]
    UnencodableByte {
        /// The byte.
        byte: u8,
    },
    /// A `tokenizer.json` that is not UTF-8.
    #[error("tokenizer.json is not UTF-8: invalid byte sequence at byte {offset}")]
    InvalidUtf8 {
        /// Where the first invalid sequence starts.
        offset: usize,
    },
    /// A `tokenizer.json` the `tokenizers` crate rejects, or that lacks what this crate needs.
    #[error("cannot load tokenizer.json: {message}")]
    TokenizerJson {
        /// The `tokenizers` crate's message, or what is missing.
        message: String,
    },
    /// The `tokenizers` crate failed to encode or decode.
    #[error("the tokenizers crate failed to {operation}: {message}")]
    HfTokenizer {
        /// What it was doing (`encode`, `decode`).
        operation: &'static str,
        /// Its message.
        message: String,
    },
    /// A file could not be read.
    #[error("cannot read {path}: {message}")]
    Io {
        /// The path.
        path: String,
        /// The operating system's message.
        message: String,
    },
    /// A chat template that does not parse or fails to render.
    #[error("chat template `{template}`{}: {message}", line.map(|l| format!(", line {l}")).unwrap_or_default())]
    Template {
        /// The template's name (`chat_template` for a model's own, or the built-in name).
        template: String,
        /// The line in the template where it failed, when known.
        line: Option<usize>,
        /// What went wrong, as the template engine says it (including `raise_exception` text).
        message: String,
    },
    /// A built-in chat template name this crate does not know.
    #[error("no built-in chat template named `{name}` (known: chatml, llama3, llama2, mistral)")]
    UnknownTemplate {
        /// The name asked for.
        name: String,
    },
    /// Plain ranges given to [`Tokenizer::encode_with_plain_ranges`](crate::Tokenizer) that
    /// are not sorted, overlap, or do not fall on character boundaries of the text.
    #[error("plain range {start}..{end} is out of order, overlaps the one before, or does not fall on character boundaries of the {len}-byte text")]
    PlainRange {
        /// The range's start.
        start: usize,
        /// The range's end.
        end: usize,
        /// The text's length in bytes.
        len: usize,
    },
    /// A chat template whose rendering of the messages' content could not be told apart from its
    /// own text (it slices, splits or tests the content), so special-token text in a message
    /// cannot be kept as text.
    #[error("chat template `{template}` {reason}, so the special-token text in a message cannot be kept as text; remove it from the message or use another template")]
    ContentNotLocated {
        /// The template's name.
        template: String,
        /// What the template does to the content.
        reason: &'static str,
    },
}
