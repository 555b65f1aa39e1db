//! The KV cache: keys and values per layer, append, truncate, fork and prefix reuse, with exact size accounting.
