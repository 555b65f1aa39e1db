//! The CUDA C source of the kernels (`kernels.cu`), compiled at run time with NVRTC.

/// The source text.
pub(crate) const SOURCE: &str = include_str!("kernels.cu");

/// The entry points the source defines, in the order the backend loads them.
pub const KERNEL_NAMES: [&str; 21] = [
    "matmul_q4_0",
    "matmul_q4_1",
    "matmul_q8_0",
    "matmul_f32",
    "matmul_f16",
    "matmul_bf16",
    "embed_q4_0",
    "embed_q4_1",
    "embed_q8_0",
    "embed_f32",
    "embed_f16",
    "embed_bf16",
    "attention",
    "attention_paged",
    "write_kv_paged",
    "rms_norm",
    "rms_norm_rows",
    "add_bias",
    "add",
    "silu_mul",
    "rope",
];
