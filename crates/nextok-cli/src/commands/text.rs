//! `nextok tokenize`, `nextok template`, `nextok logits` and `nextok score`.

use super::{load_engine, load_engine_for_text, model_path, text_or_stdin};
use crate::args::{ConstrainBenchArgs, LogitsArgs, ScoreArgs, TemplateArgs, TokenizeArgs};
use crate::output::{println, significant};
use anyhow::Context;
use nextok::gguf::GgufFile;
use nextok::tokenizer::{ChatTemplate, EncodeOptions, Message, Tokenizer};
use serde_json::json;
use std::io::Write;

fn open(args: &crate::args::ModelArgs) -> anyhow::Result<GgufFile> {
    let path = model_path(args)?;
    Ok(GgufFile::open(&path).map_err(nextok::Error::from)?)
}

fn piece(tokenizer: &dyn Tokenizer, id: u32) -> String {
    String::from_utf8_lossy(tokenizer.token_bytes(id).unwrap_or_default()).into_owned()
}

/// Runs `nextok tokenize`.
pub fn tokenize(a: &TokenizeArgs) -> anyhow::Result<()> {
    let text = text_or_stdin(&a.text)?;
    let file = open(&a.model)?;
    let tokenizer = nextok::tokenizer::load_from_gguf(&file).map_err(nextok::Error::from)?;
    let options = EncodeOptions {
        add_bos: tokenizer.add_bos_by_default(),
        parse_special: a.parse_special,
    };
    let ids = tokenizer
        .encode(&text, options)
        .map_err(nextok::Error::from)?;
    let pieces: Vec<String> = ids
        .iter()
        .map(|&id| piece(tokenizer.as_ref(), id))
        .collect();
    if a.json {
        return println(&json!({"ids": ids, "pieces": pieces}).to_string());
    }
    let mut out = String::new();
    for (id, p) in ids.iter().zip(&pieces) {
        out.push_str(&format!("{id:>6}  {p:?}\n"));
    }
    out.push_str(&format!("{} tokens", ids.len()));
    println(&out)
}

/// A message as a conversation file gives it.
#[derive(serde::Deserialize)]
struct FileMessage {
    role: String,
    content: String,
}

/// Runs `nextok template`.
pub fn template(a: &TemplateArgs) -> anyhow::Result<()> {
    let json = crate::files::read_text(&a.file, "conversation")?;
    let messages: Vec<FileMessage> = serde_json::from_str(&json).with_context(|| {
        format!(
            "{} is not a conversation: expected [{{\"role\": ..., \"content\": ...}}, ...]",
            a.file.display()
        )
    })?;
    let messages: Vec<Message> = messages
        .into_iter()
        .map(|m| Message::new(m.role, m.content))
        .collect();
    let file = open(&a.model)?;
    if file.metadata().get("tokenizer.chat_template").is_none() {
        return Err(nextok::Error::NoChatTemplate.into());
    }
    let template = ChatTemplate::from_gguf(&file).map_err(nextok::Error::from)?;
    let text = template
        .render(&messages, !a.no_generation_prompt)
        .map_err(nextok::Error::from)?;
    crate::output::print(&text)
}

/// Runs `nextok logits`.
pub fn logits(a: &LogitsArgs) -> anyhow::Result<()> {
    let engine = load_engine(&a.run)?;
    let ids = match (&a.ids, &a.prompt) {
        (Some(ids), _) => ids.clone(),
        (None, Some(text)) => engine.encode_prompt(&nextok::Prompt::Raw {
            text: text_or_stdin(text)?,
            parse_special: a.parse_special,
        })?,
        (None, None) => anyhow::bail!("give a prompt or --ids"),
    };
    let vocab = engine.vocab_size();
    if let Some(&id) = ids.iter().find(|&&id| id as usize >= vocab) {
        return Err(nextok::Error::TokenOutOfRange { id, vocab }.into());
    }
    let logits = engine.logits(&ids, a.all_positions)?;
    if let Some(path) = &a.out {
        let mut bytes = Vec::with_capacity(logits.len() * 4);
        for x in &logits {
            bytes.extend_from_slice(&x.to_le_bytes());
        }
        let mut f = std::fs::File::create(path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        f.write_all(&bytes)
            .with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!(
            "nextok: wrote {} row(s) of {vocab} little-endian f32 logits to {}",
            logits.len() / vocab,
            path.display()
        );
        return Ok(());
    }
    let tokenizer = engine.tokenizer();
    let rows: Vec<serde_json::Value> = logits
        .chunks_exact(vocab)
        .map(|row| {
            let lp = nextok::sampling::log_softmax(row).unwrap_or_default();
            let mut order: Vec<u32> = (0..vocab as u32).collect();
            // Highest logit first, ties to the lowest id, so the listing is stable.
            order.sort_by(|&x, &y| row[y as usize].total_cmp(&row[x as usize]).then(x.cmp(&y)));
            let top: Vec<serde_json::Value> = order
                .iter()
                .take(a.top_k)
                .map(|&id| {
                    json!({
                        "id": id,
                        "text": piece(tokenizer, id),
                        "logit": row[id as usize],
                        "logprob": lp.get(id as usize).copied().unwrap_or(f32::NAN),
                    })
                })
                .collect();
            json!(top)
        })
        .collect();
    let v = if a.all_positions {
        json!({"ids": ids, "positions": rows})
    } else {
        json!({"ids": ids, "top": rows.first()})
    };
    println(&v.to_string())
}

/// Runs `nextok score`.
pub fn score(a: &ScoreArgs) -> anyhow::Result<()> {
    let text = text_or_stdin(&a.text)?;
    let engine = load_engine(&a.run)?;
    let ids = engine.encode_prompt(&nextok::Prompt::Raw {
        text,
        parse_special: a.parse_special,
    })?;
    let score = engine.score(&ids)?;
    let tokenizer = engine.tokenizer();
    if a.json {
        let pieces: Vec<String> = ids.iter().map(|&id| piece(tokenizer, id)).collect();
        return println(
            &json!({
                "tokens": score.tokens,
                "pieces": pieces,
                "logprobs": score.logprobs,
                "perplexity": score.perplexity,
            })
            .to_string(),
        );
    }
    let mut out = format!("{:>6}  {:<20} {:>10}\n", "id", "token", "logprob");
    out.push_str(&format!(
        "{:>6}  {:<20} {:>10}\n",
        ids[0],
        format!("{:?}", piece(tokenizer, ids[0])),
        "-"
    ));
    for (&id, lp) in ids[1..].iter().zip(&score.logprobs) {
        out.push_str(&format!(
            "{id:>6}  {:<20} {lp:>10.4}\n",
            format!("{:?}", piece(tokenizer, id))
        ));
    }
    let total: f64 = score.logprobs.iter().map(|&x| x as f64).sum();
    out.push_str(&format!(
        "log-probability {} over {} tokens; perplexity {}",
        significant(total),
        score.logprobs.len(),
        significant(score.perplexity)
    ));
    println(&out)
}

/// The `.json` files of a benchmark folder, sorted by name: only regular files of at most
/// [`crate::files::MAX_TEXT_FILE_BYTES`] (a link is followed); anything else (a FIFO that would
/// block the read, a link to a device that never ends, a folder named `*.json`) is skipped with a
/// line on stderr. A folder with no case file is an error, not an all-zero table.
fn case_files(dir: &std::path::Path) -> anyhow::Result<Vec<std::path::PathBuf>> {
    use crate::files::{check_regular, MAX_TEXT_FILE_BYTES};
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read the folder {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    let mut files = Vec::with_capacity(paths.len());
    for path in paths {
        match check_regular(&path, "benchmark case", MAX_TEXT_FILE_BYTES) {
            Ok(_) => files.push(path),
            Err(e) => eprintln!("nextok: skipped: {e}"),
        }
    }
    if files.is_empty() {
        anyhow::bail!(
            "{} holds no .json case files (regular files of at most 16 MiB): nothing to measure",
            dir.display()
        );
    }
    Ok(files)
}

/// Another run of `nextok constrain-bench` with the same cases, model and documents, in a fresh
/// process (so that its first uses cost what they cost the first run): its every mask's and
/// compile's time, in the order timed.
fn other_run_samples(a: &ConstrainBenchArgs) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let exe = std::env::current_exe().context("finding this program to run it again")?;
    let mut command = std::process::Command::new(exe);
    command
        .arg("constrain-bench")
        .arg(&a.dir)
        .arg("--model")
        .arg(model_path(&a.model)?)
        .arg("--samples");
    for dir in &a.resources {
        command.arg("--resources").arg(dir);
    }
    if let Some(dir) = &a.remotes {
        command.arg("--remotes").arg(dir);
    }
    let out = command
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("running constrain-bench again for --runs")?;
    if !out.status.success() {
        anyhow::bail!("a later run of constrain-bench failed ({})", out.status);
    }
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("reading a later run's timings")?;
    let list = |key: &str| -> anyhow::Result<Vec<f64>> {
        v[key]
            .as_array()
            .and_then(|a| a.iter().map(serde_json::Value::as_f64).collect())
            .with_context(|| format!("a later run's timings have no list {key:?}"))
    };
    Ok((list("mask_us")?, list("compile_ms")?))
}

/// Runs `nextok constrain-bench`.
pub fn constrain_bench(a: &ConstrainBenchArgs) -> anyhow::Result<()> {
    use nextok::constraints::{ConformanceRun, JsonOptions, Percentiles};
    if !a.dir.is_dir() {
        anyhow::bail!("{} is not a folder of schema files", a.dir.display());
    }
    let files = case_files(&a.dir)?;
    // Only the vocabulary and the tokenizer are used: the forward pass never runs here, so the
    // command takes no --threads or --device.
    let engine = load_engine_for_text(&a.model)?;
    let vocab = engine.constraint_vocab()?;
    let tokenizer = engine.tokenizer();
    let tokenize = |bytes: &[u8]| -> Vec<u32> {
        tokenizer
            .encode(&String::from_utf8_lossy(bytes), EncodeOptions::plain())
            .unwrap_or_default()
    };
    // Schemas of the folder may refer to each other (JSON Schema Store's do), and to the
    // documents of the --resources folders.
    let mut resources = ConformanceRun::resources_in_dir(&a.dir).map_err(nextok::Error::from)?;
    for dir in &a.resources {
        if !dir.is_dir() {
            anyhow::bail!("{} is not a folder of resource documents", dir.display());
        }
        resources.extend(ConformanceRun::resources_in_dir(dir).map_err(nextok::Error::from)?);
    }
    if let Some(dir) = &a.remotes {
        if !dir.is_dir() {
            anyhow::bail!("{} is not a folder of remote documents", dir.display());
        }
        let served = ConformanceRun::documents_served_at(dir, ConformanceRun::SUITE_REMOTES_URL);
        resources.extend(served.map_err(nextok::Error::from)?);
    }
    let options = JsonOptions::default().with_resources(resources);
    let mut run = ConformanceRun::new(vocab, options, &tokenize);
    let mut outcomes = Vec::new();
    for f in &files {
        outcomes.extend(run.run_file(f).map_err(nextok::Error::from)?);
    }
    if outcomes.is_empty() {
        anyhow::bail!(
            "the case files in {} hold no schemas: nothing to measure",
            a.dir.display()
        );
    }
    let report = run.report(outcomes);
    if a.samples {
        let v = json!({"mask_us": report.mask_us_each, "compile_ms": report.compile_ms_each});
        return println(&v.to_string());
    }
    let least = if a.runs > 1 {
        let others = (2..=a.runs)
            .map(|_| other_run_samples(a))
            .collect::<anyhow::Result<Vec<_>>>()?;
        Some(report.least_of(&others).map_err(anyhow::Error::msg)?)
    } else {
        None
    };
    let p =
        |x: &Percentiles| json!({"median": x.median, "p99": x.p99, "p999": x.p999, "max": x.max});
    let refusals = report.refusal_table();
    if a.json {
        let mut v = json!({
            "schemas": report.schemas,
            "compiled": report.compiled,
            "unsupported": report.unsupported,
            "valid_total": report.valid_total,
            "valid_accepted": report.valid_accepted,
            "invalid_total": report.invalid_total,
            "invalid_rejected": report.invalid_rejected,
            "mask_mismatches": report.mask_mismatches,
            "mask_us": p(&report.mask_us),
            "compile_ms": p(&report.compile_ms),
            "refusals": refusals,
        });
        if let Some((masks, compiles)) = &least {
            v["least_of_runs"] =
                json!({"runs": a.runs, "mask_us": p(masks), "compile_ms": p(compiles)});
        }
        if a.verbose {
            let refused: Vec<_> = report
                .outcomes
                .iter()
                .filter_map(|o| {
                    let r = o.refusal()?;
                    Some(
                        json!({"file": o.file, "group": o.group, "keyword": r.keyword,
                                "path": r.path, "reason": r.reason}),
                    )
                })
                .collect();
            let failures: Vec<_> = report
                .outcomes
                .iter()
                .filter(|o| o.compiled.is_ok())
                .flat_map(|o| {
                    o.failures.iter().map(move |f| {
                        json!({"file": o.file, "group": o.group, "test": f.index,
                               "valid": f.valid, "description": f.description, "data": f.data})
                    })
                })
                .collect();
            v["refused"] = json!(refused);
            v["failures"] = json!(failures);
        }
        return println(&v.to_string());
    }
    let mut out = String::new();
    if a.verbose {
        // Every refusal and every wrong answer, one line each, so a regression is found by
        // its file and index.
        for o in &report.outcomes {
            let place = format!("{} group {}", o.file, o.group);
            match o.refusal() {
                Some(r) => out.push_str(&format!(
                    "refused   {place}: keyword {} at {:?}: {}\n",
                    r.keyword, r.path, r.reason
                )),
                None => {
                    for f in &o.failures {
                        out.push_str(&format!("failure   {place} {f}\n"));
                    }
                }
            }
        }
    }
    let row = |x: &Percentiles| {
        format!(
            "median {}  p99 {}  p99.9 {}  max {}",
            significant(x.median),
            significant(x.p99),
            significant(x.p999),
            significant(x.max)
        )
    };
    out.push_str(&format!(
        "schemas            {}\n\
         compiled           {}\n\
         unsupported        {}\n\
         valid accepted     {} of {}\n\
         invalid rejected   {} of {}\n\
         mask mismatches    {}\n\
         mask time (µs)     {}\n\
         compile time (ms)  {}",
        report.schemas,
        report.compiled,
        report.unsupported,
        report.valid_accepted,
        report.valid_total,
        report.invalid_rejected,
        report.invalid_total,
        report.mask_mismatches,
        row(&report.mask_us),
        row(&report.compile_ms),
    ));
    if let Some((masks, compiles)) = &least {
        out.push_str(&format!(
            "\nleast of {} runs (each mask's and each compile's least time, a process per run)\n\
             mask time (µs)     {}\n\
             compile time (ms)  {}",
            a.runs,
            row(masks),
            row(compiles),
        ));
    }
    if !refusals.is_empty() {
        // The refusal table: each refused schema counted once, by the keyword of its first
        // refusal, most frequent first.
        let mut rows: Vec<_> = refusals.iter().collect();
        rows.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        out.push_str("\nrefusals by keyword");
        for (keyword, count) in rows {
            out.push_str(&format!("\n  {count:>5}  {keyword}"));
        }
    }
    println(&out)
}
