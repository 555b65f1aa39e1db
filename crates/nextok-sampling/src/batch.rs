//! Sampling many sequences' rows at once, split over the threads of a pool.

use std::sync::Mutex;

use crate::sampler::{Chosen, Sampled, Sampler};
use crate::stages::Context;
use crate::Error;

/// One sequence's row of a batch: its own sampler (chain and random generator), its logits and
/// its context.
#[derive(Debug)]
pub struct BatchRow<'a> {
    /// The sequence's sampler; its generator advances exactly as a call of its own would.
    pub sampler: &'a mut Sampler,
    /// The sequence's logits.
    pub logits: &'a [f32],
    /// The sequence's tokens so far and mask.
    pub ctx: Context<'a>,
}

/// [`Sampler::sample`] on every row, the rows split into at most `parts` contiguous groups;
/// `run(job)` must call `job(i)` once for each `i < parts`, on any threads (a thread pool's
/// `run`, or scoped threads). Results are in row order and each is exactly what the row's own
/// `sample` call gives: rows share nothing, so neither the split nor the threads can change a
/// token. A part that `run` leaves out is sampled afterwards on the calling thread.
///
/// With `nextok-kernels`' pool: `sample_batch(&mut rows, pool.threads(), |job| pool.run(job))`.
///
/// ```
/// use nextok_sampling::{sample_batch, BatchRow, Context, Sampler, SamplingParams};
///
/// let params = |seed| SamplingParams { temperature: 0.8, top_k: Some(2), seed: Some(seed), ..Default::default() };
/// let (mut a, mut b) = (Sampler::new(&params(1))?, Sampler::new(&params(2))?);
/// let (za, zb) = ([1.0, 3.0, 2.0], [0.5, -1.0, 4.0]);
/// let mut rows = [
///     BatchRow { sampler: &mut a, logits: &za, ctx: Context::default() },
///     BatchRow { sampler: &mut b, logits: &zb, ctx: Context::default() },
/// ];
/// let out = sample_batch(&mut rows, 2, |job| {
///     std::thread::scope(|s| {
///         s.spawn(|| job(1));
///         job(0);
///     })
/// });
/// // The same tokens as each sampler alone.
/// assert_eq!(out[0].as_ref().unwrap().token, Sampler::new(&params(1))?.sample(&za, &Context::default())?.token);
/// assert_eq!(out[1].as_ref().unwrap().token, Sampler::new(&params(2))?.sample(&zb, &Context::default())?.token);
/// # Ok::<(), nextok_sampling::Error>(())
/// ```
pub fn sample_batch(
    rows: &mut [BatchRow<'_>],
    parts: usize,
    run: impl FnOnce(&(dyn Fn(usize) + Sync)),
) -> Vec<Result<Sampled, Error>> {
    batch(rows, parts, run, |row| {
        row.sampler.sample(row.logits, &row.ctx)
    })
}

/// [`Sampler::choose`] on every row, split as [`sample_batch`] splits them: the same tokens,
/// without the raw log-probabilities.
pub fn choose_batch(
    rows: &mut [BatchRow<'_>],
    parts: usize,
    run: impl FnOnce(&(dyn Fn(usize) + Sync)),
) -> Vec<Result<Chosen, Error>> {
    batch(rows, parts, run, |row| {
        row.sampler.choose(row.logits, &row.ctx)
    })
}

fn batch<T: Send>(
    rows: &mut [BatchRow<'_>],
    parts: usize,
    run: impl FnOnce(&(dyn Fn(usize) + Sync)),
    one: impl Fn(&mut BatchRow<'_>) -> Result<T, Error> + Sync,
) -> Vec<Result<T, Error>> {
    let mut out: Vec<Option<Result<T, Error>>> = rows.iter().map(|_| None).collect();
    if rows.is_empty() {
        return Vec::new();
    }
    let per = rows.len().div_ceil(parts.clamp(1, rows.len()));
    {
        // Each part locks only its own group, so the locks are never contended; they are what
        // lets a shared `Fn` hand each thread mutable access to its rows.
        let groups: Vec<Mutex<_>> = rows
            .chunks_mut(per)
            .zip(out.chunks_mut(per))
            .map(Mutex::new)
            .collect();
        run(&|part| {
            if let Some(group) = groups.get(part) {
                let mut guard = group.lock().unwrap_or_else(|e| e.into_inner());
                let (rows, out) = &mut *guard;
                for (row, slot) in rows.iter_mut().zip(out.iter_mut()) {
                    if slot.is_none() {
                        *slot = Some(one(row));
                    }
                }
            }
        });
    }
    rows.iter_mut()
        .zip(out)
        .map(|(row, slot)| slot.unwrap_or_else(|| one(row)))
        .collect()
}
