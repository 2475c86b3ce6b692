//! `dojo demo` (dojo-rollout): the first command of the README. The bundled benchmark end to end:
//! `gold-replay` (each task's gold patch through the agent's real tools) and the embedded
//! default model, every rollout graded, a summary table, and a self-contained HTML report, all
//! written under `$DOJO_HOME/demo` unless `--out` says otherwise.

use crate::exit::Exit;
use std::path::PathBuf;

use dojo_rollout::demo;

use super::runtime;
use dojo_rollout::embedded::run_policy;

#[derive(clap::Args)]
pub struct DemoArgs {
    /// Where to write the runs and the report (default `$DOJO_HOME/demo`, so that a demo run
    /// from a checkout leaves nothing in it; an earlier demo there is resumed).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Concurrent rollouts.
    #[arg(long, default_value_t = 2, value_parser = crate::args::positive::<usize>())]
    workers: usize,
    /// Skip the embedded model (gold-replay only).
    #[arg(long)]
    no_model: bool,
    /// Agent steps for the embedded model (a 135M model on CPU: kept small to fit the 10-minute budget).
    #[arg(long, default_value_t = 4, value_parser = crate::args::positive::<u32>())]
    model_steps: u32,
    /// Completion tokens per model turn.
    #[arg(long, default_value_t = 160)]
    model_max_tokens: u32,
    /// Tasks the embedded model runs (the first N of the benchmark; 0 = all). Two by default:
    /// on 2 CPU cores a 135M model needs minutes per task, and the demo must stay under 10.
    #[arg(long, default_value_t = 2)]
    model_tasks: usize,
    /// Use this task file instead of the bundled benchmark.
    #[arg(long)]
    tasks: Option<PathBuf>,
    /// Start over instead of resuming an earlier demo in `--out`.
    #[arg(long)]
    fresh: bool,
}

pub fn run(args: DemoArgs) -> anyhow::Result<Exit> {
    let started = std::time::Instant::now();
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| dojo_cache::dojo_home().join("demo"));
    eprintln!("dojo demo: writing into {}", out.display());
    let d = demo::Demo::prepare(out, args.fresh, args.tasks.as_deref(), args.workers)?;
    eprintln!(
        "dojo demo: {} tasks from {} (sources download once into the cache; the first run also builds the Python environments)",
        d.tasks.len(),
        d.tasks_file.display()
    );
    let rt = runtime()?;

    eprintln!("\n[1/2] gold-replay: the gold patch through the real tools, then graded");
    let gold_out = rt.block_on(run_policy(&d.gold_run(super::progress(false))?))?;
    eprintln!("{}", gold_out.progress_line());

    let mut outs = vec![(gold_out, "gold-replay")];
    let mut notes = vec![d.gold_note()];
    if !args.no_model {
        let (steps, tokens) = (args.model_steps, args.model_max_tokens);
        let model = dojo_tokenizer::model_spec::DEFAULT;
        let progress = super::progress(false);
        let run = d.model_run(model, steps, tokens, args.model_tasks, progress);
        eprintln!(
            "\n[2/2] embedded SmolLM2-135M-Instruct (CPU, {steps} steps max, {tokens} tokens per turn): expect mostly unresolved"
        );
        match rt.block_on(run_policy(&run)) {
            Ok(o) => {
                eprintln!("{}", o.progress_line());
                outs.push((o, "embedded"));
                notes.push(demo::model_note(steps, tokens));
            }
            Err(e) if cfg!(not(feature = "engine")) => {
                eprintln!("skipping the embedded model: {e:#}");
                notes.push(demo::SKIPPED_NOTE.into());
            }
            Err(e) => return Err(e.into()),
        }
    }

    let summaries: Vec<_> = outs.iter().map(|(o, _)| o.summary.clone()).collect();
    println!("\n{}", dojo_rollout::render_table(&summaries));
    let secs = started.elapsed().as_secs_f64();
    notes.push(demo::generated_note(env!("CARGO_PKG_VERSION"), secs));
    let runs: Vec<_> = outs.iter().map(|(o, dir)| (o, *dir)).collect();
    let title = "dojo demo: the bundled benchmark";
    let shown = dojo_rollout::report::write_demo_report(&d.out, title, &runs, &notes)?;
    println!("report: {}", shown.display());
    println!("open it: xdg-open {}", shown.display());
    // Gold patches that do not all resolve mean the harness, not a model, is broken.
    Ok(Exit::infrastructure_if(!demo::trustworthy(&summaries)))
}
