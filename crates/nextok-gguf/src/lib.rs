//! Read GGUF model files: typed metadata, memory-mapped zero-copy tensor views, and dequantisation of the GGML tensor types.
