//! Text to token ids and back: byte-level BPE and SentencePiece tokenizers from GGUF or tokenizer.json, chat templates, streaming detokenization.
