//! `/metrics`: Prometheus text, from a registry of this server's own (no global state, so several
//! servers live in one process).
//!
//! The gauges and token counters are read from the scheduler at each scrape; the histograms are
//! observed by the request handlers.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};
use std::sync::{Arc, OnceLock};

/// What the collector reads at each scrape.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Snapshot {
    pub running: u64,
    pub waiting: u64,
    pub kv_usage_ratio: f64,
    pub prompt_tokens_total: u64,
    pub generation_tokens_total: u64,
    pub spec_decode_drafts_total: u64,
    pub spec_decode_draft_tokens_total: u64,
    pub spec_decode_accepted_tokens_total: u64,
    pub grammar_cache_hits_total: u64,
    pub grammar_cache_misses_total: u64,
}

/// Reads the scheduler's figures (zero until the model is loaded).
pub(crate) type Source = Arc<OnceLock<Box<dyn Fn() -> Snapshot + Send + Sync>>>;

/// The server's metrics.
#[derive(Debug)]
pub(crate) struct Metrics {
    registry: Registry,
    pub time_to_first_token: Histogram,
    pub time_per_output_token: Histogram,
    pub request_duration: Histogram,
}

/// The gauges and counters the scheduler keeps.
struct SchedulerCollector {
    source: Source,
}

impl std::fmt::Debug for SchedulerCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchedulerCollector").finish()
    }
}

impl Collector for SchedulerCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = self.source.get().map(|f| f()).unwrap_or_default();
        let gauges: [(&str, &str, ConstGauge<f64>); 3] = [
            (
                "nextok_requests_running",
                "Requests decoding now (in the scheduler's running batch).",
                ConstGauge::new(s.running as f64),
            ),
            (
                "nextok_requests_waiting",
                "Requests queued for admission (the queue length a router balances on).",
                ConstGauge::new(s.waiting as f64),
            ),
            (
                "nextok_kv_cache_usage_ratio",
                "Fraction of the KV cache's blocks in use, 0 to 1.",
                ConstGauge::new(s.kv_usage_ratio),
            ),
        ];
        for (name, help, gauge) in gauges {
            let m = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
            gauge.encode(m)?;
        }
        // The encoder adds `_total` to counters.
        let counters = [
            (
                "nextok_prompt_tokens",
                "Prompt tokens processed (prefilled or taken from the prefix cache).",
                ConstCounter::new(s.prompt_tokens_total),
            ),
            (
                "nextok_generation_tokens",
                "Tokens generated.",
                ConstCounter::new(s.generation_tokens_total),
            ),
            // vLLM's names, under nextok's prefix.
            (
                "nextok_spec_decode_num_drafts",
                "Speculative decoding: drafts checked (one completion's draft in one step).",
                ConstCounter::new(s.spec_decode_drafts_total),
            ),
            (
                "nextok_spec_decode_num_draft_tokens",
                "Speculative decoding: tokens drafted.",
                ConstCounter::new(s.spec_decode_draft_tokens_total),
            ),
            (
                "nextok_spec_decode_num_accepted_tokens",
                "Speculative decoding: drafted tokens kept (each also counted as generated).",
                ConstCounter::new(s.spec_decode_accepted_tokens_total),
            ),
            (
                "nextok_grammar_cache_hits",
                "Constraints built from a kept grammar (JSON Schema, GBNF, Lark) without compiling.",
                ConstCounter::new(s.grammar_cache_hits_total),
            ),
            (
                "nextok_grammar_cache_misses",
                "Grammars compiled (a constraint met first, or again after it left the cache).",
                ConstCounter::new(s.grammar_cache_misses_total),
            ),
        ];
        for (name, help, counter) in counters {
            let m = encoder.encode_descriptor(name, help, None, counter.metric_type())?;
            counter.encode(m)?;
        }
        Ok(())
    }
}

impl Metrics {
    /// A registry with the histograms and the scheduler's figures from `source`.
    pub(crate) fn new(source: Source) -> Self {
        let mut registry = Registry::default();
        // 1 ms to about 65 s.
        let seconds = || Histogram::new(exponential_buckets(0.001, 2.0, 17));
        let time_to_first_token = seconds();
        let time_per_output_token = seconds();
        let request_duration = seconds();
        registry.register_with_unit(
            "nextok_time_to_first_token",
            "From the request's arrival to its first token.",
            Unit::Seconds,
            time_to_first_token.clone(),
        );
        registry.register_with_unit(
            "nextok_time_per_output_token",
            "Per request: (end - first token) / (tokens - 1) of its longest completion.",
            Unit::Seconds,
            time_per_output_token.clone(),
        );
        registry.register_with_unit(
            "nextok_request_duration",
            "From the request's arrival to its last token.",
            Unit::Seconds,
            request_duration.clone(),
        );
        registry.register_collector(Box::new(SchedulerCollector { source }));
        Metrics {
            registry,
            time_to_first_token,
            time_per_output_token,
            request_duration,
        }
    }

    /// The Prometheus text of every metric.
    pub(crate) fn render(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

/// The scheduler's figures as the collector reports them.
pub(crate) fn snapshot(scheduler: &nextok::Scheduler) -> Snapshot {
    let s = scheduler.stats();
    let grammars = scheduler.engine().grammar_cache_stats();
    Snapshot {
        running: s.running as u64,
        waiting: s.waiting as u64,
        kv_usage_ratio: s.kv_usage_ratio,
        prompt_tokens_total: s.prompt_tokens_total,
        generation_tokens_total: s.generation_tokens_total,
        spec_decode_drafts_total: s.drafts,
        spec_decode_draft_tokens_total: s.drafted_tokens,
        spec_decode_accepted_tokens_total: s.accepted_tokens,
        grammar_cache_hits_total: grammars.hits,
        grammar_cache_misses_total: grammars.misses,
    }
}
