//! A load generator for OpenAI-compatible servers, reported with vLLM's serving figures.
//!
//! `nextok-loadgen` (run it as `cargo xtask loadgen`) sends streamed chat requests
//! (`POST /v1/chat/completions` with `stream`, `stream_options.include_usage` and `ignore_eos`) at
//! fixed concurrencies, each on a new connection, and reports output tokens per second, time to
//! first token (TTFT), time per output token (TPOT), inter-token latency (ITL) and end-to-end
//! latency (E2E), each as mean, median and 99th percentile, with the definitions of vLLM's
//! `vllm bench serve` ([`stats`]). The prompts are made from a seed ([`prompts`]), so two servers
//! measured one after the other get the same requests.
//!
//! - [`stats`]: the figures and their definitions, a table, and the JSON shape.
//! - [`prompts`]: the seeded prompts of 40 to 120 words.
//! - [`client`]: one timed streamed request, and a run at a fixed concurrency.
//! - [`args`]: the command line.
//!
//! ```
//! use nextok_loadgen::stats::{Report, RequestTiming};
//! // One request sent at 0 s: text chunks at 0.1, 0.2 and 0.3 s, stream ended at 0.3 s,
//! // three tokens; the run took 0.5 s.
//! let r = RequestTiming { chunks: vec![0.1, 0.2, 0.3], end: 0.3, output_tokens: 3, prompt_tokens: 9 };
//! let report = Report::new(1, 0.5, &[r], 0);
//! assert_eq!(report.output_tokens_per_s, 6.0);
//! let ttft = report.ttft.unwrap();
//! assert!((ttft.p50_ms - 100.0).abs() < 1e-9);
//! let tpot = report.tpot.unwrap(); // (0.3 - 0.1) / (3 - 1)
//! assert!((tpot.mean_ms - 100.0).abs() < 1e-9);
//! ```
#![deny(missing_docs)]

pub mod args;
pub mod client;
pub mod prompts;
pub mod stats;
