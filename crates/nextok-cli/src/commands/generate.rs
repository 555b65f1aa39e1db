//! `nextok generate` and `nextok chat`: answers streamed to stdout, stop reason and timings on
//! stderr.

use super::{load_engine, schema_options, text_or_stdin, validate_sampling};
use crate::args::{
    AnswerArgs, ChatArgs, ClassifyArgs, ConstraintArgs, GenerateArgs, MoreSamplingArgs,
    SamplingArgs,
};
use crate::output::{print, println, significant};
use anyhow::{bail, Context};
use nextok::sampling::SamplingParams;
use nextok::{BeamOptions, Chat, Completion, ConstraintSpec, Event, GenerateOptions, Prompt, Stop};
use serde_json::{json, Value};
use std::io::BufRead;

/// The seed of a run: `--seed`, or a fresh one from the operating system's random source. The
/// libraries never draw randomness; the command does, once, and reports the number (issue #15),
/// so that any sampled answer can be had again with `--seed`.
fn seed(a: &SamplingArgs) -> anyhow::Result<u64> {
    match a.seed {
        Some(seed) => Ok(seed),
        None => getrandom::u64()
            .map_err(|e| anyhow::anyhow!("cannot draw a random seed ({e}); give one with --seed")),
    }
}

fn sampling(a: &SamplingArgs, seed: u64) -> anyhow::Result<SamplingParams> {
    let params = SamplingParams {
        temperature: a.temperature,
        top_k: a.top_k,
        top_p: a.top_p,
        min_p: a.min_p,
        repetition_penalty: a.repetition_penalty,
        presence_penalty: a.presence_penalty,
        frequency_penalty: a.frequency_penalty,
        seed: Some(seed),
        ..more_sampling(&a.more)
    };
    validate_sampling(&params)?;
    Ok(params)
}

/// The stages of issue #16, over the defaults.
fn more_sampling(m: &MoreSamplingArgs) -> SamplingParams {
    let defaults = SamplingParams::default();
    SamplingParams {
        min_tokens_to_keep: m.min_tokens_to_keep,
        typical_p: m.typical_p,
        epsilon_cutoff: m.epsilon_cutoff,
        eta_cutoff: m.eta_cutoff,
        no_repeat_ngram_size: m.no_repeat_ngram_size,
        encoder_no_repeat_ngram_size: m.encoder_no_repeat_ngram_size,
        dry_multiplier: m.dry_multiplier,
        dry_base: m.dry_base,
        dry_allowed_length: m.dry_allowed_length,
        dry_penalty_last_n: m.dry_penalty_last_n,
        dry_sequence_breakers: if m.dry_sequence_breakers.is_empty() {
            defaults.dry_sequence_breakers.clone()
        } else {
            m.dry_sequence_breakers.clone()
        },
        xtc_probability: m.xtc_probability,
        xtc_threshold: m.xtc_threshold,
        top_n_sigma: m.top_n_sigma,
        mirostat: m.mirostat,
        mirostat_tau: m.mirostat_tau,
        mirostat_eta: m.mirostat_eta,
        dynatemp_range: m.dynatemp_range,
        dynatemp_exponent: m.dynatemp_exponent,
        ..defaults
    }
}

fn options(s: &SamplingArgs, a: &AnswerArgs, seed: u64) -> anyhow::Result<GenerateOptions> {
    if a.max_tokens == 0 {
        bail!("--max-tokens is 0, but it must be at least 1");
    }
    if let Some(i) = a.stop.iter().position(String::is_empty) {
        bail!("--stop number {} is empty; give a non-empty text", i + 1);
    }
    Ok(GenerateOptions {
        sampling: sampling(s, seed)?,
        max_tokens: Some(a.max_tokens),
        stop: a.stop.clone(),
        ignore_eos: a.ignore_eos,
        speculative: !a.no_speculative,
        ..GenerateOptions::default()
    })
}

/// The stop reason as the Anthropic API names it, with the token or sequence that matched.
fn stop_words(stop: &Stop) -> String {
    match stop {
        Stop::EndTurn { token } => format!("end_turn (token {token})"),
        Stop::StopSequence { text, .. } => format!("stop_sequence ({text:?})"),
        other => stop_reason(other).to_string(),
    }
}

fn stop_reason(stop: &Stop) -> &'static str {
    match stop.reason() {
        nextok::StopReason::EndTurn => "end_turn",
        nextok::StopReason::MaxTokens => "max_tokens",
        nextok::StopReason::StopSequence => "stop_sequence",
        nextok::StopReason::ContextWindow => "context_window",
        _ => "other",
    }
}

/// One line for stderr: why it stopped, how fast it went, and the seed that gives it again.
pub fn summary(c: &Completion, seed: u64) -> String {
    let t = &c.timings;
    format!(
        "[{} | {} prompt tokens ({} cached), {} generated | time to first token {} s | prefill {} tokens/s | decode {} | KV cache {} | seed {seed}]",
        stop_words(&c.stop),
        c.usage.prompt_tokens,
        c.usage.cached_prompt_tokens,
        c.usage.completion_tokens,
        significant(t.time_to_first_token_s),
        significant(t.prefill_tokens_per_s),
        decode_words(c),
        crate::output::bytes(t.kv_cache_bytes as f64),
    )
}

/// The decode rate and time per token.
fn decode_words(c: &Completion) -> String {
    let t = &c.timings;
    format!(
        "{} tokens/s ({} ms/token)",
        significant(t.decode_tokens_per_s),
        significant(t.time_per_output_token_s * 1e3)
    )
}

/// With several completions, each one's own line: its number, why it stopped, how many tokens it
/// generated, its decode rate and its KV cache. What they share (the prompt, its prefill, the
/// time to the first tokens) is said once, by [`shared_summary`].
pub fn completion_summary(c: &Completion, n: usize) -> String {
    format!(
        "[completion {} of {n} | {} | {} generated | decode {} | KV cache {}]",
        c.index + 1,
        stop_words(&c.stop),
        c.usage.completion_tokens,
        decode_words(c),
        crate::output::bytes(c.timings.kv_cache_bytes as f64),
    )
}

/// With several completions, what they share: one prompt, one prefill and one seed.
pub fn shared_summary(c: &Completion, n: usize, seed: u64) -> String {
    let t = &c.timings;
    format!(
        "[{n} completions of one prompt | {} prompt tokens ({} cached) | time to first token {} s | prefill {} tokens/s | seed {seed}]",
        c.usage.prompt_tokens,
        c.usage.cached_prompt_tokens,
        significant(t.time_to_first_token_s),
        significant(t.prefill_tokens_per_s),
    )
}

fn completion_json(c: &Completion, seed: u64, logprobs: Option<&Vec<Value>>) -> Value {
    let mut v = json!({
        "text": c.text,
        "tokens": c.tokens,
        "prompt_tokens": c.prompt_tokens,
        "stop_reason": stop_reason(&c.stop),
        "usage": c.usage,
        "timings": c.timings,
        "logprob": c.logprob,
        "seed": seed,
    });
    match &c.stop {
        Stop::EndTurn { token } => v["stop_token"] = json!(token),
        Stop::StopSequence { text, .. } => v["stop_sequence"] = json!(text),
        _ => {}
    }
    if let Some(lp) = logprobs {
        v["logprobs"] = json!(lp);
    }
    v
}

/// The constraint the flags ask for, if any.
fn constraint(c: &ConstraintArgs) -> anyhow::Result<Option<ConstraintSpec>> {
    Ok(if let Some(choices) = &c.choice {
        Some(ConstraintSpec::Choice(choices.clone()))
    } else if let Some(r) = &c.regex {
        Some(ConstraintSpec::Regex(r.clone()))
    } else if c.json_object {
        Some(ConstraintSpec::Json)
    } else if let Some(path) = &c.json_schema {
        let schema = serde_json::from_str(&crate::files::read_text(path, "JSON Schema")?)
            .with_context(|| format!("{} is not JSON", path.display()))?;
        Some(ConstraintSpec::JsonSchema(schema))
    } else if let Some(path) = &c.grammar {
        let text = crate::files::read_text(path, "grammar")?;
        if path.extension().is_some_and(|e| e == "lark") {
            Some(ConstraintSpec::Lark(text))
        } else {
            Some(ConstraintSpec::Gbnf(text))
        }
    } else {
        None
    })
}

/// Runs `nextok generate`.
pub fn run(a: &GenerateArgs) -> anyhow::Result<()> {
    let text = text_or_stdin(&a.prompt)?;
    if a.n == 0 {
        bail!("-n is 0, but it must be at least 1");
    }
    if let Some(b) = a.beams {
        if b == 0 {
            bail!("--beams is 0, but it must be at least 1");
        }
        if a.n > b {
            bail!(
                "-n is {} but --beams is {b}: beam search returns at most one answer per beam",
                a.n
            );
        }
    }
    let seed = seed(&a.sampling)?;
    let mut options = options(&a.sampling, &a.answer, seed)?;
    options.n = a.n;
    options.logprobs = a.logprobs.is_some();
    options.top_logprobs = a.logprobs.unwrap_or(0);
    options.beams = a.beams.map(|width| BeamOptions {
        width,
        length_penalty: a.length_penalty as f64,
    });
    options.constraint = constraint(&a.constraint)?;
    if options.constraint.is_some() && options.beams.is_some() {
        bail!("a constraint (--choice, --regex, --json-object, --json-schema, --grammar) cannot be used with --beams");
    }
    let mut engine = load_engine(&a.run)?;
    engine.set_json_schema_options(schema_options(&a.schema)?);
    if let Some(ConstraintSpec::JsonSchema(schema)) = &options.constraint {
        // What the schema holds that JSON Schema reads as annotations is said, not hidden.
        let compiled = engine.check_json_schema(schema, &options.constraint_limits)?;
        for i in &compiled.ignored {
            eprintln!(
                "nextok: the JSON Schema's {} at {} is not enforced (an annotation)",
                i.keyword, i.path
            );
        }
    }
    let prompt = if a.raw {
        Prompt::Raw {
            text,
            parse_special: a.parse_special,
        }
    } else {
        if a.parse_special {
            bail!("--parse-special applies to raw prompts: add --raw");
        }
        Prompt::chat(a.answer.system.as_deref(), &text)
    };
    let generation = engine.generate(&prompt, &options)?;
    let mut logprobs: Vec<Vec<Value>> = vec![Vec::new(); a.n];
    let mut completions = Vec::new();
    // One completion streams as it comes; several decode side by side, so each one's text is
    // kept until it ends and then printed whole.
    let stream = a.n == 1 && !a.json;
    let mut texts: Vec<String> = vec![String::new(); a.n];
    for event in generation {
        match event? {
            Event::Token(t) => {
                if a.logprobs.is_some() {
                    if let Some(list) = logprobs.get_mut(t.index) {
                        list.push(json!({"id": t.id, "text": t.text, "logprob": t.logprob, "raw_logprob": t.raw_logprob, "top": t.top}));
                    }
                }
                if stream {
                    print(&t.text)?;
                } else if let Some(text) = texts.get_mut(t.index) {
                    text.push_str(&t.text);
                }
            }
            Event::Done(c) => {
                if !a.json {
                    if a.n > 1 {
                        println(&format!("--- completion {} ---", c.index + 1))?;
                        print(&texts[c.index.min(a.n - 1)])?;
                    }
                    println("")?;
                    if a.logprobs.is_some() {
                        for lp in &logprobs[c.index.min(a.n - 1)] {
                            eprintln!("{lp}");
                        }
                    }
                    if a.n > 1 {
                        eprintln!("{}", completion_summary(&c, a.n));
                    } else {
                        eprintln!("{}", summary(&c, seed));
                    }
                }
                completions.push(*c);
            }
        }
    }
    completions.sort_by_key(|c| c.index);
    if a.n > 1 && !a.json {
        if let Some(first) = completions.first() {
            eprintln!("{}", shared_summary(first, completions.len(), seed));
        }
    }
    if a.json {
        let with_lp = |c: &Completion| {
            completion_json(c, seed, a.logprobs.map(|_| &logprobs[c.index.min(a.n - 1)]))
        };
        let mut v = completions.first().map(with_lp).unwrap_or(Value::Null);
        if completions.len() > 1 {
            v["choices"] = Value::Array(completions.iter().map(with_lp).collect());
        }
        println(&v.to_string())?;
    }
    Ok(())
}

/// What `chat` does with one line of input.
#[derive(Debug, PartialEq, Eq)]
pub enum ChatLine<'a> {
    /// A blank line: nothing.
    Blank,
    /// `/exit` or `/quit`: end the session.
    Exit,
    /// `/reset`: start a new conversation.
    Reset,
    /// A `/word` that is not a command: said, and nothing sent.
    Unknown(&'a str),
    /// A message for the model (a line that starts with `//` sends the rest after one `/`, so a
    /// message can start with a slash).
    Message(&'a str),
}

/// Reads one line of `chat` input.
pub fn chat_line(line: &str) -> ChatLine<'_> {
    let line = line.trim();
    match line {
        "" => ChatLine::Blank,
        "/exit" | "/quit" => ChatLine::Exit,
        "/reset" => ChatLine::Reset,
        _ if line.starts_with("//") => ChatLine::Message(&line[1..]),
        _ if line.starts_with('/') => {
            ChatLine::Unknown(line.split_whitespace().next().unwrap_or(line))
        }
        _ => ChatLine::Message(line),
    }
}

/// Runs `nextok chat`: one line per user message; `/exit` (or end of input) ends it, `/reset`
/// starts over and says so.
///
/// A line that fails (an unknown `/command`, input that is not UTF-8 text, a message the model
/// cannot answer, such as one past the context window) is reported on stderr and the session goes
/// on, with the conversation as it was before that line. Only a failure to write the answer (a
/// closed stdout) or to read the input ends it.
///
/// The `> ` prompt is shown only when the input is a terminal: when lines come from a pipe or a
/// file, stdout holds the answers alone, one per line, and ends with a line break.
pub fn chat(a: &ChatArgs) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    let seed = seed(&a.sampling)?;
    let options = options(&a.sampling, &a.answer, seed)?;
    let engine = load_engine(&a.run)?;
    let mut chat = Chat::new(&engine, a.answer.system.as_deref());
    eprintln!("nextok: chatting with the model; /reset starts over, /exit (or Ctrl-D) ends");
    let stdin = std::io::stdin();
    let interactive = stdin.is_terminal();
    let mut input = stdin.lock();
    let mut number = 0usize;
    loop {
        if interactive {
            print("> ")?;
        }
        // Read as bytes, so that a line that is not UTF-8 is reported and skipped rather than
        // ending the session.
        let mut bytes = Vec::new();
        if input.read_until(b'\n', &mut bytes)? == 0 {
            // Ctrl-D leaves the cursor after the prompt: end the line.
            if interactive {
                println("")?;
            }
            return Ok(());
        }
        number += 1;
        let Ok(line) = std::str::from_utf8(&bytes) else {
            eprintln!("nextok: line {number} is not UTF-8 text; it was skipped");
            continue;
        };
        let message = match chat_line(line) {
            ChatLine::Blank => continue,
            ChatLine::Exit => return Ok(()),
            ChatLine::Reset => {
                chat = Chat::new(&engine, a.answer.system.as_deref());
                eprintln!("nextok: the conversation was reset; the next message starts a new one");
                continue;
            }
            ChatLine::Unknown(command) => {
                eprintln!(
                    "nextok: {command} is not a command (/reset starts over, /exit ends; start a message with // to send a slash); nothing was sent"
                );
                continue;
            }
            ChatLine::Message(m) => m,
        };
        let mut failed = None;
        let result = chat.send(message, &options, |event| {
            if let Event::Token(t) = event {
                if let Err(e) = print(&t.text) {
                    failed.get_or_insert(e);
                }
            }
        });
        if let Some(e) = failed {
            return Err(e);
        }
        match result {
            Ok(completion) => {
                println("")?;
                if a.verbose {
                    eprintln!("{}", summary(&completion, seed));
                }
            }
            Err(e) => {
                // The answer's line ends (empty, or partial), so that stdout keeps one line per
                // message sent.
                println("")?;
                eprintln!(
                    "nextok: {}; the conversation goes on without this message",
                    crate::one_line(&e.to_string())
                );
            }
        }
    }
}

/// The question `classify` asks, through the model's chat template: an instruction that names the
/// labels first, then the text. The answer's first tokens are what is scored, so the model must
/// have been asked to answer with a label; a bare continuation of the text is not a question
/// (specification, "Constrained decoding", the FRAUD/OK example).
pub fn classify_prompt(text: &str, labels: &[String]) -> Prompt {
    Prompt::chat(
        None,
        &format!(
            "Classify the following text. Answer with exactly one of: {}.\n\nText: {}",
            labels.join(", "),
            text.trim()
        ),
    )
}

/// Runs `nextok classify`: every label's probability as the whole answer, and the best one.
pub fn classify(a: &ClassifyArgs) -> anyhow::Result<()> {
    let labels: Vec<String> = a.labels.iter().map(|l| l.trim().to_string()).collect();
    if labels.len() < 2 || labels.iter().any(String::is_empty) {
        bail!("--labels needs at least two non-empty labels, e.g. --labels FRAUD,OK");
    }
    let engine = load_engine(&a.run)?;
    let prompt = classify_prompt(&text_or_stdin(&a.text)?, &labels);
    let scores = engine.classify(&prompt, &labels)?;
    if a.json {
        let v = json!({"label": scores[0].label, "labels": scores});
        return println(&v.to_string());
    }
    let mut out = format!("{}\n", scores[0].label);
    for s in &scores {
        out.push_str(&format!(
            "  {:<16} probability {:.4}   constrained {:.4}\n",
            s.label, s.probability, s.constrained
        ));
    }
    print(&out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_lines_are_commands_messages_or_unknown_commands() {
        assert_eq!(chat_line("  \n"), ChatLine::Blank);
        assert_eq!(chat_line("/exit\n"), ChatLine::Exit);
        assert_eq!(chat_line("/quit"), ChatLine::Exit);
        assert_eq!(chat_line(" /reset "), ChatLine::Reset);
        // Issue #13, point 7: an unknown /command is said, not sent, and does not end the
        // session.
        assert_eq!(chat_line("/help me"), ChatLine::Unknown("/help"));
        assert_eq!(chat_line("/resett"), ChatLine::Unknown("/resett"));
        assert_eq!(
            chat_line("//etc is a folder"),
            ChatLine::Message("/etc is a folder")
        );
        assert_eq!(chat_line("hello /exit\n"), ChatLine::Message("hello /exit"));
    }

    #[test]
    fn classify_asks_one_user_message_with_the_labels_before_the_text() {
        let labels = vec!["FRAUD".to_string(), "OK".to_string()];
        let Prompt::Chat(messages) = classify_prompt("  Thank you for dinner!\n", &labels) else {
            panic!("classify must go through the chat template");
        };
        assert_eq!(messages.len(), 1);
        assert_eq!(messages[0].role, "user");
        assert_eq!(
            messages[0].content,
            "Classify the following text. Answer with exactly one of: FRAUD, OK.\n\n\
             Text: Thank you for dinner!"
        );
    }
}
