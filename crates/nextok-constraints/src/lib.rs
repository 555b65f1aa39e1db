//! Constrained decoding: token masks for label sets, regular expressions, JSON, JSON Schema and context-free grammars.
