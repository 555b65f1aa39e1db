//! One module per subcommand.

mod bench;
mod bench_sampler;
mod generate;
mod plan;
mod sample;
mod serve;
mod text;

use crate::args::{Command, ModelArgs, RunArgs, SchemaArgs};
use anyhow::{bail, Context};
use std::path::PathBuf;

/// Runs one subcommand.
pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Plan(a) => plan::run(&a),
        Command::Sample(a) => sample::run(&a),
        Command::Generate(a) => generate::run(&a),
        Command::Chat(a) => generate::chat(&a),
        Command::Tokenize(a) => text::tokenize(&a),
        Command::Template(a) => text::template(&a),
        Command::Logits(a) => text::logits(&a),
        Command::Score(a) => text::score(&a),
        Command::Classify(a) => generate::classify(&a),
        Command::ConstrainBench(a) => text::constrain_bench(&a),
        Command::Bench(a) => bench::run(&a),
        Command::Serve(a) => serve::run(&a),
        Command::FetchModel => {
            let path = crate::fetch::fetch_and_check(&mut |line| eprintln!("nextok: {line}"))?;
            crate::output::println(&path.display().to_string())
        }
    }
}

/// The model file to use: `--model` if given (it must be a regular file, or a folder for the
/// message that says folders are not supported), else the default model, fetched on first use
/// with its progress on stderr.
pub fn model_path(args: &ModelArgs) -> anyhow::Result<PathBuf> {
    match &args.model {
        Some(path) if path.is_dir() => Ok(path.clone()),
        Some(path) => {
            nextok::check_model_file(path)?;
            Ok(path.clone())
        }
        None => Ok(crate::fetch::ensure_default_model(&mut |line| {
            eprintln!("nextok: {line}")
        })?),
    }
}

/// Checks sampling settings, naming the flag to fix.
pub fn validate_sampling(params: &nextok::sampling::SamplingParams) -> anyhow::Result<()> {
    match params.validate() {
        Ok(()) => Ok(()),
        Err(nextok::sampling::Error::InvalidParam {
            name,
            value,
            expected,
        }) => anyhow::bail!("--{} is {value}, but it must be {expected}", flag(name)),
        Err(e) => Err(e.into()),
    }
}

/// The flag that sets a field of `SamplingParams`.
fn flag(field: &str) -> String {
    field.replace('_', "-")
}

/// Loads the model `args` name (or the default model) with its tokenizer, to run on the threads
/// and device they ask for.
pub fn load_engine(args: &RunArgs) -> anyhow::Result<nextok::Engine> {
    if args.threads == Some(0) {
        anyhow::bail!("--threads is 0, but it must be at least 1");
    }
    let options = nextok::EngineOptions {
        threads: args.threads,
        device: args.device,
        ..nextok::EngineOptions::default()
    };
    Ok(nextok::Engine::load(model_path(&args.file)?, &options)?)
}

/// The engine's JSON Schema options as the flags ask: strict, `format` as annotation, the
/// default draft, and the documents of `--schema-resources` (each `.json` file, by its `$id`).
pub fn schema_options(args: &SchemaArgs) -> anyhow::Result<nextok::constraints::JsonOptions> {
    use nextok::constraints::{FormatMode, JsonOptions, SchemaResources};
    let mut options = JsonOptions::default()
        .with_strict(args.schema_strict)
        .with_draft(args.schema_draft);
    if args.schema_format_annotation {
        options = options.with_format(FormatMode::Annotation);
    }
    if let Some(dir) = &args.schema_resources {
        let mut resources = SchemaResources::new();
        let entries = std::fs::read_dir(dir)
            .with_context(|| format!("--schema-resources: {} is not a folder", dir.display()))?;
        let mut files: Vec<_> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "json"))
            .collect();
        files.sort();
        for path in &files {
            let text = crate::files::read_text(path, "JSON Schema")?;
            let schema: serde_json::Value = serde_json::from_str(&text)
                .with_context(|| format!("{} is not JSON", path.display()))?;
            if !resources.insert_document(schema) {
                bail!(
                    "{} has no `$id` (or draft-04 `id`) that is an absolute URI, so no `$ref` \
                     can name it",
                    path.display()
                );
            }
        }
        if resources.is_empty() {
            bail!("--schema-resources: {} holds no .json file", dir.display());
        }
        options = options.with_resources(resources);
    }
    Ok(options)
}

/// Loads the model `args` name with the default options, for a command that needs the engine's
/// tokenizer-side views but never runs the forward pass.
pub fn load_engine_for_text(args: &ModelArgs) -> anyhow::Result<nextok::Engine> {
    Ok(nextok::Engine::load(
        model_path(args)?,
        &nextok::EngineOptions::default(),
    )?)
}

/// Reads `-` as standard input (at most [`crate::files::MAX_TEXT_FILE_BYTES`], as UTF-8 text);
/// any other text is itself.
pub fn text_or_stdin(text: &str) -> anyhow::Result<String> {
    if text == "-" {
        use std::io::Read;
        let limit = crate::files::MAX_TEXT_FILE_BYTES;
        let mut bytes = Vec::new();
        std::io::stdin().take(limit + 1).read_to_end(&mut bytes)?;
        if bytes.len() as u64 > limit {
            anyhow::bail!(
                "standard input holds more than {limit} bytes, the most a prompt read from it may have"
            );
        }
        String::from_utf8(bytes).map_err(|_| {
            anyhow::anyhow!("standard input is not UTF-8 text; give the prompt as text")
        })
    } else {
        Ok(text.to_owned())
    }
}
