//! The files a curation run writes: the exports it was asked for and `manifest.json`, which says
//! how they were made (settings, model fingerprints, per-stage counts, every problem).

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::export::{self, EXPORT_SCHEMA_VERSION, Fingerprints, MessagesRow, TokenRow};
use crate::input::Problem;
use crate::render::{self, ChatModel, MessagesStyle};

use crate::error::{CurateError, write_file};
use crate::summary::CurationSummary;

use super::Config;

/// Writes the exports `cfg.formats` asks for; `tokens` is the rendered token rows with the
/// model's fingerprints, when there is a token export. Returns the files written.
pub(super) fn write_exports(
    cfg: &Config,
    model: Option<&dyn ChatModel>,
    msg_rows: &[MessagesRow],
    tokens: Option<&(Vec<TokenRow>, Fingerprints)>,
    out: &mut CurationSummary,
) -> Result<Vec<PathBuf>, CurateError> {
    let mut files = Vec::new();
    if let Some((token_rows, fp)) = tokens {
        let p = cfg.out.join("tokens.parquet");
        export::write_tokens_parquet(&p, token_rows, fp)?;
        files.push(p);
    }
    if cfg.formats.messages {
        let inline = match (cfg.messages_style, model) {
            (MessagesStyle::Inline, Some(_)) => true,
            (MessagesStyle::Auto, Some(m)) => !m.supports_tools(),
            _ => false,
        };
        let inline = if inline {
            Some(inline_rows(msg_rows)?)
        } else {
            None
        };
        out.messages_style = if inline.is_some() { "inline" } else { "native" };
        let rows = inline.as_deref().unwrap_or(msg_rows);
        let p = cfg.out.join("messages.jsonl");
        export::write_messages_jsonl(&p, rows)?;
        files.push(p);
        let p = cfg.out.join("messages.parquet");
        export::write_messages_parquet(&p, rows)?;
        files.push(p);
    }
    if cfg.formats.sharegpt {
        let p = cfg.out.join("sharegpt.jsonl");
        let bad = export::write_sharegpt(&p, msg_rows)?;
        for (i, reason) in bad {
            out.record_problem(Problem {
                file: p.display().to_string(),
                line: 0,
                kind: "sharegpt_unconvertible".into(),
                reason: format!("{}: {reason}", msg_rows[i].meta.traj_id),
            });
        }
        files.push(p);
    }
    Ok(files)
}

/// The rows with tools, calls and results written into the text ([`render::hermes_inline`]).
/// The token export rendered these very messages, so a failure here is a bug, not bad input.
fn inline_rows(rows: &[MessagesRow]) -> Result<Vec<MessagesRow>, CurateError> {
    rows.iter()
        .map(|r| {
            let messages = render::hermes_inline(&r.messages, &r.tools).map_err(|source| {
                CurateError::Render {
                    traj_id: r.meta.traj_id.clone(),
                    source,
                }
            })?;
            Ok(MessagesRow {
                meta: r.meta.clone(),
                messages,
                tools: Vec::new(),
            })
        })
        .collect()
}

/// Writes one text file, naming it in the error.
pub(super) fn write_manifest(
    p: &Path,
    cfg: &Config,
    out: &CurationSummary,
    fp: Option<&Fingerprints>,
) -> Result<(), CurateError> {
    // Explicitly, not inside `json!` (which unwraps): a path that is not UTF-8 cannot be
    // recorded, and that is an error, not a panic.
    let config = serde_json::to_value(cfg).map_err(|source| CurateError::RecordConfig {
        path: p.to_path_buf(),
        source,
    })?;
    let m = json!({
        "schema_version": EXPORT_SCHEMA_VERSION,
        "kind": "dojo-curate-export",
        "writer": format!("dojo-curate {}", env!("CARGO_PKG_VERSION")),
        "files": out.written.iter().filter_map(|f| f.file_name()).map(|f| f.to_string_lossy()).collect::<Vec<_>>(),
        "model": fp,
        "masking": cfg.masking,
        "messages_style": out.messages_style,
        "config": config,
        "input": {
            "files": out.files_read, "bytes": out.bytes_read, "lines": out.lines,
            "trajectories": out.trajectories,
        },
        "stages": out.stages,
        "world": out.world,
        "difficulty": out.difficulty.as_ref().map(|d| json!({
            "always_fail": d.always_fail, "always_pass": d.always_pass, "mixed": d.mixed,
            "histogram": d.histogram,
        })),
        "kept_trajectories": out.kept_trajectories,
        "samples": out.samples,
        "trained_tokens": out.trained_tokens,
        "problem_counts": out.problem_counts,
        "problems": out.problems,
    });
    let text = serde_json::to_string_pretty(&m).unwrap_or_default();
    write_file(p, &text)
}
