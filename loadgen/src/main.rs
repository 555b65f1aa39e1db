//! `nextok-loadgen`: see `--help` and the crate's README.

use nextok_loadgen::args::{Args, HELP};
use nextok_loadgen::client::{first_model, run_step, RequestSettings};
use nextok_loadgen::stats::table;
use std::process::ExitCode;

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let args = match Args::parse(&argv, std::env::var("NEXTOK_API_KEY").ok()) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("nextok-loadgen: {e}");
            return ExitCode::from(2);
        }
    };
    if args.help {
        print!("{HELP}");
        return ExitCode::SUCCESS;
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("nextok-loadgen: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(measure(&args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(message) => {
            eprintln!("nextok-loadgen: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the sweep and prints it; `Ok(false)` when some request failed.
async fn measure(args: &Args) -> Result<bool, String> {
    let model = match &args.model {
        Some(m) => m.clone(),
        None => first_model(&args.url, args.api_key.as_deref())
            .await
            .map_err(|e| format!("GET {}/v1/models: {e}", args.url))?,
    };
    let settings = RequestSettings {
        base_url: args.url.clone(),
        model: model.clone(),
        api_key: args.api_key.clone(),
        max_tokens: args.max_tokens,
        temperature: args.temperature,
        timeout: args.timeout,
    };
    eprintln!(
        "nextok-loadgen: {} | model {model} | {} requests per step | concurrency {:?} | max_tokens {} | seed {}",
        args.url, args.requests, args.concurrency, args.max_tokens, args.seed
    );
    let mut reports = Vec::new();
    let mut all_ok = true;
    for &concurrency in &args.concurrency {
        let (report, errors) = run_step(&settings, args.seed, args.requests, concurrency).await;
        eprintln!(
            "nextok-loadgen: concurrency {concurrency}: {}/{} completed in {:.2} s, {:.1} output tokens/s",
            report.completed, report.requests, report.duration_s, report.output_tokens_per_s
        );
        for e in &errors {
            eprintln!("nextok-loadgen:   failed: {e}");
        }
        all_ok &= report.failed == 0;
        reports.push(report);
    }
    if args.json {
        let v = serde_json::json!({
            "url": args.url,
            "model": model,
            "requests": args.requests,
            "max_tokens": args.max_tokens,
            "temperature": args.temperature,
            "seed": args.seed,
            "steps": reports,
        });
        println!("{v}");
    } else {
        print!("{}", table(&reports));
    }
    Ok(all_ok)
}
