//! The stages of a curation run, one function each, in the order [`super::run`] calls them:
//! reading, the filters (their order is fixed, see [`crate::filters`]), turning the survivors into
//! export rows, and rendering those rows to tokens. Every stage records what it dropped, and
//! why, in the [`CurationSummary`].

use crate::export::{self, Fingerprints, MessagesRow, RowMeta, TokenRow};
use crate::filters::{self, Cand, FormatConfig, StageReport};
use crate::input::{self, Problem};
use crate::render::{self, ChatModel, Masking, Window};
use crate::view::{Origin, Traj};

use crate::summary::CurationSummary;

use super::Config;

/// Worker threads: `n`, or the available parallelism when 0.
pub(super) fn threads(n: usize) -> usize {
    if n > 0 {
        n
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }
}

/// Maps `f` over `items` on `n` threads, keeping order.
fn par_map<T: Sync, R: Send>(items: &[T], n: usize, f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    if n <= 1 || items.len() < 2 {
        return items.iter().map(f).collect();
    }
    let chunk = items.len().div_ceil(n);
    std::thread::scope(|s| {
        let handles: Vec<_> = items
            .chunks(chunk)
            .map(|c| s.spawn(|| c.iter().map(&f).collect::<Vec<R>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    })
}

/// Reads every input; unreadable lines and files become problems.
pub(super) fn read(cfg: &Config, out: &mut CurationSummary) -> Vec<Cand> {
    let loaded = input::load(&cfg.inputs);
    out.files_read = loaded.files.len();
    out.bytes_read = loaded.bytes;
    out.lines = loaded.lines;
    out.trajectories = loaded.trajs.len();
    for p in loaded.problems {
        out.record_problem(p);
    }
    loaded
        .trajs
        .into_iter()
        .map(|t| Cand {
            n_tokens: None,
            traj: t,
        })
        .collect()
}

/// Reads the `world.jsonl` records of every input, selects (the `world` stage) and renders them
/// into candidates.
pub(super) fn read_world(
    cfg: &Config,
    w: &crate::world::WorldConfig,
    out: &mut CurationSummary,
) -> Vec<Cand> {
    let loaded = crate::world::load(&cfg.inputs);
    out.files_read = loaded.files.len();
    out.bytes_read = loaded.bytes;
    out.lines = loaded.lines;
    out.trajectories = loaded.records.len();
    for p in loaded.problems {
        out.record_problem(p);
    }
    let (records, rep) = crate::world::select(loaded.records, w);
    out.stages.push(rep);
    let (cands, stats) = crate::world::samples(records, w);
    out.world = Some(stats);
    cands
}

/// Runs the configured filters in their fixed order; with a model, counts tokens (and checks the
/// recorded prompt ids) between the cheap checks and the token budget.
pub(super) fn filter(
    cfg: &Config,
    model: Option<&dyn ChatModel>,
    nthreads: usize,
    mut cands: Vec<Cand>,
    out: &mut CurationSummary,
) -> Vec<Cand> {
    if cfg.world.is_some() {
        if let Some(model) = model {
            cands = tokenize(cands, model, false, nthreads, out);
        }
        if let Some(max) = cfg.format.max_tokens {
            cands = token_budget(cands, max, out);
        }
        return cands;
    }
    if let Some(v) = &cfg.verifier {
        if cfg.filters.dedup {
            cands = push(out, filters::dedup(cands, true));
        }
        out.difficulty = Some(filters::difficulty_stats(&cands));
        cands = push(out, crate::verifier::judgement_samples(cands, v));
        if let Some(model) = model {
            cands = tokenize(cands, model, false, nthreads, out);
        }
        if let Some(max) = cfg.format.max_tokens {
            cands = token_budget(cands, max, out);
        }
        return cands;
    }
    if cfg.filters.dedup {
        cands = push(out, filters::dedup(cands, true));
    }
    if cfg.filters.difficulty {
        let (k, rep, st) = filters::difficulty(cands, &cfg.difficulty);
        out.difficulty = Some(st);
        cands = push(out, (k, rep));
    } else {
        out.difficulty = Some(filters::difficulty_stats(&cands));
    }
    if cfg.filters.dedup {
        cands = push(out, filters::dedup(cands, false));
    }
    if cfg.filters.format {
        cands = format(cfg, cands, out);
    }
    match model {
        Some(model) => {
            cands = tokenize(cands, model, !cfg.allow_tokenizer_mismatch, nthreads, out);
        }
        None => {
            for c in &mut cands {
                c.n_tokens = c.traj.recorded_tokens.map(|n| n as usize);
            }
        }
    }
    if cfg.filters.format
        && let Some(max) = cfg.format.max_tokens
    {
        cands = token_budget(cands, max, out);
    }
    if let Some(min) = cfg.filters.lsp_min {
        cands = push(out, filters::lsp(cands, &cfg.lsp_tool, min));
    }
    if cfg.filters.cap {
        cands = push(out, filters::cap(cands, cfg.cap));
    }
    cands
}

/// Records a stage's report and passes its survivors on.
fn push(out: &mut CurationSummary, (kept, rep): (Vec<Cand>, StageReport)) -> Vec<Cand> {
    out.stages.push(rep);
    kept
}

/// The format filter's cheap checks; the token budget waits until tokens are counted, so only
/// plausible trajectories pay for rendering.
fn format(cfg: &Config, cands: Vec<Cand>, out: &mut CurationSummary) -> Vec<Cand> {
    let (kept, mut rep) = filters::format(
        cands,
        &FormatConfig {
            max_tokens: None,
            ..cfg.format.clone()
        },
    );
    rep.stage = "format".into();
    push(out, (kept, rep))
}

/// Drops the trajectories over the token budget (the format filter's last check).
fn token_budget(mut cands: Vec<Cand>, max: usize, out: &mut CurationSummary) -> Vec<Cand> {
    let mut rep = StageReport {
        stage: "token_budget".into(),
        input: cands.len(),
        ..Default::default()
    };
    cands.retain(|c| {
        let over = c.n_tokens.is_some_and(|n| n > max);
        if over {
            *rep.dropped.entry("over_token_budget".into()).or_default() += 1;
        }
        !over
    });
    rep.kept = cands.len();
    push(out, (cands, rep))
}

/// The trajectory with portable messages (arguments as objects; see
/// [`export::portable_message`]): rendering uses the same messages the messages export holds, so
/// both exports describe one conversation.
fn portable(t: &Traj) -> Traj {
    let mut p = t.clone();
    p.messages = t.messages.iter().map(export::portable_message).collect();
    p.summaries = t.summaries.iter().map(export::portable_message).collect();
    p
}

/// Why a trajectory's tokens could not be counted; [`CountError::kind`] is the problem kind
/// it is dropped under.
#[derive(Debug, thiserror::Error)]
enum CountError {
    #[error("{0}")]
    InvalidRecord(#[source] render::RenderError),
    #[error("{0}")]
    Unrenderable(#[source] render::RenderError),
    #[error(
        "the policy ({policy}) was sent {sent} prompt tokens at step {step}, the target model {model} renders {ours} (first difference at token {at}): trajectories and --model do not share a tokenizer/template"
    )]
    TokenizerMismatch {
        policy: String,
        sent: usize,
        step: usize,
        model: String,
        ours: usize,
        at: usize,
    },
}

impl CountError {
    fn kind(&self) -> &'static str {
        match self {
            CountError::InvalidRecord(_) => "invalid_record",
            CountError::Unrenderable(_) => "unrenderable",
            CountError::TokenizerMismatch { .. } => "tokenizer_mismatch",
        }
    }
}

/// Token count of the longest window (what must fit the training context), after checking the
/// recorded prompt ids (if any) against the target tokenizer.
fn count_tokens(model: &dyn ChatModel, t: &Traj, check_ids: bool) -> Result<usize, CountError> {
    let p = portable(t);
    if check_ids && let Some((k, ids)) = &t.recorded_prompt {
        let prompt = render::prompt_of(&p, *k).map_err(CountError::InvalidRecord)?;
        let ours = model
            .prompt_ids(&prompt, &p.tools)
            .map_err(CountError::Unrenderable)?;
        if &ours != ids {
            let at = ours
                .iter()
                .zip(ids)
                .position(|(a, b)| a != b)
                .unwrap_or(ours.len().min(ids.len()));
            return Err(CountError::TokenizerMismatch {
                policy: t.source.to_string(),
                sent: ids.len(),
                step: k + 1,
                model: model.name().to_string(),
                ours: ours.len(),
                at,
            });
        }
    }
    let mut max = 0;
    for w in render::windows(&p).map_err(CountError::InvalidRecord)? {
        max = max.max(
            model
                .count(&w.messages, &p.tools)
                .map_err(CountError::Unrenderable)?,
        );
    }
    Ok(max)
}

/// Drops candidates whose conversation cannot be rendered/tokenized, counting them.
fn tokenize(
    cands: Vec<Cand>,
    model: &dyn ChatModel,
    check_ids: bool,
    nthreads: usize,
    out: &mut CurationSummary,
) -> Vec<Cand> {
    let mut rep = StageReport {
        stage: "tokenize".into(),
        input: cands.len(),
        ..Default::default()
    };
    let counts = par_map(&cands, nthreads, |c| {
        count_tokens(model, &c.traj, check_ids)
    });
    let mut kept = Vec::with_capacity(cands.len());
    for (mut c, n) in cands.into_iter().zip(counts) {
        match n {
            Ok(n) => {
                c.n_tokens = Some(n);
                kept.push(c);
            }
            Err(e) => {
                let kind = e.kind();
                *rep.dropped.entry(kind.into()).or_default() += 1;
                out.record_problem(Problem {
                    file: c.traj.origin.file.clone(),
                    line: c.traj.origin.line,
                    kind: kind.into(),
                    reason: format!("task {}: {e}", c.traj.task_id),
                });
            }
        }
    }
    rep.kept = kept.len();
    out.stages.push(rep);
    kept
}

/// The export rows of the surviving trajectories: one per window (a trajectory whose context
/// was compressed has several), each ending with its last assistant turn.
pub(super) struct Rows {
    pub messages: Vec<MessagesRow>,
    /// The window behind each row, where it came from, and its tools: what rendering needs.
    windows: Vec<(Window, Origin, Vec<serde_json::Value>)>,
}

/// Turns the survivors into rows; a trajectory whose windows cannot be cut is a problem.
pub(super) fn rows(cands: &[Cand], out: &mut CurationSummary) -> Rows {
    let mut rows = Rows {
        messages: Vec::new(),
        windows: Vec::new(),
    };
    for c in cands {
        let t = &portable(&c.traj);
        // Windows were computed without error while counting tokens, or no model is set and this
        // is the first time: a failure here is counted like any other.
        let ws = match render::windows(t) {
            Ok(ws) => ws,
            Err(e) => {
                out.record_problem(Problem {
                    file: t.origin.file.clone(),
                    line: t.origin.line,
                    kind: "invalid_record".into(),
                    reason: format!("task {}: {e}", t.task_id),
                });
                continue;
            }
        };
        let multi = ws.len() > 1;
        for mut w in ws {
            // Every export ends with the window's last assistant turn (see
            // `export::through_last_assistant`).
            let keep = export::through_last_assistant(&w.messages).len();
            w.messages.truncate(keep);
            let traj_id = if multi {
                format!("{}#{}/{}", t.task_id, t.sample, w.part)
            } else if let Some(id) = &t.row_id {
                id.clone()
            } else {
                format!("{}#{}", t.task_id, t.sample)
            };
            let meta = RowMeta {
                task_id: t.task_id.clone(),
                traj_id,
                sample: t.sample,
                part: w.part as i32,
                source: t.source.clone(),
                reward: t.reward,
                num_turns: w.messages[w.first_new..]
                    .iter()
                    .filter(|m| crate::view::role(m) == "assistant")
                    .count() as i32,
            };
            rows.messages.push(MessagesRow {
                meta,
                messages: w.messages.clone(),
                tools: t.tools.clone(),
            });
            rows.windows.push((w, t.origin.clone(), t.tools.clone()));
        }
    }
    rows
}

/// Renders every row with the target model. A row that cannot be rendered is a problem and is
/// dropped from the messages rows too, so every export holds the same samples.
pub(super) fn render_tokens(
    model: &dyn ChatModel,
    masking: Masking,
    nthreads: usize,
    rows: &mut Rows,
    out: &mut CurationSummary,
) -> (Vec<TokenRow>, Fingerprints) {
    let rendered = par_map(&rows.windows, nthreads, |(w, _, tools)| {
        render::render_window(model, w, tools, masking)
    });
    let mut token_rows = Vec::new();
    let mut keep = vec![true; rows.messages.len()];
    for (i, r) in rendered.into_iter().enumerate() {
        match r {
            Ok(r) => token_rows.push(TokenRow {
                meta: rows.messages[i].meta.clone(),
                input_ids: r.input_ids,
                assistant_masks: r.assistant_masks,
            }),
            Err(e) => {
                keep[i] = false;
                let o = &rows.windows[i].1;
                out.record_problem(Problem {
                    file: o.file.clone(),
                    line: o.line,
                    kind: "unrenderable".into(),
                    reason: format!("{}: {e}", rows.messages[i].meta.traj_id),
                });
            }
        }
    }
    let mut k = keep.iter();
    rows.messages.retain(|_| *k.next().unwrap_or(&true));
    let fingerprints = Fingerprints {
        model: model.name(),
        tokenizer_sha: model.tokenizer_fingerprint(),
        template_sha: model.template_fingerprint(),
    };
    (token_rows, fingerprints)
}
