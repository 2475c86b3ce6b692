//! Environment builds: a private mount namespace where /testbed is an overlay of the pristine
//! tree (throwaway upper) and /venv is the cache entry being built, so the editable install and
//! every script shebang refer to the paths the sandboxes will use. The network stays (uv needs
//! PyPI).

#![allow(unsafe_op_in_unsafe_fn)]

use std::ffi::CString;

use super::layers::{Layers, RootEntry, stage_layers};
use crate::sys::{self, Fd, Step};

pub(crate) struct EnvBuildPlan {
    /// Not root: create a user namespace mapping us to root.
    pub userns: bool,
    pub uid_map: CString,
    pub gid_map: CString,
    pub status_w: Fd,
    pub layers: Layers,
    pub entries: Vec<RootEntry>,
}

pub(crate) unsafe fn run_env_build(plan: &EnvBuildPlan) -> std::io::Result<()> {
    let mut fds = [plan.status_w];
    // keep_fds closes everything else; the status pipe is close-on-exec, so it reports EOF when
    // the build script starts.
    if !sys::keep_fds(&mut fds) {
        return Err(std::io::Error::last_os_error());
    }
    let status = fds[0];
    let null = std::ptr::null::<libc::c_char>();
    macro_rules! check {
        ($cond:expr, $step:expr) => {
            if !$cond {
                let e = std::io::Error::last_os_error();
                sys::send(
                    status,
                    sys::TAG_ERR,
                    $step as i32,
                    e.raw_os_error().unwrap_or(0),
                );
                return Err(e);
            }
        };
    }
    if plan.userns {
        check!(
            libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) == 0,
            Step::Unshare
        );
        check!(
            sys::write_file(c"/proc/self/setgroups", b"deny")
                && sys::write_file(c"/proc/self/uid_map", plan.uid_map.as_bytes())
                && sys::write_file(c"/proc/self/gid_map", plan.gid_map.as_bytes()),
            Step::UidMap
        );
    } else {
        check!(libc::unshare(libc::CLONE_NEWNS) == 0, Step::Unshare);
    }
    if let Err(step) = stage_layers(&plan.layers) {
        check!(false, step);
    }
    check!(
        sys::mount(
            c"tmpfs".as_ptr(),
            c"/tmp/root".as_ptr(),
            c"tmpfs".as_ptr(),
            0,
            c"mode=0755".as_ptr()
        ),
        Step::RootTmpfs
    );
    for e in &plan.entries {
        match e {
            RootEntry::Bind { src, dst } | RootEntry::File { src, dst } => {
                if matches!(e, RootEntry::File { .. }) {
                    let fd = libc::open(dst.as_ptr(), libc::O_CREAT | libc::O_WRONLY, 0o644);
                    check!(fd >= 0 && libc::close(fd) == 0, Step::Mkdir);
                } else {
                    check!(libc::mkdir(dst.as_ptr(), 0o755) == 0, Step::Mkdir);
                }
                check!(
                    sys::mount(
                        src.as_ptr(),
                        dst.as_ptr(),
                        null,
                        libc::MS_BIND | libc::MS_REC,
                        null
                    ),
                    Step::Bind
                );
            }
            RootEntry::Symlink { target, dst } => {
                check!(
                    libc::symlink(target.as_ptr(), dst.as_ptr()) == 0,
                    Step::Mkdir
                );
            }
            RootEntry::Dir { dst } => {
                check!(libc::mkdir(dst.as_ptr(), 0o755) == 0, Step::Mkdir);
            }
        }
    }
    check!(
        libc::mkdir(c"/tmp/root/testbed".as_ptr(), 0o755) == 0,
        Step::Mkdir
    );
    if plan.layers.lower.is_some() {
        check!(
            sys::mount(
                c"overlay".as_ptr(),
                c"/tmp/root/testbed".as_ptr(),
                c"overlay".as_ptr(),
                0,
                c"userxattr,lowerdir=/tmp/lower,upperdir=/tmp/layer/upper,workdir=/tmp/layer/work"
                    .as_ptr()
            ),
            Step::Overlay
        );
    }
    check!(
        libc::mkdir(c"/tmp/root/venv".as_ptr(), 0o755) == 0,
        Step::Mkdir
    );
    check!(
        sys::mount(
            c"/tmp/venv".as_ptr(),
            c"/tmp/root/venv".as_ptr(),
            null,
            libc::MS_BIND,
            null
        ),
        Step::Bind
    );
    check!(
        libc::mkdir(c"/tmp/root/tmp".as_ptr(), 0o1777) == 0,
        Step::Mkdir
    );
    check!(
        sys::mount(
            c"tmpfs".as_ptr(),
            c"/tmp/root/tmp".as_ptr(),
            c"tmpfs".as_ptr(),
            0,
            c"mode=1777".as_ptr()
        ),
        Step::Tmpfs
    );
    check!(
        libc::chdir(c"/tmp/root".as_ptr()) == 0
            && libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) == 0
            && libc::umount2(c".".as_ptr(), libc::MNT_DETACH) == 0
            && libc::chdir(c"/testbed".as_ptr()) == 0,
        Step::PivotRoot
    );
    Ok(())
}
