//! The scheduler on the small seeded random Llama of `tests/common` (no download): every
//! request's completions equal the same request run alone through `Engine::generate_ids`, bit for
//! bit, whatever else runs, however its prompt is chunked and whether it is preempted; bad
//! requests, a full queue, cancellation and shutdown give their typed errors and free their KV
//! blocks.

mod common;

use common::{engine_with, greedy, SEED};
use nextok::sampling::SamplingParams;
use nextok::{
    BeamOptions, Completion, ConstraintSpec, Engine, Error, Event, GenerateOptions, Request,
    RequestHandle, Scheduler, SchedulerOptions,
};
use proptest::prelude::*;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// The small model with a context of 256 positions, shared by every test of this binary.
fn engine() -> Arc<Engine> {
    static ENGINE: OnceLock<Arc<Engine>> = OnceLock::new();
    ENGINE
        .get_or_init(|| Arc::new(engine_with(SEED, 256)))
        .clone()
}

/// Bytes of one KV block (16 positions) of the small model.
fn block_bytes() -> u64 {
    engine().new_cache().config().bytes_for(16)
}

fn options(blocks: u64) -> SchedulerOptions {
    SchedulerOptions {
        kv_budget_bytes: Some(blocks * block_bytes()),
        ..SchedulerOptions::default()
    }
}

/// The request run alone, as `Engine::generate_ids` runs it.
fn alone(request: &Request) -> Vec<Completion> {
    engine()
        .generate_ids(request.prompt.clone(), &request.options, None)
        .expect("a valid request")
        .collect_completions()
        .expect("the request runs")
}

/// The parts of a completion that must not depend on what else runs (the timings do).
fn key(c: &Completion) -> (usize, Vec<u32>, String, String, u64, usize) {
    (
        c.index,
        c.tokens.clone(),
        c.text.clone(),
        format!("{:?}", c.stop),
        c.logprob.to_bits(),
        c.usage.completion_tokens,
    )
}

/// Every event of a handle: the token events' (index, id, logprob bits, top ids) and the
/// completions.
type Tokens = Vec<(usize, u32, u32, Vec<u32>)>;

/// Records one event.
fn record(event: Event, tokens: &mut Tokens, done: &mut Vec<Completion>) {
    match event {
        Event::Token(t) => tokens.push((
            t.index,
            t.id,
            t.logprob.to_bits(),
            t.top.iter().map(|a| a.id).collect(),
        )),
        Event::Done(c) => done.push(*c),
    }
}

fn drain(handle: RequestHandle) -> (Tokens, Vec<Completion>) {
    let mut tokens = Vec::new();
    let mut done = Vec::new();
    for event in handle {
        record(event.expect("no error"), &mut tokens, &mut done);
    }
    done.sort_by_key(|c| c.index);
    (tokens, done)
}

/// The token events a generation alone gives, as [`drain`] records them.
fn alone_tokens(request: &Request) -> Tokens {
    let mut out = Vec::new();
    for event in engine()
        .generate_ids(request.prompt.clone(), &request.options, None)
        .expect("a valid request")
    {
        if let Event::Token(t) = event.expect("the request runs") {
            out.push((
                t.index,
                t.id,
                t.logprob.to_bits(),
                t.top.iter().map(|a| a.id).collect(),
            ));
        }
    }
    out
}

/// The blocks of 16 positions a request needs at most, as the scheduler counts them: its
/// prompt's full blocks once, for each completion the rest of its prompt and answer, and with
/// several completions the prompt's shared partial block once more.
fn blocks_needed(request: &Request) -> u64 {
    let prompt = request.prompt.len();
    let longest = prompt + request.options.max_tokens.unwrap_or(0);
    let full = prompt / 16;
    let n = request.options.n;
    let shared_partial = usize::from(n > 1 && !prompt.is_multiple_of(16));
    (full + n * (longest.div_ceil(16) - full) + shared_partial) as u64
}

/// A random request: a prompt of ordinary tokens, greedy or seeded sampling, maybe a stop
/// sequence, a constraint, two completions and top log-probabilities.
fn request() -> impl Strategy<Value = Request> {
    let vocab = common::vocab_size() as u32;
    (
        proptest::collection::vec(3..vocab, 1..60),
        any::<bool>(),
        any::<u64>(),
        1usize..32,
        prop::sample::select(vec![None, Some("e"), Some("th"), Some(" the")]),
        0usize..4,
        1usize..3,
        0usize..3,
    )
        .prop_map(
            |(prompt, greedy, seed, max_tokens, stop, constraint, n, top)| Request {
                prompt,
                options: GenerateOptions {
                    sampling: if greedy {
                        SamplingParams::greedy()
                    } else {
                        SamplingParams {
                            temperature: 1.0,
                            seed: Some(seed),
                            ..SamplingParams::default()
                        }
                    },
                    max_tokens: Some(max_tokens),
                    stop: stop.map(String::from).into_iter().collect(),
                    ignore_eos: seed % 2 == 0,
                    top_logprobs: top,
                    n,
                    constraint: (constraint == 0)
                        .then(|| ConstraintSpec::Regex("(hello|the|user| )+".into())),
                    ..GenerateOptions::default()
                },
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Random requests arrive while others run (each after a random number of events of the
    /// earlier ones), under random step budgets, caps on the prompt tokens beside decodes,
    /// running limits and KV budgets that hold the
    /// largest request alone and at most 2 blocks more (so that requests wait and are
    /// preempted), and some are cancelled midway. Every
    /// request that runs to the end gives exactly the completions it gives alone; a cancelled one
    /// gives a prefix of its tokens alone. When all are over, no KV block is held.
    #[test]
    fn every_request_gets_what_it_gets_alone(
        requests in proptest::collection::vec(request(), 2..6),
        delays in proptest::collection::vec(0usize..6, 6),
        cancel_after in proptest::collection::vec(proptest::option::weighted(0.2, 0usize..8), 6),
        step_budget in 1usize..40,
        prefill_cap in 1usize..40,
        max_running in 1usize..5,
        spare_blocks in 0u64..3,
    ) {
        // The budget holds the largest request alone and a few blocks more: requests wait for
        // memory, and running ones are preempted.
        let blocks = requests.iter().map(blocks_needed).max().unwrap_or(1) + spare_blocks;
        let scheduler = Scheduler::new(engine(), SchedulerOptions {
            max_tokens_per_step: step_budget,
            max_prefill_while_decoding: prefill_cap,
            max_running,
            ..options(blocks)
        }).expect("valid options");
        // Submit each request after reading some events of those already submitted.
        type Seen = (Request, RequestHandle, Tokens, Vec<Completion>);
        let mut handles: Vec<Seen> = Vec::new();
        for (k, request) in requests.into_iter().enumerate() {
            for _ in 0..delays[k] {
                for (_, h, seen, done) in handles.iter_mut() {
                    if let Some(event) = h.next() {
                        record(event.expect("no error"), seen, done);
                    }
                }
            }
            let handle = scheduler.submit(request.clone()).expect("the request fits");
            handles.push((request, handle, Vec::new(), Vec::new()));
        }
        for (k, (request, mut handle, mut seen, mut done)) in handles.into_iter().enumerate() {
            if let Some(after) = cancel_after[k] {
                // Read some more events, then cancel: what came is a prefix of the run alone.
                for _ in 0..after {
                    if let Some(event) = handle.next() {
                        record(event.expect("no error"), &mut seen, &mut done);
                    }
                }
                handle.cancel();
                let (rest, _) = drain(handle);
                seen.extend(rest);
                let whole = alone_tokens(&request);
                // Per completion, the tokens seen are the first ones of that completion alone.
                for index in 0..request.options.n {
                    let got: Vec<_> = seen.iter().filter(|t| t.0 == index).collect();
                    let want: Vec<_> = whole.iter().filter(|t| t.0 == index).collect();
                    prop_assert!(got.len() <= want.len());
                    prop_assert_eq!(&got[..], &want[..got.len()]);
                }
                continue;
            }
            let (rest, more) = drain(handle);
            seen.extend(rest);
            done.extend(more);
            done.sort_by_key(|c| c.index);
            let want = alone(&request);
            prop_assert_eq!(
                done.iter().map(key).collect::<Vec<_>>(),
                want.iter().map(key).collect::<Vec<_>>()
            );
            // Completions interleave differently when one was preempted; each one's own tokens
            // are what count.
            seen.sort_by_key(|t| t.0);
            let mut want_tokens = alone_tokens(&request);
            want_tokens.sort_by_key(|t| t.0);
            prop_assert_eq!(seen, want_tokens);
        }
        scheduler.wait_idle();
        let stats = scheduler.stats();
        prop_assert_eq!((stats.running, stats.waiting, stats.kv_blocks_used), (0, 0, 0));
    }
}

/// Two long requests on a budget that holds one of them at a time: the newer one is preempted
/// (its blocks freed), recomputed later from its prompt and the tokens it had chosen, and both
/// still give their tokens alone.
#[test]
fn preemption_recomputes_without_changing_the_answer() {
    let prompt_a: Vec<u32> = (10..40).collect();
    let prompt_b: Vec<u32> = (50..70).collect();
    let a = Request {
        prompt: prompt_a,
        options: greedy(60),
    };
    let b = Request {
        prompt: prompt_b,
        options: GenerateOptions {
            sampling: SamplingParams {
                temperature: 1.0,
                seed: Some(7),
                ..SamplingParams::default()
            },
            ..greedy(60)
        },
    };
    // A needs 90 positions (6 blocks) at most, B 80 (5 blocks): 8 blocks hold both prompts but
    // not both answers.
    let scheduler = Scheduler::new(
        engine(),
        SchedulerOptions {
            max_tokens_per_step: 64,
            ..options(8)
        },
    )
    .unwrap();
    let ha = scheduler.submit(a.clone()).unwrap();
    let hb = scheduler.submit(b.clone()).unwrap();
    let (_, done_a) = drain(ha);
    let (_, done_b) = drain(hb);
    assert_eq!(
        done_a.iter().map(key).collect::<Vec<_>>(),
        alone(&a).iter().map(key).collect::<Vec<_>>()
    );
    assert_eq!(
        done_b.iter().map(key).collect::<Vec<_>>(),
        alone(&b).iter().map(key).collect::<Vec<_>>()
    );
    scheduler.wait_idle();
    let stats = scheduler.stats();
    assert!(stats.preemptions >= 1, "{stats:?}");
    assert_eq!(stats.kv_blocks_used, 0);
    assert_eq!(stats.generation_tokens_total, 120);
    assert_eq!(stats.prompt_tokens_total, 50);
}

/// A long prompt is read in chunks of the step budget while a running request keeps decoding:
/// both answers are those alone.
#[test]
fn a_long_prompt_is_chunked_beside_a_decode() {
    let short = Request {
        prompt: vec![40, 41, 42],
        options: greedy(40),
    };
    let long = Request {
        prompt: (3..200).map(|i| i % 250 + 3).collect(),
        options: greedy(8),
    };
    let scheduler = Scheduler::new(
        engine(),
        SchedulerOptions {
            max_tokens_per_step: 8,
            ..SchedulerOptions::default()
        },
    )
    .unwrap();
    let hs = scheduler.submit(short.clone()).unwrap();
    let hl = scheduler.submit(long.clone()).unwrap();
    let (_, ds) = drain(hs);
    let (_, dl) = drain(hl);
    assert_eq!(
        ds.iter().map(key).collect::<Vec<_>>(),
        alone(&short).iter().map(key).collect::<Vec<_>>()
    );
    assert_eq!(
        dl.iter().map(key).collect::<Vec<_>>(),
        alone(&long).iter().map(key).collect::<Vec<_>>()
    );
    scheduler.wait_idle();
    // 197 prompt tokens at most 8 per step (fewer beside the decode) take at least 25 steps.
    assert!(scheduler.stats().steps >= 25 + 7, "{:?}", scheduler.stats());
}

#[test]
fn the_scheduler_can_be_shared_between_threads() {
    fn shared<T: Send + Sync>() {}
    fn sent<T: Send>() {}
    shared::<Scheduler>();
    sent::<RequestHandle>();
    sent::<Request>();
}

#[test]
fn a_request_that_can_never_fit_is_refused_with_the_numbers() {
    // 2 blocks: 32 positions. A prompt of 10 and 30 new tokens need 40.
    let scheduler = Scheduler::new(engine(), options(2)).unwrap();
    let err = scheduler
        .submit(Request {
            prompt: (10..20).collect(),
            options: greedy(30),
        })
        .unwrap_err();
    assert_eq!(
        err,
        Error::ExceedsKvBudget {
            tokens: 40,
            fit: 32
        }
    );
    // Two completions of 10 new tokens each: 10 + 2 × 10 = 30 positions asked, but the prompt
    // has no full block to share, so each completion's 20 positions take 2 blocks of its own:
    // 4 blocks > 2.
    let err = scheduler
        .submit(Request {
            prompt: (10..20).collect(),
            options: GenerateOptions { n: 2, ..greedy(10) },
        })
        .unwrap_err();
    assert_eq!(
        err,
        Error::ExceedsKvBudget {
            tokens: 30,
            fit: 32
        }
    );
    // Without max tokens the rest of the context window (256) is asked for.
    let err = scheduler
        .submit(Request {
            prompt: vec![5],
            options: GenerateOptions {
                max_tokens: None,
                ..greedy(1)
            },
        })
        .unwrap_err();
    assert_eq!(
        err,
        Error::ExceedsKvBudget {
            tokens: 256,
            fit: 32
        }
    );
    // One that fits runs.
    let ok = Request {
        prompt: (10..20).collect(),
        options: greedy(20),
    };
    let (_, done) = drain(scheduler.submit(ok.clone()).unwrap());
    assert_eq!(done[0].tokens, alone(&ok)[0].tokens);
}

#[test]
fn bad_requests_and_options_are_typed_errors() {
    let scheduler = Scheduler::new(engine(), SchedulerOptions::default()).unwrap();
    let beams = GenerateOptions {
        beams: Some(BeamOptions {
            width: 2,
            length_penalty: 0.0,
        }),
        ..greedy(4)
    };
    assert!(matches!(
        scheduler.submit(Request {
            prompt: vec![5],
            options: beams
        }),
        Err(Error::InvalidOption {
            option: "beams",
            ..
        })
    ));
    assert!(matches!(
        scheduler.submit(Request {
            prompt: vec![],
            options: greedy(4)
        }),
        Err(Error::EmptyPrompt)
    ));
    assert!(matches!(
        scheduler.submit(Request {
            prompt: vec![1_000_000],
            options: greedy(4)
        }),
        Err(Error::TokenOutOfRange { id: 1_000_000, .. })
    ));
    assert!(matches!(
        scheduler.submit(Request {
            prompt: vec![5; 256],
            options: greedy(4)
        }),
        Err(Error::ContextWindowExceeded { .. })
    ));
    for bad in [
        SchedulerOptions {
            max_running: 0,
            ..SchedulerOptions::default()
        },
        SchedulerOptions {
            max_tokens_per_step: 0,
            ..SchedulerOptions::default()
        },
        SchedulerOptions {
            max_prefill_while_decoding: 0,
            ..SchedulerOptions::default()
        },
        SchedulerOptions {
            max_waiting: 0,
            ..SchedulerOptions::default()
        },
    ] {
        assert!(matches!(
            Scheduler::new(engine(), bad),
            Err(Error::OutOfRange { min: 1, .. })
        ));
    }
    assert!(matches!(
        Scheduler::new(
            engine(),
            SchedulerOptions {
                kv_budget_bytes: Some(block_bytes() - 1),
                ..SchedulerOptions::default()
            }
        ),
        Err(Error::Model(nextok::model::Error::Cache(
            nextok::kv_cache::Error::BudgetTooSmall { .. }
        )))
    ));
}

/// A sink that reports each event and then blocks the scheduler's thread until the test lets
/// it go on (one permit per event): the test decides exactly where the worker stands.
fn gated_sink() -> (
    nextok::Sink,
    mpsc::Receiver<Result<Event, Error>>,
    mpsc::Sender<bool>,
) {
    let (events_tx, events_rx) = mpsc::channel();
    let (permit_tx, permit_rx) = mpsc::channel::<bool>();
    let sink: nextok::Sink = Box::new(move |event| {
        let _ = events_tx.send(event);
        // The permit says whether to go on; a closed gate lets everything through.
        permit_rx.recv().unwrap_or(true)
    });
    (sink, events_rx, permit_tx)
}

#[test]
fn a_full_queue_is_refused_with_the_numbers() {
    let scheduler = Scheduler::new(
        engine(),
        SchedulerOptions {
            max_running: 1,
            max_waiting: 1,
            ..SchedulerOptions::default()
        },
    )
    .unwrap();
    let (sink, events, permits) = gated_sink();
    scheduler
        .submit_with(
            Request {
                prompt: vec![5, 6],
                options: greedy(3),
            },
            sink,
        )
        .unwrap();
    // The first request is running (its first token came) and the worker waits in its sink.
    assert!(matches!(events.recv(), Ok(Ok(Event::Token(_)))));
    let second = scheduler
        .submit(Request {
            prompt: vec![7],
            options: greedy(2),
        })
        .unwrap();
    let third = scheduler.submit(Request {
        prompt: vec![8],
        options: greedy(2),
    });
    assert_eq!(
        third.unwrap_err(),
        Error::QueueFull {
            waiting: 1,
            limit: 1
        }
    );
    drop(permits);
    let (_, done) = drain(second);
    assert_eq!(done.len(), 1);
}

#[test]
fn cancelling_frees_the_blocks_and_a_sink_can_cancel() {
    let scheduler = Scheduler::new(engine(), SchedulerOptions::default()).unwrap();
    let (sink, events, permits) = gated_sink();
    let id = scheduler
        .submit_with(
            Request {
                prompt: (10..50).collect(),
                options: greedy(200),
            },
            sink,
        )
        .unwrap();
    // Two steps have run and been published when the third token's event is in the sink.
    for _ in 0..2 {
        assert!(matches!(events.recv(), Ok(Ok(Event::Token(_)))));
        permits.send(true).unwrap();
    }
    assert!(matches!(events.recv(), Ok(Ok(Event::Token(_)))));
    let stats = scheduler.stats();
    assert_eq!(stats.running, 1);
    // As of the second step: 40 prompt positions and the first token's, 3 blocks.
    assert_eq!(stats.kv_blocks_used, 3);
    scheduler.cancel(id);
    permits.send(true).unwrap();
    scheduler.wait_idle();
    let stats = scheduler.stats();
    assert_eq!((stats.running, stats.kv_blocks_used), (0, 0));
    // No event came after the cancel took effect, and the sink is gone.
    assert_eq!(events.try_iter().count(), 0);

    // A sink that returns false cancels its request: it is called no more.
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = calls.clone();
    scheduler
        .submit_with(
            Request {
                prompt: vec![5, 6, 7],
                options: greedy(50),
            },
            Box::new(move |_| counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < 1),
        )
        .unwrap();
    scheduler.wait_idle();
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(scheduler.stats().kv_blocks_used, 0);

    // Dropping a handle cancels too.
    let handle = scheduler
        .submit(Request {
            prompt: vec![5, 6, 7],
            options: greedy(200),
        })
        .unwrap();
    drop(handle);
    scheduler.wait_idle();
    let stats = scheduler.stats();
    assert_eq!(
        (stats.running, stats.waiting, stats.kv_blocks_used),
        (0, 0, 0)
    );
}

#[test]
fn shutdown_refuses_new_requests_and_ends_running_ones() {
    let scheduler = Arc::new(Scheduler::new(engine(), SchedulerOptions::default()).unwrap());
    let (sink, events, permits) = gated_sink();
    scheduler
        .submit_with(
            Request {
                prompt: vec![5, 6],
                options: greedy(200),
            },
            sink,
        )
        .unwrap();
    assert!(matches!(events.recv(), Ok(Ok(Event::Token(_)))));
    let closer = {
        let scheduler = scheduler.clone();
        std::thread::spawn(move || scheduler.shutdown(Duration::ZERO))
    };
    // Once the shutdown has begun, submissions are refused.
    loop {
        match scheduler.submit(Request {
            prompt: vec![5],
            options: greedy(1),
        }) {
            Err(Error::SchedulerShutDown) => break,
            Ok(h) => drop(h),
            // The scheduler's thread is held by the gated sink, so the dropped requests wait in
            // the queue until the closer runs; on a loaded machine the queue may fill first.
            Err(Error::QueueFull { .. }) => std::thread::sleep(Duration::from_millis(1)),
            Err(e) => panic!("unexpected {e}"),
        }
        std::thread::yield_now();
    }
    drop(permits);
    closer.join().unwrap();
    // The running request ended with the shutdown error, not with a completion.
    let rest: Vec<_> = events.iter().collect();
    assert!(
        matches!(rest.last(), Some(Err(Error::SchedulerShutDown))),
        "{rest:?}"
    );
    assert!(!rest.iter().any(|e| matches!(e, Ok(Event::Done(_)))));
}

/// A second request that shares a long prompt prefix with a finished one reads that prefix's
/// full blocks from the prefix cache, reports them, and still gives its tokens alone; with prefix
/// caching off nothing is reused.
#[test]
fn a_shared_prefix_comes_from_the_prefix_cache() {
    let common: Vec<u32> = (0..40).map(|i| (i * 7 + 5) % 250 + 3).collect();
    let first = Request {
        prompt: [common.clone(), vec![100, 101]].concat(),
        options: greedy(6),
    };
    let second = Request {
        prompt: [common, vec![200, 201, 202]].concat(),
        options: greedy(6),
    };
    for prefix_caching in [true, false] {
        let scheduler = Scheduler::new(
            engine(),
            SchedulerOptions {
                prefix_caching,
                ..SchedulerOptions::default()
            },
        )
        .unwrap();
        let (_, a) = drain(scheduler.submit(first.clone()).unwrap());
        assert_eq!(a[0].usage.cached_prompt_tokens, 0);
        let (_, b) = drain(scheduler.submit(second.clone()).unwrap());
        // 40 tokens in common: two full blocks of 16.
        let cached = if prefix_caching { 32 } else { 0 };
        assert_eq!(b[0].usage.cached_prompt_tokens, cached);
        assert_eq!(b[0].tokens, alone(&second)[0].tokens);
        scheduler.wait_idle();
        let stats = scheduler.stats();
        assert_eq!(stats.cached_prompt_tokens_total, cached as u64);
        assert_eq!(stats.kv_blocks_used, 0);
        // What stays is the prefix cache's, free to evict.
        assert_eq!(stats.kv_blocks_cached > 0, prefix_caching);
    }
}

/// The small model, but its forward pass refuses any batch in which a sequence runs token
/// [`POISON`]: a model that fails on one request.
#[derive(Debug)]
struct Refuses(nextok::LlamaOnBackend);

const POISON: u32 = 77;

impl nextok::LanguageModel for Refuses {
    fn forward(&self, batch: &mut [nextok::model::Sequence<'_>]) -> Result<Vec<Vec<f32>>, Error> {
        if batch.iter().any(|s| s.tokens.contains(&POISON)) {
            return Err(Error::InvalidOption {
                option: "tokens",
                expected: "no poison",
            });
        }
        self.0.forward(batch)
    }
    fn new_cache(&self, kv_type: nextok::kv_cache::KvType) -> nextok::kv_cache::KvCache {
        self.0.new_cache(kv_type)
    }
    fn new_pool(
        &self,
        kv_type: nextok::kv_cache::KvType,
        budget_bytes: u64,
    ) -> Result<nextok::kv_cache::KvPool, Error> {
        self.0.new_pool(kv_type, budget_bytes)
    }
    fn vocab_size(&self) -> usize {
        self.0.vocab_size()
    }
    fn context_window(&self) -> usize {
        self.0.context_window()
    }
}

/// A request the model fails on ends with the model's error and gives its blocks back; the
/// requests that ran in the same batch go on and give their tokens alone.
#[test]
fn a_failing_request_ends_alone_and_frees_its_blocks() {
    use nextok::gguf::GgufFile;
    use nextok::model::{CpuBackend, LlamaModel, LoadOptions};
    let file = GgufFile::from_bytes(common::gguf(SEED, 256)).unwrap();
    let tokenizer = nextok::tokenizer::load_from_gguf(&file).unwrap();
    let model = LlamaModel::from_gguf(file, LoadOptions::default()).unwrap();
    let model = Refuses(nextok::LlamaOnBackend::new(
        model,
        Box::new(CpuBackend::new(1)),
    ));
    let engine = Arc::new(
        Engine::from_parts(
            Box::new(model),
            tokenizer,
            None,
            nextok::kv_cache::KvType::F32,
        )
        .unwrap(),
    );
    let scheduler = Scheduler::new(engine, SchedulerOptions::default()).unwrap();
    let good = Request {
        prompt: vec![10, 11, 12, 13],
        options: greedy(12),
    };
    // Its prompt is read in a step beside the other request's prompt or first decodes (12 tokens
    // to go), so the batch the model refuses holds both.
    let bad = Request {
        prompt: vec![20, 21, POISON, 22],
        options: greedy(12),
    };
    let hg = scheduler.submit(good.clone()).unwrap();
    let hb = scheduler.submit(bad).unwrap();
    let events: Vec<_> = hb.collect();
    assert_eq!(
        events,
        [Err(Error::InvalidOption {
            option: "tokens",
            expected: "no poison"
        })]
    );
    let (_, done) = drain(hg);
    assert_eq!(
        done.iter().map(key).collect::<Vec<_>>(),
        alone(&good).iter().map(key).collect::<Vec<_>>()
    );
    scheduler.wait_idle();
    assert_eq!(scheduler.stats().kv_blocks_used, 0);
}

/// How many tokens a decoding request (`n` completions of a 3-token prompt, `answer` tokens
/// each) streams before a 200-token prompt submitted beside it gets its first token, with
/// `max_prefill_while_decoding` set to `cap`; and both requests' completions, which must be
/// those each gives alone. The decoding request's sink holds the worker at its first token while
/// the long request is submitted, so the long prompt is admitted in the very next step.
fn tokens_before_first_long_token(n: usize, answer: usize, cap: usize) -> usize {
    let short = Request {
        prompt: vec![40, 41, 42],
        options: GenerateOptions {
            n,
            ..greedy(answer)
        },
    };
    let long = Request {
        prompt: (0..200).map(|i| (i * 13 + 7) % 250 + 3).collect(),
        options: greedy(3),
    };
    let scheduler = Scheduler::new(
        engine(),
        SchedulerOptions {
            max_prefill_while_decoding: cap,
            // One token per completion per step, so that the count of tokens measures steps.
            speculative: false,
            ..SchedulerOptions::default()
        },
    )
    .unwrap();
    // Which request each token event came from, in the order the worker sent them.
    let log: Arc<Mutex<Vec<char>>> = Arc::new(Mutex::new(Vec::new()));
    let (first_tx, first_rx) = mpsc::channel::<()>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel::<(char, Completion)>();
    let sink = |who: char, gate: Option<(mpsc::Sender<()>, mpsc::Receiver<()>)>| {
        let log = log.clone();
        let done = done_tx.clone();
        let mut gate = gate;
        let sink: nextok::Sink = Box::new(move |event| {
            match event.expect("no error") {
                Event::Token(_) => log.lock().unwrap().push(who),
                Event::Done(c) => done.send((who, *c)).unwrap(),
            }
            if let Some((first, go)) = gate.take() {
                first.send(()).unwrap();
                go.recv().unwrap();
            }
            true
        });
        sink
    };
    scheduler
        .submit_with(short.clone(), sink('s', Some((first_tx, go_rx))))
        .unwrap();
    first_rx.recv().unwrap();
    scheduler
        .submit_with(long.clone(), sink('l', None))
        .unwrap();
    go_tx.send(()).unwrap();
    drop(done_tx);
    let mut short_done = Vec::new();
    let mut long_done = Vec::new();
    for (who, c) in done_rx {
        if who == 's' {
            short_done.push(c);
        } else {
            long_done.push(c);
        }
    }
    short_done.sort_by_key(|c| c.index);
    assert_eq!(
        short_done.iter().map(key).collect::<Vec<_>>(),
        alone(&short).iter().map(key).collect::<Vec<_>>()
    );
    assert_eq!(
        long_done.iter().map(key).collect::<Vec<_>>(),
        alone(&long).iter().map(key).collect::<Vec<_>>()
    );
    scheduler.wait_idle();
    assert_eq!(scheduler.stats().kv_blocks_used, 0);
    let log = log.lock().unwrap();
    log.iter()
        .position(|&who| who == 'l')
        .expect("the long request streamed")
}

/// While a request decodes, a step reads at most `max(max_prefill_while_decoding, d)` prompt
/// tokens beside its `d` decodes, so the decoding request streams one token per completion in
/// every step that reads part of the long prompt: its first token (step S), then one per
/// completion in each of the steps S+1 to S+k that read the 200 prompt tokens (k = 200 / cap,
/// rounded up), before the long request's first token (which comes after those decodes in step
/// S+k).
#[test]
fn prompt_tokens_beside_decodes_are_capped() {
    // Cap 16: 13 steps read the prompt (12 of 16 tokens, then 8).
    assert_eq!(tokens_before_first_long_token(1, 40, 16), 1 + 13);
    // Cap 50: 4 steps.
    assert_eq!(tokens_before_first_long_token(1, 40, 50), 1 + 4);
    // A cap above the prompt: one step, as with no cap at all.
    assert_eq!(tokens_before_first_long_token(1, 40, 512), 1 + 1);
    // Cap 1 beside two decoding completions: max(1, 2) = 2 prompt tokens a step, 100 steps,
    // 2 tokens each (and both completions' first tokens in step S).
    assert_eq!(tokens_before_first_long_token(2, 110, 1), 2 + 2 * 100);
}

/// With nothing decoding, a step reads up to `max_tokens_per_step` prompt tokens whatever the
/// cap beside decodes: a 200-token prompt alone takes one step, then one per further token.
#[test]
fn a_prompt_alone_is_read_in_one_step_whatever_the_cap() {
    let scheduler = Scheduler::new(
        engine(),
        SchedulerOptions {
            max_prefill_while_decoding: 1,
            ..SchedulerOptions::default()
        },
    )
    .unwrap();
    let request = Request {
        prompt: (0..200).map(|i| (i * 11 + 5) % 250 + 3).collect(),
        options: greedy(3),
    };
    let (_, done) = drain(scheduler.submit(request.clone()).unwrap());
    assert_eq!(
        done.iter().map(key).collect::<Vec<_>>(),
        alone(&request).iter().map(key).collect::<Vec<_>>()
    );
    scheduler.wait_idle();
    assert_eq!(scheduler.stats().steps, 3);
}

/// The model's own log-probabilities come only with the requests that ask for them, in a step
/// whose choices mix both kinds (drawn with and without the pass over the vocabulary that they
/// cost): eight seeded requests, every other one with `logprobs`, run at once, give the tokens
/// and sampling log-probabilities they give alone, `raw_logprob` as alone (`Some` exactly when
/// asked for), and the same tokens with and without.
#[test]
fn raw_log_probabilities_come_only_when_asked_for() {
    let request = |seed: u64, logprobs: bool| Request {
        prompt: vec![60, 61, 62, 63, 64],
        options: GenerateOptions {
            sampling: SamplingParams {
                temperature: 0.9,
                seed: Some(seed),
                ..SamplingParams::default()
            },
            max_tokens: Some(12),
            ignore_eos: true,
            logprobs,
            ..GenerateOptions::default()
        },
    };
    let requests: Vec<Request> = (0..8).map(|k| request(k / 2, k % 2 == 1)).collect();
    let scheduler = Scheduler::new(engine(), SchedulerOptions::default()).unwrap();
    let handles: Vec<RequestHandle> = requests
        .iter()
        .map(|r| scheduler.submit(r.clone()).unwrap())
        .collect();
    let raw = |events: Vec<Event>| -> Vec<(u32, u32, Option<u32>)> {
        events
            .into_iter()
            .filter_map(|e| match e {
                Event::Token(t) => {
                    Some((t.id, t.logprob.to_bits(), t.raw_logprob.map(f32::to_bits)))
                }
                Event::Done(_) => None,
            })
            .collect()
    };
    let mut got = Vec::new();
    for (r, handle) in requests.iter().zip(handles) {
        let events: Vec<Event> = handle.map(|e| e.expect("no error")).collect();
        let events = raw(events);
        let want = raw(engine()
            .generate_ids(r.prompt.clone(), &r.options, None)
            .unwrap()
            .map(|e| e.unwrap())
            .collect());
        assert_eq!(events, want);
        assert_eq!(events.len(), 12);
        assert!(events.iter().all(|e| e.2.is_some() == r.options.logprobs));
        got.push(events);
    }
    // Each seed with and without: the same tokens and sampling log-probabilities.
    for pair in got.chunks(2) {
        let strip =
            |v: &[(u32, u32, Option<u32>)]| v.iter().map(|e| (e.0, e.1)).collect::<Vec<_>>();
        assert_eq!(strip(&pair[0]), strip(&pair[1]));
    }
    scheduler.wait_idle();
    assert_eq!(scheduler.stats().kv_blocks_used, 0);
}

/// A request's grammar (or automaton) is compiled once, when the request is checked: its completions, each
/// built by the scheduler on its own thread, take the grammar the engine kept, as does the
/// same request sent again; and what they answer is what an engine that keeps no grammar (and
/// so compiles one per completion) answers, bit for bit. New schema options forget the kept
/// grammars, which were compiled under the old ones.
#[test]
fn a_requests_grammar_is_compiled_once_and_answers_as_a_fresh_one() {
    let kept = Arc::new(engine_with(SEED, 256));
    let fresh = Arc::new(engine_with(SEED, 256));
    fresh.set_grammar_cache_capacity(0);
    let specs = [
        ConstraintSpec::JsonSchema(serde_json::json!({
            "type": "array",
            "items": {"enum": ["hello", "the", "user"]},
            "minItems": 1
        })),
        ConstraintSpec::Gbnf(r#"root ::= ("hello" | "the" | "user" | " ")+"#.into()),
        ConstraintSpec::Lark(r#"start: ("hello" | "the" | "user")+"#.into()),
        ConstraintSpec::Regex("(hello|the|user| )+".into()),
        ConstraintSpec::Choice(vec!["hello the".into(), "the user".into(), "user".into()]),
        ConstraintSpec::Json,
    ];
    let run = |engine: &Arc<Engine>, spec: &ConstraintSpec| {
        let scheduler = Scheduler::new(engine.clone(), options(8)).expect("valid options");
        let request = Request {
            prompt: vec![5, 6, 7],
            options: GenerateOptions {
                sampling: SamplingParams {
                    temperature: 1.0,
                    seed: Some(11),
                    ..SamplingParams::default()
                },
                max_tokens: Some(12),
                n: 3,
                constraint: Some(spec.clone()),
                ..GenerateOptions::default()
            },
        };
        let (_, done) = drain(scheduler.submit(request).expect("the request fits"));
        let mut keys: Vec<_> = done.iter().map(key).collect();
        keys.sort();
        keys
    };
    for (i, spec) in specs.iter().enumerate() {
        let answers = run(&kept, spec);
        assert_eq!(answers.len(), 3);
        assert!(answers.iter().all(|k| !k.1.is_empty()), "{answers:?}");
        // Checked (compiled, kept), then one constraint per completion from the kept grammar.
        let stats = kept.grammar_cache_stats();
        assert_eq!((stats.misses, stats.hits), (i as u64 + 1, 7 * i as u64 + 3));
        assert_eq!(answers, run(&kept, spec), "{spec:?} sent again");
        let stats = kept.grammar_cache_stats();
        assert_eq!((stats.misses, stats.hits), (i as u64 + 1, 7 * i as u64 + 7));
        assert_eq!(answers, run(&fresh, spec), "{spec:?} without the cache");
    }
    // Without the cache, every check and every completion compiled.
    let stats = fresh.grammar_cache_stats();
    assert_eq!((stats.misses, stats.hits, stats.entries), (24, 0, 0));
    assert_eq!(kept.grammar_cache_stats().entries, 6);
    let mut changed = Arc::into_inner(kept).expect("the schedulers are gone");
    changed.set_json_schema_options(nextok::constraints::JsonOptions::default().with_strict(true));
    // The automata of patterns and choices do not depend on the schema options.
    assert_eq!(changed.grammar_cache_stats().entries, 2);
}
