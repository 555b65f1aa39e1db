//! The `nextok` command: generate, chat, tokenize, template, logits, score, sample, plan,
//! classify, bench, constrain-bench and serve, over the `nextok` library. It is also the one place that
//! fetches the default model (`fetch`): the library starts no process.
//!
//! Errors are for a person: one line on stderr that says what to do, and a non-zero exit code
//! (2 for a command line that does not parse, 1 for everything else). A panic, which would be a
//! bug, is reported the same way, without a backtrace.

mod args;
mod commands;
mod fetch;
mod files;
mod output;

use clap::Parser;
use std::process::ExitCode;

/// The process's allocator. The schema compiler (`constrain`, `constrain-bench`, a server's
/// `response_format`) builds and drops many small automata and maps; under glibc's allocator a
/// tenth or more of a compile went to `malloc` and `free`.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // A panic is a bug in nextok, but the person running it still gets one line, not a trace.
    std::panic::set_hook(Box::new(|info| {
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        let place = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!(
            "nextok: internal error ({}{place}); please report it",
            one_line(&message)
        );
    }));
    let cli = match args::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    match commands::run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if output::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nextok: {}", one_line(&message(&e)));
            ExitCode::FAILURE
        }
    }
}

/// Prints help and version as clap does; any other parse error as one line.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            }
        }
        _ => {
            // clap's message opens with "error: ", says what was wrong (sometimes over several
            // lines), then shows the usage and a hint; the part before the usage is folded
            // onto one line.
            let rendered = e.render().to_string();
            let what: Vec<&str> = rendered
                .lines()
                .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect();
            let what = what.join(" ");
            let what = what.trim_start_matches("error: ");
            eprintln!("nextok: {what}; see `nextok --help`");
            ExitCode::from(2)
        }
    }
}

/// The error and its causes, joined by ": ", leaving out a cause whose text the message already
/// contains (errors that wrap another usually print it themselves).
fn message(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let part = cause.to_string();
        if text.contains(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    text
}

/// Folds a message onto one line.
pub(crate) fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}
