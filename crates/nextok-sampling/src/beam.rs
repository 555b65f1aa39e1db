//! Beam search, independent of any model.

use crate::Error;

/// Settings of [`beam_search`].
#[derive(Debug, Clone, PartialEq)]
pub struct BeamConfig {
    /// Number of partial answers kept after each step (`>= 1`; 1 is greedy decoding).
    pub beam_width: usize,
    /// Number of finished sequences returned, best first (`1..=beam_width`).
    pub num_return_sequences: usize,
    /// Exponent `alpha` of the length penalty: a finished sequence scores
    /// `sum of log-probabilities / generated_length^alpha`, where the length counts the end
    /// token. 0 ranks by plain probability; values above 0 favour longer answers, as in
    /// transformers (whose default is 1).
    pub length_penalty: f64,
    /// Tokens that end a sequence.
    pub end_tokens: Vec<u32>,
    /// When true, stop as soon as `beam_width` sequences have ended. When false, go on while a
    /// running beam could still beat the worst finished one, judged by its score at the current
    /// length (transformers' heuristic).
    pub early_stopping: bool,
    /// Maximum number of generated tokens, end token included. Beams still running at this
    /// length are returned as unfinished.
    pub max_new_tokens: usize,
}

impl Default for BeamConfig {
    fn default() -> Self {
        BeamConfig {
            beam_width: 4,
            num_return_sequences: 1,
            length_penalty: 1.0,
            end_tokens: Vec::new(),
            early_stopping: true,
            max_new_tokens: 256,
        }
    }
}

/// A sequence returned by [`beam_search`].
#[derive(Debug, Clone, PartialEq)]
pub struct Hypothesis {
    /// The generated tokens, with the end token if the sequence ended.
    pub tokens: Vec<u32>,
    /// Sum of the natural logarithms of the tokens' probabilities.
    pub logprob: f64,
    /// `logprob / tokens.len()^length_penalty`: what sequences are ranked by.
    pub score: f64,
    /// Whether the sequence ended with an end token (rather than at `max_new_tokens`).
    pub ended: bool,
}

#[derive(Debug, Clone)]
struct Beam {
    tokens: Vec<u32>,
    logprob: f64,
}

fn score(logprob: f64, len: usize, alpha: f64) -> f64 {
    if alpha == 0.0 {
        logprob
    } else {
        logprob / (len.max(1) as f64).powf(alpha)
    }
}

/// Beam search: keeps the `beam_width` most probable partial answers at each step and returns the
/// best finished sequences.
///
/// `next_logprobs` receives the generated tokens of every running beam (a batch) and returns, for
/// each, the log-probability of every next token (one row per prefix, all of the vocabulary's
/// length; `-inf` for impossible tokens). Scores are sums of logarithms, so long sequences never
/// underflow. The callback's error type absorbs this crate's [`Error`].
///
/// ```
/// use nextok_sampling::{beam_search, BeamConfig, Error};
/// // Vocabulary: 0 = "a", 1 = "b", 2 = end. "a" is likelier first, but "b" then ends surely.
/// let step = |prefixes: &[&[u32]]| -> Result<Vec<Vec<f32>>, Error> {
///     Ok(prefixes.iter().map(|p| match p.last() {
///         None => vec![0.6f32.ln(), 0.4f32.ln(), f32::NEG_INFINITY],
///         Some(0) => vec![0.5f32.ln(), f32::NEG_INFINITY, 0.5f32.ln()],
///         Some(_) => vec![f32::NEG_INFINITY, f32::NEG_INFINITY, 0.0],
///     }).collect())
/// };
/// let config = BeamConfig { beam_width: 2, end_tokens: vec![2], length_penalty: 0.0, ..Default::default() };
/// let best = &beam_search(&config, step).unwrap()[0];
/// assert_eq!(best.tokens, [1, 2]);
/// ```
pub fn beam_search<F, E>(config: &BeamConfig, mut next_logprobs: F) -> Result<Vec<Hypothesis>, E>
where
    F: FnMut(&[&[u32]]) -> Result<Vec<Vec<f32>>, E>,
    E: From<Error>,
{
    validate(config)?;
    let width = config.beam_width;
    let alpha = config.length_penalty;
    let mut beams = vec![Beam {
        tokens: Vec::new(),
        logprob: 0.0,
    }];
    let mut finished: Vec<Hypothesis> = Vec::new();
    let is_end = |t: u32| config.end_tokens.contains(&t);

    for step in 0..config.max_new_tokens {
        let prefixes: Vec<&[u32]> = beams.iter().map(|b| b.tokens.as_slice()).collect();
        let rows = next_logprobs(&prefixes)?;
        check_rows(&rows, beams.len())?;

        // Every (beam, token) extension, of which the best 2 * width are enough: at most `width`
        // of them can end, so at least `width` running beams remain among them.
        let mut ext: Vec<(f64, usize, u32)> = Vec::new();
        for (b, row) in rows.iter().enumerate() {
            for (t, &lp) in row.iter().enumerate() {
                if lp != f32::NEG_INFINITY {
                    ext.push((beams[b].logprob + lp as f64, b, t as u32));
                }
            }
        }
        // Highest sum first; ties by beam, then token, so that the result is deterministic.
        let by_score = |a: &(f64, usize, u32), b: &(f64, usize, u32)| {
            b.0.total_cmp(&a.0).then((a.1, a.2).cmp(&(b.1, b.2)))
        };
        let keep = (2 * width).min(ext.len());
        if keep == 0 {
            break;
        }
        if keep < ext.len() {
            ext.select_nth_unstable_by(keep - 1, by_score);
            ext.truncate(keep);
        }
        ext.sort_unstable_by(by_score);

        let len = step + 1;
        let mut next = Vec::with_capacity(width);
        for (rank, &(lp, b, t)) in ext.iter().enumerate() {
            if is_end(t) {
                // As in transformers, an ending only counts when it ranks among the top `width`.
                if rank < width {
                    let mut tokens = beams[b].tokens.clone();
                    tokens.push(t);
                    add_finished(
                        &mut finished,
                        width,
                        Hypothesis {
                            tokens,
                            logprob: lp,
                            score: score(lp, len, alpha),
                            ended: true,
                        },
                    );
                }
            } else {
                let mut tokens = beams[b].tokens.clone();
                tokens.push(t);
                next.push(Beam {
                    tokens,
                    logprob: lp,
                });
            }
            if next.len() == width {
                break;
            }
        }
        beams = next;
        if beams.is_empty() {
            break;
        }
        if finished.len() >= width {
            if config.early_stopping {
                break;
            }
            let worst = finished.last().map_or(f64::NEG_INFINITY, |h| h.score);
            let best_running = score(beams[0].logprob, len, alpha);
            if worst >= best_running {
                break;
            }
        }
        if len == config.max_new_tokens {
            for b in &beams {
                add_finished(
                    &mut finished,
                    width,
                    Hypothesis {
                        tokens: b.tokens.clone(),
                        logprob: b.logprob,
                        score: score(b.logprob, len, alpha),
                        ended: false,
                    },
                );
            }
        }
    }
    finished.truncate(config.num_return_sequences);
    Ok(finished)
}

/// Inserts `h` keeping `finished` sorted best first and at most `width` long.
fn add_finished(finished: &mut Vec<Hypothesis>, width: usize, h: Hypothesis) {
    let pos = finished
        .iter()
        .position(|f| h.score > f.score)
        .unwrap_or(finished.len());
    if pos < width {
        finished.insert(pos, h);
        finished.truncate(width);
    }
}

fn validate(config: &BeamConfig) -> Result<(), Error> {
    if config.beam_width == 0 {
        return Err(Error::InvalidParam {
            name: "beam_width",
            value: 0.0,
            expected: ">= 1",
        });
    }
    if config.num_return_sequences == 0 || config.num_return_sequences > config.beam_width {
        return Err(Error::InvalidParam {
            name: "num_return_sequences",
            value: config.num_return_sequences as f64,
            expected: "between 1 and beam_width",
        });
    }
    if config.max_new_tokens == 0 {
        return Err(Error::InvalidParam {
            name: "max_new_tokens",
            value: 0.0,
            expected: ">= 1",
        });
    }
    if !config.length_penalty.is_finite() {
        return Err(Error::InvalidParam {
            name: "length_penalty",
            value: config.length_penalty,
            expected: "finite",
        });
    }
    Ok(())
}

fn check_rows(rows: &[Vec<f32>], expected: usize) -> Result<(), Error> {
    if rows.len() != expected {
        return Err(Error::BeamBatchSize {
            expected,
            got: rows.len(),
        });
    }
    let vocab = rows[0].len();
    for (row, r) in rows.iter().enumerate() {
        if r.len() != vocab {
            return Err(Error::BeamRowLength {
                row,
                expected: vocab,
                got: r.len(),
            });
        }
        if let Some(token) = r.iter().position(|v| v.is_nan() || *v == f32::INFINITY) {
            return Err(Error::InvalidLogprob {
                row,
                token,
                value: r[token],
            });
        }
    }
    Ok(())
}
