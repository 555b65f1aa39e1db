//! The serving figures, with the definitions of vLLM's `vllm bench serve`.
//!
//! Per request, from the moments its streamed chunks arrived (seconds after the request was sent):
//! - **TTFT** (time to first token): when the first chunk with text arrived;
//! - **ITL** (inter-token latency): the gap between one chunk with text and the next; each gap is
//!   one sample, and the figures are taken over the gaps of all requests together;
//! - **E2E** (end-to-end latency): when the stream ended;
//! - **TPOT** (time per output token, first token excluded): `(E2E - TTFT) / (output tokens - 1)`,
//!   for requests of more than one output token; one sample per request.
//!
//! Over a run: **output tokens/s** is every completion token that the servers' usage counts
//! reported, divided by the run's wall time (first request sent to last stream ended).
//! Each figure is given as mean, median (p50) and p99; percentiles interpolate linearly between
//! the two nearest ranks, as NumPy's `percentile` (which vLLM uses) does by default.

use serde::Serialize;

/// What was measured of one request.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RequestTiming {
    /// Seconds after sending at which each chunk carrying text arrived, in order.
    pub chunks: Vec<f64>,
    /// Seconds after sending at which the stream ended.
    pub end: f64,
    /// Completion tokens, as the server's usage reported them.
    pub output_tokens: u64,
    /// Prompt tokens, as the server's usage reported them.
    pub prompt_tokens: u64,
}

impl RequestTiming {
    /// Time to first token: the first chunk with text; `None` when no text came.
    pub fn ttft(&self) -> Option<f64> {
        self.chunks.first().copied()
    }

    /// The gaps between consecutive chunks with text.
    pub fn itl(&self) -> Vec<f64> {
        self.chunks.windows(2).map(|w| w[1] - w[0]).collect()
    }

    /// Time per output token after the first: `(E2E - TTFT) / (output tokens - 1)`; `None` for
    /// a request of at most one output token or without text.
    pub fn tpot(&self) -> Option<f64> {
        let ttft = self.ttft()?;
        (self.output_tokens > 1).then(|| (self.end - ttft) / (self.output_tokens - 1) as f64)
    }
}

/// The `p`-th percentile (0 to 100) of `sorted` (ascending), interpolating linearly between the
/// two nearest ranks (NumPy's default, `method="linear"`); `None` for no values or a `p` outside
/// 0 to 100.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() || !(0.0..=100.0).contains(&p) {
        return None;
    }
    let rank = p / 100.0 * (sorted.len() - 1) as f64;
    let below = rank.floor() as usize;
    let above = rank.ceil() as usize;
    let fraction = rank - below as f64;
    Some(sorted[below] + (sorted[above] - sorted[below]) * fraction)
}

/// Mean, median and 99th percentile of a set of durations, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    /// The arithmetic mean.
    pub mean_ms: f64,
    /// The median (50th percentile).
    pub p50_ms: f64,
    /// The 99th percentile.
    pub p99_ms: f64,
    /// How many values it summarises.
    pub count: usize,
}

impl Spread {
    /// The spread of `seconds` (in any order), reported in milliseconds; `None` for no values.
    /// A value that is not finite (NaN) is left out.
    pub fn of_seconds(seconds: &[f64]) -> Option<Spread> {
        let mut sorted: Vec<f64> = seconds.iter().copied().filter(|v| v.is_finite()).collect();
        sorted.sort_by(f64::total_cmp);
        let mean = sorted.iter().sum::<f64>() / sorted.len() as f64;
        Some(Spread {
            mean_ms: mean * 1e3,
            p50_ms: percentile(&sorted, 50.0)? * 1e3,
            p99_ms: percentile(&sorted, 99.0)? * 1e3,
            count: sorted.len(),
        })
    }
}

/// The figures of one run at one concurrency.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Requests sent.
    pub requests: usize,
    /// Requests that streamed to the end with a usage count.
    pub completed: usize,
    /// Requests that failed (an HTTP error, a broken stream, no usage count, a timeout).
    pub failed: usize,
    /// Wall time of the run in seconds: first request sent to last stream ended.
    pub duration_s: f64,
    /// Prompt tokens of the completed requests (the servers' counts).
    pub prompt_tokens: u64,
    /// Completion tokens of the completed requests (the servers' counts).
    pub output_tokens: u64,
    /// `output_tokens / duration_s`.
    pub output_tokens_per_s: f64,
    /// Completed requests per second.
    pub requests_per_s: f64,
    /// Time to first token over the completed requests.
    pub ttft: Option<Spread>,
    /// Time per output token (first excluded) over the completed requests of two tokens or more.
    pub tpot: Option<Spread>,
    /// Inter-token latency over every gap of every completed request.
    pub itl: Option<Spread>,
    /// End-to-end latency over the completed requests.
    pub e2e: Option<Spread>,
}

impl Report {
    /// The figures of a run at `concurrency` that lasted `duration_s`, from its completed
    /// requests and the number that failed.
    pub fn new(
        concurrency: usize,
        duration_s: f64,
        completed: &[RequestTiming],
        failed: usize,
    ) -> Report {
        let output_tokens: u64 = completed.iter().map(|r| r.output_tokens).sum();
        let per_second = |n: f64| {
            if duration_s > 0.0 {
                n / duration_s
            } else {
                0.0
            }
        };
        let ttfts: Vec<f64> = completed.iter().filter_map(RequestTiming::ttft).collect();
        let tpots: Vec<f64> = completed.iter().filter_map(RequestTiming::tpot).collect();
        let itls: Vec<f64> = completed.iter().flat_map(RequestTiming::itl).collect();
        let e2es: Vec<f64> = completed.iter().map(|r| r.end).collect();
        Report {
            concurrency,
            requests: completed.len() + failed,
            completed: completed.len(),
            failed,
            duration_s,
            prompt_tokens: completed.iter().map(|r| r.prompt_tokens).sum(),
            output_tokens,
            output_tokens_per_s: per_second(output_tokens as f64),
            requests_per_s: per_second(completed.len() as f64),
            ttft: Spread::of_seconds(&ttfts),
            tpot: Spread::of_seconds(&tpots),
            itl: Spread::of_seconds(&itls),
            e2e: Spread::of_seconds(&e2es),
        }
    }
}

/// The reports as a plain-text table, one row per concurrency, milliseconds as mean / p50 / p99.
pub fn table(reports: &[Report]) -> String {
    let spread = |s: &Option<Spread>| match s {
        Some(s) => format!("{:.1} / {:.1} / {:.1}", s.mean_ms, s.p50_ms, s.p99_ms),
        None => "-".to_string(),
    };
    let mut rows = vec![[
        "concurrency".to_string(),
        "ok/sent".to_string(),
        "wall s".to_string(),
        "output tok/s".to_string(),
        "TTFT ms mean/p50/p99".to_string(),
        "TPOT ms mean/p50/p99".to_string(),
        "ITL ms mean/p50/p99".to_string(),
        "E2E ms mean/p50/p99".to_string(),
    ]];
    for r in reports {
        rows.push([
            r.concurrency.to_string(),
            format!("{}/{}", r.completed, r.requests),
            format!("{:.2}", r.duration_s),
            format!("{:.1}", r.output_tokens_per_s),
            spread(&r.ttft),
            spread(&r.tpot),
            spread(&r.itl),
            spread(&r.e2e),
        ]);
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:>w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn percentiles_interpolate_between_ranks_as_numpy_does() {
        // numpy.percentile([1, 2, 3, 4], [0, 50, 99, 100]) = [1, 2.5, 3.97, 4].
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&v, 50.0), Some(2.5));
        assert!(close(percentile(&v, 99.0).unwrap(), 3.97));
        assert_eq!(percentile(&v, 100.0), Some(4.0));
        // numpy.percentile(range(1, 101), 99) = 99.01; median of an odd count is the middle.
        let hundred: Vec<f64> = (1..=100).map(f64::from).collect();
        assert!(close(percentile(&hundred, 99.0).unwrap(), 99.01));
        assert_eq!(percentile(&[5.0, 7.0, 100.0], 50.0), Some(7.0));
        assert_eq!(percentile(&[3.0], 99.0), Some(3.0));
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile(&v, 101.0), None);
        assert_eq!(percentile(&v, f64::NAN), None);
    }

    #[test]
    fn a_spread_sorts_its_values_and_reports_milliseconds() {
        let s = Spread::of_seconds(&[0.004, 0.001, 0.003, 0.002]).unwrap();
        assert!(close(s.mean_ms, 2.5));
        assert!(close(s.p50_ms, 2.5));
        assert!(close(s.p99_ms, 3.97));
        assert_eq!(s.count, 4);
        assert_eq!(Spread::of_seconds(&[]), None);
        assert_eq!(Spread::of_seconds(&[f64::NAN]), None);
    }

    #[test]
    fn ttft_itl_and_tpot_follow_vllm_definitions() {
        // Sent at 0; text chunks at 100, 110, 130, 160 ms; stream ended at 170 ms; 5 tokens (the
        // server put two tokens in one chunk).
        let r = RequestTiming {
            chunks: vec![0.100, 0.110, 0.130, 0.160],
            end: 0.170,
            output_tokens: 5,
            prompt_tokens: 50,
        };
        assert_eq!(r.ttft(), Some(0.100));
        let itl = r.itl();
        assert_eq!(itl.len(), 3);
        for (got, want) in itl.iter().zip([0.010, 0.020, 0.030]) {
            assert!(close(*got, want), "{itl:?}");
        }
        // (E2E - TTFT) / (tokens - 1) = (0.170 - 0.100) / 4.
        assert!(close(r.tpot().unwrap(), 0.0175));
        // One token: no TPOT; no text: no TTFT.
        let one = RequestTiming {
            chunks: vec![0.05],
            end: 0.06,
            output_tokens: 1,
            prompt_tokens: 3,
        };
        assert_eq!(one.tpot(), None);
        assert!(one.itl().is_empty());
        assert_eq!(RequestTiming::default().ttft(), None);
        assert_eq!(RequestTiming::default().tpot(), None);
    }

    #[test]
    fn a_report_pools_itl_over_requests_and_divides_tokens_by_wall_time() {
        let a = RequestTiming {
            chunks: vec![0.1, 0.2, 0.3],
            end: 0.3,
            output_tokens: 3,
            prompt_tokens: 10,
        };
        let b = RequestTiming {
            chunks: vec![0.5, 0.9],
            end: 1.0,
            output_tokens: 2,
            prompt_tokens: 20,
        };
        let r = Report::new(2, 2.0, &[a, b], 1);
        assert_eq!((r.requests, r.completed, r.failed), (3, 2, 1));
        assert_eq!((r.prompt_tokens, r.output_tokens), (30, 5));
        assert!(close(r.output_tokens_per_s, 2.5));
        assert!(close(r.requests_per_s, 1.0));
        // TTFT over requests: 100 and 500 ms.
        let ttft = r.ttft.unwrap();
        assert!(close(ttft.mean_ms, 300.0) && close(ttft.p50_ms, 300.0));
        // ITL pooled: 100, 100 (request a) and 400 (request b) ms: one sample per gap, so the
        // mean is 200, not the mean of the per-request means (250).
        let itl = r.itl.unwrap();
        assert_eq!(itl.count, 3);
        assert!(close(itl.mean_ms, 200.0) && close(itl.p50_ms, 100.0));
        assert!(close(itl.p99_ms, 394.0));
        // TPOT per request: (0.3 - 0.1) / 2 = 100 ms and (1.0 - 0.5) / 1 = 500 ms.
        let tpot = r.tpot.unwrap();
        assert_eq!(tpot.count, 2);
        assert!(close(tpot.mean_ms, 300.0));
        // E2E: 300 and 1000 ms.
        let e2e = r.e2e.unwrap();
        assert!(close(e2e.mean_ms, 650.0) && close(e2e.p99_ms, 993.0));
        // Nothing completed: counts, no spreads.
        let empty = Report::new(4, 1.0, &[], 4);
        assert_eq!(
            (empty.completed, empty.failed, empty.output_tokens),
            (0, 4, 0)
        );
        assert_eq!(empty.ttft, None);
        assert_eq!(empty.itl, None);
    }

    #[test]
    fn the_table_has_a_row_per_concurrency() {
        let r = RequestTiming {
            chunks: vec![0.1, 0.2],
            end: 0.2,
            output_tokens: 2,
            prompt_tokens: 1,
        };
        let text = table(&[
            Report::new(1, 1.0, std::slice::from_ref(&r), 0),
            Report::new(4, 0.5, &[r.clone(), r], 0),
        ]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[0].contains("TTFT ms mean/p50/p99"));
        let cells: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(cells[..3], ["1", "1/1", "1.00"], "{text}");
        // 4 tokens in 0.5 s; TTFT 100 ms each.
        assert!(lines[2].contains("8.0"), "{text}");
        assert!(lines[2].contains("100.0 / 100.0 / 100.0"), "{text}");
    }
}
