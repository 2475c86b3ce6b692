//! The in-sandbox launcher: why per-command overhead does not grow with the caller's size.
//!
//! Joining a sandbox per command means forking the *caller* (a tokio process, possibly holding
//! a model: `dojo rollout` with the embedded engine is ~550 MB resident), and a fork copies its
//! page tables: measured here, a 500 MB caller made every sandboxed `true` cost 80–150 ms. So
//! pid 1 of each sandbox, once its root is built, `exec`s the calling binary again (through an
//! fd to `/proc/self/exe` opened before the pivot) with
//! `DOJO_SANDBOX_LAUNCHER=<sock>,<life>,<prewarm>,<venv writable>` in its environment; the `.init_array` hook of
//! [`server`] sees it before `main` runs and serves commands instead. That process is small and single-threaded, lives inside the sandbox's
//! user/mount/net/pid namespaces and cgroup, and forks each command's supervisor (its own pid
//! namespace, Landlock, seccomp, rlimits: `child::run_inside`) on request.
//!
//! Protocol (a unix stream socketpair per sandbox; the caller keeps one end): the launcher greets
//! with one byte `R`; a request is one message: a 4-byte little-endian length then that many
//! bytes of JSON (`child::Request`), with the fds `[stdin, stdout, stderr, ctl]` attached
//! (SCM_RIGHTS), or `[stdout, stderr, ctl]` for a command whose stdin is `/dev/null` (opened
//! inside, for that command alone). A body over [`INLINE_MAX`] travels in a memfd attached
//! last instead ([`BODY_IN_FD`] set in the length): never in a second message. `ctl` is one
//! end of a per-command socketpair: the supervisor writes setup errors and the command's wait
//! status there, after closing its own copies of the command's stdout and stderr, so the caller
//! finds output and status complete at once; the caller writes `T` (SIGTERM to everything the
//! command started), `K` (SIGKILL) or closes it (SIGKILL, no report; after a status: the
//! supervisor's cue to exit, which it defers so that tearing down its namespaces never runs
//! ahead of the caller).
//!
//! Pre-warming: while idle, the launcher keeps two supervisors forked ahead of time, each
//! already pid 1 of its own fresh pid namespace, in its own mount namespace with that
//! namespace's `/proc` mounted, the seccomp filter installed (the same for every command; the
//! command inherits it) and the sandbox's Landlock ruleset built, not enforced (the command
//! enforces it; the launcher's start variable says whether `/venv` is writable). The first fork
//! into a new pid namespace is the expensive one (the kernel sets up the namespace's internal
//! proc mount then), and with the mount namespace, `/proc` and the filter it was most of the
//! per-command setup; now it happens between commands. Each spare also starts the command's own
//! process ahead, in its memory and with its fd table (like `posix_spawn`'s child, while the
//! spare sleeps until its `execve`): that process reads the next request itself (processes waiting on one socket
//! get one request each) and goes straight to its `execve`, so neither a fork nor a hop through
//! another process lies between the request and the command; the spare then supervises. Stdio,
//! argv, env, cwd, rlimits and Landlock still come from the request and are applied in the
//! command's own process, and a spare serves exactly one command, so commands share nothing.
//! A spare tells the launcher over its hand-off pipe once its command has taken a request; the
//! launcher arms that slot again 2 ms later while the other spare still waits (so the fork of
//! the replacement does not land on a short command's exit or result: arming it at once, beside
//! the running command, did), and at once when no spare waits (a sandbox runs any number of
//! commands at a time). A command sent right after another finds the second spare. (With one
//! spare, waiting until the command was done left commands sent back to back at 1.8–3.5× a
//! bare fork/exec instead of ~1.1×.) Spares live in the sandbox's pid namespace and die with
//! it.
//! `DOJO_SANDBOX_PREWARM=0` turns this off.
//!
//! When the greeting does not come, commands join the namespaces per command with `setns`, as
//! kept sandboxes re-attached from another process always do, and the launcher stays off for
//! the rest of the process, with one warning. If the exec itself failed (the sandbox uid cannot
//! run the binary), pid 1 keeps holding the namespaces. If the exec worked but the new image
//! died before `main` (the dynamic loader cannot find a shared library inside the sandbox: a
//! `--features cuda` build whose CUDA libraries live under `/tmp` or in a directory only
//! `LD_LIBRARY_PATH` names), pid 1 is gone with it and the sandbox is created again without one.
//! The caller's `LD_LIBRARY_PATH` is passed to the launcher (never to commands) so that the
//! loader looks where it looked on the host.
//!
//! Two halves that share nothing but the protocol: [`server`] runs inside the sandbox (the
//! hook, the serving loop, the spares), [`client`] in the caller (starting it, submitting
//! requests, the process-wide switches).

pub(crate) mod client;
pub(crate) mod server;

pub(crate) use client::{Client, disable, exe_fd, loader_env, prewarm, socketpair};

/// The greeting byte the launcher sends once it serves.
pub(crate) const GREETING: u8 = b'R';

/// The largest request body sent inline, after its header, in the request's one message;
/// a larger one travels in a memfd passed last among the fds. The launcher's spares both read
/// the socket, each taking one message: a request must never continue in a second one, which
/// the other could read.
pub(crate) const INLINE_MAX: usize = 16 << 10;

/// Set in a request's header when its body is in the memfd passed last.
pub(crate) const BODY_IN_FD: u32 = 1 << 31;
