use nextok_gguf::GgmlType;

/// What can go wrong when loading a model or running it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The GGUF file itself is malformed, or a metadata key is missing or of the wrong type.
    #[error(transparent)]
    Gguf(#[from] nextok_gguf::Error),
    /// A tensor the architecture needs is not in the file.
    #[error("missing tensor `{name}`")]
    MissingTensor {
        /// The tensor's name in the checkpoint.
        name: String,
    },
    /// A tensor whose dimensions are not the ones the hyper-parameters imply.
    #[error("tensor `{tensor}` has shape {found:?}, expected {expected:?} (GGML order)")]
    BadShape {
        /// The tensor's name.
        tensor: String,
        /// The dimensions the hyper-parameters imply.
        expected: Vec<u64>,
        /// The dimensions in the file.
        found: Vec<u64>,
    },
    /// A tensor stored in a type the kernels cannot read.
    #[error("tensor `{tensor}` has type {ty:?}, which this backend does not support")]
    UnsupportedTensorType {
        /// The tensor's name.
        tensor: String,
        /// Its type.
        ty: GgmlType,
    },
    /// The file's `general.architecture` is not one we implement.
    #[error("unsupported architecture `{architecture}` (supported: llama, mistral, qwen2)")]
    UnsupportedArchitecture {
        /// The architecture named in the file.
        architecture: String,
    },
    /// A hyper-parameter that is out of range or inconsistent with another.
    #[error("invalid hyper-parameter `{key}` = {value}: {reason}")]
    BadHyperparameter {
        /// The metadata key (or the name of the derived quantity).
        key: String,
        /// Its value.
        value: u64,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A real-valued hyper-parameter that is not a usable number (NaN, infinite, zero or
    /// negative where it must be positive).
    #[error("invalid hyper-parameter `{key}` = {value}: {reason}")]
    BadRealHyperparameter {
        /// The metadata key.
        key: String,
        /// Its value, as the file holds it.
        value: f64,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A rotary-embedding scaling scheme we do not implement.
    #[error("unsupported rope scaling `{kind}` (supported: none, linear)")]
    UnsupportedRopeScaling {
        /// The scheme named in the file.
        kind: String,
    },
    /// A token id outside the vocabulary.
    #[error(
        "token {token} at input {index} of sequence {seq} is outside the vocabulary of {vocab}"
    )]
    TokenOutOfRange {
        /// The sequence in the batch.
        seq: usize,
        /// The index of the token in that sequence's new tokens.
        index: usize,
        /// The id.
        token: u32,
        /// The vocabulary size.
        vocab: usize,
    },
    /// A KV cache whose shape does not match the model.
    #[error("the KV cache of sequence {seq} has {found} but the model needs {expected}")]
    IncompatibleCache {
        /// The sequence in the batch.
        seq: usize,
        /// The model's (layers, kv heads, head dim), printed.
        expected: String,
        /// The cache's, printed.
        found: String,
    },
    /// Logits were asked for a sequence that has no new tokens.
    #[error("sequence {seq} asks for logits but has no new tokens")]
    NoTokens {
        /// The sequence in the batch.
        seq: usize,
    },
    /// A position past the model's context length.
    #[error("position {pos} of sequence {seq} is past the context length {context}")]
    ContextOverflow {
        /// The sequence in the batch.
        seq: usize,
        /// The position.
        pos: usize,
        /// The context length.
        context: usize,
    },
    /// A file could not be read.
    #[error("cannot read {path}: {message}")]
    Io {
        /// The path.
        path: String,
        /// The operating system's message.
        message: String,
    },
    /// A compute backend failed on its own (a device error, memory it could not get): not the
    /// model's or the input's fault.
    #[error("{backend}: {message}")]
    Backend {
        /// Which backend, and which device where there are several (`"CUDA device 0 (H200)"`).
        backend: String,
        /// What failed.
        message: String,
    },
    /// A [`Buffer`](crate::Buffer) a backend cannot read: made by another backend, or too short
    /// for the operation.
    #[error("{what}: a buffer of {len} numbers that this backend cannot use here")]
    ForeignBuffer {
        /// Which operand of which operation.
        what: &'static str,
        /// The buffer's length.
        len: usize,
    },
    /// A safetensors file that does not parse (the parser's message).
    #[error("invalid safetensors file: {message}")]
    Safetensors {
        /// What the parser reported.
        message: String,
    },
    /// A Hugging Face `config.json` that lacks a key or has one of the wrong type.
    #[error("config.json: `{key}` {reason}")]
    BadConfig {
        /// The key.
        key: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A safetensors tensor of a number type the kernels cannot read.
    #[error("tensor `{tensor}` has dtype {dtype}, expected F32, F16 or BF16")]
    UnsupportedDtype {
        /// The tensor's name in the checkpoint.
        tensor: String,
        /// The dtype, as safetensors names it.
        dtype: String,
    },
    /// A KV cache operation failed.
    #[error(transparent)]
    Cache(#[from] nextok_kv_cache::Error),
    /// A weight product's kernel refused its inputs.
    #[error(transparent)]
    Kernel(#[from] nextok_kernels::Error),
}
