//! World-model training data from real rollouts: the SWT and SWR records of `world.jsonl`.
//!
//! [`CapturingWorkspace`] sits between the agent's tools and the sandbox. When a tool runs a
//! shell command that runs Python or tests, it first takes what SWE-World's transition model
//! would see (the files the command executes, now and at the base commit, and the agent's patch
//! at that moment), runs the command for real, and buffers the context with the real stdout,
//! stderr and exit code in the run's [`WorldWriter`] ([`SwtCapture`]). Which commands, which
//! files and how they are read is [`dojo_world::observe`]'s, the simulated environment's own
//! rule; in `hybrid`/`shadow` mode that environment hands its read to [`SwtCapture`] instead. Every other
//! operation passes straight through, and a capture that fails only loses that record: the
//! agent's command always runs exactly as it would without capture.
//!
//! After grading, [`swr_record`] builds the reward model's record (test command, test files as
//! graded, both patches, FAIL_TO_PASS / PASS_TO_PASS, the test report section of the log and the
//! real reward), and the runner writes the rollout's batch ([`WorldWriter::write_rollout`]).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use dojo_agent::Workspace;
use dojo_grade::InstanceReport;
use dojo_grade::grading::{END_TEST_OUTPUT, START_TEST_OUTPUT};
use dojo_llm::BoxFuture;
use dojo_sandbox::{ExecOutput, ExecRequest, Sandbox, SandboxError, WORKSPACE};

use crate::prepared::Prepared;
use crate::world_sim::world_task;
use dojo_world::classify::CommandClass;
use dojo_world::observe::{self, ReadLimits, Snapshot};
use dojo_world::record::{WorldBody, WorldRecord, WorldWriter, clip_chars, test_report_section};
use dojo_world::sim::RealRunObserver;
use dojo_world::{SwrTarget, SwtTarget, WorldTask};

/// Set to `0`, `off` or `false` to turn capture off for a run (it is on by default).
pub const WORLD_RECORDS_VAR: &str = "DOJO_WORLD_RECORDS";

/// Whether `dojo rollout` captures world records (see [`WORLD_RECORDS_VAR`]).
pub fn capture_enabled() -> bool {
    !matches!(
        std::env::var(WORLD_RECORDS_VAR).as_deref().map(str::trim),
        Ok("0" | "off" | "false" | "no")
    )
}

/// Records the real runs of commands that run Python or tests as SWT records of one rollout.
/// The agent's workspace wraps it in real mode ([`CapturingWorkspace`]); a simulated
/// environment tells it about the commands it runs for real, with the state it read for the
/// model ([`RealRunObserver`]).
pub struct SwtCapture<'a> {
    writer: &'a WorldWriter,
    task: WorldTask,
    sample_index: u32,
    /// The base commit's tree on the host (base versions of files).
    pristine: PathBuf,
    seq: AtomicU32,
}

impl<'a> SwtCapture<'a> {
    pub fn new(writer: &'a WorldWriter, prepared: &Prepared, sample_index: u32) -> Self {
        SwtCapture {
            writer,
            task: world_task(&prepared.task, &prepared.repo_env),
            sample_index,
            pristine: prepared.pristine.path.clone(),
            seq: AtomicU32::new(0),
        }
    }

    pub fn pristine(&self) -> &Path {
        &self.pristine
    }
}

impl RealRunObserver for SwtCapture<'_> {
    fn read_limits(&self) -> ReadLimits {
        self.writer.limits().read_limits()
    }

    fn observe(&self, command: &str, before: &Snapshot, out: &ExecOutput) {
        let limits = self.writer.limits();
        let (stdout, cut_out) = clip_chars(&out.stdout_lossy(), limits.max_output_chars);
        let (stderr, cut_err) = clip_chars(&out.stderr_lossy(), limits.max_output_chars);
        let exit_code = match (out.exit_code, out.signal) {
            (Some(c), _) => c,
            // The shell's convention for a process killed by a signal.
            (None, Some(s)) => 128 + s,
            (None, None) => -1,
        };
        let incomplete = out.timed_out
            || out.stdout_truncated
            || out.stderr_truncated
            || cut_out
            || cut_err
            || (out.exit_code.is_none() && out.signal.is_none());
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let context = self
            .task
            .swt_context(command, before.files.clone(), &before.agent_patch);
        let target = SwtTarget {
            stdout,
            stderr,
            exit_code,
        };
        self.writer.push_pending(WorldRecord::new(
            &self.task.task_id,
            self.sample_index,
            WorldBody::Swt {
                seq,
                context,
                target,
                incomplete,
            },
        ));
    }
}

/// The agent's workspace with SWT capture in real mode (see the module documentation).
pub struct CapturingWorkspace<'a> {
    inner: &'a Sandbox,
    capture: SwtCapture<'a>,
}

impl<'a> CapturingWorkspace<'a> {
    pub fn new(
        inner: &'a Sandbox,
        writer: &'a WorldWriter,
        prepared: &Prepared,
        sample_index: u32,
    ) -> Self {
        CapturingWorkspace {
            inner,
            capture: SwtCapture::new(writer, prepared, sample_index),
        }
    }
}

/// The shell script of a `bash -c SCRIPT` request (how `execute_bash` runs commands).
fn shell_command(req: &ExecRequest) -> Option<&str> {
    match req.argv.as_slice() {
        [bash, c, script] if bash == "bash" && c == "-c" => Some(script),
        _ => None,
    }
}

impl Workspace for CapturingWorkspace<'_> {
    fn exec<'b>(&'b self, req: &'b ExecRequest) -> BoxFuture<'b, Result<ExecOutput, SandboxError>> {
        Box::pin(async move {
            let Some(command) = shell_command(req) else {
                return self.inner.exec(req).await;
            };
            // The simulated environment's classifier and readers (`dojo_world::observe`): what
            // SWT is trained on is what it is later asked.
            let CommandClass::Python(run) = observe::classify_in(self.inner, command).await else {
                return self.inner.exec(req).await;
            };
            let cwd = req.cwd.as_deref().unwrap_or(WORKSPACE);
            let c = &self.capture;
            let before =
                observe::snapshot(self.inner, &run, cwd, Some(c.pristine()), c.read_limits()).await;
            let out = self.inner.exec(req).await?;
            match before {
                Ok(before) => c.observe(command, &before, &out),
                Err(e) => tracing::warn!(
                    task = %c.task.task_id,
                    "world capture: could not read the workspace before {command:?} ({e}); record skipped"
                ),
            }
            Ok(out)
        })
    }
    fn read_file<'b>(&'b self, path: &'b str) -> BoxFuture<'b, Result<Vec<u8>, SandboxError>> {
        Workspace::read_file(self.inner, path)
    }
    fn write_file<'b>(
        &'b self,
        path: &'b str,
        data: &'b [u8],
    ) -> BoxFuture<'b, Result<(), SandboxError>> {
        Workspace::write_file(self.inner, path, data)
    }
    fn diff(&self) -> BoxFuture<'_, Result<String, SandboxError>> {
        Workspace::diff(self.inner)
    }
    fn sandbox(&self) -> Option<&Sandbox> {
        Some(self.inner)
    }
}

/// The SWR record of a graded rollout, read from the sandbox right after grading (the test files
/// as graded: test patch and agent patch applied). `None` when the grade is not a real verdict
/// to learn from: an empty patch (SWR is not asked), an infrastructure failure, or a log without
/// a complete test output section (timed out).
pub async fn swr_record(
    sb: &Sandbox,
    prepared: &Prepared,
    sample_index: u32,
    patch: &str,
    report: &InstanceReport,
    writer: &WorldWriter,
) -> Option<WorldRecord> {
    let (task, pristine) = (&prepared.task, prepared.pristine.path.as_path());
    if patch.trim().is_empty() || report.infra_failure || !report.patch_successfully_applied {
        return None;
    }
    let test_report = test_report_section(&report.test_output, START_TEST_OUTPUT, END_TEST_OUTPUT)?;
    // The same test files and reader the simulated reward model is asked with
    // (`dojo_world::sim::test_files_after_patch`).
    let paths = dojo_grade::guard::task_test_files(task);
    let test_files =
        observe::read_views(sb, &paths, Some(pristine), writer.limits().read_limits()).await;
    let context = world_task(task, &prepared.repo_env).swr_context(patch, test_files);
    let target = SwrTarget {
        test_report,
        reward: u8::from(report.resolved),
    };
    Some(WorldRecord::new(
        &task.instance_id,
        sample_index,
        WorldBody::Swr { context, target },
    ))
}
