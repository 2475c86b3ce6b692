//! What runs between `fork` and `exec`, one file per program: the holder that builds a
//! sandbox's root ([`holder`]), the per-command supervisor ([`command`]) and the environment
//! build's namespace ([`env_build`]); [`plan`] is the data they are given, [`layers`] the
//! staging of host directories that the holder and the environment build share. Everything is prepared by the parent into plain C strings and pointers; the child
//! code below only issues system calls (async-signal-safe), so it is correct even when the
//! calling process is multi-threaded (tokio) and whatever binary it is (the `dojo` CLI or another
//! crate's test binary — no helper executable has to be found).
//!
//! Processes of one command (namespace backend):
//! ```text
//! caller (tokio) ── I: supervisor (host pid ns; joined the sandbox user/mnt/net ns, uid S)
//!                   ├── K: pid 1 of a fresh pid ns (forwards TERM to everyone, reaps orphans)
//!                   └── L: the command (pid 2 there; own mount ns with its own /proc,
//!                          setsid, rlimits, Landlock, seccomp, execve)
//! ```
//! The caller signals I only. TERM → I → K → `kill(-1, TERM)` inside the pid namespace. When L
//! exits (or I is SIGKILLed, or the caller dies: lifeline pipe EOF), K is gone and the kernel kills
//! every process left in that pid namespace, `setsid` double-forked daemons included.
//!
//! Through the in-sandbox launcher (the `launcher` module, what `Sandbox::exec` uses), the same
//! guarantees with one process fewer and no fork of the caller:
//! ```text
//! launcher (pid 1 of the sandbox) ── I: pid 1 of a fresh pid ns (own mount ns and /proc, the
//!                                       seccomp filter, the Landlock ruleset; forked ahead of
//!                                       the request, then supervises)
//!                                    └── L: the command (pid 2; started ahead too, reads the
//!                                           request itself; setsid, rlimits, Landlock, execve;
//!                                           inherits the filter)
//! ```
//! (With pre-warming off, I is forked when the request arrives, reads it, starts L, and L
//! installs the filter.) The caller talks to I over its control socket (`T` → `kill(-1, TERM)`,
//! `K`/EOF → KILL); when L exits I kills and reaps everything left (nothing, when it has no
//! child left), closes its copies of L's stdout and stderr, reports L's status, and exits once
//! the caller has closed the control socket.

mod command;
mod env_build;
mod holder;
mod layers;
mod plan;

pub(crate) use command::{
    StepFailed, command_stack, exec_command, fail_with, prepare_inside, run_command, run_inside,
    run_prepared, supervise_started,
};
pub(crate) use env_build::{EnvBuildPlan, UV_CACHE_PATH, run_env_build};
pub(crate) use holder::{HolderPlan, LAUNCHER_VAR, run_holder};
pub(crate) use layers::{EXTRA_SLOTS, Layers, RootEntry};
pub(crate) use plan::{ExecPlan, Mode, Request};
