//! Many requests at once: continuous batching (iteration-level scheduling) with chunked prefill,
//! admission under a KV memory budget, and preemption by recomputation.
//!
//! A [`Scheduler`] owns one worker thread that runs the step loop. Every step is **one**
//! [`LanguageModel::forward`](crate::LanguageModel::forward) over the next token of every
//! running completion (decodes first) and then chunks of prompts still being read, under
//! [`SchedulerOptions::max_tokens_per_step`], so a long prompt never stalls the others' tokens and
//! the weights are read once per step for everyone. After the pass, every completion that got
//! logits chooses its next token with the same code as [`Generation`](crate::Generation)
//! (sampling chain, constraint mask, stop conditions, stream decoder), and its events go to the
//! request's sink or handle.
//!
//! # How a step flows
//!
//! 1. **Intake.** New requests join the waiting queue (FCFS by arrival); cancellations are
//!    applied, so a cancelled request's KV blocks are free before the step's pass.
//! 2. **Decodes.** Each running completion whose cache lacks only its last chosen token gets one
//!    token in the batch. When its cache needs a block that is not free, the newest running
//!    request is preempted: its blocks are freed and it goes back to the waiting queue with its
//!    sampler, constraint, stop state and tokens intact.
//! 3. **Chunks.** What is left of the step's token budget goes, oldest request first, to
//!    prompts being read and to preempted completions catching up (prompt + tokens chosen so far,
//!    recomputed); in a step that decodes `d` completions, at most
//!    `max(`[`SchedulerOptions::max_prefill_while_decoding`]`, d)` of them (see below).
//! 4. **Admission.** While fewer than [`SchedulerOptions::max_running`] run and budget is left,
//!    the head of the waiting queue is admitted when its prompt's blocks and one more are free
//!    (never skipped for a later one, so no request starves).
//! 5. **Drafts.** With [`SchedulerOptions::speculative`], each decode may bring a draft (see
//!    below) within [`SchedulerOptions::max_draft_tokens_per_step`] and what the step's token
//!    budgets and the free blocks have left.
//! 6. **The pass**, while the engine's mask worker computes the constraint masks of the choices
//!    it scores (where the pass leaves a core free; otherwise each choice computes its own);
//!    then every completion that got logits chooses its token (all of the step's
//!    choices drawn in one [`sample_batch`] over the backend's threads), and every cache that
//!    ran publishes its full blocks to the pool's prefix cache.
//!
//! # Speculative decoding
//!
//! As in [`Generation`](crate::Generation), exactly: a decoding completion whose text so far
//! repeats itself or its prompt (prompt lookup: the same drafts as `Generation`'s, with their
//! adaptive length and pauses, one drafting state per completion) runs its pending token and a
//! draft in the step's pass and gets every position's logits. Its ordinary choice then runs at
//! each position in turn (mask, chain, seeded draw, stop check: one draw per emitted token), a
//! drafted token is kept exactly when it is the chosen one, and each kept token is its own
//! event. At the first difference the cache is cut back to the tokens chosen, and only then
//! publishes its full blocks, so no block of the prefix cache ever holds a token that was not
//! chosen. Drafts come last in a step: they take only the token budget that decodes, prompt
//! chunks and admissions left, and only blocks that are free after those (a draft is cut to
//! what fits and never preempts anyone). Since a position's logits are the same bits however a
//! pass is split, every answer is the one plain decoding gives, token for token;
//! [`SchedulerStats::accepted_tokens`] counts what drafting saved.
//!
//! Drafting pays for one stream: a decode step is mostly the weights' read, so a few more rows
//! in it cost little and each kept token saves a step. It pays less, and costs latency, as
//! more streams decode: the step already reads the weights once for all of them, and every
//! drafted row lengthens the step that *every* running stream waits for, while kept drafts
//! arrive as bursts after it. So a step's drafts are bounded in all by
//! [`SchedulerOptions::max_draft_tokens_per_step`] (default 4), split over its decodes: with
//! `d` decodes each drafts at most `max_draft_tokens_per_step / d` tokens, so one stream
//! drafts up to 4, two up to 2 each, three or four 1 each, and more do not draft. Drafts also
//! share with prompt chunks the cap on a step's rows beside its decodes (below): they take
//! only what the step's prompt tokens left of it.
//!
//! # Inter-token latency
//!
//! A step's time grows with its tokens, and every running stream's next token waits for the
//! whole step. On a CPU a prompt token costs a good part of a decode step (the default model on
//! 2 threads: about 1.5-2 ms a token in a prefill, 5.5 ms a decode step), so a step that read a
//! 512-token prompt beside the decodes would hold every running stream's next token for the
//! length of that prefill (measured with the server at 16 concurrent streams and a 512-token
//! step budget: an inter-token p99 of 874 ms). The policy is Sarathi-Serve's stall-free
//! batching, vLLM's chunked prefill with decodes first: while any completion decodes, a step
//! reads at most `max(N, d)` prompt tokens, `d` being its decodes and `N`
//! [`SchedulerOptions::max_prefill_while_decoding`] (default 8). A stream's next token then
//! waits for at most that many prompt tokens' work beside its step (at most twice the step's
//! decodes once more than `N` decode), never for a whole prefill, and prompts are still read in
//! every step beside the decodes, where the weights are read once for both. The default comes
//! from the server's load test on a quiet machine (32 streamed chat requests of 40-120 words, 64
//! tokens, 2 threads): with `N` = 16 a step carrying a prompt chunk took 27-32 ms more than a
//! plain decode step (12.9 ms at 4 streams, 23.8 ms at 8), which set the inter-token p99 at 4
//! and 8 streams (39.6 and 56.0 ms, against llama-server's 34.2 and 49.2); 8 prompt tokens
//! halve that addition, for a slower read of the prompts beside decodes (the time to first
//! token, whose p99 was 0.5-0.9 of llama-server's). Drafts share this cap (above). When
//! nothing decodes (the first request, or all answers done), a step reads up to
//! [`SchedulerOptions::max_tokens_per_step`] prompt tokens, for the time to first token, since
//! it costs no stream a token. None of this changes a token: how a prompt is chunked never
//! changes a bit.
//!
//! # Memory
//!
//! The caches come from one [`KvPool`] made by [`Engine::new_pool`] (the model's backend owns
//! the blocks) under [`SchedulerOptions::kv_budget_bytes`]. A request is admitted with the
//! longest prefix of its prompt that the prefix cache holds ([`KvPool::cache_for_prompt`];
//! [`Completion::usage`](crate::Completion)'s `cached_prompt_tokens` reports it), the plan checks
//! [`KvCache::blocks_needed`] against [`KvPool::available_blocks`], and a request that ends, fails,
//! is cancelled or preempted drops its caches, which gives their blocks back within the step.
//! A request whose caches could not fit the budget even alone is refused at submission with the
//! numbers ([`Error::ExceedsKvBudget`]); any other request fits once the ones before it are done,
//! so every request is admitted in the end.
//!
//! Because a position's logits never depend on how the work was split (the
//! [`LanguageModel`](crate::LanguageModel) contract, which nextok's kernels keep bit for bit), a
//! request's tokens are the same whatever else runs beside it, however its prompt was chunked and
//! whether it was preempted: exactly the tokens [`Engine::generate`] gives it alone.
//!
//! Beam search does not run on the scheduler: a request with [`GenerateOptions::beams`] is refused
//! with [`Error::InvalidOption`] (use [`Engine::generate`]).

use crate::generate::{overlapping_masks, timings, Decoding, Drawn};
use crate::speculative::Speculation;
use crate::{Engine, Error, Event, GenerateOptions};
use nextok_kv_cache::{KvCache, KvPool};
use nextok_model::{Logits, Sequence};
use nextok_sampling::{choose_batch, sample_batch, Sampled};
use nextok_stopping::{Stop, StopConditions};
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The scheduler's limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulerOptions {
    /// Requests running at once (admitted, holding KV memory); default 32.
    pub max_running: usize,
    /// Tokens in one step's forward pass: every decode first, then chunks of prompts; default
    /// 512. Decodes always run, so a step can hold more than this when more completions decode.
    pub max_tokens_per_step: usize,
    /// Prompt tokens (prompts being read, and preempted completions catching up) in a step that
    /// also decodes: a step decoding `d` completions reads at most `max(this, d)` prompt tokens;
    /// default 8. A step without decodes reads up to [`Self::max_tokens_per_step`]. See
    /// "Inter-token latency" in the [module](self) documentation for why.
    pub max_prefill_while_decoding: usize,
    /// The KV cache's memory budget in bytes. `None`: [`Self::max_running`] full context windows
    /// of the model, capped at [`Self::DEFAULT_MAX_KV_BYTES`].
    pub kv_budget_bytes: Option<u64>,
    /// Requests waiting to be admitted at most; one more is [`Error::QueueFull`]. Default 256.
    pub max_waiting: usize,
    /// Reuse the KV blocks of prompt prefixes that earlier requests computed; default on.
    pub prefix_caching: bool,
    /// Exact speculative decoding for the completions of requests that ask for it
    /// ([`GenerateOptions::speculative`]): a decoding completion brings a prompt-lookup draft
    /// to the step's pass when budget and memory are left, and keeps the drafted tokens that
    /// its ordinary choices confirm (see "Speculative decoding" in the [module](self)
    /// documentation). Default on; the tokens are the same either way.
    pub speculative: bool,
    /// Drafted tokens in one step, in all; a step decoding `d` completions gives each at most
    /// `this / d` of them, so nothing is drafted while more than this many decode. Default 4.
    /// Drafts also take only what [`Self::max_prefill_while_decoding`] leaves after the step's
    /// prompt tokens. A draft's rows lengthen the step for every running stream, so this bounds
    /// what drafting adds to the inter-token latency (see "Speculative decoding" in the
    /// [module](self) documentation).
    pub max_draft_tokens_per_step: usize,
}

impl SchedulerOptions {
    /// The default KV budget's cap: 2 GiB.
    pub const DEFAULT_MAX_KV_BYTES: u64 = 2 << 30;
    /// The most running requests and queue length one may ask for.
    pub const MAX_REQUESTS: usize = 1 << 16;
    /// The largest step budget one may ask for.
    pub const MAX_TOKENS_PER_STEP: usize = 1 << 20;

    /// Checks the limits: each count between 1 and its maximum.
    pub fn validate(&self) -> Result<(), Error> {
        let range = |option, value, max| {
            if (1..=max).contains(&value) {
                Ok(())
            } else {
                Err(Error::OutOfRange {
                    option,
                    value,
                    min: 1,
                    max,
                })
            }
        };
        range("max_running", self.max_running, Self::MAX_REQUESTS)?;
        range(
            "max_tokens_per_step",
            self.max_tokens_per_step,
            Self::MAX_TOKENS_PER_STEP,
        )?;
        range(
            "max_prefill_while_decoding",
            self.max_prefill_while_decoding,
            Self::MAX_TOKENS_PER_STEP,
        )?;
        range("max_waiting", self.max_waiting, Self::MAX_REQUESTS)?;
        range(
            "max_draft_tokens_per_step",
            self.max_draft_tokens_per_step,
            Self::MAX_TOKENS_PER_STEP,
        )?;
        Ok(())
    }
}

impl Default for SchedulerOptions {
    fn default() -> Self {
        SchedulerOptions {
            max_running: 32,
            max_tokens_per_step: 512,
            max_prefill_while_decoding: 8,
            kv_budget_bytes: None,
            max_waiting: 256,
            prefix_caching: true,
            speculative: true,
            max_draft_tokens_per_step: 4,
        }
    }
}

/// What to generate: prompt ids (see [`Engine::encode_prompt`]) and the options, as
/// [`Engine::generate_ids`] takes them.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The prompt's token ids.
    pub prompt: Vec<u32>,
    /// Sampling, stop conditions, `n`, logprobs and constraint (not beam search).
    pub options: GenerateOptions,
}

/// A request's number, unique within its scheduler, in order of arrival.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub u64);

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Where a request's events go: called on the scheduler's thread; returning `false` cancels the
/// request (its client went away).
pub type Sink = Box<dyn FnMut(Result<Event, Error>) -> bool + Send>;

/// The scheduler's figures, as of the end of the last step (gauges) and since it started
/// (totals).
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct SchedulerStats {
    /// Requests admitted and not finished.
    pub running: usize,
    /// Requests waiting to be admitted (preempted ones included).
    pub waiting: usize,
    /// KV blocks in use over all blocks, 0 to 1.
    pub kv_usage_ratio: f64,
    /// KV blocks in use.
    pub kv_blocks_used: usize,
    /// KV blocks in the budget.
    pub kv_blocks_total: usize,
    /// KV blocks held only by the prefix cache (free to evict).
    pub kv_blocks_cached: usize,
    /// Forward passes run.
    pub steps: u64,
    /// Prompt tokens of the requests admitted.
    pub prompt_tokens_total: u64,
    /// Tokens generated.
    pub generation_tokens_total: u64,
    /// Prompt tokens whose keys and values came from the prefix cache.
    pub cached_prompt_tokens_total: u64,
    /// Times a running request was preempted to free KV memory.
    pub preemptions: u64,
    /// Drafts checked by speculative decoding (a completion's draft in one step's pass).
    pub drafts: u64,
    /// Tokens drafted, in all.
    pub drafted_tokens: u64,
    /// Drafted tokens that were the chosen ones, and so were kept (each is also counted in
    /// `generation_tokens_total`).
    pub accepted_tokens: u64,
}

/// Runs many requests at once on one [`Engine`] (see the [module](self) documentation).
///
/// `Send + Sync`: share it (in an `Arc`) between the threads or tasks that submit requests.
/// Dropping it shuts it down at once ([`Scheduler::shutdown`] with no grace).
///
/// ```no_run
/// use nextok::sampling::SamplingParams;
/// use nextok::{Engine, EngineOptions, Event, GenerateOptions, Prompt, Request};
/// use nextok::{Scheduler, SchedulerOptions};
/// use std::sync::Arc;
///
/// let engine = Engine::load("SmolLM2-135M-Instruct.Q4_1.gguf", &EngineOptions::default())?;
/// let scheduler = Scheduler::new(Arc::new(engine), SchedulerOptions::default())?;
/// let options = GenerateOptions {
///     sampling: SamplingParams::greedy(),
///     max_tokens: Some(32),
///     ..GenerateOptions::default()
/// };
/// // Two requests run side by side: one forward pass per step for both.
/// let mut handles = Vec::new();
/// for question in ["What is 2 + 2?", "Name a colour."] {
///     let prompt = scheduler.engine().encode_prompt(&Prompt::chat(None, question))?;
///     let options = options.clone();
///     handles.push(scheduler.submit(Request { prompt, options })?);
/// }
/// for handle in handles {
///     for event in handle {
///         match event? {
///             Event::Token(t) => print!("{}", t.text),
///             Event::Done(c) => println!(" [{:?}]", c.stop.reason()),
///         }
///     }
/// }
/// assert_eq!(scheduler.stats().kv_blocks_used, 0);
/// # Ok::<(), nextok::Error>(())
/// ```
pub struct Scheduler {
    engine: Arc<Engine>,
    options: SchedulerOptions,
    memory: Memory,
    shared: Arc<Shared>,
    worker: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("options", &self.options)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

struct Shared {
    inbox: Mutex<Inbox>,
    /// The worker waits on it for work.
    wake: Condvar,
    /// [`Scheduler::wait_idle`] waits on it for the worker to be idle.
    idled: Condvar,
    stats: Mutex<SchedulerStats>,
}

impl Shared {
    fn inbox(&self) -> MutexGuard<'_, Inbox> {
        // A panic while the lock was held leaves plain data; the scheduler goes on with it.
        self.inbox.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn stats(&self) -> MutexGuard<'_, SchedulerStats> {
        self.stats.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[derive(Default)]
struct Inbox {
    new: VecDeque<Submitted>,
    cancelled: Vec<RequestId>,
    /// Requests taken from `new` and not admitted yet: the worker keeps it exact at every
    /// intake, admission and preemption, so that the queue's limit holds.
    waiting: usize,
    /// The worker has nothing to run and waits for work (see [`Scheduler::wait_idle`]).
    idle: bool,
    next_id: u64,
    /// When running requests are cancelled; set by [`Scheduler::shutdown`].
    deadline: Option<Instant>,
    /// The worker has ended (after a shutdown, or a panic).
    stopped: bool,
}

struct Submitted {
    id: RequestId,
    request: Request,
    conditions: StopConditions,
    /// The most KV blocks it can need (see [`Memory::check_fits`]).
    max_blocks: usize,
    sink: Sink,
    arrived: Instant,
}

impl Scheduler {
    /// A scheduler over `engine`, with its worker thread started.
    ///
    /// The KV cache's blocks come from [`Engine::new_pool`] (the model's backend), under
    /// [`SchedulerOptions::kv_budget_bytes`]; a budget below one block is an error
    /// ([`nextok_kv_cache::Error::BudgetTooSmall`] inside [`Error::Model`]).
    pub fn new(engine: Arc<Engine>, options: SchedulerOptions) -> Result<Scheduler, Error> {
        options.validate()?;
        let config = *engine.new_cache().config();
        let budget = options.kv_budget_bytes.unwrap_or_else(|| {
            let full = config.bytes_for(engine.context_window() as u64);
            full.saturating_mul(options.max_running as u64)
                .min(SchedulerOptions::DEFAULT_MAX_KV_BYTES)
        });
        let memory = Memory::new(engine.new_pool(budget)?, options.prefix_caching);
        let shared = Arc::new(Shared {
            inbox: Mutex::new(Inbox::default()),
            wake: Condvar::new(),
            idled: Condvar::new(),
            stats: Mutex::new(SchedulerStats {
                kv_blocks_total: memory.total_blocks,
                ..SchedulerStats::default()
            }),
        });
        let worker = {
            let (engine, shared, options, memory) = (
                engine.clone(),
                shared.clone(),
                options.clone(),
                memory.clone(),
            );
            std::thread::Builder::new()
                .name("nextok-scheduler".into())
                .spawn(move || work(&engine, &shared, &options, &memory))
                .map_err(|e| Error::SchedulerFailed {
                    reason: format!("cannot start the worker thread: {e}"),
                })?
        };
        Ok(Scheduler {
            engine,
            options,
            memory,
            shared,
            worker: Mutex::new(Some(worker)),
        })
    }

    /// The engine the requests run on.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// The limits it runs under.
    pub fn options(&self) -> &SchedulerOptions {
        &self.options
    }

    /// Submits a request; its events stream from the handle as a [`Generation`](crate::Generation)'s
    /// do (each token as it is chosen, then one [`Event::Done`] per completion).
    ///
    /// Refused at once, with a typed error, when the request is invalid (as
    /// [`Engine::generate_ids`] would refuse it), asks for beam search, can never fit the KV
    /// budget ([`Error::ExceedsKvBudget`]), finds the queue full ([`Error::QueueFull`]) or the
    /// scheduler shut down ([`Error::SchedulerShutDown`]).
    pub fn submit(&self, request: Request) -> Result<RequestHandle, Error> {
        let (tx, rx) = mpsc::channel();
        let id = self.submit_with(request, Box::new(move |e| tx.send(e).is_ok()))?;
        Ok(RequestHandle {
            id,
            rx,
            shared: self.shared.clone(),
            ended: false,
        })
    }

    /// Submits a request whose events are pushed into `sink` from the scheduler's thread (for
    /// async callers). The sink returning `false` cancels the request. After the last
    /// [`Event::Done`], or an error, the sink is dropped. Refused as [`Scheduler::submit`] is.
    pub fn submit_with(&self, request: Request, sink: Sink) -> Result<RequestId, Error> {
        if request.options.beams.is_some() {
            return Err(Error::InvalidOption {
                option: "beams",
                expected: "absent: the scheduler does not run beam search (use Engine::generate)",
            });
        }
        let conditions = self
            .engine
            .check_request(&request.prompt, &request.options)?;
        let max_blocks = self.memory.check_fits(
            request.prompt.len(),
            &request.options,
            self.engine.context_window(),
        )?;
        let mut inbox = self.shared.inbox();
        if inbox.deadline.is_some() || inbox.stopped {
            return Err(Error::SchedulerShutDown);
        }
        let waiting = inbox.waiting + inbox.new.len();
        if waiting >= self.options.max_waiting {
            return Err(Error::QueueFull {
                waiting,
                limit: self.options.max_waiting,
            });
        }
        let id = RequestId(inbox.next_id);
        inbox.next_id += 1;
        inbox.new.push_back(Submitted {
            id,
            request,
            conditions,
            max_blocks,
            sink,
            arrived: Instant::now(),
        });
        drop(inbox);
        self.shared.wake.notify_all();
        Ok(id)
    }

    /// Cancels a request: it gets no more events, and its KV blocks are freed before the next
    /// step's pass. An id that is not running or waiting is ignored.
    pub fn cancel(&self, id: RequestId) {
        cancel(&self.shared, id);
    }

    /// The figures as of the last step.
    pub fn stats(&self) -> SchedulerStats {
        *self.shared.stats()
    }

    /// Blocks until no request is running or waiting and every submission and cancellation so
    /// far has been taken in (or the worker has stopped). [`Scheduler::stats`] then describes
    /// that state.
    pub fn wait_idle(&self) {
        let mut inbox = self.shared.inbox();
        let done = |i: &Inbox| i.stopped || i.idle && i.new.is_empty() && i.cancelled.is_empty();
        while !done(&inbox) {
            inbox = self
                .shared
                .idled
                .wait(inbox)
                .unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Stops taking requests ([`Error::SchedulerShutDown`]), lets those already taken run for up
    /// to `grace`, ends the ones still running then with [`Error::SchedulerShutDown`], and waits
    /// for the worker thread to end.
    pub fn shutdown(&self, grace: Duration) {
        {
            let mut inbox = self.shared.inbox();
            let deadline = Instant::now() + grace;
            inbox.deadline = Some(inbox.deadline.map_or(deadline, |d| d.min(deadline)));
        }
        self.shared.wake.notify_all();
        let worker = self.worker.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(worker) = worker {
            // A worker that panicked has already marked itself stopped; nothing more to do.
            let _ = worker.join();
        }
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        self.shutdown(Duration::ZERO);
    }
}

fn cancel(shared: &Shared, id: RequestId) {
    shared.inbox().cancelled.push(id);
    shared.wake.notify_all();
}

/// A submitted request's events, blocking: an iterator of `Result<Event, Error>` that ends after
/// the last completion's [`Event::Done`], after an error, or after a cancel. Dropping it cancels
/// the request.
pub struct RequestHandle {
    id: RequestId,
    rx: mpsc::Receiver<Result<Event, Error>>,
    shared: Arc<Shared>,
    ended: bool,
}

impl std::fmt::Debug for RequestHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestHandle")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl RequestHandle {
    /// The request's id.
    pub fn id(&self) -> RequestId {
        self.id
    }

    /// Cancels the request (see [`Scheduler::cancel`]); the iterator then ends.
    pub fn cancel(&mut self) {
        if !self.ended {
            cancel(&self.shared, self.id);
        }
    }

    /// Runs the request to the end and returns its completions, in index order.
    pub fn collect_completions(&mut self) -> Result<Vec<crate::Completion>, Error> {
        let mut out = Vec::new();
        for event in self.by_ref() {
            if let Event::Done(c) = event? {
                out.push(*c);
            }
        }
        out.sort_by_key(|c| c.index);
        Ok(out)
    }
}

impl Iterator for RequestHandle {
    type Item = Result<Event, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.ended {
            return None;
        }
        match self.rx.recv() {
            Ok(e) => Some(e),
            Err(_) => {
                // The scheduler dropped the sink: the request is over.
                self.ended = true;
                None
            }
        }
    }
}

impl Drop for RequestHandle {
    fn drop(&mut self) {
        self.cancel();
    }
}

/// The KV memory the scheduler hands out: the engine's [`KvPool`] (from the model's backend, so
/// that attention reads the blocks where they live), whose accounting is exact: a request that
/// ends, fails, is cancelled or preempted drops its caches, and their blocks go back to the pool
/// (full prompt blocks stay in its prefix cache, evictable, when prefix caching is on).
#[derive(Debug, Clone)]
struct Memory {
    pool: KvPool,
    block_positions: usize,
    total_blocks: usize,
    prefix_caching: bool,
}

impl Memory {
    fn new(pool: KvPool, prefix_caching: bool) -> Self {
        Memory {
            block_positions: pool.config().block_positions,
            total_blocks: pool.total_blocks(),
            pool,
            prefix_caching,
        }
    }

    fn blocks_for(&self, positions: usize) -> usize {
        self.pool.blocks_for(positions)
    }

    /// A cache for a prompt being admitted: with its longest cached prefix when prefix caching
    /// is on.
    fn prompt_cache(&self, prompt: &[u32]) -> KvCache {
        if self.prefix_caching {
            self.pool.cache_for_prompt(prompt)
        } else {
            self.pool.new_cache()
        }
    }

    /// Refuses a request whose caches could not fit the budget even alone; returns the blocks
    /// it needs at most.
    fn check_fits(
        &self,
        prompt_len: usize,
        options: &GenerateOptions,
        context_window: usize,
    ) -> Result<usize, Error> {
        let room = context_window.saturating_sub(prompt_len);
        let answer = options.max_tokens.unwrap_or(room).min(room);
        let longest = prompt_len + answer;
        let n = options.n.max(1);
        // The prompt's full blocks are shared by the completions; each one holds the rest of its
        // prompt and answer. With several completions the shared partial block of the prompt
        // is counted once more: the first copies may be planned before it is known which
        // completion writes it last.
        let bp = self.block_positions;
        let full = prompt_len / bp;
        let shared_partial = usize::from(n > 1 && !prompt_len.is_multiple_of(bp));
        let blocks = full + n * (self.blocks_for(longest) - full) + shared_partial;
        if blocks > self.total_blocks {
            return Err(Error::ExceedsKvBudget {
                tokens: prompt_len + n * answer,
                fit: self.total_blocks * self.block_positions,
            });
        }
        Ok(blocks)
    }
}

/// A completion of a running or waiting request.
struct Seq<'e> {
    decoding: Decoding<'e>,
    /// Its drafting state, when speculative decoding is on for it.
    speculation: Option<Speculation>,
    /// Its cache once the prompt has been read (`None` while waiting or reading the prompt,
    /// and after it ended).
    cache: Option<KvCache>,
    done: bool,
}

/// A request the worker holds, waiting or running.
struct Active<'e> {
    id: RequestId,
    prompt: Vec<u32>,
    /// Its `max_tokens`: a draft never runs past it.
    max_tokens: Option<usize>,
    /// The most KV blocks it can need.
    max_blocks: usize,
    sink: Sink,
    arrived: Instant,
    /// When the prompt's pass began and how long reading it took (first admission).
    admitted: Option<Instant>,
    prefill_s: f64,
    cached_prompt_tokens: Option<usize>,
    /// The prompt's cache while the prompt is being read.
    prompt_cache: Option<KvCache>,
    seqs: Vec<Seq<'e>>,
    /// Its client went away, or it was cancelled.
    gone: bool,
}

impl Active<'_> {
    /// Gives its blocks back: the request waits to be read again from its prompt, its
    /// completions' choices kept.
    fn preempt(&mut self) {
        self.prompt_cache = None;
        for s in &mut self.seqs {
            s.cache = None;
        }
    }

    fn send(&mut self, event: Result<Event, Error>) {
        if !self.gone && !(self.sink)(event) {
            self.gone = true;
        }
    }

    fn finished(&self) -> bool {
        self.gone || self.seqs.iter().all(|s| s.done)
    }
}

/// What one batch entry runs: which cache, which tokens, whether logits come back.
enum Target {
    Prompt,
    Seq(usize),
}

struct Item {
    /// Index into the running requests.
    req: usize,
    target: Target,
    /// The tokens to run: a decode's last chosen token followed by its draft, or a chunk.
    tokens: Vec<u32>,
    logits: bool,
    /// Drafted tokens at the end of `tokens` (every position's logits then come back).
    drafted: usize,
    cache: Option<KvCache>,
}

/// One entry of a step after its pass: which request and cache it ran for, and what.
struct Entry {
    req: usize,
    target: Target,
    tokens: Vec<u32>,
    logits: bool,
    drafted: usize,
}

/// A completion choosing tokens from a step's logits: `rows` holds one row per position of
/// its entry, and `at` is the row of the next choice. A choice that confirms the drafted token
/// after it goes on to the next row; any other ends the completion's choices in this step.
struct Choice {
    req: usize,
    seq: usize,
    rows: Rc<Vec<f32>>,
    at: usize,
    /// The tokens its entry ran (the pending token, then the draft); empty after a prompt.
    input: Vec<u32>,
    drafted: usize,
}

/// The worker's state: the running requests (in arrival order) and the waiting queue (ordered by
/// arrival, so preempted requests come back before later ones).
struct Worker<'a, 'e> {
    engine: &'e Engine,
    shared: &'a Shared,
    options: &'a SchedulerOptions,
    memory: &'a Memory,
    running: Vec<Active<'e>>,
    waiting: VecDeque<Active<'e>>,
    stats: SchedulerStats,
}

/// The worker thread's body.
fn work(engine: &Engine, shared: &Shared, options: &SchedulerOptions, memory: &Memory) {
    /// Marks the worker stopped however it ends, so that submissions fail rather than wait.
    struct Stopped<'s>(&'s Shared);
    impl Drop for Stopped<'_> {
        fn drop(&mut self) {
            self.0.inbox().stopped = true;
            self.0.idled.notify_all();
        }
    }
    let _stopped = Stopped(shared);
    let mut worker = Worker {
        engine,
        shared,
        options,
        memory,
        running: Vec::new(),
        waiting: VecDeque::new(),
        stats: SchedulerStats {
            kv_blocks_total: memory.total_blocks,
            ..SchedulerStats::default()
        },
    };
    while worker.intake() {
        worker.step();
        worker.sweep();
        worker.sync_waiting();
        worker.publish();
    }
}

impl<'e> Worker<'_, 'e> {
    /// Takes new requests and cancellations; waits while there is nothing to do. Returns false
    /// when the worker must end: shut down, and the grace period over or nothing left to run.
    fn intake(&mut self) -> bool {
        loop {
            let (new, cancelled, deadline) = {
                let mut inbox = self.shared.inbox();
                while inbox.new.is_empty()
                    && inbox.cancelled.is_empty()
                    && inbox.deadline.is_none()
                    && self.running.is_empty()
                    && self.waiting.is_empty()
                {
                    // Idle: the last step's figures are published and nothing is pending.
                    inbox.idle = true;
                    self.shared.idled.notify_all();
                    inbox = self
                        .shared
                        .wake
                        .wait(inbox)
                        .unwrap_or_else(|e| e.into_inner());
                }
                inbox.idle = false;
                // They move to the worker's waiting queue, and stay counted as waiting.
                inbox.waiting += inbox.new.len();
                let new: Vec<Submitted> = inbox.new.drain(..).collect();
                (new, std::mem::take(&mut inbox.cancelled), inbox.deadline)
            };
            // Sinks are called without the lock held, so that one may submit or cancel.
            for s in new {
                self.accept(s);
            }
            for id in cancelled {
                for r in self.running.iter_mut().chain(self.waiting.iter_mut()) {
                    if r.id == id {
                        r.gone = true;
                    }
                }
            }
            self.sweep();
            self.sync_waiting();
            let idle = self.running.is_empty() && self.waiting.is_empty();
            if let Some(deadline) = deadline {
                // No request can arrive once the deadline is set (submit checks it under the
                // lock this intake held), so what is left here is everything.
                if idle || Instant::now() >= deadline {
                    for mut r in self.running.drain(..).chain(self.waiting.drain(..)) {
                        r.send(Err(Error::SchedulerShutDown));
                    }
                    self.publish();
                    return false;
                }
            }
            if !idle {
                return true;
            }
            // Everything was cancelled: publish that and wait again.
            self.publish();
        }
    }

    /// A new request joins the waiting queue, its completions' choosers built.
    fn accept(&mut self, s: Submitted) {
        let mut seqs = Vec::with_capacity(s.request.options.n);
        for index in 0..s.request.options.n {
            match Decoding::new(
                self.engine,
                &s.request.options,
                &s.conditions,
                s.request.prompt.len(),
                index,
            ) {
                Ok(decoding) => seqs.push(Seq {
                    decoding,
                    speculation: (self.options.speculative && s.request.options.speculative)
                        .then(|| Speculation::new(&s.request.prompt)),
                    cache: None,
                    done: false,
                }),
                Err(e) => {
                    let mut sink = s.sink;
                    sink(Err(e));
                    return;
                }
            }
        }
        self.waiting.push_back(Active {
            id: s.id,
            max_tokens: s.request.options.max_tokens,
            prompt: s.request.prompt,
            max_blocks: s.max_blocks,
            sink: s.sink,
            arrived: s.arrived,
            admitted: None,
            prefill_s: 0.0,
            cached_prompt_tokens: None,
            prompt_cache: None,
            seqs,
            gone: false,
        });
    }

    /// Drops finished, failed and cancelled requests (their caches, so their blocks, go with
    /// them).
    fn sweep(&mut self) {
        self.running.retain(|r| !r.finished());
        self.waiting.retain(|r| !r.finished());
    }

    fn publish(&mut self) {
        let pool = &self.memory.pool;
        self.stats.running = self.running.len();
        self.stats.waiting = self.waiting.len();
        self.stats.kv_blocks_used = pool.used_blocks();
        self.stats.kv_blocks_cached = pool.cached_blocks();
        self.stats.kv_usage_ratio = pool.usage_ratio();
        *self.shared.stats() = self.stats;
    }

    /// Makes the shared count of waiting requests exact again.
    fn sync_waiting(&self) {
        self.shared.inbox().waiting = self.waiting.len();
    }

    /// Blocks a cache can still take: free, or held only by the prefix cache.
    fn available(&self) -> usize {
        self.memory.pool.available_blocks()
    }

    /// Preempts the newest running request (the last in arrival order), never the only one,
    /// and with `newer_than`, only one newer than that request. Returns its id. Items already
    /// planned for it leave `plan`.
    fn preempt_newest(
        &mut self,
        newer_than: Option<RequestId>,
        plan: &mut Vec<Item>,
    ) -> Option<RequestId> {
        if self.running.len() < 2 {
            return None;
        }
        let newest = self.running.len() - 1;
        if newer_than.is_some_and(|id| self.running[newest].id <= id) {
            return None;
        }
        let mut r = self.running.remove(newest);
        plan.retain(|i| i.req != newest);
        r.preempt();
        self.stats.preemptions += 1;
        let id = r.id;
        let at = self
            .waiting
            .iter()
            .position(|w| w.id > id)
            .unwrap_or(self.waiting.len());
        self.waiting.insert(at, r);
        self.sync_waiting();
        Some(id)
    }

    /// Plans and runs one step (see the module documentation).
    fn step(&mut self) {
        let bp = self.memory.block_positions;
        let mut plan: Vec<Item> = Vec::new();
        let mut reserved = 0usize;
        let mut budget = self.options.max_tokens_per_step;

        // Decodes, oldest request first. A completion that needs a block that is not free
        // preempts the newest running request, possibly its own.
        let mut r = 0;
        while r < self.running.len() {
            let mut s = 0;
            let mut preempted_self = false;
            while s < self.running[r].seqs.len() {
                let req = &self.running[r];
                let seq = &req.seqs[s];
                let Some(cache) = seq.cache.as_ref().filter(|_| !seq.done) else {
                    s += 1;
                    continue;
                };
                let have = cache.len();
                let all = req.prompt.len() + seq.decoding.tokens.len();
                if all != have + 1 {
                    s += 1;
                    continue;
                }
                let Some(&token) = seq.decoding.tokens.last() else {
                    s += 1;
                    continue;
                };
                let need = cache.blocks_needed(1);
                if need > self.available().saturating_sub(reserved) {
                    let id = req.id;
                    match self.preempt_newest(None, &mut plan) {
                        Some(victim) if victim == id => {
                            preempted_self = true;
                            break;
                        }
                        Some(_) => continue,
                        None => {
                            // Alone and still short: the admission check makes this
                            // impossible; end the request rather than loop.
                            let fit = self.memory.total_blocks * bp;
                            let r = &mut self.running[r];
                            r.send(Err(Error::ExceedsKvBudget { tokens: all, fit }));
                            r.gone = true;
                            break;
                        }
                    }
                }
                reserved += need;
                budget = budget.saturating_sub(1);
                plan.push(Item {
                    req: r,
                    target: Target::Seq(s),
                    tokens: vec![token],
                    logits: true,
                    drafted: 0,
                    cache: None,
                });
                s += 1;
            }
            if !preempted_self {
                r += 1;
            }
        }

        // While completions decode, the prompt tokens beside them are capped: a step's time
        // grows with its tokens, and every running stream's next token waits for the step.
        let decodes = plan.len();
        if decodes > 0 {
            budget = budget.min(self.options.max_prefill_while_decoding.max(decodes));
        }

        // Chunks of prompts and of completions catching up, oldest request first.
        for r in 0..self.running.len() {
            if budget == 0 {
                break;
            }
            self.plan_chunks(r, &mut plan, &mut reserved, &mut budget);
        }

        // Admission, FCFS: the head of the queue or nobody.
        while budget > 0 && self.running.len() < self.options.max_running {
            let Some(head) = self.waiting.front() else {
                break;
            };
            // Its prompt's blocks and one to grow into, or all it can ever need if that is less
            // (so that a request that fits the budget alone is always admitted in the end).
            let need = (self.memory.blocks_for(head.prompt.len()) + 1).min(head.max_blocks);
            if need > self.available().saturating_sub(reserved) {
                break;
            }
            let Some(mut head) = self.waiting.pop_front() else {
                break;
            };
            let cache = self.memory.prompt_cache(&head.prompt);
            if head.cached_prompt_tokens.is_none() {
                head.cached_prompt_tokens = Some(cache.len());
                self.stats.prompt_tokens_total += head.prompt.len() as u64;
                self.stats.cached_prompt_tokens_total += cache.len() as u64;
            }
            head.admitted.get_or_insert_with(Instant::now);
            head.prompt_cache = Some(cache);
            self.running.push(head);
            self.sync_waiting();
            let r = self.running.len() - 1;
            self.plan_chunks(r, &mut plan, &mut reserved, &mut budget);
        }

        // Nothing could be planned although requests run (every one short of memory for its
        // chunk): the oldest goes on, newer ones preempted until it fits (alone it always does).
        if plan.is_empty() && !self.running.is_empty() {
            while self.running.len() > 1 && plan.is_empty() {
                let oldest = self.running[0].id;
                if self.preempt_newest(Some(oldest), &mut plan).is_none() {
                    break;
                }
                let mut b = self.options.max_tokens_per_step;
                self.plan_chunks(0, &mut plan, &mut reserved, &mut b);
            }
        }
        if plan.is_empty() {
            // Cannot happen (a request alone always fits, by the check at submission); if it
            // did, the oldest request ends with the numbers rather than the worker spinning.
            if let Some(r) = self.running.first_mut() {
                let fit = self.memory.total_blocks * bp;
                let tokens = r.prompt.len();
                r.send(Err(Error::ExceedsKvBudget { tokens, fit }));
                r.gone = true;
                self.sweep();
            }
            return;
        }
        if self.options.speculative && decodes > 0 {
            // What the cap beside decodes left after the prompt tokens, so that drafts and
            // prompt chunks together stay under it.
            self.plan_drafts(&mut plan, reserved, decodes, budget);
        }
        self.run(plan);
    }

    /// Drafts for the step's `decodes` decodes, oldest request first: each decoding completion
    /// that drafts appends a prompt-lookup draft to its token, of at most
    /// `max_draft_tokens_per_step / decodes` tokens, within `left` (what the step's budgets
    /// have left after everything else) and [`SchedulerOptions::max_draft_tokens_per_step`] in
    /// all, and within the blocks that are free after everything else (a draft never preempts
    /// anyone: it is cut to what fits), and never past its `max_tokens` or the context window.
    fn plan_drafts(&mut self, plan: &mut [Item], mut reserved: usize, decodes: usize, left: usize) {
        let per_decode = self.options.max_draft_tokens_per_step / decodes.max(1);
        if per_decode == 0 {
            return;
        }
        let mut left = left.min(self.options.max_draft_tokens_per_step);
        let available = self.available();
        let context = self.engine.context_window();
        let mut draft = Vec::new();
        for item in plan.iter_mut() {
            let Target::Seq(s) = item.target else {
                continue;
            };
            if item.tokens.len() != 1 || !item.logits {
                continue;
            }
            let req = &mut self.running[item.req];
            let seq = &mut req.seqs[s];
            let (Some(speculation), Some(cache)) = (seq.speculation.as_mut(), seq.cache.as_ref())
            else {
                continue;
            };
            // As in `Generation`: a round chooses at most one token more than it drafts, so the
            // draft stays within the tokens the answer may still take and the positions left.
            let base = cache.len();
            let chosen = seq.decoding.tokens.len();
            let answer_room = req
                .max_tokens
                .map_or(usize::MAX, |m| m.saturating_sub(chosen));
            let limit = answer_room
                .min(context.saturating_sub(base))
                .saturating_sub(1)
                .min(left)
                .min(per_decode);
            draft.clear();
            speculation.draft(&seq.decoding.tokens, limit, &mut draft);
            let one = cache.blocks_needed(1);
            let free = available.saturating_sub(reserved);
            let mut k = draft.len();
            while k > 0 && cache.blocks_needed(1 + k) - one > free {
                k -= 1;
            }
            if k == 0 {
                continue;
            }
            reserved += cache.blocks_needed(1 + k) - one;
            left -= k;
            item.tokens.extend_from_slice(&draft[..k]);
            item.drafted = k;
        }
    }

    /// Plans the chunks of running request `r`: its prompt, or its completions catching up.
    fn plan_chunks(
        &self,
        r: usize,
        plan: &mut Vec<Item>,
        reserved: &mut usize,
        budget: &mut usize,
    ) {
        let avail = self.available();
        let req = &self.running[r];
        // Each cache that needs tokens, and those tokens.
        let mut wants: Vec<(Target, &KvCache, Vec<u32>)> = Vec::new();
        if let Some(cache) = &req.prompt_cache {
            wants.push((Target::Prompt, cache, req.prompt[cache.len()..].to_vec()));
        } else {
            for (s, seq) in req.seqs.iter().enumerate() {
                let (Some(cache), false) = (&seq.cache, seq.done) else {
                    continue;
                };
                let have = cache.len();
                let tokens = &seq.decoding.tokens;
                if req.prompt.len() + tokens.len() > have + 1 {
                    // A completion catching up after a preemption: what its cache lacks of the
                    // prompt and the tokens chosen so far.
                    let todo: Vec<u32> = req
                        .prompt
                        .iter()
                        .chain(tokens)
                        .skip(have)
                        .copied()
                        .collect();
                    wants.push((Target::Seq(s), cache, todo));
                }
            }
        }
        for (target, cache, todo) in wants {
            if *budget == 0 {
                break;
            }
            let free = avail.saturating_sub(*reserved);
            // The longest chunk whose blocks are free (blocks_needed grows with the chunk).
            let mut take = todo.len().min(*budget);
            if cache.blocks_needed(take) > free {
                let (mut lo, mut hi) = (0, take);
                while lo < hi {
                    let mid = (lo + hi).div_ceil(2);
                    if cache.blocks_needed(mid) <= free {
                        lo = mid;
                    } else {
                        hi = mid - 1;
                    }
                }
                take = lo;
            }
            if take == 0 {
                continue;
            }
            *reserved += cache.blocks_needed(take);
            *budget -= take;
            plan.push(Item {
                req: r,
                target,
                logits: take == todo.len(),
                tokens: todo[..take].to_vec(),
                drafted: 0,
                cache: None,
            });
        }
    }

    /// Runs the planned batch in one forward pass, while a worker thread computes the
    /// constraint masks of the choices the pass's logits are for, then lets every completion
    /// that got logits choose its tokens.
    fn run(&mut self, mut plan: Vec<Item>) {
        for item in &mut plan {
            let req = &mut self.running[item.req];
            item.cache = match item.target {
                Target::Prompt => req.prompt_cache.take(),
                Target::Seq(s) => req.seqs[s].cache.take(),
            };
        }
        // Every planned entry has a cache by construction; one without could not run, and would
        // shift the rows against the entries.
        plan.retain(|item| item.cache.is_some());
        let engine = self.engine;
        let outcome = {
            // The completions that choose from this pass: a decode's own, and after a prompt's
            // last chunk those of its request that have no token yet.
            let choosers: Vec<(usize, Option<usize>)> = plan
                .iter()
                .filter(|i| i.logits)
                .map(|i| match i.target {
                    Target::Prompt => (i.req, None),
                    Target::Seq(s) => (i.req, Some(s)),
                })
                .collect();
            let mut masks = Vec::new();
            for (r, req) in self.running.iter_mut().enumerate() {
                for (s, seq) in req.seqs.iter_mut().enumerate() {
                    let chooses = choosers.iter().any(|&(cr, cs)| {
                        cr == r
                            && match cs {
                                Some(cs) => cs == s,
                                None => !seq.done && seq.decoding.tokens.is_empty(),
                            }
                    });
                    if chooses {
                        masks.extend(seq.decoding.masking.as_mut());
                    }
                }
            }
            overlapping_masks(engine, masks, || forward(engine, &mut plan))
        };
        let mut results: Vec<Result<Vec<f32>, Error>> = match outcome {
            Ok(rows) => rows.into_iter().map(Ok).collect(),
            Err(Error::Model(nextok_model::Error::Cache(
                nextok_kv_cache::Error::OutOfBlocks { .. },
            ))) if self.running.len() > 1 => {
                // The plan asked for blocks the pool could not give after all (a copy-on-write
                // it did not foresee). The caches are as they were: put them back, free memory
                // by preempting the newest request, and plan again next step.
                self.stats.steps += 1;
                self.put_back(plan);
                self.preempt_newest(None, &mut Vec::new());
                return;
            }
            Err(e) if plan.len() == 1 => vec![Err(e)],
            Err(_) => {
                // The model refused the batch; the caches are as they were. Each entry runs
                // alone (the same bits, by the model's contract), so that only the requests the
                // model refuses end with its error, not the others beside them.
                plan.iter_mut()
                    .map(|item| {
                        forward(engine, std::slice::from_mut(item))
                            .map(|mut rows| rows.pop().unwrap_or_default())
                    })
                    .collect()
            }
        };
        self.stats.steps += 1;
        for (item, result) in plan.iter_mut().zip(&results) {
            // The full blocks of every cache that ran join the prefix cache, for later requests
            // that share a prefix and for this one should it be preempted. A cache that ran a
            // draft publishes once the draft's rejected tokens are cut off (`end_choices`), so
            // that no block of the prefix cache ever holds a token that was not chosen.
            if result.is_ok() && self.memory.prefix_caching && item.drafted == 0 {
                if let Some(cache) = item.cache.as_mut() {
                    cache.publish_prefix();
                }
            }
        }
        let entries = self.put_back(plan);
        let vocab = engine.vocab_size();
        let mut choices = Vec::new();
        for (entry, result) in entries.into_iter().zip(results.drain(..)) {
            let r = entry.req;
            let rows = match result {
                Ok(rows) if entry.drafted > 0 && rows.len() != entry.tokens.len() * vocab => {
                    Err(Error::ModelOutput {
                        expected: entry.tokens.len() * vocab,
                        got: rows.len(),
                    })
                }
                other => other,
            };
            let rows = match rows {
                Ok(rows) => rows,
                Err(e) => {
                    let req = &mut self.running[r];
                    req.send(Err(e));
                    req.gone = true;
                    continue;
                }
            };
            if !entry.logits {
                continue;
            }
            let rows = Rc::new(rows);
            match entry.target {
                Target::Prompt => {
                    for s in self.prompt_read(r) {
                        choices.push(Choice {
                            req: r,
                            seq: s,
                            rows: rows.clone(),
                            at: 0,
                            input: Vec::new(),
                            drafted: 0,
                        });
                    }
                }
                Target::Seq(s) => choices.push(Choice {
                    req: r,
                    seq: s,
                    rows,
                    at: 0,
                    input: entry.tokens,
                    drafted: entry.drafted,
                }),
            }
        }
        self.choose(choices);
        self.sweep();
    }

    /// Puts the entries' caches back where they came from, and returns what each entry ran.
    fn put_back(&mut self, plan: Vec<Item>) -> Vec<Entry> {
        let mut entries = Vec::with_capacity(plan.len());
        for item in plan {
            let req = &mut self.running[item.req];
            match item.target {
                Target::Prompt => req.prompt_cache = item.cache,
                Target::Seq(s) => req.seqs[s].cache = item.cache,
            }
            entries.push(Entry {
                req: item.req,
                target: item.target,
                tokens: item.tokens,
                logits: item.logits,
                drafted: item.drafted,
            });
        }
        entries
    }

    /// The prompt of running request `r` has been read: its completions fork its cache. Returns
    /// those that have not chosen a token yet, which choose one from the prompt's logits.
    fn prompt_read(&mut self, r: usize) -> Vec<usize> {
        let req = &mut self.running[r];
        let Some(cache) = req.prompt_cache.take() else {
            return Vec::new();
        };
        if req.admitted.is_some() && req.prefill_s == 0.0 {
            req.prefill_s = req.admitted.map_or(0.0, |a| a.elapsed().as_secs_f64());
        }
        let live: Vec<usize> = (0..req.seqs.len()).filter(|&s| !req.seqs[s].done).collect();
        let mut cache = Some(cache);
        for (k, &s) in live.iter().enumerate() {
            req.seqs[s].cache = if k + 1 == live.len() {
                cache.take()
            } else {
                cache.as_ref().map(KvCache::fork)
            };
        }
        live.into_iter()
            .filter(|&s| req.seqs[s].decoding.tokens.is_empty())
            .collect()
    }

    /// The step's choices. Every completion that got logits chooses from its first row, all of
    /// them in one batched draw; those whose choice confirms their draft's next token choose
    /// again from their next row, in the next batched draw, and so on. Each choice is the one
    /// plain decoding makes at that position ([`Decoding::choose`]'s mask, chain, draw and stop
    /// check, split into [`Decoding::batch_row`] and [`Decoding::accept`]), and each chosen token
    /// is its own event.
    fn choose(&mut self, mut choices: Vec<Choice>) {
        while !choices.is_empty() {
            choices.retain(|c| !self.running[c.req].gone);
            let sampled = self.sample(&choices);
            let mut again = Vec::new();
            for (mut c, sampled) in choices.into_iter().zip(sampled) {
                let engine = self.engine;
                let req = &mut self.running[c.req];
                if req.gone {
                    continue;
                }
                let chosen = sampled.and_then(|s| {
                    let decoding = &mut req.seqs[c.seq].decoding;
                    let chosen = decoding.chosen(s);
                    decoding.accept(engine, chosen)
                });
                let (event, stop) = match chosen {
                    Ok(chosen) => chosen,
                    Err(e) => {
                        req.send(Err(e));
                        req.gone = true;
                        continue;
                    }
                };
                let id = event.id;
                self.stats.generation_tokens_total += 1;
                req.send(Ok(Event::Token(event)));
                if stop.is_none() && c.at < c.drafted && c.input.get(c.at + 1) == Some(&id) {
                    // The drafted token is the chosen one: its logits are already computed.
                    // (Only a draft's tokens: a completion catching up reads several tokens
                    // and gets the logits of its last one only.)
                    c.at += 1;
                    again.push(c);
                } else {
                    self.end_choices(&c, stop);
                }
            }
            choices = again;
        }
    }

    /// Draws the next token of every choice: [`sample_batch`] over the model's host threads for
    /// the completions that asked for log-probabilities, [`choose_batch`] (the same tokens,
    /// without the exponential pass over the vocabulary that the model's own log-probabilities
    /// cost) for the others; each row exactly as its own sampler call would draw it. Results
    /// are in the order of `choices`.
    fn sample(&mut self, choices: &[Choice]) -> Vec<Result<Drawn, Error>> {
        let engine = self.engine;
        let vocab = engine.vocab_size();
        let index: HashMap<(usize, usize), usize> = choices
            .iter()
            .enumerate()
            .map(|(i, c)| ((c.req, c.seq), i))
            .collect();
        let mut out: Vec<Option<Result<Drawn, Error>>> = choices.iter().map(|_| None).collect();
        // Rows that need the raw log-probabilities, and rows that do not, each with the index
        // of its choice.
        let (mut raw, mut raw_of) = (Vec::new(), Vec::new());
        let (mut plain, mut plain_of) = (Vec::new(), Vec::new());
        for (r, req) in self.running.iter_mut().enumerate() {
            let prompt = &req.prompt;
            for (s, seq) in req.seqs.iter_mut().enumerate() {
                let Some(&i) = index.get(&(r, s)) else {
                    continue;
                };
                let c = &choices[i];
                let Some(logits) = c.rows.get(c.at * vocab..(c.at + 1) * vocab) else {
                    out[i] = Some(Err(Error::ModelOutput {
                        expected: (c.at + 1) * vocab,
                        got: c.rows.len(),
                    }));
                    continue;
                };
                let wants_raw = seq.decoding.raw_logprobs();
                match seq.decoding.batch_row(prompt, logits) {
                    Ok(row) if wants_raw => {
                        raw.push(row);
                        raw_of.push(i);
                    }
                    Ok(row) => {
                        plain.push(row);
                        plain_of.push(i);
                    }
                    Err(e) => out[i] = Some(Err(e)),
                }
            }
        }
        let model = engine.model();
        let parts = model.host_parts();
        let sampled: Vec<Result<Sampled, nextok_sampling::Error>> = if raw.len() > 1 && parts > 1 {
            sample_batch(&mut raw, parts, |job| model.run_host_parts(job))
        } else {
            raw.iter_mut()
                .map(|row| row.sampler.sample(row.logits, &row.ctx))
                .collect()
        };
        let chosen: Vec<Result<nextok_sampling::Chosen, nextok_sampling::Error>> =
            if plain.len() > 1 && parts > 1 {
                choose_batch(&mut plain, parts, |job| model.run_host_parts(job))
            } else {
                plain
                    .iter_mut()
                    .map(|row| row.sampler.choose(row.logits, &row.ctx))
                    .collect()
            };
        for (i, result) in raw_of.into_iter().zip(sampled) {
            out[i] = Some(result.map(Drawn::Sampled).map_err(Error::from));
        }
        for (i, result) in plain_of.into_iter().zip(chosen) {
            out[i] = Some(result.map(Drawn::Chosen).map_err(Error::from));
        }
        out.into_iter()
            .map(|o| {
                o.unwrap_or_else(|| {
                    Err(Error::SchedulerFailed {
                        reason: "a completion to choose for was not running".into(),
                    })
                })
            })
            .collect()
    }

    /// A completion's choices in this step have ended with `c`'s last one. After a draft its
    /// cache is cut back to the positions before the token just chosen (the rest of the draft
    /// was not chosen), then publishes its full blocks, and its drafting state learns how the
    /// draft went; when the answer has ended, the completion is finished.
    fn end_choices(&mut self, c: &Choice, stop: Option<Stop>) {
        let prefix_caching = self.memory.prefix_caching;
        let req = &mut self.running[c.req];
        let seq = &mut req.seqs[c.seq];
        if c.drafted > 0 {
            if let Some(cache) = seq.cache.as_mut() {
                // The pass appended the pending token and the draft after `base`.
                let base = cache.len().saturating_sub(c.input.len());
                cache.truncate(base + 1 + c.at);
                if prefix_caching {
                    cache.publish_prefix();
                }
            }
            if let Some(speculation) = seq.speculation.as_mut() {
                speculation.record(c.drafted, c.at);
            }
            self.stats.drafts += 1;
            self.stats.drafted_tokens += c.drafted as u64;
            self.stats.accepted_tokens += c.at as u64;
        }
        let Some(stop) = stop else {
            return;
        };
        seq.done = true;
        let cache = seq.cache.take();
        let prefilled = req.prompt.len() - req.cached_prompt_tokens.unwrap_or(0);
        let t = timings(
            req.arrived,
            seq.decoding.first_token,
            seq.decoding.last_token,
            req.prefill_s,
            prefilled,
            cache.as_ref().map_or(0, KvCache::bytes),
        );
        let completion =
            seq.decoding
                .finish(&req.prompt, req.cached_prompt_tokens.unwrap_or(0), stop, t);
        req.send(Ok(Event::Done(Box::new(completion))));
    }
}

/// One forward pass over the planned entries (each holds its cache): a decode with a draft asks
/// for every position's logits, any other entry that chooses for its last one.
fn forward(engine: &Engine, plan: &mut [Item]) -> Result<Vec<Vec<f32>>, Error> {
    let mut batch: Vec<Sequence<'_>> = plan
        .iter_mut()
        .filter_map(|item| {
            let logits = if item.drafted > 0 {
                Logits::All
            } else if item.logits {
                Logits::Last
            } else {
                Logits::None
            };
            item.cache.as_mut().map(|cache| Sequence {
                cache,
                tokens: &item.tokens,
                logits,
            })
        })
        .collect();
    engine.model().forward(&mut batch)
}
