//! The crate's one error type.

/// Everything that can go wrong when building or driving a constraint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A token id is not in the vocabulary.
    #[error("token {token} is outside the vocabulary of {vocab_size} tokens")]
    TokenOutOfRange {
        /// The offending token id.
        token: u32,
        /// The vocabulary size.
        vocab_size: usize,
    },
    /// The constraint does not allow this token in its current state.
    #[error("token {token} is not allowed after {position} tokens")]
    TokenRefused {
        /// The refused token id.
        token: u32,
        /// How many tokens had been accepted before it.
        position: usize,
    },
    /// A token was offered after an end-of-generation token was accepted.
    #[error("token {token} offered after the end of generation")]
    Finished {
        /// The token offered.
        token: u32,
    },
    /// `rollback` asked for more tokens than were accepted.
    #[error("cannot roll back {requested} tokens: only {available} were accepted")]
    RollbackTooFar {
        /// Tokens asked for.
        requested: usize,
        /// Tokens accepted so far.
        available: usize,
    },
    /// A mask slice of the wrong length.
    #[error("mask has {actual} words, the vocabulary needs {expected}")]
    MaskLength {
        /// Words needed (`vocab_size.div_ceil(64)`).
        expected: usize,
        /// Words given.
        actual: usize,
    },
    /// An end-of-generation token id is outside the vocabulary.
    #[error("end-of-generation token {token} is outside the vocabulary of {vocab_size} tokens")]
    EosOutOfRange {
        /// The token id.
        token: u32,
        /// The vocabulary size.
        vocab_size: usize,
    },
    /// A tokenizer refused a token id below its own vocabulary size, so its vocabulary cannot
    /// be read (an inconsistent `Tokenizer` implementation).
    #[error(
        "the tokenizer refused token {token}, which is below its vocabulary size {vocab_size}"
    )]
    TokenizerInconsistent {
        /// The id it refused.
        token: u32,
        /// The vocabulary size it reports.
        vocab_size: usize,
    },
    /// A regular expression did not compile.
    #[error("regular expression {pattern:?} does not compile: {reason}")]
    Regex {
        /// The pattern as given.
        pattern: String,
        /// The regex engine's explanation.
        reason: String,
    },
    /// A regular expression that does not parse: where, and what is wrong there.
    #[error("regular expression {pattern:?} does not parse at byte {offset}: {reason}")]
    RegexSyntax {
        /// The pattern as given.
        pattern: String,
        /// The byte offset in `pattern` where the problem starts.
        offset: usize,
        /// What is wrong there (for example "unclosed group").
        reason: String,
    },
    /// An automaton grew past the size limit.
    #[error("automaton for {what} exceeds {limit} states")]
    TooLarge {
        /// What was being built.
        what: String,
        /// The state limit.
        limit: usize,
    },
    /// A grammar, or the work of one mask or token, went past one of the caller's
    /// [`Limits`](crate::Limits).
    #[error("{limit} exceeded: {value} where at most {max} is allowed")]
    LimitExceeded {
        /// Which limit.
        limit: crate::Limit,
        /// The size reached (for work, the count when the work stopped).
        value: u64,
        /// The limit's value.
        max: u64,
    },
    /// The constraint matches no output at all.
    #[error("the constraint matches no output at all")]
    EmptyLanguage,
    /// A set of choices was empty or held an empty choice.
    #[error("choice {index} is empty (or no choices were given)")]
    EmptyChoice {
        /// The index of the empty choice (0 when the list was empty).
        index: usize,
    },
    /// A JSON Schema keyword (or keyword value) that this crate does not enforce.
    #[error("unsupported JSON Schema keyword {keyword:?} at {path}")]
    UnsupportedKeyword {
        /// The keyword.
        keyword: String,
        /// JSON pointer of the schema holding it.
        path: String,
    },
    /// A keyword JSON Schema does not define, refused because [`JsonOptions::strict`] asked
    /// for it (otherwise it is an annotation).
    ///
    /// [`JsonOptions::strict`]: crate::JsonOptions::strict
    #[error("unknown JSON Schema keyword {keyword:?} at {path} (strict mode)")]
    UnknownKeyword {
        /// The keyword.
        keyword: String,
        /// JSON pointer of the schema holding it.
        path: String,
    },
    /// A JSON Schema that is malformed.
    #[error("invalid JSON Schema at {path}: {reason}")]
    InvalidSchema {
        /// JSON pointer of the bad schema.
        path: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// A grammar text that does not parse.
    #[error("grammar syntax error at line {line}, column {column}: {reason}")]
    GrammarSyntax {
        /// 1-based line.
        line: usize,
        /// 1-based column (in characters).
        column: usize,
        /// What was expected.
        reason: &'static str,
    },
    /// A grammar refers to a rule it never defines.
    #[error("grammar rule {name:?} is used but never defined")]
    UndefinedRule {
        /// The rule name.
        name: String,
    },
    /// A grammar names a token by its text (GBNF's `<|im_end|>`) that the vocabulary does not
    /// have, or that was compiled without a vocabulary.
    #[error("no token {text:?} in the vocabulary (a grammar's token texts need one)")]
    UnknownToken {
        /// The text, with its angle brackets.
        text: String,
    },
    /// A grammar has no start rule.
    #[error("grammar has no start rule {name:?}")]
    MissingStart {
        /// The expected start rule name.
        name: String,
    },
    /// A file of schemas or tests could not be read or is malformed.
    #[error("cannot use {path}: {reason}")]
    Io {
        /// The file or directory.
        path: String,
        /// What went wrong.
        reason: String,
    },
}
