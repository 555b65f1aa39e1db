//! `nextok sample`: what each stage of the sampling chain does to a list of logits.

use crate::args::SampleArgs;
use crate::output::println;
use anyhow::bail;
use nextok::sampling::{Context, SamplingParams, Trace};

/// Runs `nextok sample`.
pub fn run(a: &SampleArgs) -> anyhow::Result<()> {
    if let Some(names) = &a.tokens {
        if names.len() != a.logits.len() {
            bail!(
                "--tokens names {} tokens but --logits gives {}; give one name per logit",
                names.len(),
                a.logits.len()
            );
        }
    }
    let params = SamplingParams {
        temperature: a.temperature,
        top_k: a.top_k,
        top_p: a.top_p,
        min_p: a.min_p,
        ..SamplingParams::default()
    };
    super::validate_sampling(&params)?;
    let trace = Trace::new(&params, &a.logits, &Context::default())?;
    if a.json {
        return println(&serde_json::to_string(&trace)?);
    }
    let names: Vec<String> = match &a.tokens {
        Some(n) => n.clone(),
        None => (0..a.logits.len()).map(|i| i.to_string()).collect(),
    };
    let mut rows: Vec<(String, Vec<String>)> = vec![(
        "logits".into(),
        a.logits.iter().map(|z| format!("{z:?}")).collect(),
    )];
    for stage in &trace.stages {
        let label = match stage.name.as_str() {
            "softmax" => "softmax".to_string(),
            "temperature" => format!("temperature, T = {}", a.temperature),
            "top_k" => format!("top-k, k = {}", a.top_k.unwrap_or(0)),
            "top_p" => format!("top-p, p = {}", a.top_p),
            "min_p" => format!("min-p, {}", a.min_p),
            other => other.to_string(),
        };
        rows.push((label, stage.probs.iter().map(|&p| prob(p)).collect()));
    }
    let label_width = rows
        .iter()
        .map(|(l, _)| l.chars().count())
        .max()
        .unwrap_or(0)
        .max(5);
    let width = |i: usize| {
        rows.iter()
            .map(|(_, v)| v[i].chars().count())
            .chain([names[i].chars().count()])
            .max()
            .unwrap_or(1)
    };
    let widths: Vec<usize> = (0..names.len()).map(width).collect();
    let mut out = format!("{:<label_width$}", "stage");
    for (name, w) in names.iter().zip(&widths) {
        out.push_str(&format!("  {name:>w$}"));
    }
    out.push('\n');
    for (label, values) in &rows {
        out.push_str(&format!("{label:<label_width$}"));
        for (v, w) in values.iter().zip(&widths) {
            out.push_str(&format!("  {v:>w$}"));
        }
        out.push('\n');
    }
    crate::output::print(&out)
}

/// A probability as the specification prints them: three decimals, 0 for a removed token, and
/// enough digits to show a small one that is not 0.
fn prob(p: f32) -> String {
    if p == 0.0 {
        "0".into()
    } else if p >= 0.0005 {
        format!("{p:.3}")
    } else {
        format!("{p:.1e}")
    }
}
