//! Exact speculative decoding on the scheduler, on the small random model behind
//! `common::copier::Copier` (which continues the text as it went before, so that prompt-lookup
//! drafts are kept): every request's events (ids, texts, log-probabilities as bits,
//! alternatives) and completions are those of the same request run alone through
//! `Engine::generate_ids` with speculative decoding off, whatever runs beside it, however the
//! step and memory budgets cut its drafts, when a stop lands inside a draft, under constraints,
//! preemption and cancellation. Each test asserts from `SchedulerStats` that drafted tokens
//! were kept, so that none passes without the speculative path, and that no KV block is held
//! once all is over.

mod common;

use common::copier::copier_on;
use common::{greedy, sampled};
use nextok::{
    Completion, ConstraintSpec, Engine, Event, GenerateOptions, Prompt, Request, Scheduler,
    SchedulerOptions, SchedulerStats, Stop, TokenEvent,
};
use proptest::prelude::*;
use std::sync::{mpsc, Arc, OnceLock};

/// The copier on two threads (so that a step's choices are drawn with `sample_batch` split over
/// the backend's pool), with a context of 512 positions, shared by the tests of this binary.
fn engine() -> Arc<Engine> {
    static ENGINE: OnceLock<Arc<Engine>> = OnceLock::new();
    ENGINE
        .get_or_init(|| Arc::new(copier_on(6.0, 512, 2)))
        .clone()
}

const REPETITIVE: &str =
    "hello the user in the system, hello the user in the system, hello the user";

/// Letters, one token each: the copier goes on with the alphabet.
const ALPHABET: &str = "abcdefghijklmnopqrstuvwxyza";

fn ids(text: &str) -> Vec<u32> {
    engine()
        .encode_prompt(&Prompt::raw(text))
        .expect("the small vocabulary encodes ASCII")
}

/// Bytes of one KV block (16 positions).
fn block_bytes() -> u64 {
    engine().new_cache().config().bytes_for(16)
}

/// A token event with its numbers as bits, so that two events compare exactly.
type Bits = (usize, u32, String, u32, Option<u32>, Vec<(u32, u32)>);

fn bits(t: &TokenEvent) -> Bits {
    (
        t.index,
        t.id,
        t.text.clone(),
        t.logprob.to_bits(),
        t.raw_logprob.map(f32::to_bits),
        t.top.iter().map(|a| (a.id, a.logprob.to_bits())).collect(),
    )
}

/// What must not depend on what else runs: a completion without its timings.
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

/// A request's token events, in order within each completion (completions interleave
/// differently on the scheduler), and its completions in index order.
fn split(events: Vec<Event>) -> (Vec<Bits>, Vec<Completion>) {
    let mut tokens = Vec::new();
    let mut done = Vec::new();
    for e in events {
        match e {
            Event::Token(t) => tokens.push(bits(&t)),
            Event::Done(c) => done.push(*c),
        }
    }
    // A stable sort: each completion's own tokens keep their order.
    tokens.sort_by_key(|t| t.0);
    done.sort_by_key(|c| c.index);
    (tokens, done)
}

/// The request alone, through `Engine::generate_ids`, with speculative decoding off.
fn alone(request: &Request) -> (Vec<Bits>, Vec<Completion>) {
    let options = GenerateOptions {
        speculative: false,
        ..request.options.clone()
    };
    let events = engine()
        .generate_ids(request.prompt.clone(), &options, None)
        .expect("a valid request")
        .map(|e| e.expect("the request runs"))
        .collect();
    split(events)
}

/// Submits every request at once, asserts that each gives what it gives alone without drafts
/// and that no KV block is held at the end, and returns the scheduler's figures.
fn run_all(options: SchedulerOptions, requests: &[Request]) -> SchedulerStats {
    let scheduler = Scheduler::new(engine(), options).expect("valid options");
    let handles: Vec<_> = requests
        .iter()
        .map(|r| scheduler.submit(r.clone()).expect("the request fits"))
        .collect();
    for (request, handle) in requests.iter().zip(handles) {
        let events: Vec<Event> = handle.map(|e| e.expect("no error")).collect();
        let (tokens, done) = split(events);
        let (want_tokens, want_done) = alone(request);
        assert_eq!(tokens, want_tokens, "{request:?}");
        assert_eq!(
            done.iter().map(key).collect::<Vec<_>>(),
            want_done.iter().map(key).collect::<Vec<_>>(),
            "{request:?}"
        );
    }
    scheduler.wait_idle();
    let stats = scheduler.stats();
    assert_eq!((stats.running, stats.waiting), (0, 0), "{stats:?}");
    assert_eq!(stats.kv_blocks_used, 0, "{stats:?}");
    let chosen: usize = requests
        .iter()
        .map(|r| alone(r).1.iter().map(|c| c.tokens.len()).sum::<usize>())
        .sum();
    assert_eq!(stats.generation_tokens_total, chosen as u64, "{stats:?}");
    assert!(stats.accepted_tokens <= stats.drafted_tokens, "{stats:?}");
    stats
}

/// The default options but for the draft budget, large enough that every decode drafts what
/// it would alone (up to the 16 tokens of the longest draft) however many decode beside it, so
/// that the tests that run several requests at once check drafts beside each other. (The
/// default budget drafts nothing while more than 4 decode: see
/// `a_step_drafts_within_its_budget_split_over_its_decodes`.)
fn drafting() -> SchedulerOptions {
    SchedulerOptions {
        max_draft_tokens_per_step: 1024,
        max_prefill_while_decoding: 1024,
        ..SchedulerOptions::default()
    }
}

fn request(text: &str, options: GenerateOptions) -> Request {
    Request {
        prompt: ids(text),
        options,
    }
}

#[test]
fn greedy_and_seeded_requests_keep_drafts_and_equal_themselves_alone() {
    let mut requests = vec![
        request(REPETITIVE, greedy(60)),
        request(
            "the user, the system, the user, the system, the",
            greedy(40),
        ),
        request(ALPHABET, greedy(30)),
    ];
    for seed in 0..4 {
        let mut options = sampled(seed, 40);
        if seed % 2 == 1 {
            options.sampling.top_k = Some(20);
            options.sampling.top_p = 0.9;
            options.top_logprobs = 3;
        }
        requests.push(request(REPETITIVE, options));
    }
    // Two completions of one prompt: each drafts on its own fork of the prompt's cache.
    requests.push(request(
        REPETITIVE,
        GenerateOptions {
            n: 2,
            ..sampled(9, 30)
        },
    ));
    let stats = run_all(drafting(), &requests);
    // The greedy copies alone keep dozens of drafted tokens: fewer passes than tokens.
    assert!(stats.accepted_tokens >= 60, "{stats:?}");
    assert!(stats.drafted_tokens > stats.accepted_tokens, "{stats:?}");
}

#[test]
fn stops_and_max_tokens_inside_drafts_end_the_answer_at_the_same_token() {
    let (_, long) = alone(&request(ALPHABET, greedy(40)));
    let long = &long[0];
    assert_eq!(long.text, "bcdefghijklmnopqrstuvwxyzabcdefghijklmno");
    let mut requests = Vec::new();
    // A stop token at each place of the answer, so that it falls at every place of a draft.
    for &id in &long.tokens[..25] {
        requests.push(request(
            ALPHABET,
            GenerateOptions {
                stop_token_ids: vec![id],
                ..greedy(40)
            },
        ));
    }
    // Stop sequences cut from the answer's own text.
    let chars: Vec<char> = long.text.chars().collect();
    for start in [2, 5, 9, 14, 20] {
        let stop: String = chars[start..start + 3].iter().collect();
        requests.push(request(
            ALPHABET,
            GenerateOptions {
                stop: vec![stop],
                ..greedy(40)
            },
        ));
    }
    // Max tokens: a draft never runs past it.
    for max in 1..=20 {
        requests.push(request(REPETITIVE, greedy(max)));
    }
    let stats = run_all(drafting(), &requests);
    assert!(stats.accepted_tokens > 0, "{stats:?}");
    // And the stops are the ones asked for.
    for r in &requests[..25] {
        let (_, done) = alone(r);
        assert_eq!(
            done[0].stop,
            Stop::EndTurn {
                token: r.options.stop_token_ids[0]
            }
        );
    }
}

#[test]
fn constrained_requests_choose_with_the_sequential_masks() {
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string", "enum": ["user", "the", "system"]}}
        },
        "required": ["name", "tags"]
    });
    let spec = ConstraintSpec::JsonSchema(schema);
    let text = r#"{"name": "user", "tags": ["the", "user", "the", "user", "#;
    let mut requests = vec![request(
        text,
        GenerateOptions {
            constraint: Some(spec.clone()),
            ..greedy(60)
        },
    )];
    for seed in 0..3 {
        requests.push(request(
            text,
            GenerateOptions {
                constraint: Some(spec.clone()),
                ..sampled(seed, 60)
            },
        ));
    }
    requests.push(request(
        REPETITIVE,
        GenerateOptions {
            constraint: Some(ConstraintSpec::Regex(
                "(hello|the|user|in|system|,| )+".into(),
            )),
            ..greedy(40)
        },
    ));
    let stats = run_all(drafting(), &requests);
    assert!(stats.accepted_tokens > 0, "{stats:?}");
    // The masks computed beside the passes are the sequential ones: each greedy token is the
    // argmax of fresh logits under the mask of a constraint walked one token at a time here.
    for r in [&requests[0], &requests[4]] {
        let (_, done) = alone(r);
        let spec = r.options.constraint.as_ref().unwrap();
        common::assert_masked_greedy(&engine(), spec, &r.prompt, &done[0].tokens);
    }
}

/// Two long requests on a budget that holds one of them at a time, the second admitted while
/// the first is short (the first one's sink holds the worker at its first token until the
/// second is submitted): as both grow the newer one is preempted (a draft never preempts, but
/// decodes do), recomputed later, and both still give their tokens alone, drafts kept.
#[test]
fn preemption_with_drafts_changes_no_answer() {
    let a = request(REPETITIVE, greedy(80));
    // Both copy their prompts, so both grow by several tokens a step.
    let b = request(
        "the system, the user, the system, the user,",
        GenerateOptions {
            top_logprobs: 2,
            ..greedy(80)
        },
    );
    let blocks = |r: &Request| (r.prompt.len() + 80).div_ceil(16) as u64;
    let budget = blocks(&a).max(blocks(&b)) + 1;
    let scheduler = Scheduler::new(
        engine(),
        SchedulerOptions {
            kv_budget_bytes: Some(budget * block_bytes()),
            ..drafting()
        },
    )
    .unwrap();
    let (first_tx, first_rx) = mpsc::channel::<()>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (events_tx, events_rx) = mpsc::channel::<Event>();
    let mut gate = Some((first_tx, go_rx));
    scheduler
        .submit_with(
            a.clone(),
            Box::new(move |event| {
                events_tx.send(event.expect("no error")).unwrap();
                if let Some((first, go)) = gate.take() {
                    first.send(()).unwrap();
                    go.recv().unwrap();
                }
                true
            }),
        )
        .unwrap();
    first_rx.recv().unwrap();
    let hb = scheduler.submit(b.clone()).unwrap();
    go_tx.send(()).unwrap();
    let got_b = split(hb.map(|e| e.expect("no error")).collect());
    let got_a = split(events_rx.iter().collect());
    for (request, (tokens, done)) in [(&a, got_a), (&b, got_b)] {
        let (want_tokens, want_done) = alone(request);
        assert_eq!(tokens, want_tokens);
        assert_eq!(
            done.iter().map(key).collect::<Vec<_>>(),
            want_done.iter().map(key).collect::<Vec<_>>()
        );
    }
    scheduler.wait_idle();
    let stats = scheduler.stats();
    assert_eq!(stats.kv_blocks_used, 0, "{stats:?}");
    assert_eq!(stats.generation_tokens_total, 160, "{stats:?}");
    assert!(stats.preemptions >= 1, "{stats:?}");
    assert!(stats.accepted_tokens > 0, "{stats:?}");
}

/// Drafts take only the blocks that are free after everything else: with a budget that holds
/// every request whole, none is ever preempted, drafts or not.
#[test]
fn drafts_never_preempt() {
    let requests: Vec<Request> = (0..4)
        .map(|k| request(REPETITIVE, sampled(k, 50)))
        .collect();
    let blocks: u64 = requests
        .iter()
        .map(|r| (r.prompt.len() + 50).div_ceil(16) as u64)
        .sum();
    let stats = run_all(
        SchedulerOptions {
            kv_budget_bytes: Some(blocks * block_bytes()),
            prefix_caching: false,
            ..drafting()
        },
        &requests,
    );
    assert_eq!(stats.preemptions, 0, "{stats:?}");
    assert!(stats.accepted_tokens > 0, "{stats:?}");
}

/// Drafted tokens count against the step's token budget, after the decodes: with one token a
/// step nothing is drafted; with four, one request drafts at most three a step.
#[test]
fn drafts_fit_the_step_budget() {
    let r = request(REPETITIVE, greedy(40));
    let one = run_all(
        SchedulerOptions {
            max_tokens_per_step: 1,
            ..SchedulerOptions::default()
        },
        std::slice::from_ref(&r),
    );
    assert_eq!(one.drafts, 0, "{one:?}");
    let four = run_all(
        SchedulerOptions {
            max_tokens_per_step: 4,
            ..SchedulerOptions::default()
        },
        std::slice::from_ref(&r),
    );
    assert!(four.accepted_tokens > 0, "{four:?}");
    assert!(four.drafted_tokens <= 3 * four.drafts, "{four:?}");
}

/// The draft budget, split over a step's decodes: five greedy completions of one request (its
/// prompt read once, then five identical answers that decode in lockstep, the same drafts
/// kept) draft nothing under a budget of 4 (4 / 5 = 0 tokens each), and drafts of exactly one
/// token each under a budget of 5; one request alone drafts at most the budget a step, and
/// keeps drafts.
#[test]
fn a_step_drafts_within_its_budget_split_over_its_decodes() {
    let five = request(REPETITIVE, GenerateOptions { n: 5, ..greedy(30) });
    let budget = |b: usize| SchedulerOptions {
        max_draft_tokens_per_step: b,
        max_prefill_while_decoding: 1024,
        ..SchedulerOptions::default()
    };
    let four = run_all(budget(4), std::slice::from_ref(&five));
    assert_eq!((four.drafts, four.drafted_tokens), (0, 0), "{four:?}");
    // The prompt's step chooses every first token, then one step per token.
    assert_eq!(four.steps, 30, "{four:?}");
    let five_budget = run_all(budget(5), std::slice::from_ref(&five));
    assert!(five_budget.accepted_tokens > 0, "{five_budget:?}");
    assert!(five_budget.steps < 30, "{five_budget:?}");
    assert_eq!(
        five_budget.drafted_tokens, five_budget.drafts,
        "{five_budget:?}"
    );
    assert_eq!(five_budget.drafts % 5, 0, "{five_budget:?}");
    let alone = request(REPETITIVE, greedy(40));
    for b in [1, 2, 4, 7] {
        let stats = run_all(budget(b), std::slice::from_ref(&alone));
        assert!(stats.accepted_tokens > 0, "budget {b}: {stats:?}");
        assert!(
            stats.drafted_tokens <= b as u64 * stats.drafts,
            "budget {b}: {stats:?}"
        );
    }
    // The default budget is 4.
    let default = run_all(SchedulerOptions::default(), std::slice::from_ref(&alone));
    assert!(default.accepted_tokens > 0, "{default:?}");
    assert!(default.drafted_tokens <= 4 * default.drafts, "{default:?}");
}

/// Drafts share with prompt chunks the cap on a step's tokens beside its decodes: with a cap of
/// 3 and nothing else to read, one decoding request drafts at most 3 tokens a step whatever the
/// draft budget.
#[test]
fn drafts_take_only_what_prompt_chunks_leave_of_the_cap() {
    let r = request(REPETITIVE, greedy(40));
    let stats = run_all(
        SchedulerOptions {
            max_draft_tokens_per_step: 64,
            max_prefill_while_decoding: 3,
            ..SchedulerOptions::default()
        },
        std::slice::from_ref(&r),
    );
    assert!(stats.accepted_tokens > 0, "{stats:?}");
    assert!(stats.drafted_tokens <= 3 * stats.drafts, "{stats:?}");
}

/// Off in the scheduler's options, or in a request's, nothing is drafted.
#[test]
fn speculative_decoding_can_be_turned_off() {
    let r = request(REPETITIVE, greedy(40));
    let off = run_all(
        SchedulerOptions {
            speculative: false,
            ..SchedulerOptions::default()
        },
        std::slice::from_ref(&r),
    );
    assert_eq!((off.drafts, off.drafted_tokens), (0, 0), "{off:?}");
    let request_off = Request {
        options: GenerateOptions {
            speculative: false,
            ..r.options.clone()
        },
        ..r.clone()
    };
    let stats = run_all(SchedulerOptions::default(), &[request_off]);
    assert_eq!(stats.drafts, 0, "{stats:?}");
    // The same request with drafting on keeps drafts, and takes fewer steps.
    let on = run_all(SchedulerOptions::default(), std::slice::from_ref(&r));
    assert!(on.accepted_tokens > 0, "{on:?}");
    assert!(on.steps < off.steps, "{on:?} {off:?}");
}

/// A client that goes away in the middle of a draft's tokens (its sink refuses the k-th event,
/// which comes from a step that checked a draft) cancels its request there: it saw a prefix of
/// its tokens alone, the request beside it is unchanged, and every block is freed.
#[test]
fn cancelling_mid_draft_frees_every_block() {
    let steady = request(ALPHABET, greedy(30));
    let mut accepted = 0;
    for k in 2..8 {
        let scheduler = Scheduler::new(engine(), drafting()).unwrap();
        let leaving = request(REPETITIVE, greedy(60));
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink_seen = seen.clone();
        scheduler
            .submit_with(
                leaving.clone(),
                Box::new(move |event| {
                    let mut seen = sink_seen.lock().unwrap();
                    if let Ok(Event::Token(t)) = event {
                        seen.push(bits(&t));
                    }
                    seen.len() < k
                }),
            )
            .unwrap();
        let handle = scheduler.submit(steady.clone()).unwrap();
        let (tokens, done) = split(handle.map(|e| e.unwrap()).collect());
        let (want_tokens, want_done) = alone(&steady);
        assert_eq!(tokens, want_tokens);
        assert_eq!(key(&done[0]), key(&want_done[0]));
        scheduler.wait_idle();
        let stats = scheduler.stats();
        assert_eq!(stats.kv_blocks_used, 0, "{stats:?}");
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), k);
        let (whole, _) = alone(&leaving);
        assert_eq!(&seen[..], &whole[..k]);
        accepted += stats.accepted_tokens;
    }
    assert!(accepted > 0);
}

/// Random requests on the copier under random step budgets, caps, running limits and KV
/// budgets that hold the largest request alone and a few blocks more.
fn random_request() -> impl Strategy<Value = Request> {
    (
        prop::sample::select(vec![REPETITIVE, ALPHABET, "the user the user the"]),
        any::<bool>(),
        any::<u64>(),
        1usize..48,
        prop::sample::select(vec![None, Some("e"), Some("system"), Some(" the")]),
        0usize..4,
        1usize..3,
    )
        .prop_map(|(text, greedy_, seed, max_tokens, stop, constraint, n)| {
            let mut options = if greedy_ {
                greedy(max_tokens)
            } else {
                sampled(seed, max_tokens)
            };
            options.stop = stop.map(String::from).into_iter().collect();
            options.n = n;
            options.top_logprobs = (seed % 3) as usize;
            options.constraint = (constraint == 0)
                .then(|| ConstraintSpec::Regex("(hello|the|user|in|system|[a-z]|,| )+".into()));
            request(text, options)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn random_requests_with_drafts_equal_themselves_alone(
        requests in proptest::collection::vec(random_request(), 1..5),
        step_budget in 1usize..40,
        prefill_cap in 1usize..40,
        draft_budget in 1usize..24,
        max_running in 1usize..5,
        spare_blocks in 0u64..4,
    ) {
        let blocks = requests
            .iter()
            .map(|r| {
                let prompt = r.prompt.len();
                let longest = prompt + r.options.max_tokens.unwrap_or(0);
                let full = prompt / 16;
                let n = r.options.n;
                let shared = usize::from(n > 1 && !prompt.is_multiple_of(16));
                (full + n * (longest.div_ceil(16) - full) + shared) as u64
            })
            .max()
            .unwrap_or(1)
            + spare_blocks;
        run_all(
            SchedulerOptions {
                max_tokens_per_step: step_budget,
                max_prefill_while_decoding: prefill_cap,
                max_draft_tokens_per_step: draft_budget,
                max_running,
                kv_budget_bytes: Some(blocks * block_bytes()),
                ..SchedulerOptions::default()
            },
            &requests,
        );
    }
}
