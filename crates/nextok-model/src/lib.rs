//! The forward pass: Llama-family decoder-only and encoder-decoder transformers over GGUF or safetensors weights, with prefill, decode and batching.
