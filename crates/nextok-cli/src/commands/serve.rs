//! `nextok serve`: the OpenAI-compatible HTTP server (`nextok-server`) over the scheduler.
//!
//! It binds first, so that `/health` answers 503 while the model is fetched and loaded, then
//! hands the scheduler to the server. SIGINT or SIGTERM: `/health` turns 503, no connection is
//! accepted, running requests get `--shutdown-grace` seconds to finish and are cancelled after
//! that, and the process exits 0.

use crate::args::ServeArgs;
use anyhow::Context;
use nextok::constraints::Limits;
use nextok::{Scheduler, SchedulerOptions};
use nextok_server::{Server, ServerConfig};
use std::sync::Arc;
use std::time::Duration;

/// Runs the server until a signal stops it.
pub fn run(args: &ServeArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        // The forward pass runs on the scheduler's own threads; these only move bytes.
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let result = runtime.block_on(serve(args));
    // A model still loading when a signal came is left to the process's end, not waited for.
    runtime.shutdown_timeout(Duration::from_millis(500));
    result
}

/// The model's id: `--model-name`, else the file's name without `.gguf`.
fn model_name(args: &ServeArgs) -> anyhow::Result<String> {
    if let Some(name) = &args.model_name {
        if name.is_empty() {
            anyhow::bail!("--model-name is empty: give a name, or leave it out");
        }
        return Ok(name.clone());
    }
    let path = match &args.run.file.model {
        Some(p) => p.clone(),
        None => nextok::default_model_path()?,
    };
    let file = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    Ok(file.strip_suffix(".gguf").unwrap_or(&file).to_string())
}

/// Resolves on SIGINT or SIGTERM.
async fn signal() {
    let interrupt = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = interrupt => {}
        _ = terminate => {}
    }
}

async fn serve(args: &ServeArgs) -> anyhow::Result<()> {
    let api_key = args.api_key.clone().or_else(|| {
        std::env::var("NEXTOK_API_KEY")
            .ok()
            .filter(|k| !k.is_empty())
    });
    if args.api_key.as_deref() == Some("") {
        anyhow::bail!("--api-key is empty: give a key, or leave it out");
    }
    let limits = Limits::DEFAULT
        .with_max_rules(args.max_grammar_rules)
        .with_max_items(args.max_grammar_items)
        .with_max_terminals(args.max_grammar_terminals)
        .with_max_terminal_states(args.max_grammar_states)
        .with_max_mask_work(args.max_mask_work);
    let name = model_name(args)?;
    let max_body = usize::try_from(args.max_body).context("--max-body is too large")?;
    let config = ServerConfig::new(name.clone())
        .with_api_key(api_key.clone())
        .with_protect_metrics(args.protect_metrics)
        .with_max_body_bytes(max_body)
        .with_constraint_limits(limits)
        .with_max_tokens_limit(args.max_tokens_limit);
    let scheduler_options = SchedulerOptions {
        max_running: args.max_running,
        max_tokens_per_step: args.max_tokens_per_step,
        max_prefill_while_decoding: args.max_prefill_while_decoding,
        kv_budget_bytes: args.kv_memory,
        max_waiting: args.max_waiting,
        prefix_caching: !args.no_prefix_cache,
        speculative: !args.no_speculative,
        max_draft_tokens_per_step: args.max_draft_tokens_per_step,
    };
    scheduler_options.validate()?;
    let schema = crate::commands::schema_options(&args.schema)?;
    let server = Server::new(config)?;

    let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port))
        .await
        .with_context(|| format!("cannot listen on {}:{}", args.host, args.port))?;
    let addr = listener.local_addr()?;
    let url = format!("http://{addr}");
    crate::output::println(&format!(
        "nextok: serving {name} at {url} (loading the model; /health answers 503 until it is ready)"
    ))?;

    // One signal stops everything: a watch that the server's graceful shutdown and this task
    // both wait on.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        signal().await;
        let _ = stop_tx.send(true);
    });
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|&s| s).await;
    };
    let serving = tokio::spawn(nextok_server::serve(
        listener,
        server.router(),
        stopped(stop_rx.clone()),
    ));

    let run = args.run.clone();
    let (grammar_cache, grammar_cache_memory) = (args.grammar_cache, args.grammar_cache_memory);
    let loading = tokio::task::spawn_blocking(move || -> anyhow::Result<Scheduler> {
        let mut engine = crate::commands::load_engine(&run)?;
        engine.set_json_schema_options(schema);
        engine.set_grammar_cache_capacity(grammar_cache);
        engine.set_grammar_cache_bytes(usize::try_from(grammar_cache_memory).unwrap_or(usize::MAX));
        Ok(Scheduler::new(Arc::new(engine), scheduler_options)?)
    });
    let scheduler = tokio::select! {
        loaded = loading => Arc::new(loaded.context("loading the model stopped")??),
        _ = stopped(stop_rx.clone()) => {
            // Stopped while loading: nothing runs yet, so stop at once.
            serving.abort();
            return Ok(());
        }
    };
    server.set_ready(scheduler.clone())?;
    let auth = match &api_key {
        Some(_) => " -H \"Authorization: Bearer $NEXTOK_API_KEY\"",
        None => "",
    };
    crate::output::println(&format!("nextok: ready at {url}; try:"))?;
    crate::output::println(&format!(
        "curl {url}/v1/chat/completions -H 'Content-Type: application/json'{auth} -d '{{\"messages\":[{{\"role\":\"user\",\"content\":\"Hello!\"}}],\"max_tokens\":32}}'"
    ))?;

    stopped(stop_rx).await;
    eprintln!(
        "nextok: stopping: no new connections; running requests have {} s to finish",
        args.shutdown_grace
    );
    server.begin_shutdown();
    let grace = Duration::from_secs(args.shutdown_grace);
    let draining = tokio::task::spawn_blocking(move || scheduler.shutdown(grace));
    // The scheduler ends every request within the grace; streams then close, and the server
    // with them. The margin covers the last bytes on slow connections.
    let bound = grace + Duration::from_secs(5);
    if tokio::time::timeout(bound, serving).await.is_err() {
        eprintln!("nextok: connections still open after the grace period; exiting anyway");
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), draining).await;
    Ok(())
}
