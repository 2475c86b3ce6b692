//! `--allow-source`: the URL prefixes an inline row's sdist source may be fetched from.
//!
//! A prefix is matched against the URL as it will be fetched, never as the text a caller
//! sent: both are parsed as URLs (WHATWG, the way servers and proxies read them), with their
//! `.` and `..` segments (also written `%2e`) resolved, then compared part by part: scheme,
//! host and port exactly, the path segment by segment. So `https://h/allow/` admits
//! `https://h/allow/x.tar.gz` but not `https://h/allow/../secret/x.tar.gz`,
//! `https://h/allowed/x`, `https://h.evil/allow/x` or `https://u@h/allow/x`. An admitted source
//! is fetched from its normalised form, so what was checked is what is fetched.
//!
//! `file:///dir/` prefixes admit local files under `dir`, after symlinks are resolved (a link
//! inside `dir` to a file elsewhere is refused).

use std::path::PathBuf;

use url::Url;

/// Why a source URL (or an `--allow-source` prefix) is refused.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("not a URL")]
    Parse(#[source] url::ParseError),
    #[error("{0}")]
    Refused(&'static str),
    #[error("{} cannot be resolved", .0.display())]
    Resolve(PathBuf, #[source] std::io::Error),
    #[error("not under an allowed source")]
    NotAllowed,
}

use SourceError::Refused;

/// An `--allow-source` prefix that is refused, and why.
#[derive(Debug, thiserror::Error)]
#[error("--allow-source {prefix:?}: {source}")]
pub struct BadPrefix {
    pub prefix: String,
    #[source]
    pub source: SourceError,
}

/// The parsed `--allow-source` prefixes.
#[derive(Debug)]
pub(crate) struct AllowList(Vec<Prefix>);

#[derive(Debug)]
struct Prefix {
    /// Normalised; its path ends in `/`.
    url: Url,
    /// A `file:///dir/` prefix's directory, symlinks resolved.
    dir: Option<PathBuf>,
}

impl AllowList {
    /// Parse and check every prefix; the error names the first bad one.
    pub(crate) fn new(prefixes: &[String]) -> Result<AllowList, BadPrefix> {
        prefixes
            .iter()
            .map(|p| {
                prefix(p).map_err(|source| BadPrefix {
                    prefix: p.clone(),
                    source,
                })
            })
            .collect::<Result<_, _>>()
            .map(AllowList)
    }

    /// The URL to fetch `raw` from (normalised; a local file's with its symlinks resolved),
    /// if a prefix admits it.
    pub(crate) fn admit(&self, raw: &str) -> Result<String, SourceError> {
        let u = parse(raw, true)?;
        // Checked as written first, so that a caller cannot probe the host's files outside the
        // allowed directories through the resolution's errors.
        if !self.0.iter().any(|p| under(&p.url, &u)) {
            return Err(SourceError::NotAllowed);
        }
        if u.scheme() != "file" {
            return Ok(u.into());
        }
        let path = u
            .to_file_path()
            .map_err(|()| Refused("not a local file path"))?;
        // The file is read later, by this resolved path: only someone who can write the
        // allowed directory could swap a link in between.
        let real = path
            .canonicalize()
            .map_err(|e| SourceError::Resolve(path, e))?;
        let inside = self
            .0
            .iter()
            .filter_map(|p| p.dir.as_deref())
            .any(|d| real.starts_with(d));
        if !inside || !real.is_file() {
            return Err(SourceError::NotAllowed);
        }
        Url::from_file_path(&real)
            .map(String::from)
            .map_err(|()| Refused("not a local file path"))
    }
}

/// An `--allow-source` prefix: a source URL that also ends in `/` (a directory or host, never
/// a partial name: `https://files.pythonhosted.org` would otherwise admit
/// `https://files.pythonhosted.org.example.com/`).
fn prefix(raw: &str) -> Result<Prefix, SourceError> {
    // An operator's `allow/../` is a mistake, never meant as the whole host.
    let url = parse(raw, false)?;
    if !raw.ends_with('/') {
        return Err(Refused(
            "must end in '/' (a directory or host, never a partial name)",
        ));
    }
    if url.query().is_some() || raw.contains('#') {
        return Err(Refused("must not carry a query or fragment"));
    }
    let dir = if url.scheme() == "file" {
        let path = url
            .to_file_path()
            .map_err(|()| Refused("not a local directory"))?;
        let real = path
            .canonicalize()
            .map_err(|e| SourceError::Resolve(path, e))?;
        if !real.is_dir() {
            return Err(Refused("not a directory"));
        }
        Some(real)
    } else {
        None
    };
    Ok(Prefix { url, dir })
}

/// `raw` as a URL, or refused where parsers could read it differently. The parser already
/// lowercases the host, drops a default port and resolves dot segments; what it would
/// silently repair (spaces, tabs, `\` for `/`, `https:h` without slashes) is refused here
/// instead, so the checks below read the URL exactly as written. Dot segments are resolved
/// when `dots` allows them, and refused otherwise.
fn parse(raw: &str, dots: bool) -> Result<Url, SourceError> {
    if !raw.is_ascii()
        || raw
            .bytes()
            .any(|b| b.is_ascii_control() || b == b' ' || b == b'\\')
    {
        return Err(Refused(
            "must be ASCII without spaces, control characters or '\\' (percent-encode them)",
        ));
    }
    let mut url = Url::parse(raw).map_err(SourceError::Parse)?;
    let scheme = url.scheme();
    if !matches!(scheme, "http" | "https" | "file") {
        return Err(Refused("expected an http://, https:// or file:/// URL"));
    }
    let Some(rest) = raw.get(scheme.len()..).and_then(|r| r.strip_prefix("://")) else {
        return Err(Refused(
            "expected scheme:// (http://, https:// or file:///)",
        ));
    };
    let (authority, path) = rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()));
    if scheme == "file" {
        if !(authority.is_empty() || authority.eq_ignore_ascii_case("localhost")) {
            return Err(Refused("a file URL names no host (file:///path)"));
        }
    } else if authority.is_empty() {
        return Err(Refused("names no host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(Refused("must not carry user information (user@host)"));
    }
    // Some servers decode these into separators after resolving dot segments, which would
    // let `..%2f` climb out of the prefix on their side.
    let p = url.path().to_ascii_lowercase();
    if p.contains("%2f") || p.contains("%5c") {
        return Err(Refused("must not percent-encode '/' or '\\' in its path"));
    }
    match dot_segments(path) {
        Dots::Climb => return Err(Refused("its '..' segments climb above the root")),
        Dots::Some if !dots => return Err(Refused("must not contain '.' or '..' segments")),
        Dots::Some | Dots::None => {}
    }
    // Never sent to the server; the sha256 checks the content.
    url.set_fragment(None);
    Ok(url)
}

/// The dot segments of a path as written (up to its query).
enum Dots {
    None,
    Some,
    /// `..` above the root: the parser would keep the path at the root; a URL that tries is
    /// refused rather than reinterpreted.
    Climb,
}

/// Empty segments are not counted as depth, which errs on the side of refusing.
fn dot_segments(path: &str) -> Dots {
    let path = path.split(['?', '#']).next().unwrap_or("");
    let (mut depth, mut dots) = (0usize, Dots::None);
    for seg in path.split('/') {
        // `%2e` is a dot to URL parsers (and so to servers), in either case.
        match seg.to_ascii_lowercase().replace("%2e", ".").as_str() {
            ".." => match depth.checked_sub(1) {
                Some(d) => (depth, dots) = (d, Dots::Some),
                None => return Dots::Climb,
            },
            "." => dots = Dots::Some,
            "" => {}
            _ => depth += 1,
        }
    }
    dots
}

/// Whether `u` names a file under `prefix`: same scheme, host and port, and the prefix's path
/// segments (its trailing empty one aside) begin `u`'s, which end in a file name.
fn under(prefix: &Url, u: &Url) -> bool {
    let segments = |u: &Url| -> Vec<String> {
        u.path_segments()
            .map(|s| s.map(str::to_string).collect())
            .unwrap_or_default()
    };
    let (p, s) = (segments(prefix), segments(u));
    let dir = &p[..p.len().saturating_sub(1)];
    prefix.scheme() == u.scheme()
        && prefix.host() == u.host()
        && prefix.port_or_known_default() == u.port_or_known_default()
        && s.len() > dir.len()
        && s.starts_with(dir)
        && s.last().is_some_and(|f| !f.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn list(prefixes: &[&str]) -> AllowList {
        let p: Vec<String> = prefixes.iter().map(|p| p.to_string()).collect();
        AllowList::new(&p).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn prefixes_are_matched_by_parts_after_normalising() {
        let a = list(&["https://h/allow/", "http://files.example:8080/pkgs/"]);
        for ok in [
            "https://h/allow/x.tar.gz",
            "https://H/allow/x.tar.gz",
            "HTTPS://h:443/allow/x.tar.gz",
            "https://h/allow/sub/../x.tar.gz",
            "https://h/allow/./x.tar.gz",
            "https://h/allow/%2e/x.tar.gz",
            "https://h/allow/x.tar.gz?download=1#sha256=ab",
            "http://files.example:8080/pkgs/a/b.tar.gz",
        ] {
            assert!(a.admit(ok).is_ok(), "{ok}: {:?}", a.admit(ok));
        }
        assert_eq!(
            a.admit("https://h/allow/sub/%2E%2e/x.tar.gz#frag").unwrap(),
            "https://h/allow/x.tar.gz",
            "fetched as normalised"
        );
        for bad in [
            "https://h/allow/../secret/x.tar.gz",
            "https://h/allow/%2e%2e/secret/x.tar.gz",
            "https://h/allow/.%2E/secret/x.tar.gz",
            "https://h/allow/%2E./secret/x.tar.gz",
            "https://h/allow/..%2fsecret/x.tar.gz",
            "https://h/allow/..%5Csecret/x.tar.gz",
            "https://h/allow\\..\\secret/x.tar.gz",
            "https://h/allowed/x.tar.gz",
            "https://h/allow",
            "https://h/allow/",
            "https://h/x.tar.gz",
            "https://h.evil/allow/x.tar.gz",
            "https://h:444/allow/x.tar.gz",
            "http://h/allow/x.tar.gz",
            "https://user@h/allow/x.tar.gz",
            "https://h:pw@h.evil/allow/x.tar.gz",
            "https://h@h.evil/allow/x.tar.gz",
            "https:h/allow/x.tar.gz",
            "https:///h/allow/x.tar.gz",
            "https://h/../../allow/x.tar.gz",
            "https://h/allow/\t../secret/x",
            "https://h/allow/ x",
            "https://h/allow/\u{ff0e}\u{ff0e}/x",
            "ftp://h/allow/x.tar.gz",
            "file:///etc/passwd",
            "not a url",
            "",
            "http://files.example/pkgs/a.tar.gz",
        ] {
            assert!(a.admit(bad).is_err(), "{bad} admitted: {:?}", a.admit(bad));
        }
    }

    #[test]
    fn bad_prefixes_are_refused() {
        for bad in [
            "https://files.pythonhosted.org",
            "https://h/allow",
            "files.pythonhosted.org/",
            "https:///",
            "https://u@h/",
            "https://h/a/../../",
            "https://h/allow/../",
            "https://h/./allow/",
            "https://h/allow/%2e%2e/",
            "https://h/?q=/",
            "https://h/#/",
            "ftp://h/",
            "file://host/dir/",
            "file:///no/such/dir/anywhere/",
        ] {
            let p = vec![bad.to_string()];
            assert!(AllowList::new(&p).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn local_files_under_a_file_prefix_with_symlinks_resolved() {
        let root = tempfile::tempdir().unwrap();
        let allowed = root.path().join("allow");
        let secret = root.path().join("secret");
        std::fs::create_dir_all(allowed.join("sub")).unwrap();
        std::fs::create_dir_all(&secret).unwrap();
        std::fs::write(allowed.join("sub/a b.tar.gz"), "sdist").unwrap();
        std::fs::write(secret.join("s.tar.gz"), "secret").unwrap();
        std::os::unix::fs::symlink(secret.join("s.tar.gz"), allowed.join("link.tar.gz")).unwrap();
        std::os::unix::fs::symlink(&secret, allowed.join("dirlink")).unwrap();
        let url = |p: &std::path::Path| Url::from_file_path(p).unwrap().to_string();
        let a = list(&[&format!("{}/", url(&allowed))]);

        let fetched = a.admit(&url(&allowed.join("sub/a b.tar.gz"))).unwrap();
        let real = allowed.canonicalize().unwrap().join("sub/a b.tar.gz");
        assert_eq!(fetched, url(&real));
        assert_eq!(
            Url::parse(&fetched).unwrap().to_file_path().unwrap(),
            real,
            "the fetched URL names the resolved file"
        );
        for bad in [
            url(&allowed.join("link.tar.gz")),
            url(&allowed.join("dirlink/s.tar.gz")),
            url(&secret.join("s.tar.gz")),
            format!("{}/../secret/s.tar.gz", url(&allowed)),
            format!("{}/%2e%2e/secret/s.tar.gz", url(&allowed)),
            url(&allowed.join("sub")),
            url(&allowed.join("missing.tar.gz")),
            format!("file://otherhost{}", allowed.join("sub/x").display()),
        ] {
            assert!(a.admit(&bad).is_err(), "{bad} admitted");
        }
        // Outside the prefix nothing is resolved: the answer does not tell whether it exists.
        assert!(matches!(
            a.admit("file:///no/such/file"),
            Err(SourceError::NotAllowed)
        ));
    }

    /// Segments a path may be made of: dots in every spelling, names, the prefix's own name.
    fn segment() -> impl Strategy<Value = &'static str> {
        prop::sample::select(vec![
            "..", ".", "%2e", "%2E", "%2e%2e", ".%2E", "%2E.", "..%2f", "", "allow", "allowed",
            "secret", "x.tar.gz",
        ])
    }

    proptest! {
        /// No URL built from dot segments leaves the prefix: whatever is admitted is fetched
        /// from a path under `/allow/` that has no dot segments left, on the same host.
        #[test]
        fn dot_segments_never_escape_the_prefix(
            host in prop::sample::select(vec!["h", "H", "h.evil", "u@h", "h:443", "h:1"]),
            segs in prop::collection::vec(segment(), 0..8),
        ) {
            let a = list(&["https://h/allow/"]);
            let raw = format!("https://{host}/{}", segs.join("/"));
            if let Ok(fetched) = a.admit(&raw) {
                let u = Url::parse(&fetched).unwrap();
                prop_assert_eq!(u.host_str(), Some("h"), "{}", raw);
                prop_assert_eq!(u.port(), None);
                prop_assert!(u.path().starts_with("/allow/"), "{} -> {}", raw, fetched);
                let dots = u.path().split('/').any(|s| {
                    matches!(s.to_ascii_lowercase().replace("%2e", ".").as_str(), "." | "..")
                });
                prop_assert!(!dots, "{} -> {}", raw, fetched);
                // Admitting what is fetched changes nothing.
                prop_assert_eq!(a.admit(&fetched).ok(), Some(fetched.clone()));
            }
        }
    }
}
