//! A debugging view of the chain: the distribution after each stage.

use serde::{Deserialize, Serialize};

use crate::candidates::Candidates;
use crate::stages::{Chain, Context, LogitsProcessor};
use crate::{Error, SamplingParams};

/// The distribution after one stage of the chain, over the whole vocabulary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceStage {
    /// Stage name: `"softmax"` for the model's raw distribution, `"mask"` for the constraint
    /// mask, then the names of the chain's stages (`"temperature"`, `"top_k"`, ...).
    pub name: String,
    /// Probability of every token after this stage (0 for removed tokens), renormalised.
    pub probs: Vec<f32>,
}

/// The distribution after each stage, like the tables of the specification's "How the rules
/// combine" section. Serialises as `{"stages": [{"name": ..., "probs": [...]}], "final": [...]}`.
///
/// ```
/// use nextok_sampling::{SamplingParams, Trace};
/// let params = SamplingParams { temperature: 2.0, top_k: Some(3), top_p: 0.9, ..Default::default() };
/// let trace = Trace::new(&params, &[6.2, 4.9, 2.1, 1.0], &Default::default()).unwrap();
/// let names: Vec<_> = trace.stages.iter().map(|s| s.name.as_str()).collect();
/// assert_eq!(names, ["softmax", "temperature", "top_k", "top_p"]);
/// assert!((trace.final_probs[0] - 0.657).abs() < 5e-4);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trace {
    /// One entry per stage, the first being the raw softmax of the logits.
    pub stages: Vec<TraceStage>,
    /// The distribution that is finally sampled from.
    #[serde(rename = "final")]
    pub final_probs: Vec<f32>,
}

impl Trace {
    /// Runs the chain that `params` describe on `logits` and records every stage.
    pub fn new(params: &SamplingParams, logits: &[f32], ctx: &Context<'_>) -> Result<Trace, Error> {
        Trace::of_chain(&Chain::from_params(params)?, logits, ctx)
    }

    /// Runs `chain` on `logits` and records every stage.
    pub fn of_chain(chain: &Chain, logits: &[f32], ctx: &Context<'_>) -> Result<Trace, Error> {
        let mut stages = vec![TraceStage {
            name: "softmax".to_string(),
            probs: crate::softmax(logits)?,
        }];
        let mut c = Candidates::new();
        c.fill(logits, ctx.allowed)?;
        if ctx.allowed.is_some() {
            stages.push(TraceStage {
                name: "mask".to_string(),
                probs: c.dense_probs()?,
            });
        }
        chain.apply_traced(&mut c, ctx, &mut stages)?;
        let final_probs = c.dense_probs()?;
        Ok(Trace {
            stages,
            final_probs,
        })
    }
}
