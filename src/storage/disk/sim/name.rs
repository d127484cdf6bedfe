//! [`Name`]: a path as [`SimDisk`](super::SimDisk)'s namespace keys it,
//! ordered exactly as `Path` orders, but compared byte by byte.
//!
//! This module owns the order and its proof; it does not know what the
//! namespace holds. `Path` compares component by component, parsing both
//! paths as it goes: in the namespace's maps, where every lookup, insertion
//! and removal makes a dozen comparisons of long paths that share most of
//! their bytes, that parsing was a tenth of a simulated run's instructions.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::ops::Deref;
use std::path::{Path, PathBuf};

/// A path, ordered as [`Path::cmp`] orders it.
///
/// Invariant: `plain` says whether `path` is plain (see [`is_plain`]).
#[derive(Clone, Debug)]
pub(super) struct Name {
    path: PathBuf,
    plain: bool,
}

/// Whether `bytes`, a path, has the same order among plain paths byte by
/// byte as component by component: on Unix, the root alone, or components
/// that are neither empty, `.` nor `..` (no `//`, no `/./`, no trailing
/// `/`), after an optional leading `/`.
///
/// Why the orders agree: a plain path is its components joined by `/`
/// (after a `/` for the root). [`rank`] puts `/` below every other byte, so
/// two joined paths first differ either inside two components that differ
/// there too, or where one component ends (a `/` or the path's end) and the
/// other goes on: the shorter component, a prefix of the longer, is the
/// lesser in both orders. The root's `/` is below every component's first
/// byte, as `Component::RootDir` is below `Component::Normal`.
fn is_plain(bytes: &[u8]) -> bool {
    if !cfg!(unix) || bytes.is_empty() {
        return false;
    }
    if bytes == b"/" {
        return true;
    }
    let relative = bytes.strip_prefix(b"/").unwrap_or(bytes);
    relative
        .split(|b| *b == b'/')
        .all(|component| !component.is_empty() && component != b"." && component != b"..")
}

/// A byte's place in the order of plain paths: the separator first.
fn rank(byte: u8) -> u16 {
    if byte == b'/' {
        0
    } else {
        u16::from(byte) + 1
    }
}

impl Name {
    pub(super) fn new(path: &Path) -> Name {
        Name::from(path.to_path_buf())
    }

    pub(super) fn as_path(&self) -> &Path {
        &self.path
    }

    fn bytes(&self) -> &[u8] {
        self.path.as_os_str().as_encoded_bytes()
    }

    /// Whether this is an entry right under directory `directory`: what
    /// `self.parent() == Some(directory)` says, without parsing either
    /// path when both are plain.
    pub(super) fn is_child_of(&self, directory: &Name) -> bool {
        if !(self.plain && directory.plain) {
            return self.path.parent() == Some(directory.as_path());
        }
        // A plain path's components are never empty.
        self.rest_below(directory)
            .is_some_and(|rest| !rest.is_empty() && !rest.contains(&b'/'))
    }

    /// Whether this is `directory` or below it: what
    /// `self.starts_with(directory)` says, without parsing either path
    /// when both are plain.
    pub(super) fn is_within(&self, directory: &Name) -> bool {
        if !(self.plain && directory.plain) {
            return self.path.starts_with(&directory.path);
        }
        self.bytes() == directory.bytes() || self.rest_below(directory).is_some()
    }

    /// Of a plain path below plain `directory`, the bytes after
    /// `directory`'s and the separator.
    fn rest_below(&self, directory: &Name) -> Option<&[u8]> {
        let rest = self.bytes().strip_prefix(directory.bytes())?;
        if directory.bytes() == b"/" {
            Some(rest)
        } else {
            rest.strip_prefix(b"/")
        }
    }
}

impl From<PathBuf> for Name {
    fn from(path: PathBuf) -> Name {
        let plain = is_plain(path.as_os_str().as_encoded_bytes());
        Name { path, plain }
    }
}

impl Deref for Name {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.path
    }
}

/// Maps keyed by `Name` may be read with a `&Path` (at `Path`'s cost): the
/// orders are the same, as `Borrow` requires.
impl Borrow<Path> for Name {
    fn borrow(&self) -> &Path {
        &self.path
    }
}

impl Ord for Name {
    fn cmp(&self, other: &Name) -> Ordering {
        if !(self.plain && other.plain) {
            return self.path.cmp(&other.path);
        }
        let (a, b) = (self.bytes(), other.bytes());
        // Eight bytes at a time over the prefix the two share (most of
        // them: a directory's entries differ in their last few bytes).
        let same = a
            .chunks_exact(8)
            .zip(b.chunks_exact(8))
            .take_while(|(x, y)| x == y)
            .count()
            * 8;
        match a[same..].iter().zip(&b[same..]).position(|(x, y)| x != y) {
            Some(at) => rank(a[same + at]).cmp(&rank(b[same + at])),
            None => a.len().cmp(&b.len()),
        }
    }
}

impl PartialOrd for Name {
    fn partial_cmp(&self, other: &Name) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Name {
    fn eq(&self, other: &Name) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Name {}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every pair of a set of tricky paths orders as `Path` orders it, and
    /// `is_child_of` agrees with `parent`.
    #[test]
    fn names_order_as_paths_do() {
        let paths = [
            "/", "", "a", "a/b", "a-b", "a.b", "a0", "ab", "/a", "/a/b", "/a/b/c", "/a-b", "/a.b",
            "/a0", "/ab", "/a//b", "/a/./b", "/a/", "./a", "../a", "/a/../b", "/d/c", "/d/c-d",
            "/d/c/z", "/d\u{0}", "/d/\u{0}", "/é", "/z", "//", "/.", "/a/b/",
        ];
        for x in paths {
            for y in paths {
                let (px, py) = (Path::new(x), Path::new(y));
                let (nx, ny) = (Name::new(px), Name::new(py));
                assert_eq!(nx.cmp(&ny), px.cmp(py), "{x:?} vs {y:?}");
                assert_eq!(nx == ny, px == py, "{x:?} == {y:?}");
                assert_eq!(
                    nx.is_child_of(&ny),
                    px.parent() == Some(py),
                    "{x:?} child of {y:?}"
                );
                assert_eq!(nx.is_within(&ny), px.starts_with(py), "{x:?} within {y:?}");
            }
        }
    }
}
