//! What an environment build wrote into the project tree, kept for every sandbox of the
//! environment ([`keep_tree`]), and the lists that keep it out of agents' diffs.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::error::BuildError;

/// Where a sandbox's diff finds the paths to leave out of it: the files the build created in the
/// project tree (they are the environment's, not the agent's), one git exclude pattern a line.
pub(crate) const TREE_EXCLUDE: &str = ".dojo-tree-exclude";

/// The tracked files of the project that the build's `pre_install` changed (paths relative to
/// `/testbed`, NUL-separated), written by the build script: kept by [`keep_tree`]. Beside it,
/// `.dojo-tree-base.diff` has their changes as a binary git patch over the base commit: sandbox
/// diffs are taken against the base with it applied (`patch::DIFF_SCRIPT`), so the
/// environment's edits never show in an agent's patch.
pub(crate) const TREE_CHANGED: &str = ".dojo-tree-changed";

/// The paths of [`TREE_CHANGED`] in `venv` (none when it is missing).
fn pre_install_changed(venv: &Path) -> std::collections::HashSet<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let list = std::fs::read(venv.join(TREE_CHANGED)).unwrap_or_default();
    list.split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| PathBuf::from(std::ffi::OsStr::from_bytes(p)))
        .collect()
}

/// Copy what the build wrote into the project tree (the overlay's `upper`) to `dest`, which
/// sandboxes stack over the pristine tree: without it setuptools-scm's `_version.py` and the
/// editable install's metadata would be missing from every sandbox. `.git` and `__pycache__`
/// are left out, and so are whiteouts (a build deleting project files is not kept) and changes
/// to files the pristine tree already has: the pristine tree is every sandbox's diff base, so a
/// kept change (an sdist's `version.py` or `PKG-INFO` that the install regenerates) would show
/// in every agent's patch and break its grading. The exception is the files `pre_install`
/// edited ([`TREE_CHANGED`]): the harness's image has them edited (sphinx's `tox.ini` gets
/// `pytest -rA`), and the venv's `.dojo-tree-base.diff` makes them part of the diff base. The new
/// files are listed in the venv's [`TREE_EXCLUDE`] for diffs.
pub(super) fn keep_tree(
    upper: &Path,
    pristine: &Path,
    dest: &Path,
    venv: &Path,
) -> std::result::Result<(), BuildError> {
    let fail = |p: &Path, source: std::io::Error| BuildError::Io {
        what: format!("keeping the build's file {}", p.display()),
        source,
    };
    // Owned like the pristine tree: an overlay copy-up of a directory whose owner is not
    // mapped in the sandbox fails (EOVERFLOW).
    let own = |p: &Path| match crate::ids::owner() {
        Some((u, g)) => std::os::unix::fs::lchown(p, Some(u), Some(g)).map_err(|x| fail(p, x)),
        None => Ok(()),
    };
    std::fs::create_dir_all(dest).map_err(|x| fail(dest, x))?;
    std::fs::set_permissions(dest, std::fs::Permissions::from_mode(0o755))
        .map_err(|x| fail(dest, x))?;
    own(dest)?;
    let changed = pre_install_changed(venv);
    let mut exclude = String::new();
    let mut any = false;
    let walk = walkdir::WalkDir::new(upper)
        .min_depth(1)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| {
            let n = e.file_name();
            !(n == "__pycache__" || (e.depth() == 1 && n == ".git"))
        });
    for e in walk {
        let e = e.map_err(|source| BuildError::Walk {
            what: "reading the build's tree".into(),
            source,
        })?;
        let rel = e
            .path()
            .strip_prefix(upper)
            .map_err(|_| BuildError::Outside {
                path: e.path().to_path_buf(),
                root: upper.to_path_buf(),
            })?;
        let to = dest.join(rel);
        let ft = e.file_type();
        let in_pristine = std::fs::symlink_metadata(pristine.join(rel)).is_ok();
        let edited = in_pristine && changed.contains(rel);
        if in_pristine && !ft.is_dir() && !edited {
            continue;
        }
        if ft.is_dir() {
            std::fs::create_dir_all(&to).map_err(|x| fail(&to, x))?;
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755))
                .map_err(|x| fail(&to, x))?;
            own(&to)?;
            continue;
        }
        if ft.is_symlink() {
            let target = std::fs::read_link(e.path()).map_err(|x| fail(e.path(), x))?;
            std::os::unix::fs::symlink(target, &to).map_err(|x| fail(&to, x))?;
        } else if ft.is_file() {
            copy_kept(e.path(), e.metadata().ok(), &to).map_err(|x| fail(&to, x))?;
        } else {
            continue;
        }
        own(&to)?;
        any = true;
        if !edited {
            // (An edited file is tracked: the diff base has it, .dojo-tree-base.diff; an
            // exclude would not apply.)
            exclude.push_str(&exclude_pattern(rel));
        }
    }
    if !any {
        crate::trash::remove_all(dest);
        return Ok(());
    }
    let list = venv.join(TREE_EXCLUDE);
    std::fs::write(&list, exclude).map_err(|x| fail(&list, x))?;
    std::fs::set_permissions(&list, std::fs::Permissions::from_mode(0o644))
        .map_err(|x| fail(&list, x))
}

/// A file the build wrote, copied to `to` with a plain mode (executable or not) and the build's
/// own modification time, not the copy's: an offline reinstall at grading decides what to
/// rebuild by comparing them (setuptools' `newer`, Cython's `.pyx` vs `.c`), and a tree copied
/// in name order made scikit-learn re-cythonize everything (600 s a run).
fn copy_kept(from: &Path, meta: Option<std::fs::Metadata>, to: &Path) -> std::io::Result<()> {
    std::fs::copy(from, to)?;
    let mode = meta.as_ref().map_or(0o644, |m| m.permissions().mode());
    let mode = if mode & 0o111 != 0 { 0o755 } else { 0o644 };
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(mode))?;
    if let Some(modified) = meta.and_then(|m| m.modified().ok()) {
        let times = std::fs::FileTimes::new().set_modified(modified);
        std::fs::File::options()
            .write(true)
            .open(to)
            .and_then(|f| f.set_times(times))?;
    }
    Ok(())
}

/// The git exclude line matching exactly `rel` from the tree's root (glob characters escaped).
fn exclude_pattern(rel: &Path) -> String {
    let mut line = String::from("/");
    for c in rel.to_string_lossy().chars() {
        if matches!(c, '*' | '?' | '[' | '\\' | '!' | '#' | ' ') {
            line.push('\\');
        }
        line.push(c);
    }
    line.push('\n');
    line
}
