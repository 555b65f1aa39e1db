//! Golden tests for beam search: the specification's "Choosing the next token", "Greedy
//! decoding" section, worked example "beam width 2", and its "Logarithms instead of products"
//! detail.

use nextok_sampling::{beam_search, BeamConfig, Context, Error, Sampler, SamplingParams};

// Vocabulary of the example: the four tokens of the step-1 table, plus <EOS> and AND.
const CAT: u32 = 0;
const DOG: u32 = 1;
const EOS: u32 = 4;
const AND: u32 = 5;

/// The example's model. Step 1: the printed probabilities CAT 0.772, DOG 0.211, IS 0.013, LOVELY
/// 0.004 ("The step-1 probabilities are the ones above"). Step 2, made up by the specification:
/// after CAT, <EOS> 0.20 and AND 0.18 (the other 0.62 shared by the four other tokens, 0.155
/// each, so that <EOS> and AND are the two most likely); after DOG, <EOS> 0.95 and AND 0.02 (the
/// other 0.03 shared, 0.0075 each). After <EOS> or AND nothing is specified; the search never
/// gets there in this example, and a third step would only ever offer <EOS>.
fn model(prefix: &[u32]) -> Vec<f32> {
    let probs: [f64; 6] = match prefix {
        [] => [0.772, 0.211, 0.013, 0.004, 0.0, 0.0],
        [CAT] => [0.155, 0.155, 0.155, 0.155, 0.20, 0.18],
        [DOG] => [0.0075, 0.0075, 0.0075, 0.0075, 0.95, 0.02],
        _ => [0.0, 0.0, 0.0, 0.0, 1.0, 0.0],
    };
    probs.iter().map(|p| p.ln() as f32).collect()
}

fn batch(prefixes: &[&[u32]]) -> Result<Vec<Vec<f32>>, Error> {
    Ok(prefixes.iter().map(|p| model(p)).collect())
}

fn config(width: usize, returned: usize, length_penalty: f64) -> BeamConfig {
    BeamConfig {
        beam_width: width,
        num_return_sequences: returned,
        length_penalty,
        end_tokens: vec![EOS],
        early_stopping: true,
        max_new_tokens: 10,
    }
}

#[test]
fn beam_width_2_finds_dog_eos() {
    let source = "Greedy decoding, worked example 'beam width 2'";
    // Length penalty 0 ranks by the plain sequence probability, as the example does; with 1 the
    // ranking is the same because both sequences have two tokens.
    for alpha in [0.0, 1.0] {
        let out = beam_search(&config(2, 2, alpha), batch).unwrap();
        assert_eq!(out.len(), 2, "{source}");
        // "Keep the 2 best: DOG <EOS> (0.200) and CAT <EOS> (0.154). Both have ended".
        assert_eq!(out[0].tokens, [DOG, EOS], "{source}");
        assert_eq!(out[1].tokens, [CAT, EOS], "{source}");
        assert!(out.iter().all(|h| h.ended));
        assert!((out[0].logprob.exp() - 0.200).abs() <= 5e-4, "{source}");
        assert!((out[1].logprob.exp() - 0.154).abs() <= 5e-4, "{source}");
        // "ln 0.211 + ln 0.95 = -1.607 is higher than ln 0.772 + ln 0.20 = -1.868".
        assert!((out[0].logprob - -1.607).abs() <= 5e-4, "{source}");
        assert!((out[1].logprob - -1.868).abs() <= 5e-4, "{source}");
    }
}

#[test]
fn the_step_2_table() {
    let source = "Greedy decoding, beam width 2, table 'Step 2'";
    // Sequence scores: 0.772 x 0.20 = 0.154, 0.772 x 0.18 = 0.139, 0.211 x 0.95 = 0.200,
    // 0.211 x 0.02 = 0.004 (the last printed to one significant digit).
    let step1 = model(&[]);
    for (first, next, want, tol) in [
        (CAT, EOS, 0.154, 5e-4),
        (CAT, AND, 0.139, 5e-4),
        (DOG, EOS, 0.200, 5e-4),
        (DOG, AND, 0.004, 5e-4),
    ] {
        let score = (step1[first as usize] + model(&[first])[next as usize]).exp() as f64;
        assert!((score - want).abs() <= tol, "{source}: {score} vs {want}");
    }
    // "ln 0.211 = -1.556" and "ln 0.95 = -0.051" from the refresher.
    assert!((step1[DOG as usize] as f64 - -1.556).abs() <= 5e-4);
    assert!((model(&[DOG])[EOS as usize] as f64 - -0.051).abs() <= 5e-4);
}

#[test]
fn greedy_finds_only_cat_eos() {
    let source = "Greedy decoding: 'picks CAT at step 1 and <EOS> at step 2, for 0.154'";
    // Beam width 1 is greedy decoding.
    let out = beam_search(&config(1, 1, 0.0), batch).unwrap();
    assert_eq!(out[0].tokens, [CAT, EOS], "{source}");
    assert!((out[0].logprob.exp() - 0.154).abs() <= 5e-4, "{source}");

    // The same with the sampler at temperature 0, token by token.
    let mut sampler = Sampler::new(&SamplingParams::greedy()).unwrap();
    let mut tokens = Vec::new();
    let mut logprob = 0.0f64;
    while tokens.last() != Some(&EOS) {
        let out = sampler
            .sample(&model(&tokens), &Context::new(&tokens))
            .unwrap();
        logprob += out.raw_logprob as f64;
        tokens.push(out.token);
    }
    assert_eq!(tokens, [CAT, EOS], "{source}");
    assert!((logprob.exp() - 0.154).abs() <= 5e-4, "{source}");
}
